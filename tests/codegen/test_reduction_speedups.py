"""Two reduction kernel shapes that once ran at a fraction of the machine's speed, pinned down.

- Float max and min reductions vectorise: along a run of reduced elements as a vector float max with a
  separate NaN check (kernel.float_extremum), across kept elements as ordered integer keys
  (lowering.Reduction.keyed); the float compare-and-select chain did not vectorise. NaN must still win
  (either sign), infinities and zeros order as NumPy's do.
- A reduction whose innermost input dim is kept accumulates a chunk of kept elements in a stack array,
  the reduced dims looping outside, whether or not an epilogue follows; an epilogue used to send the
  kernel back to one column at a time, five times slower.

Values are checked against eager (NumPy); the kernels are checked for what the compiler made of them.
"""

import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
from jitorch.codegen import kernel as kernel_module
from jitorch.codegen.target import CpuTarget
from tests.codegen.test_kernels import fused_result

SPECIALS = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e-45, -5e-324, 3e38, -3e38, 1e308, 65504.0]
FLOATS = [jt.float32, jt.float64, jt.float16, jt.bfloat16]


def special_arrays(dtype, shape):
    """Arrays of ``shape`` whose elements are drawn from the special floats and ordinary numbers."""
    values = st.one_of(st.sampled_from(SPECIALS), st.floats(-1e6, 1e6, width=32))
    n = int(np.prod(shape))
    return st.lists(values, min_size=n, max_size=n).map(
        lambda v: np.array(v, dtype=np.float64).astype(dtype.np).reshape(shape))


SHAPES = st.lists(st.integers(1, 9), min_size=0, max_size=3).map(tuple)


def reductions_of(shape):
    """(name, reduction) pairs over every dim, every dim set and the whole of a tensor of ``shape``."""
    fns = [("max", lambda t: t.max()), ("min", lambda t: t.min()), ("amax", lambda t: t.amax()),
           ("amin", lambda t: t.amin())]
    for d in range(len(shape)):
        fns += [("amax", lambda t, d=d: t.amax(d)), ("amin", lambda t, d=d: t.amin(d, keepdim=True))]
    if len(shape) == 3:
        fns += [("amax", lambda t: t.amax((0, 2))), ("amin", lambda t: t.amin((0, 1)) * 2)]
    return fns


@given(data=st.data(), shape=SHAPES, dtype=st.sampled_from(FLOATS))
def test_float_max_and_min_match_eager_with_nan_infinities_and_zeros(data, shape, dtype):
    x = jt.tensor(data.draw(special_arrays(dtype, shape)), dtype=dtype)
    for name, fn in reductions_of(shape):
        # assert_array_equal takes -0.0 == 0.0: which zero wins a tie is not specified by NumPy either;
        # compared as float64 (exact for every float dtype), as NumPy misses a 0-d bfloat16 NaN's equality
        np.testing.assert_array_equal(fused_result(fn, x, ops=[name]).numpy().astype(np.float64),
                                      fn(x).numpy().astype(np.float64))


@given(data=st.data(), shape=SHAPES.filter(lambda s: len(s) > 0),
       dtype=st.sampled_from([jt.int8, jt.uint8, jt.int32, jt.int64, jt.bool]))
def test_integer_max_and_min_match_eager_at_the_extremes(data, shape, dtype):
    lo, hi = (0, 1) if dtype is jt.bool else (np.iinfo(dtype.np).min, np.iinfo(dtype.np).max)
    n = int(np.prod(shape))
    values = data.draw(st.lists(st.one_of(st.sampled_from([lo, hi, 0]), st.integers(lo, hi)), min_size=n, max_size=n))
    x = jt.tensor(np.array(values).astype(dtype.np).reshape(shape), dtype=dtype)
    for name, fn in reductions_of(shape):
        np.testing.assert_array_equal(fused_result(fn, x, ops=[name]).numpy(), fn(x).numpy())


def test_a_nan_anywhere_wins_in_every_position(rng):
    # NaN of either sign at each position of a vectorised row (main loop, remainder, first and last)
    for dtype in (jt.float32, jt.float64):
        base = rng.standard_normal((37, 45)).astype(dtype.np)
        for j in (0, 7, 8, 31, 44):
            a = base.copy()
            a[j % 37, j] = np.nan if j % 2 else -np.nan
            x = jt.tensor(a)
            for fn in (lambda t: t.amax(1), lambda t: t.amin(0), lambda t: t.max(), lambda t: t.amax(0) + 1):
                np.testing.assert_array_equal(jt.compile(fn)(x).numpy(), fn(x).numpy())


def max_loops(ir_text, bits):
    """The vectorised float max/min operations of a kernel's optimised IR on ``bits``-bit floats."""
    return re.findall(rf"llvm\.(?:max|min)num\.v\d+f{bits}", ir_text)


@pytest.mark.parametrize("dtype, bits", [(jt.float32, 32), (jt.float64, 64)])
def test_float_max_reductions_and_softmax_vectorise(dtype, bits):
    x = jt.randn(64, 300, dtype=dtype)
    for fn in (lambda t: t.amax(1), lambda t: t.amin(), lambda t: t.softmax(-1), lambda t: t.log_softmax(-1),
               lambda t: t.logsumexp(1)):
        kernels = jt.compile(fn).lower(x).kernels
        assert any(max_loops(k.llvm_ir, bits) for k in kernels), [k.ops for k in kernels]


def test_reductions_with_an_epilogue_keep_the_kept_dim_innermost():
    x = jt.randn(512, 512)
    for fn, ops in ((lambda t: t.sum(0) * 2, ["sum", "mul"]), (lambda t: t.mean(0), ["mean"]),
                    (lambda t: t.amax(0) + 1, ["amax", "add"])):
        (k,) = jt.compile(fn).lower(x).kernels
        assert k.ops == ops
        # the chunk's accumulators in a stack array, updated and finished by vector instructions
        assert re.search(r"alloca \[\d+ x (float|i32)\]", k.llvm_ir), k.llvm_ir
        assert re.search(r"store <\d+ x (float|i32)>", k.llvm_ir)


def _two_results(m, u):
    """The reduction's value and a value of its epilogue, both leaving the kernel."""
    return m > u, m


SLOTS = CpuTarget.kept_chunk_bytes // 8        # float64 accumulators in a chunk
RUN_SLOTS = CpuTarget.kept_run_bytes // 8      # ... in a chunk of one kept dim laid along memory
STACK_LIMIT = kernel_module.KEPT_CHUNK_MAX_BYTES // 8


@pytest.mark.parametrize("shape, dims", [
    ((5, 2 * SLOTS + 3), 0),                 # more kept elements than a chunk of several kept dims holds: one run
    ((3, 2 * RUN_SLOTS + 3), 0),             # more kept elements than one run holds
    ((30, 4, SLOTS // 10), 1),               # several rows of the outer kept dim per chunk, three chunks
    ((2, 3, 2 * SLOTS + 1), 1),              # a row of the outer kept dim bigger than a chunk: one per chunk
    ((2, 2, STACK_LIMIT + 1), 1),            # bigger than a stack array may be: kept dims outside instead
    ((6, 4, 5), (0, 1)),
])
def test_leading_dim_reductions_with_epilogues_match_eager(shape, dims):
    x = jt.randn(*shape, dtype=jt.float64)
    y = jt.randn(*shape[-1:], dtype=jt.float64)
    fns = [lambda t, u: (t.sum(dims) * 2 - u,), lambda t, u: ((t * t).mean(dims).sqrt(),),
           lambda t, u: (t.amax(dims) + u,), lambda t, u: _two_results(t.amin(dims), u)]
    for fn in fns:
        compiled = jt.compile(fn)
        assert len(compiled.lower(x, y).kernels) == 1
        for got, expected in zip(compiled(x, y), fn(x, y)):
            np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)


def test_a_wide_rows_sum_reads_each_row_in_one_run_and_a_transposed_one_in_chunks():
    """A sum over rows that keeps one dim laid along memory (a bias gradient: the (700, 10000) logits' of a word
    model) takes chunks of `kept_run_bytes`, a whole 10,000-wide row, so the rows' reads stay one stream; read
    through a transpose, each kept element lies a row apart and the chunk stays `kept_chunk_bytes`. Each kept
    element is summed in the same order: eager's bytes."""
    x = jt.randn(7, 3, 10000)
    (k,) = jt.compile(lambda t: t.sum((0, 1))).lower(x).kernels
    assert f"alloca [{CpuTarget.kept_run_bytes // 4} x float]" in k.llvm_ir
    assert np.array_equal(jt.compile(lambda t: t.sum((0, 1)))(x).numpy(), x.sum((0, 1)).numpy())
    y = jt.randn(10000, 21)
    (k,) = jt.compile(lambda t: t.t().sum(0)).lower(y).kernels
    assert f"alloca [{CpuTarget.kept_chunk_bytes // 4} x float]" in k.llvm_ir
    np.testing.assert_allclose(jt.compile(lambda t: t.t().sum(0))(y).numpy(), y.sum(1).numpy(), rtol=1e-5, atol=1e-4)


def test_threads_split_kept_chunks_without_changing_results(monkeypatch):
    # thread chunks (half the columns each) do not fall on the kernel's own chunks of kept elements;
    # each kept element is still reduced in the same order
    x = jt.randn(64, 5000)
    compiled = jt.compile(lambda t: t.sum(0) * 2)
    assert compiled.lower(x).kernels[0]._kernel.parallel
    monkeypatch.setenv("JITORCH_NUM_THREADS", "2")
    two = compiled(x)
    monkeypatch.setenv("JITORCH_NUM_THREADS", "1")
    np.testing.assert_array_equal(two.numpy(), compiled(x).numpy())
    np.testing.assert_allclose(two.numpy(), (x.sum(0) * 2).numpy(), rtol=1e-5, atol=1e-4)


def test_integer_and_narrow_results_of_a_kept_dim_reduction():
    # accumulators wider than the result (int8 sums in int64, float16 in float32) and a bool epilogue
    x8 = jt.tensor(np.arange(-60, 60, dtype=np.int8).reshape(8, 15))
    h = jt.randn(40, 33).half()
    for fn, t in ((lambda t: t.sum(0), x8), (lambda t: t.sum(0) > 3, x8), (lambda t: t.amax(0) - 1, x8),
                  (lambda t: t.mean(0) * 2, h), (lambda t: t.amax(0) * 2, h)):
        got, expected = jt.compile(fn)(t), fn(t)
        np.testing.assert_allclose(got.numpy().astype(np.float64), expected.numpy().astype(np.float64), rtol=2e-3)


def test_empty_kept_or_reduced_dims():
    for shape, fn in (((0, 5), lambda t: t.amax(1)), ((0, 5), lambda t: t.sum(0) * 2), ((4, 0), lambda t: t.sum(0) + 1),
                      ((0, 5), lambda t: t.mean(1) * 2), ((3, 0, 4), lambda t: t.sum(1) - 1)):
        x = jt.ones(*shape)
        got, expected = jt.compile(fn)(x), fn(x)
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_in_place_update_from_a_leading_dim_sum():
    # the bias update of SGD: the epilogue reads the parameter and writes it in place
    g = jt.randn(64, 300)
    p = jt.randn(300)
    q = p.clone()

    def step(p, g):
        p.sub_(0.1 * g.sum(0))
        return p
    jt.compile(step)(p, g)
    step(q, g)
    np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.cpu_independent
def test_cuda_kept_dim_reductions_keep_their_accumulator_in_a_register():
    x = jt.randn(64, 300)
    for fn in (lambda t: t.sum(0) * 2, lambda t: t.reshape(8, 8, 300).sum(1) + 1, lambda t: t.amax(0)):
        (k,) = jt.compile(fn, fullgraph=True).lower(x, device="cuda").executable.kernels
        assert k.mode == "thread" and ".local" not in k.asm  # no per-thread stack array


def test_cuda_max_min_and_epilogues_match_eager_on_the_emulated_device(rng):
    a = rng.standard_normal((33, 70)).astype(np.float32)
    a[3, 5], a[20, 69] = np.nan, -np.inf
    x = jt.tensor(a)
    fns = (lambda t: t.amax(1), lambda t: t.amin(0), lambda t: t.max(), lambda t: t.sum(0) * 2,
           lambda t: t.amax(0) + 1, lambda t: t.softmax(-1))
    with jt.cuda.emulated():
        got = [jt.compile(fn)(x.cuda()).cpu() for fn in fns]
    for fn, g in zip(fns, got):
        # float32 sums add in another order on the device
        np.testing.assert_allclose(g.numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-5, equal_nan=True)


# Float max and min along a run of reduced elements (kernel.float_extremum): rows of every length class
# (one element, shorter than a vector, several vectors in one stream with elements past the last whole
# vector, four streams with three left over), with NaN of either sign where each stream starts and ends and
# in the elements left over, infinities and signed zeros.
ROW_LENGTHS = [1, 2, 3, 17, 64, 65, 1031, kernel_module.STREAMED_MIN + 3]


def stream_edges(n):
    """Indices where the streams of a run of ``n`` start and end, and the elements left over after them."""
    streams = kernel_module.streams_for(n)
    part = n // streams
    edges = {0, n - 1} | {i * part for i in range(streams)} | {i * part - 1 for i in range(1, streams + 1)}
    return sorted(j for j in edges if 0 <= j < n)


def extremum_rows(n, rng):
    """float64 rows of length ``n``: ordinary numbers, then the same with NaN or -NaN at each of
    `stream_edges`, then all -inf, all inf, inf with -inf, all NaN, all -0.0, all 0.0, and a large finite
    value at the end (in the elements left over when there are any) and its negation."""
    base = rng.standard_normal(n) * 100
    rows = [base]
    for i, j in enumerate(stream_edges(n)):
        row = base.copy()
        row[j] = np.nan if i % 2 else -np.nan
        rows.append(row)
    mixed = np.full(n, -np.inf)
    mixed[n // 2] = np.inf
    last = base.copy()
    last[-1] = 1e30
    rows += [np.full(n, -np.inf), np.full(n, np.inf), mixed, np.full(n, np.nan), np.full(n, -0.0), np.zeros(n),
             last, -last]
    return np.stack(rows)


@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_row_max_and_min_match_torch_on_nan_infinities_zeros_and_tails(n, dtype, rng):
    values = extremum_rows(n, rng)
    x = jt.tensor(values).to(dtype)
    tx = torch.from_numpy(values).to(getattr(torch, str(dtype).split(".")[-1]))

    def fn(t):
        return t.amax(1), t.amin(1), t.amax(), t.amin(), t[:1].max(), t[:1].min()
    compiled = jt.compile(fn)
    kernels = compiled.lower(x).kernels
    # (the row max and min share one kernel, one loop each over the row: `fusion.same_reduction`)
    assert sorted(k.ops[0] for k in kernels) == ["amax", "amax", "amin", "max", "min"]
    assert ["amax", "amin"] in [k.ops for k in kernels]
    # a zero result has the sign of the zeros where a row holds one kind of zero (torch's choice between
    # -0.0 and 0.0 in a row holding both depends on the row's length)
    signed = np.all(values == 0, axis=1) & (np.all(np.signbit(values), axis=1) | ~np.any(np.signbit(values), axis=1))
    for i, (got, want) in enumerate(zip(compiled(x), fn(tx))):
        # compared as float64 (exact for every float dtype; NumPy has no bfloat16)
        got, want = got.double().numpy(), want.double().numpy()
        np.testing.assert_array_equal(got, want)
        if i < 2:
            np.testing.assert_array_equal(np.signbit(got[signed]), np.signbit(want[signed]))


def vector_loop(ir_text, call):
    """The vectorised loop of a kernel's optimised IR (a ``vector.body`` block) that calls ``call``."""
    blocks = re.findall(r"\n(vector\.body\d*:.*?)\n\n", ir_text, re.S)
    (loop,) = [block for block in blocks if call in block]
    return loop


@pytest.mark.parametrize("dtype, name", [(jt.float32, "float"), (jt.float64, "double")], ids=str)
def test_row_max_runs_several_vector_accumulators_and_a_vector_nan_compare(dtype, name):
    x = jt.randn(8, 4096, dtype=dtype)
    for fn, intrinsic in ((lambda t: t.amax(1), "maxnum"), (lambda t: t.amin(1) * 2, "minnum"),
                          (lambda t: t.softmax(-1), "maxnum")):
        (k,) = jt.compile(fn).lower(x).kernels
        loop = vector_loop(k.llvm_ir, f"@llvm.{intrinsic}.v")
        folds = re.findall(rf"call nnan nsz <\d+ x {name}> @llvm\.{intrinsic}", loop)
        accumulators = re.findall(rf"= phi <\d+ x {name}>", loop)
        compares = re.findall(rf"fcmp uno <\d+ x {name}>", loop)
        # independent accumulators (a row of 4096 is one stream, interleaved: `kernel.RUN_LOOP`), so the
        # max's latency does not bound the loop; no integer keys; at most one unordered compare per vector
        assert len(accumulators) >= 4 and len(folds) >= len(accumulators), loop
        assert 0 < len(compares) <= len(folds), loop
        assert not re.search(r"llvm\.[su](max|min)|icmp s[gl]t <", loop)


@pytest.mark.parametrize("fn", [lambda t: t.amax(1), lambda t: t.amin(1), lambda t: t.relu().amax(1),
                                lambda t: t.float().amax(1), lambda t: t.float().softmax(-1), lambda t: t.max()],
                         ids=["amax", "amin", "relu_amax", "float_amax", "float_softmax", "full_max"])
def test_float16_max_and_min_kernels_take_no_maxnum_which_llvm15_aborts_on_after_narrowing_to_halves(fn):
    """Regression (AMD EPYC host, llvmlite 0.44 / LLVM 15): the float32 maxnum fold of `float_extremum` over
    widened float16 values was narrowed by LLVM to a half vector max, whose x86 selection aborted the whole
    process ("Cannot select: v16f16 = X86ISD::FMAX"). Such kernels now combine integer keys."""
    values = np.random.default_rng(3).standard_normal((3, 1031)) * 10
    values[1, 7] = np.nan
    compiled = jt.compile(fn)
    x = jt.tensor(values).to(jt.float16)
    for k in compiled.lower(x).kernels:
        assert "@llvm.maxnum" not in k.llvm_ir and "@llvm.minnum" not in k.llvm_ir, k.ops
    got, want = compiled(x), fn(torch.from_numpy(values).half())
    # maxima exactly; the softmax to its float32 rounding
    np.testing.assert_allclose(got.double().numpy(), want.double().numpy(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_split_full_max_and_min_with_nan_inside_and_between_parts(threads, monkeypatch):
    monkeypatch.setenv("JITORCH_NUM_THREADS", threads)
    n = (1 << 18) + 5
    step = -(-n // CpuTarget.split_parts)
    values = np.random.default_rng(1).standard_normal(n)
    fns = (lambda t: t.amax(), lambda t: t.amin(), lambda t: t.max(), lambda t: t.min())
    compiled = [jt.compile(f) for f in fns]
    cases = [values]
    # in a part's first half, in its second half, at a part's last element, at the odd last element
    for j in (3 * step + 1, 5 * step + step // 2 + 1, 2 * step - 1, n - 1):
        v = values.copy()
        v[j] = np.nan if j % 2 else -np.nan
        cases.append(v)
    cases += [np.full(n, -np.inf), np.full(n, np.inf)]
    for v in cases:
        for dtype in (np.float32, np.float64):
            x = jt.tensor(v.astype(dtype))
            assert compiled[0].lower(x).kernels[0]._kernel.source.split is not None
            for c, f in zip(compiled, fns):
                np.testing.assert_array_equal(c(x).numpy(), f(torch.from_numpy(v.astype(dtype))).numpy())


def test_softmax_and_fused_max_rows_with_nan_and_infinities_match_torch(rng):
    values = rng.standard_normal((6, 1031)).astype(np.float32)
    values[1, 700], values[2, 1030], values[3] = np.nan, -np.nan, -np.inf
    values[4, 3], values[5, 600] = np.inf, -np.inf
    x, tx = jt.tensor(values), torch.from_numpy(values)
    for fn in (lambda t: t.softmax(-1), lambda t: t.log_softmax(-1), lambda t: (t * 2 - 1).amax(1) + 1,
               lambda t: (t.abs() * -1).amin(-1, keepdim=True) - t[:, :1]):
        compiled = jt.compile(fn)
        assert len(compiled.lower(x).kernels) == 1
        np.testing.assert_allclose(compiled(x).numpy(), fn(tx).numpy(), rtol=1e-6, atol=1e-6, equal_nan=True)


SUMS = [("sum", lambda t: t.sum(-1)), ("mean", lambda t: t.mean(-1)), ("prod", lambda t: t.prod(-1)),
        ("nansum", lambda t: t.nansum(-1)), ("any", lambda t: t.any(-1)), ("all", lambda t: t.all(-1)),
        ("count_nonzero", lambda t: t.count_nonzero(-1)), ("amax", lambda t: t.amax(-1))]


@pytest.mark.parametrize("dtype", [jt.int8, jt.int32, jt.int64, jt.bool, jt.float16, jt.float32, jt.float64], ids=str)
def test_long_rows_reduce_in_four_streams_with_torchs_results(dtype, rng):
    # rows of STREAMED_MIN + 3 elements: four streams and three elements left over; integers exactly (int8
    # and int32 sums overflow their dtype, which torch sums in int64), floats in another order of the same sum
    n = kernel_module.STREAMED_MIN + 3
    assert kernel_module.streams_for(n) == 4
    part = n // 4
    if dtype is jt.bool:
        values = rng.random((3, n)) < 0.99999
        values[1], values[2, n - 2] = True, False
    elif dtype.is_floating_point:
        values = rng.standard_normal((3, n)) * 0.002 + 1.0
        values[1, n - 1], values[2, part + 1] = np.nan, 0.0
    else:
        lo, hi = (-100, 100) if dtype is jt.int8 else ((-2**31, 2**31 - 1) if dtype is jt.int32 else (-2**40, 2**40))
        values = rng.integers(lo, hi, (3, n))
        values[1] = hi
    x = jt.tensor(values).to(dtype)
    tx = torch.from_numpy(values).to(getattr(torch, str(dtype).split(".")[-1]))
    for name, fn in SUMS:
        # (torch's float16 prod accumulates in float16, far off over so many elements; jitorch's in float32)
        if name in ("mean", "nansum") and not dtype.is_floating_point or name == "amax" and dtype is jt.bool \
                or name == "prod" and dtype is jt.float16:
            continue
        compiled = jt.compile(fn)
        (k,) = compiled.lower(x).kernels
        assert k.ops == [name]
        got, want = compiled(x), fn(tx)
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        got, want = got.double().numpy(), want.double().numpy()
        if dtype.is_floating_point:
            # (a float32 product of 2**18 factors in another order: 1.4e-5 apart, a few times sqrt(n) ulps)
            rtol = {jt.float16: 2e-3, jt.float32: 1e-4}.get(dtype, 1e-9)
            np.testing.assert_allclose(got, want, rtol=rtol, equal_nan=True)
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_split_full_integer_sum_is_exact_in_streams(threads, monkeypatch):
    monkeypatch.setenv("JITORCH_NUM_THREADS", threads)
    values = np.random.default_rng(2).integers(-2**31, 2**31 - 1, (1 << 18) + 7).astype(np.int32)
    x = jt.tensor(values)
    compiled = jt.compile(lambda t: t.sum())
    assert compiled.lower(x).kernels[0]._kernel.source.split is not None
    assert compiled(x).item() == torch.from_numpy(values).sum().item()


def test_channel_statistics_of_a_batch_last_buffer_loop_along_memory_innermost():
    """A batch norm's channel mean over a convolution's batch-last buffer (C, H, W, N) seen as (N, C, H, W):
    the reduced dims nest by decreasing stride, so H, W and N merge into one contiguous run of 1024 per
    channel. In row-major order they were two loops, 64 (N) outside 16 (H and W, 64 floats apart), the inner
    loop strided (DCGAN's step, session 43's audit)."""
    base = jt.randn(256, 4, 4, 64)
    x = base.permute(3, 0, 1, 2)

    def f(x):
        return x.mean((0, 2, 3))
    (k,) = reduction_kernels(f, x)
    assert k.layouts[k.inputs[0]] == (1, 1024, 256, 64)
    assert loop_bounds(k) == ["1024"]
    np.testing.assert_allclose(jt.compile(f)(x).numpy(), f(x).numpy(), rtol=1e-6, atol=1e-7)


def reduction_kernels(fn, *args):
    from jitorch.jit.executor import KernelStep
    ex = jt.compile(fn).lower(*args).executable
    return [st.kernel.source for st in ex.steps if type(st) is KernelStep]


def loop_bounds(k):
    """The constant trip counts of a kernel's loops, outermost first."""
    return re.findall(r'icmp slt i64 %"\.\d+", (\d+)', k.llvm_ir)


def test_channel_sum_through_a_folded_permute_loops_along_the_permuted_buffer():
    """The batch-last buffer permuted inside the graph (DCGAN's `permute+sum` kernels, 38 a step): the order
    comes from the strides the prologue reads (the view's over the buffer), one run of 4096 per channel."""
    def f(y):
        return y.permute(3, 0, 1, 2).sum((0, 2, 3))
    y = jt.randn(128, 8, 8, 64)
    (k,) = reduction_kernels(f, y)
    assert k.ops == ["permute", "sum"]
    assert loop_bounds(k) == ["4096"]
    # (4096 float32 terms of about 0.8 in magnitude, reassociated: some 3300 in absolute sum, a few ulps of it)
    np.testing.assert_allclose(jt.compile(f)(y).numpy(), f(y).numpy(), rtol=1e-5, atol=1e-3)
