"""Row and full reductions after session 50's change to runs of reduced elements (`kernel.STREAMED_MIN`,
`kernel.RUN_LOOP`): every run (sums too, not only max and min) is read as `kernel.streamed_run` reads it, in one
stream below 2**18 elements, four vectors of accumulators a turn, never unrolled whole from 9 elements on.

The kernels are checked for that shape, and their values against torch's (and eager jitorch's): max and min
exactly, with torch's NaN propagation and max(dim)'s indices (the first of equal maxima, the first NaN), sums
within float rounding and bit for bit between one and two threads, over float and integer dtypes, dims, keepdim,
strided inputs, and rows of no, one and many elements.
"""

import re

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.codegen import kernel as kernel_module


def vector_bodies(ir_text):
    """The vectorised loops' blocks (``vector.body``) of a kernel's optimised IR, but for the remainder loops
    LLVM peels off (``.prol``, ``.epil``)."""
    blocks = re.findall(r"\n(vector\.body\d*:.*?)\n\n", ir_text, re.S)
    return [blk for blk in blocks if not re.match(r"vector\.body\d*\.(prol|epil)", blk)]


def torch_of(x):
    """The torch tensor of jitorch tensor ``x`` (bfloat16 through float32, which NumPy lacks)."""
    name = str(x.dtype).split(".")[-1]
    if name == "bfloat16":
        return torch.from_numpy(x.float().numpy()).to(torch.bfloat16)
    return torch.from_numpy(x.numpy().copy())


def as_numpy(t):
    """A jitorch or torch result as a float64 (or int64, bool) NumPy array, exact for every dtype here."""
    if isinstance(t, torch.Tensor):
        return (t.double() if t.is_floating_point() else t).numpy()
    return (t.double() if t.dtype.is_floating_point else t).numpy()


@pytest.mark.parametrize("dtype, name", [(jt.float32, "float"), (jt.float64, "double")], ids=str)
@pytest.mark.parametrize("width", [1024, 4096])
def test_row_max_of_wide_rows_reads_each_row_in_one_stream_of_four_vectors_not_unrolled_whole(dtype, name, width):
    """Regression (session 50): rows of 1024 to 2**18 - 1 elements were read in four streams (two for shorter
    max/min rows), which for a 4096x4096 float32 row max took 1.7 times one stream's time (rows of 1024: 2.5
    times; 1.2-1.9 times torch's); and a row of constant length 1024 was unrolled whole, spilling registers.
    Now one stream: each vectorised loop loads from one address and its next vectors, four a turn."""
    x = jt.randn(8, width, dtype=dtype)
    x[3, width - 5] = float("nan")
    fn = lambda t: t.amax(1)  # noqa: E731
    (k,) = jt.compile(fn).lower(x).kernels
    (body,) = [blk for blk in vector_bodies(k.llvm_ir) if "@llvm.maxnum" in blk]
    # (a stream's address: a variable index from a base; its next vectors take constant offsets from it. Typed
    # pointers, `float*`, before LLVM 17: llvmlite 0.44 in the minimum-versions run)
    bases = re.findall(rf"getelementptr (?:inbounds )?(?:nuw )?{name}, (?:ptr|{name}\*) %[\w.]+, i64 %", body)
    loads = re.findall(rf"load <\d+ x {name}>", body)
    assert len(bases) == 1 and len(loads) == 4, body
    got, want = jt.compile(fn)(x), fn(torch_of(x))
    np.testing.assert_array_equal(as_numpy(got), as_numpy(want))


def test_runs_shorter_than_streamed_min_are_one_stream_longer_four():
    assert kernel_module.streams_for(kernel_module.STREAMED_MIN - 1) == 1
    assert kernel_module.streams_for(kernel_module.STREAMED_MIN) == kernel_module.STREAMS == 4


@pytest.mark.parametrize("width", [3, 8, 9, 12, 16, 64])
def test_narrow_row_sums_and_maxima_loop_along_the_row_not_gathering_across_rows(width):
    """Regression (session 50): a row of constant length from 9 elements was unrolled whole by LLVM, which then
    vectorised the loop over the rows with gathers (8 rows at a time): 16M float32 in rows of 9 to 64 took
    16-21 ms to sum or max, 6-8 times torch's time and the row loop's. Runs of 9 or more are loops now
    (`kernel.RUN_LOOP_MIN`); shorter ones LLVM still unrolls, without gathers."""
    values = np.random.default_rng(width).standard_normal((64, width)).astype(np.float32)
    values[5, width // 2] = np.nan
    x = jt.from_numpy(values)
    for fn in (lambda t: t.sum(1), lambda t: t.amax(1), lambda t: t.mean(1), lambda t: t.amin(1)):
        compiled = jt.compile(fn)
        (k,) = compiled.lower(x).kernels
        assert "llvm.masked.gather" not in k.llvm_ir
        np.testing.assert_allclose(compiled(x).numpy(), fn(torch.from_numpy(values)).numpy(), rtol=1e-6, atol=1e-6,
                                   equal_nan=True)


FLOATS = [jt.float32, jt.float64, jt.float16, jt.bfloat16]
INTS = [jt.int8, jt.uint8, jt.int32, jt.int64]


def sample(dtype, shape, rng):
    """Values of ``dtype`` with repeated maxima and minima in each row (the first index must win) and, for
    floats, NaN (twice in row 1: the first wins), infinities and signed zeros."""
    if dtype.is_floating_point:
        values = rng.standard_normal(shape) * 10
        values[0, :] = 0.0
        values[0, 1::2] = -0.0
        values[1, shape[1] // 3] = values[1, shape[1] // 2] = np.nan
        values[2, 0], values[2, -1] = np.inf, -np.inf
        values[3, [1, shape[1] - 2]] = 1e4
        values[3, [2, shape[1] - 3]] = -1e4
    else:
        lo, hi = (0, 200) if dtype is jt.uint8 else (-100, 100)
        values = rng.integers(lo, hi, shape)
        values[3, [1, shape[1] - 2]] = hi
        values[3, [2, shape[1] - 3]] = lo
    return jt.tensor(values).to(dtype)


def layouts(x, transposed=True):
    """``x`` contiguous, transposed (its rows strided) where ``transposed``, and every other column of a wider
    copy (a stepped view)."""
    wide = jt.cat([x, x], dim=1)
    out = {"contiguous": x, "stepped": wide[:, ::2]}
    if transposed:
        out["transposed"] = x.t().contiguous().t()
    return out


EXTREMA = {
    "amax_1": lambda t: t.amax(1), "amin_0": lambda t: t.amin(0), "amax_-1_keepdim": lambda t: t.amax(-1, keepdim=True),
    "amin_01": lambda t: t.amin((0, 1)), "amax_all": lambda t: t.amax(), "max_1": lambda t: t.max(1),
    "min_0": lambda t: t.min(0), "max_-1_keepdim": lambda t: t.max(-1, keepdim=True), "max_all": lambda t: t.max(),
    "argmax_1": lambda t: t.argmax(1), "argmin_0": lambda t: t.argmin(0),
}


def results(fns, v, alone):
    """``fns`` on ``v`` (name -> tuple of tensors): eager, compiled one by one where ``alone`` and ``v`` is
    contiguous, and compiled all in one graph (reductions of one space may share a kernel)."""
    tuples = lambda out: out if isinstance(out, tuple) else (out,)  # noqa: E731
    got = {f"{name} eager": tuples(fn(v)) for name, fn in fns.items()}
    if alone and v.is_contiguous():
        got.update({f"{name} compiled": tuples(jt.compile(fn)(v)) for name, fn in fns.items()})
    together = jt.compile(lambda t: [tuples(fn(t)) for fn in fns.values()])(v)
    got.update({f"{name} compiled together": out for name, out in zip(fns, together, strict=True)})
    return got


def check(fns, x, compare):
    """``compare(got, want, what)`` for each result of `results` on each of `layouts` of ``x`` against torch's
    (float32 and int32 in every layout and each function compiled alone too, the kernels of one reduction;
    the other dtypes, whose kernels differ in their element type only, contiguous and stepped, compiled
    together)."""
    full = x.dtype in (jt.float32, jt.int32)
    for layout, v in layouts(x, full).items():
        tv = torch_of(v)
        want = {name: fn(tv) for name, fn in fns.items()}
        for what, got in results(fns, v, full).items():
            w = want[what.split()[0]]
            w = tuple(w) if isinstance(w, tuple) else (w,)
            for g, ww in zip(got, w, strict=True):
                label = f"{what} {layout}"
                assert tuple(g.shape) == tuple(ww.shape), label
                assert str(g.dtype).split(".")[-1] == str(ww.dtype).split(".")[-1], label
                compare(as_numpy(g), as_numpy(ww), label)


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_max_and_min_match_torch_exactly_with_nan_first_index_dims_keepdim_and_layouts(dtype, rng):
    check(EXTREMA, sample(dtype, (5, 1031), rng),
          lambda got, want, what: np.testing.assert_array_equal(got, want, err_msg=what))


SUMS = {
    "sum_1": lambda t: t.sum(1), "sum_0": lambda t: t.sum(0), "sum_-1_keepdim": lambda t: t.sum(-1, keepdim=True),
    "sum_01": lambda t: t.sum((0, 1)), "sum_all": lambda t: t.sum(),
}


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=str)
def test_sums_match_torch_over_dims_keepdim_and_layouts(dtype, rng):
    x = sample(dtype, (5, 1031), rng)
    fns = dict(SUMS)
    if dtype.is_floating_point:  # (a sum of inf and -inf is NaN either way; keep the comparison about the sum)
        x[2, 0] = 1.0
        x[2, -1] = 2.0
        fns["nansum_1"] = lambda t: t.nansum(1)
    # other orders of the same sum; torch rounds a half's sum once from float32, as jitorch does
    rtol = {jt.float16: 2e-3, jt.bfloat16: 1.6e-2, jt.float32: 1e-5, jt.float64: 1e-12}.get(dtype)
    if rtol is None:
        check(fns, x, lambda got, want, what: np.testing.assert_array_equal(got, want, err_msg=what))
    else:
        check(fns, x, lambda got, want, what: np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 100,
                                                                           equal_nan=True, err_msg=what))


@pytest.mark.parametrize("dtype", [jt.float32, jt.int32], ids=str)
def test_empty_and_one_element_rows(dtype):
    one = jt.arange(6).to(dtype).reshape(6, 1)
    none = jt.zeros(0, 7, dtype=dtype)
    for fn in (lambda t: t.amax(1), lambda t: t.max(1), lambda t: t.sum(1), lambda t: t.amin(-1, keepdim=True),
               lambda t: t.argmax(1)):
        for x in (one, none):
            want = fn(torch_of(x))
            want = tuple(want) if isinstance(want, tuple) else (want,)
            for got in (fn(x), jt.compile(fn)(x)):
                got = tuple(got) if isinstance(got, tuple) else (got,)
                for g, w in zip(got, want, strict=True):
                    assert tuple(g.shape) == tuple(w.shape)
                    np.testing.assert_array_equal(as_numpy(g), as_numpy(w))
    empty_rows = jt.zeros(3, 0, dtype=dtype)
    assert jt.compile(lambda t: t.sum(1))(empty_rows).tolist() == [0, 0, 0]
    for fn in (lambda t: t.amax(1), lambda t: t.max(1)):
        with pytest.raises(type(_raised(fn, torch_of(empty_rows)))):
            fn(empty_rows)
        with pytest.raises(type(_raised(fn, torch_of(empty_rows)))):
            jt.compile(fn)(empty_rows)


def _raised(fn, x):
    """The exception ``fn(x)`` raises (it must raise)."""
    try:
        fn(x)
    except Exception as e:  # noqa: BLE001 - any type: the caller expects jitorch to raise the same
        return e
    raise AssertionError("torch did not raise")


# (a full sum split into parts and rows of four streams; rows of one stream; a row max)
SIZES = [((1 << 20) + 3,), (3, kernel_module.STREAMED_MIN + 3), (64, 4099)]


@pytest.mark.parametrize("shape", SIZES, ids=str)
def test_compiled_sums_and_maxima_have_the_same_bits_at_one_and_two_threads(shape, monkeypatch):
    values = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    x = jt.from_numpy(values)
    fns = (lambda t: t.sum(-1), lambda t: t.mean(-1), lambda t: t.amax(-1), lambda t: t.sum())
    results = []
    for threads in ("1", "2"):
        monkeypatch.setenv("JITORCH_NUM_THREADS", threads)
        results.append([jt.compile(fn)(x).numpy().tobytes() for fn in fns])
    assert results[0] == results[1]
    tx = torch.from_numpy(values)
    for fn in fns:
        np.testing.assert_allclose(jt.compile(fn)(x).numpy(), fn(tx).numpy(), rtol=1e-5, atol=1e-3)


OTHER_ROW_REDUCTIONS = {"prod": lambda t: t.prod(1), "any": lambda t: t.any(1), "all": lambda t: t.all(1),
                        "count_nonzero": lambda t: t.count_nonzero(1), "mean": lambda t: t.mean(1)}


@pytest.mark.parametrize("dtype", [jt.float32, jt.float16, jt.int32, jt.bool], ids=str)
def test_products_truth_counts_and_means_of_short_and_long_rows_match_torch(dtype, rng):
    """The other reductions whose rows of 9 to 2**18 - 1 elements moved from the generic loop nest to
    `kernel.streamed_run` (those of 1024 or more were read in four streams before)."""
    for width in (5, 9, 64, 1031):
        values = rng.standard_normal((6, width)) * 0.05 + 1.0
        values[1, width // 2] = 0.0
        values[2] = 0.0
        if dtype is jt.int32:
            values = rng.integers(-3, 4, (6, width))
            values[3] = 1
        x = jt.tensor(values).to(dtype)
        tx = torch_of(x)
        fns = {k: f for k, f in OTHER_ROW_REDUCTIONS.items()
               if not (k == "mean" and not dtype.is_floating_point) and not (k == "prod" and dtype is jt.float16)}
        got = jt.compile(lambda t: [f(t) for f in fns.values()])(x)
        for (name, fn), g in zip(fns.items(), got, strict=True):
            want = fn(tx)
            assert str(g.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], name
            rtol = 2e-3 if dtype is jt.float16 else 1e-5
            np.testing.assert_allclose(as_numpy(g), as_numpy(want), rtol=rtol, atol=rtol, err_msg=f"{name} {width}")
