"""Ops that walk lines on CUDA tensors: cumsum/cumprod and argmax/argmin/max/min over a dim (a thread per line,
in order: the CPU's results bit for bit; few long lines in chunks), sort/topk/kthvalue/median (a bitonic
network per line, the CPU's stable order), and softmax/log_softmax over any dim (the row kernel, the dim moved last by strided copies); on the fake device running the kernels, against the CPU. Every kind of directly
written kernel, in float32, float16 and int32, is assembled with ptxas."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jitorch as jt
from jitorch.backends.cuda import copies, indexing, lines
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.codegen.nvptx import scan
from jitorch.runtime.cuda_backend import use_backend
from tests import support
from tests.cuda.test_ptx import assert_assembles
from tests.ops.samples import copy_layout
from tests.support import tensor_and_array


def drawn_tensor(draw, dtypes):
    shape = draw(support.shapes(min_dims=1, max_dims=3, min_side=1, max_side=7))
    dtype = draw(st.sampled_from(dtypes))
    values = support.random_array(shape, dtype, np.random.default_rng(draw(st.integers(0, 99))), -3, 3)
    if dtype.is_floating_point and draw(st.booleans()):
        values.flat[draw(st.integers(0, values.size - 1))] = np.nan
    t, _ = tensor_and_array(values, draw(st.sampled_from(support.LAYOUTS)))
    return t, draw(st.integers(-len(shape), len(shape) - 1))


def both(fn, x, exact=True, names=False, atol=1e-6):
    """``fn`` on a CUDA copy of ``x`` (emulated) against the CPU: the ops launched (their kernel names if
    ``names``). Not ``exact``: to ``rtol=1e-5`` and ``atol`` (a number, or one per element)."""
    with use_backend(FakeBackend(emulate="ptx")) as fake:
        got = fn(copy_layout(x, "cuda"))
        ops = [launch.name if names else launch.ops for launch in fake.launches]
        got = [t.cpu() for t in (got if isinstance(got, tuple) else (got,))]
    want = fn(x)
    want = list(want) if isinstance(want, tuple) else [want]
    for g, w in zip(got, want):
        assert (g.shape, g.dtype) == (w.shape, w.dtype)
        if exact:
            np.testing.assert_array_equal(g.numpy(), w.numpy())
        else:
            a, b = g.numpy().astype(np.float64), w.numpy().astype(np.float64)
            with np.errstate(invalid="ignore"):
                ok = (a == b) | (np.isnan(a) & np.isnan(b)) | (np.abs(a - b) <= atol + 1e-5 * np.abs(b))
            assert ok.all(), (a[~ok], b[~ok], np.broadcast_to(atol, ok.shape)[~ok])
    return ops


@settings(max_examples=15)
@given(data=st.data(), op=st.sampled_from(["cumsum", "cumprod"]))
def test_scans_match_the_cpu_bit_for_bit(data, op):
    x, dim = drawn_tensor(data.draw, [jt.float32, jt.float16, jt.int32, jt.bool])
    dtype = data.draw(st.sampled_from([None, jt.float64, jt.int64]))
    assert [op] in both(lambda t: getattr(t, op)(dim, dtype=dtype), x)


@settings(max_examples=15)
@given(data=st.data(), op=st.sampled_from(["argmax", "argmin", "max", "min"]), keepdim=st.booleans(),
       full=st.booleans())
def test_arg_reductions_keep_the_first_extreme_and_nan(data, op, keepdim, full):
    x, dim = drawn_tensor(data.draw, [jt.float32, jt.float64, jt.int64])
    if op in ("max", "min"):
        ops = both(lambda t: getattr(t, op)(dim, keepdim=keepdim), x)
        assert [op + ".dim"] in ops
    else:
        ops = both(lambda t: getattr(t, op)(None if full else dim, keepdim=keepdim), x)
        assert [op] in ops


@settings(max_examples=8, deadline=None)
@given(data=st.data(), op=st.sampled_from(["cumsum", "cumprod", "argmax", "argmin", "max", "min"]))
def test_few_long_lines_walk_in_chunks(data, op):
    """Lines of more than LONG_LINE (made 40 here) in chunks of 32: integers and arg-reductions exactly as
    the CPU, float sums reassociated (within rounding)."""
    n = data.draw(st.integers(41, 300))
    shape = data.draw(st.sampled_from([(n,), (2, n), (n, 3)]))
    dtype = data.draw(st.sampled_from([jt.float32, jt.int64, jt.int32] if op.startswith("cum") else
                                      [jt.float32, jt.float64, jt.int64, jt.float16]))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    values = (rng.integers(-1, 3, shape) if op == "cumprod" else rng.integers(-50, 50, shape)).astype(dtype.np)
    if dtype.is_floating_point and op.startswith("cum"):
        values = values * np.float32(1.1)
    if dtype.is_floating_point and not op.startswith("cum") and data.draw(st.booleans()):
        values.flat[rng.integers(0, values.size, 2)] = np.nan
    x, _ = tensor_and_array(values.astype(dtype.np), data.draw(st.sampled_from(support.LAYOUTS)))
    dim = shape.index(n)
    # a reassociated sum's rounding is relative to the magnitudes summed, not to a result that cancels (a prefix
    # of 99 values in [-55, 55) ending at -1.1 was 1.5e-5 off: hypothesis 6.170's draw): per element, a bound of
    # 40 roundings (the chunks of 32, then their carries) of the prefix's sum of magnitudes
    prefix = np.cumsum(np.abs(values.astype(np.float64)), axis=dim)
    atol = 1e-6 + 40 * float(np.finfo(np.float32).eps) * prefix if op == "cumsum" else 1e-6
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(scan, "LONG_LINE", 40)
        launches = both(lambda t: getattr(t, op)(dim), x, exact=not (op.startswith("cum") and dtype.is_floating_point),
                        names=True, atol=atol)
    phases = ("totals", "carries", "prefixes") if op.startswith("cum") else ("extremes", "pick")
    assert [name for name in launches if any(p in name for p in phases)] and \
        all(any(f"_{p}_" in name for name in launches) for p in phases)


@settings(max_examples=10)
@given(data=st.data(), log=st.booleans())
def test_softmax_over_any_dim(data, log):
    x, dim = drawn_tensor(data.draw, [jt.float32, jt.float64])
    ops = both(lambda t: t.log_softmax(dim) if log else t.softmax(dim), x, exact=False)
    assert ["log_softmax" if log else "softmax"] in ops


def repeated_values(draw):
    """A tensor whose values repeat (ties must keep their order) and may hold NaN, in a drawn layout."""
    shape = draw(support.shapes(min_dims=1, max_dims=3, min_side=1, max_side=9))
    dtype = draw(st.sampled_from([jt.float32, jt.float16, jt.float64, jt.int32, jt.int64]))
    values = np.random.default_rng(draw(st.integers(0, 99))).integers(-3, 3, shape).astype(dtype.np)
    if dtype.is_floating_point and draw(st.booleans()):
        values.flat[:: max(1, values.size // 3)] = np.nan
    t, _ = tensor_and_array(values, draw(st.sampled_from(support.LAYOUTS)))
    return t, draw(st.integers(-len(shape), len(shape) - 1))


@settings(max_examples=8)
@given(data=st.data(), descending=st.booleans())
def test_sort_topk_kthvalue_and_median_give_the_cpus_stable_order(data, descending):
    x, dim = repeated_values(data.draw)
    n = x.shape[dim]
    assert ["sort"] in both(lambda t: t.sort(dim, descending), x)
    k = data.draw(st.integers(1, n))
    both(lambda t: t.topk(k, dim, largest=descending), x)
    # among equal values the CPU runs torch's quickselect and CUDA takes the stable order's first: the same
    # value (-0.0 equal to 0.0), at an index holding it
    with use_backend(FakeBackend(emulate="ptx")):
        values, indices = (t.cpu() for t in copy_layout(x, "cuda").kthvalue(k, dim, keepdim=descending))
    want = x.kthvalue(k, dim, keepdim=descending).values
    assert (values.shape, values.dtype, indices.dtype) == (want.shape, want.dtype, jt.int64)
    np.testing.assert_array_equal(values.numpy(), want.numpy())
    at = indices.numpy() if descending else np.expand_dims(indices.numpy(), dim)
    picked = np.take_along_axis(x.numpy(), at, dim)
    np.testing.assert_array_equal(picked if descending else np.squeeze(picked, dim), want.numpy())
    both(lambda t: t.median(dim, keepdim=descending), x)  # the lower median; a line with NaN picks its first
    both(lambda t: t.median(), x)


def test_the_directly_written_kernels_assemble(fake, monkeypatch):
    monkeypatch.setattr(scan, "LONG_LINE", 8)
    tables = ((indexing, "_INDEXERS"), (copies, "_COPIES"), (lines, "_SCANS"))
    for module, name in tables:  # empty: the kernels made below, not every earlier test's in this process
        monkeypatch.setattr(module, name, {})
    index = jt.tensor([[0, 2]], device="cuda")
    makes = [lambda x: x.transpose(0, 2).cumsum(1), lambda x: x.argmax(1), lambda x: x.min(0),
             lambda x: x.flip((0, 2)), lambda x: x.gather(2, index.expand(2, 3, 2)),
             lambda x: x.scatter_add(2, index.expand(2, 3, 2), x[..., :2]),
             lambda x: x.index_add(1, index[0], x[:, :2], alpha=2), lambda x: x.transpose(0, 1).repeat(1, 2, 1),
             lambda x: x.transpose(1, 2).sort(1, descending=True), lambda x: x.reshape(-1).cumsum(0),
             lambda x: x.reshape(-1).max(0)]
    for dtype in (jt.float32, jt.float16, jt.int32):
        x = jt.arange(24, dtype=dtype, device="cuda").reshape(2, 3, 4)
        for make in makes:
            make(x)
    kernels = [k for module, name in tables for k in getattr(module, name).values()]
    assert {k.ops[0] for k in kernels} >= {"cumsum", "argmax", "min.dim", "max.dim", "copy", "gather",
                                           "scatter_add", "index_add", "sort"}
    assert {k.spec.phase for k in kernels if k.ops[0] in ("cumsum", "max.dim")} >= {"totals", "carries", "prefixes",
                                                                               "extremes", "pick"}
    assert_assembles(kernels)


def test_kthvalue_among_equal_values_on_cuda_gives_the_cpus_value_at_an_index_holding_it():
    # found by the property test above once the CPU took torch's quickselect: [0, 0, -3, 1], k = 2
    x = jt.tensor([0.0, 0.0, -3.0, 1.0])
    with use_backend(FakeBackend(emulate="ptx")):
        value, index = (t.cpu() for t in copy_layout(x, "cuda").kthvalue(2))
    assert x.kthvalue(2).indices.item() == 1  # torch's quickselect
    assert value.item() == 0.0 and index.item() in (0, 1)
