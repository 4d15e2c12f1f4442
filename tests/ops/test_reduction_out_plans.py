"""Reductions' out= calls through a remembered plan (jitorch/ops/reduction_out.py, issue 19's per-call cost): the
commonest call (one dim as a Python int, or none) is computed in the function variant's own lines from the plan of
its (dtype, shape, strides, dim, keepdim); the rest through `fast_out`; anything else through the general path.
Which path ran, the bits against the general path's, and torch's errors, dtype rules, resizing and aliasing after a
plan is remembered (a remembered plan must serve no call it does not fit)."""

import contextlib
import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops import reduction_out, reductions, registry
from jitorch.runtime import summation
from tests.ops.test_reduction_out_into import no_copy

OPS = ["sum", "mean", "nansum", "amax", "amin", "prod"]


def _variant(name):
    """The function variant of ``name``, generated (its lines and globals made)."""
    fn = getattr(jt, name)
    fn(jt.ones(1, 1), 1, True, out=jt.zeros(1, 1))
    return fn


@contextlib.contextmanager
def only_the_variants_lines(name):
    """Inside, the variant's calls of `fast_out` and of the general path (`registry.call`) raise, as do a new
    result's copy and the kernel (`no_copy`): a call that succeeds ran the variant's own lines."""
    env = _variant(name).__globals__

    def refuse(*args, **kwargs):
        raise AssertionError("not the variant's lines")
    kept = env["_fast_out"], env["_call"]
    env["_fast_out"] = env["_call"] = refuse
    try:
        with no_copy():
            yield
    finally:
        env["_fast_out"], env["_call"] = kept


@contextlib.contextmanager
def general_path(name):
    """Inside, the op's call takes the general path: a new result, written into out (a profiler records, which
    the variant's lines step aside for; the op's `fast_out` is off)."""
    op = _variant(name)._op
    kept = op.fast_out
    op.fast_out = None
    try:
        with jt.profiler.profile():
            yield
    finally:
        op.fast_out = kept


def _input(shape, dtype, seed, nans=True):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape).astype(dtype)
    if nans and a.size > 2:
        a.flat[rng.integers(a.size)] = np.nan
    return jt.tensor(a)


CALLS = [((1, 1), 1, True), ((4, 5), 1, False), ((4, 5), -2, True), ((2, 3, 4), 1, True), ((7,), 0, False),
         ((3, 4), None, False), ((3, 4), None, True), ((3, summation.BLOCK + 5), 1, True),
         ((summation.BLOCK + 5, 2), 0, False), ((2, summation.BLOCK + 7), None, False)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name, shape, dim, keepdim", [(name, *c) for name in OPS for c in CALLS
                                                       if c[1] is not None or name not in ("amax", "amin", "prod")])
def test_the_commonest_call_runs_in_the_variant_with_the_general_paths_bits(name, shape, dim, keepdim, dtype):
    x = _input(shape, dtype, seed=len(shape) + (dim or 0))
    fn = getattr(jt, name)
    with general_path(name):
        expected = fn(x, dim, keepdim, out=jt.empty(0, dtype=x.dtype))
    out = jt.full(expected.shape, 7.0, dtype=x.dtype)
    fn(x, dim, keepdim, out=out)  # (the plan made)
    assert (x.dtype, x._shape, x._stride, dim, keepdim) in reduction_out.PLANS
    out = jt.full(expected.shape, 7.0, dtype=x.dtype)
    version = out._version
    with only_the_variants_lines(name):
        assert fn(x, dim, keepdim, out=out) is out
    assert out._version == version + 1
    assert out.numpy().tobytes() == expected.numpy().tobytes()


@pytest.mark.parametrize("name", OPS)
def test_a_list_of_dims_and_an_input_requiring_grad_under_no_grad_take_fast_out(name):
    """Not the variant's lines (a list is no plan's key; the lines serve no tensor that requires grad), but
    `fast_out`'s: computed straight into out, with the general path's bits."""
    x = _input((3, 4, 5), np.float64, seed=5)
    dims = [0, 2] if name != "prod" else 1
    fn = _variant(name)
    with general_path(name):
        expected = fn(x, dims, False, out=jt.empty(0, dtype=x.dtype))
    for t in (x, x.detach().requires_grad_()):
        out = jt.empty(expected.shape, dtype=x.dtype)
        with jt.no_grad(), no_copy():
            fn(t, dims, False, out=out)
        assert out.numpy().tobytes() == expected.numpy().tobytes()
    assert not any(key[3].__class__ is list for key in reduction_out.PLANS)


def _warm(lib, name, x, out):
    """A call the variant's lines serve, which leaves its plan remembered (jitorch)."""
    getattr(lib, name)(x, 1, True, out=out)


REFUSED = [  # after the plan of (float32, (3, 4), (4, 1), 1, True) is remembered: torch's errors
    lambda lib, name, x, out: getattr(lib, name)(x.detach().requires_grad_(), 1, True, out=out),
    lambda lib, name, x, out: getattr(lib, name)(x, 1, True, out=out.detach().requires_grad_()),
    lambda lib, name, x, out: getattr(lib, name)(x, 1, 1, out=out),  # keepdim an int
    lambda lib, name, x, out: getattr(lib, name)(x, 1, True, out=out.to(lib.int64)),
    lambda lib, name, x, out: getattr(lib, name)(x, 2, True, out=out),  # a dim out of range
    lambda lib, name, x, out: getattr(lib, name)(x[:, :0], 1, True, out=out),  # empty
    lambda lib, name, x, out: getattr(lib, name)(x, 1, True, out=out.to(lib.float64)),  # (amax, amin: refused)
]


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("k", range(len(REFUSED)))
def test_refusals_after_a_remembered_plan_are_torchs_and_write_nothing(name, k):
    call = REFUSED[k]
    results = []
    for lib in (torch, jt):
        x = lib.arange(12, dtype=lib.float32).reshape(3, 4)
        _warm(lib, name, x, lib.zeros(3, 1))
        out = lib.full((3, 1), 3.0)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                call(lib, name, x, out)
            results.append(("ok", out.tolist()))
        except Exception as e:  # noqa: BLE001 (the error is compared with torch's)
            results.append((type(e).__name__, str(e), out.tolist()))
    if results[0][0] == "ok":
        assert results[1][0] == "ok" and np.allclose(results[1][1], results[0][1], equal_nan=True)
    else:
        assert results[1] == results[0] and results[1][2] == [[3.0]] * 3  # (nothing written)


@pytest.mark.parametrize("name", ["sum", "amax"])
def test_a_dim_of_another_class_finds_no_remembered_plan(name):
    """``True`` and ``1.0`` equal ``1`` as dict keys: the variant's lines take only an int's, so these raise the
    general path's TypeError (torch's type) before writing, after ``dim=1``'s plan is remembered."""
    x, out = jt.ones(3, 4), jt.full((3, 1), 3.0)
    _warm(jt, name, x, jt.zeros(3, 1))
    for dim in (True, 1.0):
        with pytest.raises(TypeError, match=f"{name}\\(\\): argument 'dim'"):
            getattr(jt, name)(x, dim, True, out=out)
        with pytest.raises(TypeError):
            getattr(torch, name)(torch.ones(3, 4), dim, True, out=torch.zeros(3, 1))
    assert out.tolist() == [[3.0]] * 3


OTHER_OUTS = [  # out tensors the remembered plan does not fit: torch's dtype rules, resizing (warning), layout
    lambda lib: lib.zeros(3, 1, dtype=lib.float64),  # sum/nansum/prod: computed in float64; mean: read in it
    lambda lib: lib.zeros(2, 2),  # resized, with torch's warning
    lambda lib: lib.zeros(3),  # of the keepdim=False shape: resized
    lambda lib: lib.zeros(1, 3).t(),  # (3, 1) of other strides
]


@pytest.mark.parametrize("name", ["sum", "mean", "nansum", "prod"])
@pytest.mark.parametrize("k", range(len(OTHER_OUTS)))
def test_outs_the_plan_does_not_fit_keep_torchs_rules(name, k):
    results = []
    for lib in (torch, jt):
        x = (lib.arange(12, dtype=lib.float32) * 0.37 - 2).reshape(3, 4)
        _warm(lib, name, x, lib.zeros(3, 1))
        out = OTHER_OUTS[k](lib)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            getattr(lib, name)(x, 1, True, out=out)
        results.append((str(out.dtype).split(".")[1], tuple(out.shape), out.stride(), out.numpy().astype(np.float64),
                        [str(w.message)[:60] for w in caught]))
    (t_dtype, t_shape, t_stride, t_values, t_warnings), (j_dtype, j_shape, j_stride, j_values, j_warnings) = results
    assert (j_dtype, j_shape, j_stride, j_warnings) == (t_dtype, t_shape, t_stride, t_warnings)
    np.testing.assert_allclose(j_values, t_values, rtol=1e-6)


def test_out_in_the_inputs_storage_is_computed_from_its_old_values():
    """The variant's lines serve no out in the input's storage: the general path computes from the input as it was
    (docs/differences-from-torch.md, "Writes that read the memory they write")."""
    x = jt.arange(12, dtype=jt.float32).reshape(3, 4)
    _warm(jt, "sum", jt.ones(3, 4), jt.zeros(3, 1))
    expected = jt.sum(x, 1, True).tolist()
    jt.sum(x, 1, True, out=x[:, :1])
    assert x[:, :1].tolist() == expected


def test_the_extremes_raise_no_floating_point_error_unsilenced():
    """amax and amin call NumPy's reduction without silencing it (`reductions._OUT_STEPS`): under ``np.errstate(
    all="raise")`` on NaNs, infinities and the largest values nothing raises, and the values are torch's."""
    a = np.array([[np.nan, 1.0, -np.inf], [np.inf, -np.inf, 0.0], [3.4e38, -3.4e38, -0.0]], np.float32)
    for name in ("amax", "amin"):
        out = jt.zeros(3, 1)
        with np.errstate(all="raise"):
            getattr(jt, name)(jt.tensor(a), 1, True, out=out)
            getattr(jt, name)(jt.tensor(a), 1, True, out=out)
        expected = getattr(torch, name)(torch.tensor(a), 1, True)
        assert out.numpy().tobytes() == expected.numpy().tobytes()


def _specials(rng, shape, dtype):
    """An array of ``shape`` drawn from NaNs (both signs), infinities, signed zeros, subnormals and normals."""
    pool = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, 1.5, -2.25, 3e5], dtype)
    return pool[rng.integers(len(pool), size=shape)]


def test_nansum_of_a_small_input_has_the_nan_zeroed_sums_bits():
    """Seed 45: nansum sums a small input first and zeroes its NaNs only where a NaN comes out (a row of +inf and
    -inf too): 400 arrays of NaNs, infinities and signed zeros, every axis, with the bits of the sum of the input
    with its NaNs zeroed."""
    rng = np.random.default_rng(45)
    with np.errstate(all="ignore"):  # (the sums of +inf and -inf: NumPy's warnings)
        for _ in range(400):
            dtype = np.float32 if rng.random() < 0.5 else np.float64
            shape = tuple(int(n) for n in rng.integers(1, 6, rng.integers(1, 4)))
            a = _specials(rng, shape, dtype) if rng.random() < 0.7 else rng.standard_normal(shape).astype(dtype)
            axis = None if rng.random() < 0.3 else (int(rng.integers(len(shape))),)
            keepdims = bool(rng.random() < 0.5)
            got = np.asarray(reductions._nansum(a, axis, keepdims))
            expected = np.asarray(reductions._nan_zeroed_sum(a, axis, keepdims))
            assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes(), (a, axis, keepdims)


@pytest.mark.parametrize("shape, dim", [((1, 1), 1), ((4, 6), 1), ((4, 6), None)])
def test_nansum_zeroes_nans_only_where_a_nan_comes_out(shape, dim):
    """The variant's lines count their NaN-zeroing passes: none for an input without NaNs, one for an input with
    one (or a row of +inf and -inf, whose sum is a NaN); the results torch's, bit for bit the general path's."""
    env = _variant("nansum").__globals__
    passes = []
    zeroed = env["_r_zeroed"]

    def counted(*args):
        passes.append(1)
        return zeroed(*args)
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) * 0.5 - 2
    with_nan, with_infs = a.copy(), a.copy()
    with_nan.flat[-1] = np.nan
    with_infs.flat[:2] = [np.inf, -np.inf] if a.size > 1 else [np.inf]
    env["_r_zeroed"] = counted
    try:
        for values, expected_passes in ((a, 0), (with_nan, 1), (with_infs, int(a.size > 1))):
            x = jt.tensor(values)
            out = jt.empty(jt.nansum(x, dim, True).shape)
            jt.nansum(x, dim, True, out=out)  # (the plan made)
            del passes[:]
            with only_the_variants_lines("nansum"):
                jt.nansum(x, dim, True, out=out)
            assert len(passes) == expected_passes
            with general_path("nansum"):
                expected = jt.nansum(x, dim, True, out=jt.empty(0))
            assert out.numpy().tobytes() == expected.numpy().tobytes()
            np.testing.assert_array_equal(out.numpy(), torch.nansum(torch.tensor(values), dim, True).numpy())
    finally:
        env["_r_zeroed"] = zeroed


def test_plans_stay_few():
    """The table of plans is cleared when full: a program of ever new shapes keeps at most `_PLANS_MAX`."""
    for n in range(1, reduction_out._PLANS_MAX + 50, 97):
        jt.sum(jt.ones(n, 2), 1, out=jt.empty(n))
    assert len(reduction_out.PLANS) <= reduction_out._PLANS_MAX
    assert registry.OPS["sum"].fast_out is _variant("sum").__globals__["_fast_out"]


@pytest.mark.parametrize("in_dtype", ["float32", "float16", "int32", "bool"])
@pytest.mark.parametrize("out_dtype", ["int64", "int32", "bool", "int8", "float64"])
def test_nansum_of_floats_into_an_integer_out_raises_torchs_error(in_dtype, out_dtype):
    """torch's nansum of a floating input into an integer or bool out tensor has no kernel (NotImplementedError,
    before writing); jitorch wrote the sum (found by test_refusals_after_a_remembered_plan_are_torchs_and_write_nothing
    [3-nansum]). An integer or bool input sums into them."""
    results = []
    for lib in (torch, jt):
        out = lib.full((), 3, dtype=getattr(lib, out_dtype))
        try:
            lib.nansum(lib.ones(3, dtype=getattr(lib, in_dtype)), 0, out=out)
            results.append(("ok", out.item()))
        except NotImplementedError as e:
            results.append((str(e), out.item()))
    assert results[1] == results[0]


@pytest.mark.parametrize("name", ["sum", "mean", "nansum", "prod"])
def test_a_call_inside_the_silenced_context_computes_again_whole(name):
    """Called where `fp_errors.silenced`'s context is taken (a kernel's own call, another thread's), the variant's
    lines hand the whole call to `fp_errors.when_busy`: out holds the plain call's bits, with a NaN for nansum to
    zero (its second pass) and mean's division done once."""
    from jitorch.runtime import fp_errors
    a = np.arange(12, dtype=np.float32).reshape(3, 4) * 0.3 - 1
    a[1, 2] = np.nan
    x = jt.tensor(a)
    expected = getattr(jt, name)(x, 1, True)
    out = jt.empty(3, 1)
    getattr(jt, name)(x, 1, True, out=out)  # (the plan made)
    out = jt.empty(3, 1)
    with only_the_variants_lines(name):
        fp_errors.silenced(lambda: getattr(jt, name)(x, 1, True, out=out))
    assert out.numpy().tobytes() == expected.numpy().tobytes()
