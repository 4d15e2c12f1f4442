"""Ops that used to run on the host for CUDA tensors, now on the device, against the CPU on the fake device running the
kernels: the formula factories (arange, eye, linspace, logspace: bit for bit), repeat_interleave, index_fill with a
tensor value, scatter_reduce (atomics and compare-and-swap loops), the data-dependent masked_select,
argwhere/nonzero and unique (a device scan and one read-back of the count), and sorts of lines longer than a block
sorts (runs, then merge passes). Each test also checks that nothing ran through ``on_host``, and the kernels they
make assemble with ptxas."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jitorch as jt
from jitorch.backends.cuda import factories, generated, indexing, lines
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.codegen.nvptx import sort
from jitorch.runtime.cuda_backend import use_backend
from tests import support
from tests.cuda.test_ptx import assert_assembles
from tests.ops.samples import copy_layout
from tests.ops.test_creation import TORCH_ARANGE
from tests.support import tensor_and_array

INTEGERS = [jt.int64, jt.int32, jt.int16, jt.int8, jt.uint8]
FLOATS = [jt.float32, jt.float64, jt.float16, jt.bfloat16]


def on_device(fn, *args):
    """``fn`` of CUDA copies of ``args`` (tensors keep their layout) on the emulating fake device: (results
    on the host as a list, the ops launched). Fails if any op went through ``on_host``."""
    hosted = []
    original = generated.on_host

    def spy(op, op_args, device):
        hosted.append(op.name)
        return original(op, op_args, device)
    with pytest.MonkeyPatch.context() as patch, use_backend(FakeBackend(emulate="ptx")) as fake:
        patch.setattr(generated, "on_host", spy)
        got = fn(*[copy_layout(a, "cuda") if isinstance(a, jt.Tensor) else a for a in args])
        got = [t.cpu() for t in (got if isinstance(got, tuple) else (got,))]
        launched = {launch.ops[0] for launch in fake.launches}
    assert hosted == [], f"ran on the host: {hosted}"
    return got, launched


def expect(fn, *args, exact=True, rtol=1e-5, made=False):
    """``fn`` on the device equals ``fn`` on the CPU (dtype, shape, values: bitwise when ``exact``); the ops
    launched. ``made``: ``fn`` takes the device to make its result on."""
    got, launched = on_device(fn, *(("cuda",) if made else args))
    want = fn(*(("cpu",) if made else args))
    want = list(want) if isinstance(want, tuple) else [want]
    for g, w in zip(got, want, strict=True):
        assert (g.dtype, g.shape) == (w.dtype, w.shape)
        if exact:
            a, b = g.numpy(), w.numpy()
            assert a.tobytes() == b.tobytes(), (a, b)
        else:
            np.testing.assert_allclose(g.numpy().astype(np.float64), w.numpy().astype(np.float64), rtol=rtol,
                                       atol=1e-6, equal_nan=True)
    return launched


# Factories ---------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(INTEGERS + FLOATS))
def test_arange_matches_the_cpu_bit_for_bit(data, dtype):
    if dtype.is_floating_point:
        start = data.draw(st.floats(-50, 50, allow_subnormal=False))
        step = data.draw(st.sampled_from([0.1, 0.3, 1.7, -0.7, 2.0 / 3]))
        end = start + step * data.draw(st.integers(1, 300))
    else:
        start = data.draw(st.integers(-300, 300))
        step = data.draw(st.sampled_from([1, 3, 7, -2]))
        end = start + step * data.draw(st.integers(1, 300))
    assert "arange" in expect(lambda device: jt.arange(start, end, step, dtype=dtype, device=device), made=True)


@pytest.mark.parametrize("args,dtype,expected", TORCH_ARANGE)
def test_device_arange_excludes_an_end_the_steps_land_on(args, dtype, expected):
    expect(lambda device: jt.arange(*args, dtype=dtype, device=device), made=True)
    got, _ = on_device(lambda: jt.arange(*args, dtype=dtype, device="cuda"))
    assert got[0].shape == (len(expected),)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(0, 9), m=st.integers(0, 9), dtype=st.sampled_from(INTEGERS + FLOATS + [jt.bool]))
def test_eye_matches_the_cpu(n, m, dtype):
    launched = expect(lambda device: jt.eye(n, m, dtype=dtype, device=device), made=True)
    assert launched == ({"eye"} if n * m else set())


@settings(max_examples=25, deadline=None)
@given(data=st.data(), steps=st.integers(1, 300), dtype=st.sampled_from(INTEGERS + FLOATS))
def test_linspace_matches_the_cpu_bit_for_bit(data, steps, dtype):
    low, high = (-1e3, 1e3) if dtype.is_floating_point else (max(-1e3, np.iinfo(dtype.np).min), 100)
    start, end = data.draw(st.floats(low, high)), data.draw(st.floats(low, high))
    assert "linspace" in expect(lambda device: jt.linspace(start, end, steps, dtype=dtype, device=device), made=True)


@settings(max_examples=20, deadline=None)
@given(start=st.floats(-4, 4), end=st.floats(-4, 4), steps=st.integers(1, 100),
       base=st.sampled_from([10.0, 2.0, 0.5, 3.3]), dtype=st.sampled_from(FLOATS))
def test_logspace_matches_the_cpu_bit_for_bit(start, end, steps, base, dtype):
    """The exponents are the CPU's exactly, and the power is jitorch's own pow (`ops.powers`) on both."""
    got, launched = on_device(lambda: jt.logspace(start, end, steps, base, dtype=dtype, device="cuda"))
    want = jt.logspace(start, end, steps, base, dtype=dtype)
    assert launched == {"logspace"} and got[0].dtype == want.dtype
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[dtype.itemsize]
    np.testing.assert_array_equal(got[0].numpy().view(bits), want.numpy().view(bits))


def test_integer_logspace_of_integer_exponents_is_exact():
    for base in (10.0, 2.0, 3.0):
        expect(lambda device: jt.logspace(0, 9, 10, base, dtype=jt.int64, device=device), made=True)


def test_factories_compile_once_per_dtype(fake):
    before = len(factories._FORMULAS)
    for n in (5, 17, 300):
        jt.arange(n, device="cuda")
        jt.linspace(0, 1, n, device="cuda")
    assert len(factories._FORMULAS) <= before + 2


# Shapes and indexing -------------------------------------------------------------------------

def drawn(draw, dtypes, max_side=6, nan=True):
    shape = draw(support.shapes(min_dims=1, max_dims=3, min_side=1, max_side=max_side))
    dtype = draw(st.sampled_from(dtypes))
    values = np.random.default_rng(draw(st.integers(0, 99))).integers(-3, 4, shape).astype(dtype.np)
    if dtype.is_floating_point:
        values = values / 2
        if nan and draw(st.booleans()):
            values.flat[:: max(1, values.size // 3)] = np.nan
    return tensor_and_array(values.astype(dtype.np), draw(st.sampled_from(support.LAYOUTS)))[0]


@settings(max_examples=15, deadline=None)
@given(data=st.data(), repeats=st.integers(0, 3), flat=st.booleans())
def test_repeat_interleave_is_one_strided_copy(data, repeats, flat):
    x = drawn(data.draw, [jt.float32, jt.int64, jt.bool, jt.float16])
    dim = None if flat else data.draw(st.integers(-x.ndim, x.ndim - 1))
    launched = expect(lambda t: t.repeat_interleave(repeats, dim), x)
    assert launched <= {"copy"}


@settings(max_examples=15, deadline=None)
@given(data=st.data(), value_dtype=st.sampled_from([jt.float64, jt.int32, jt.bool]))
def test_index_fill_with_a_tensor_value(data, value_dtype):
    x = drawn(data.draw, [jt.float32, jt.int64, jt.float64], nan=False)
    dim = data.draw(st.integers(-x.ndim, x.ndim - 1))
    n = x.shape[dim]
    index = jt.tensor(data.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=5)))
    value = jt.tensor(data.draw(st.sampled_from([-2.5, 7.0, 1.0]))).to(value_dtype)
    assert "index_fill" in expect(lambda t, i, v: t.index_fill(dim, i, v), x, index, value)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), reduce=st.sampled_from(["sum", "prod", "mean", "amax", "amin"]), include_self=st.booleans())
def test_scatter_reduce_matches_the_cpu(data, reduce, include_self):
    """Integers exactly (their sums and products wrap alike in any order); floats too for amax/amin (NaN
    kept, as NumPy's maximum.at), and within rounding for sums and products, whose order the atomics pick."""
    x = drawn(data.draw, [jt.float32, jt.float64, jt.float16, jt.bfloat16, jt.int64, jt.int32, jt.int8, jt.uint8],
              max_side=5)
    dim = data.draw(st.integers(0, x.ndim - 1))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    index_shape = tuple(data.draw(st.integers(1, 6)) if d == dim else data.draw(st.integers(1, n))
                        for d, n in enumerate(x.shape))
    index = jt.tensor(rng.integers(0, x.shape[dim], index_shape))
    src = jt.tensor(rng.integers(-3, 4, index_shape).astype(np.float64) / 2).to(x.dtype)
    if x.dtype.is_floating_point and data.draw(st.booleans()):
        src.view(-1)[0] = float("nan")
    exact = not x.dtype.is_floating_point or reduce in ("amax", "amin")
    launched = expect(lambda t, i, s: t.scatter_reduce(dim, i, s, reduce, include_self=include_self), x, index, src,
                      exact=exact, rtol={jt.float16: 1e-3, jt.bfloat16: 1e-2}.get(x.dtype, 1e-5))
    assert f"scatter_reduce_{'sum' if reduce == 'mean' else reduce}" in launched


def test_scatter_reduce_reports_a_bad_index_at_the_next_synchronisation(fake):
    x = jt.zeros(3, device="cuda")
    out = x.scatter_reduce(0, jt.tensor([0, 3], device="cuda"), jt.ones(2, device="cuda"), "amax")
    with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 0 with size 3"):
        out.cpu()
    assert x.scatter_reduce(0, jt.tensor([2], device="cuda"), jt.ones(1, device="cuda"), "prod").tolist() == [0, 0, 0]


# Data-dependent sizes ----------------------------------------------------------------------------

@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_masked_select_and_argwhere_compact_on_the_device(data):
    x = drawn(data.draw, [jt.float32, jt.int32, jt.bool, jt.float16])
    shape = data.draw(st.sampled_from([x.shape, x.shape[-1:], (1,) * x.ndim]))
    mask = tensor_and_array(np.random.default_rng(data.draw(st.integers(0, 99))).random(shape) < 0.5,
                            data.draw(st.sampled_from(support.LAYOUTS)))[0]
    launched = expect(lambda t, m: t.masked_select(m), x, mask)
    assert "scatter" in launched and "cumsum" in launched
    expect(lambda t: t.argwhere(), x)
    expect(lambda t: t.nonzero(as_tuple=True), x)


@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_unique_sorts_counts_and_inverts_on_the_device(data):
    x = drawn(data.draw, [jt.float32, jt.float64, jt.int64, jt.int8, jt.bool])
    launched = expect(lambda t: jt.unique(t, return_inverse=True, return_counts=True), x)
    assert {"sort", "cumsum", "scatter", "scatter_add"} <= launched


def test_an_empty_selection_gives_an_empty_result():
    x = jt.arange(6.0).reshape(2, 3)
    expect(lambda t: t.masked_select(t > 10), x)
    expect(lambda t: (t > 10).argwhere(), x)


# Long lines ----------------------------------------------------------------------------------------

@settings(max_examples=6, deadline=None)
@given(data=st.data(), descending=st.booleans())
def test_lines_longer_than_a_block_sorts_merge_in_the_cpus_stable_order(data, descending):
    """Runs of 8 sorted by the block kernel, then merged (a block with barriers per run is slow to emulate:
    few lines)."""
    n = data.draw(st.integers(9, 40))
    shape = data.draw(st.sampled_from([(n,), (2, n), (n, 2)]))
    dtype = data.draw(st.sampled_from([jt.float32, jt.float16, jt.int64, jt.int32]))
    values = np.random.default_rng(data.draw(st.integers(0, 99))).integers(-3, 4, shape).astype(dtype.np)
    if dtype.is_floating_point:
        values.flat[::5] = np.nan
    x = tensor_and_array(values, data.draw(st.sampled_from(support.LAYOUTS)))[0]
    dim = shape.index(n)
    k = data.draw(st.integers(1, n))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sort, "MAX_LINE", 8)
        assert {"sort", "merge"} <= expect(lambda t: t.sort(dim, descending), x)
        expect(lambda t: t.topk(k, dim, largest=descending), x)
        expect(lambda t: t.median(dim), x)


def test_a_line_of_5000_sorts_on_the_device():
    values = np.random.default_rng(0).integers(-500, 500, 5000).astype(np.float32)
    values[::97] = np.nan
    launched = expect(lambda t: t.sort(descending=True), jt.tensor(values))
    assert launched == {"sort", "merge"}


def test_the_kernels_of_this_file_assemble(fake, monkeypatch):
    monkeypatch.setattr(sort, "MAX_LINE", 4)
    for module, table in ((factories, "_FORMULAS"), (indexing, "_INDEXERS"), (lines, "_SCANS")):
        monkeypatch.setattr(module, table, {})  # only this test's kernels
    for dtype in (jt.float16, jt.bfloat16, jt.int64):
        for make in (jt.arange, jt.eye):
            make(3, dtype=dtype, device="cuda")
        jt.linspace(0, 3, 7, dtype=dtype, device="cuda")
        jt.logspace(0, 3, 7, dtype=dtype, device="cuda")
    x = jt.arange(6.0, device="cuda").reshape(2, 3)
    index = jt.tensor([[0, 1, 1]], device="cuda")
    for dtype, reduce in ((jt.float32, "prod"), (jt.float64, "amax"), (jt.int32, "amin"), (jt.int64, "mean")):
        x.to(dtype).scatter_reduce(0, index, x[:1].to(dtype), reduce)
    jt.arange(9.0, device="cuda").sort(descending=True)
    tables = (factories._FORMULAS, indexing._INDEXERS, lines._SCANS)
    kernels = [k for table in tables for k in table.values()]
    assert {"arange", "eye", "linspace", "logspace", "scatter_reduce_prod", "scatter_reduce_amax", "scatter_mean",
            "merge", "sort"} <= {k.ops[0] for k in kernels}
    assert_assembles(kernels)
