"""``out=`` calls of sum, mean, nansum, amax, amin and prod computed straight into the out tensor (issue 19: they
computed a new result and copied it into out, 11-17 us a call against torch's 1-3 us). Which path ran (the
reduction's `OpDef.fast_out`, or the general path's new result and copy), the values against the plain call
(bit for bit) and torch, and torch's dtype rules, resizing, warnings, errors and aliasing where the general
path takes the call."""

import contextlib
import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch import Tensor
from jitorch.ops import registry
from jitorch.runtime import summation
from tests.support import raises_as_torch

OPS = ["sum", "mean", "nansum", "amax", "amin", "prod"]


@contextlib.contextmanager
def no_copy():
    """Inside, neither a new result's copy into out (`Tensor._write`) nor the op's kernel (`registry.execute`)
    runs: a call that succeeds was computed straight into out."""
    kept_write, kept_execute = Tensor._write, registry.execute

    def refuse(*args, **kwargs):
        raise AssertionError("the general path ran")
    Tensor._write = registry.execute = refuse
    try:
        yield
    finally:
        Tensor._write, registry.execute = kept_write, kept_execute


def _input(lib, shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape).astype(dtype)
    if a.size > 3:
        a.flat[3] = np.nan  # (nansum reads it as zero; the others propagate it)
    return lib.tensor(a)


CALLS = [  # (shape, dim, keepdim): one dim, negative, several (a list), every one (None), a 0-d input
    ((4, 5), 1, False), ((4, 5), -2, True), ((2, 3, 4), [0, 2], False), ((2, 3, 4), (1, 2), True),
    ((3, 4), None, False), ((3, 4), None, True), ((7,), 0, False), ((), None, False),
    ((3, summation.BLOCK + 5), 1, False),  # (more than a block along the innermost dim: `add_reduce`'s blocks)
    ((summation.BLOCK + 5, 3), 0, True),
]


def _call(lib, name, x, dim, keepdim, out):
    if dim is None and name in ("amax", "amin"):
        dim = ()  # (their every dim)
    return getattr(lib, name)(x, dim, keepdim, out=out)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name, shape, dim, keepdim", [(name, *call) for name in OPS for call in CALLS
                                                       if name != "prod" or isinstance(call[1], int)])  # (prod's: one)
def test_out_of_the_results_dtype_and_shape_is_written_straight(name, shape, dim, keepdim, dtype):
    x = _input(jt, shape, dtype)
    plain = _call(jt, name, x, dim, keepdim, None)
    out = jt.full(plain.shape, 7.0, dtype=plain.dtype)
    version = out._version
    with no_copy():
        got = _call(jt, name, x, dim, keepdim, out)
    assert got is out and out._version == version + 1
    assert out.numpy().tobytes() == plain.numpy().tobytes()
    tx = _input(torch, shape, dtype)
    expected = _call(torch, name, tx, dim, keepdim, torch.full(plain.shape, 7.0, dtype=getattr(torch, dtype.__name__)))
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), equal_nan=True, **tolerance)


def test_under_no_grad_an_input_that_requires_grad_is_served():
    x = jt.ones(3, 4, requires_grad=True)
    out = jt.zeros(3)
    with jt.no_grad(), no_copy():
        jt.sum(x, 1, out=out)
    assert out.tolist() == [4.0, 4.0, 4.0]


@pytest.mark.parametrize("name", ["sum", "amax"])
def test_grad_mode_refusals_are_torchs(name):
    """An input or out tensor that requires grad in grad mode: torch's error, out unwritten."""
    for which in ("input", "out"):
        def call(lib):
            x = lib.ones(3, 4, requires_grad=which == "input")
            out = lib.zeros(3, requires_grad=which == "out")
            getattr(lib, name)(x, 1, out=out)
        raises_as_torch(call)


def _general(lib, name, x, out, *args, **kwargs):
    """The call, with the warnings it gives (as strings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = getattr(lib, name)(x, *args, out=out, **kwargs)
    return result, [str(w.message) for w in caught]


GENERAL_CASES = [  # (name, input dtype, out dtype, out shape, args): calls the general path takes, as torch's
    ("sum", "float32", "float64", (4,), (1,)),  # sum's dtype from out: the input cast to float64 first
    ("sum", "int32", "int64", (4,), (1,)),  # integers sum as int64
    ("sum", "int32", "int32", (4,), (1,)),  # out's dtype decides: int32
    ("sum", "float32", "int64", (4,), (1,)),  # the floats cast to int64, then summed
    ("prod", "int16", "int64", (4,), (1,)),
    ("nansum", "float64", "float32", (4,), (1,)),
    ("mean", "float32", "float64", (4,), (1,)),  # a floating input read in out's dtype
    ("amax", "float32", "float32", (2, 2), (1,)),  # resized, with torch's warning
    ("sum", "float32", "float32", (0,), (1,)),  # an empty out: resized without one
    ("mean", "float32", "float32", (4, 1), (1,)),  # of another shape than keepdim's
    ("amin", "int64", "int64", (4,), (1,)),  # integers: not the fast path's, the same result
    ("sum", "float32", "float32", (4,), (1,), True),  # a transposed input
]


@pytest.mark.parametrize("case", GENERAL_CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}" for c in GENERAL_CASES])
def test_the_general_path_keeps_torchs_dtype_rules_resizing_and_warnings(case):
    name, dtype, out_dtype, out_shape, args = case[:5]
    transposed = len(case) > 5
    results = []
    for lib in (torch, jt):
        base = (lib.arange(20, dtype=getattr(lib, "float64")) * 0.37 - 3).reshape(5, 4) if transposed else \
            (lib.arange(20, dtype=getattr(lib, "float64")) * 0.37 - 3).reshape(4, 5)
        x = (base.t() if transposed else base).to(getattr(lib, dtype))
        out = lib.zeros(out_shape, dtype=getattr(lib, out_dtype))
        result, caught = _general(lib, name, x, out, *args)
        assert result is out
        results.append((out.dtype, tuple(out.shape), out.numpy(), caught))
    (t_dtype, t_shape, t_values, t_warnings), (j_dtype, j_shape, j_values, j_warnings) = results
    assert str(j_dtype).split(".")[1] == str(t_dtype).split(".")[1] and j_shape == t_shape
    assert len(j_warnings) == len(t_warnings)
    assert all(t.startswith(j) for j, t in zip(j_warnings, t_warnings))  # (torch's adds where it was raised)
    np.testing.assert_allclose(j_values, t_values, rtol=1e-6)


REFUSED = [  # torch's errors, raised before out is written
    lambda lib, x, out: lib.amax(x, 1, out=out.to(lib.int64)),  # a cast amax refuses
    lambda lib, x, out: lib.mean(x, 1, out=out.to(lib.int64)),
    lambda lib, x, out: lib.sum(x, 2, out=out),  # a dim out of range
    lambda lib, x, out: lib.amax(x[:, :0], 1, out=out),  # an empty reduction
    lambda lib, x, out: lib.sum(x, 1, dtype=lib.float64, out=out),  # dtype= other than out's
    lambda lib, x, out: lib.amin(x, 1, out=out.to(lib.float64)),
]


@pytest.mark.parametrize("k", range(len(REFUSED)))
def test_refused_calls_raise_torchs_error_before_writing(k):
    call = REFUSED[k]
    raises_as_torch(lambda lib: call(lib, lib.ones(4, 5), lib.full((4,), 3.0)))
    out = jt.full((4,), 3.0)
    kept = out.to(jt.int64) if k in (0, 1) else out.to(jt.float64) if k == 5 else out
    with contextlib.suppress(Exception):
        REFUSED[k](jt, jt.ones(4, 5), kept)
    assert (kept == 3).all()


ALIASED = [  # out is the input, or overlaps it (torch checks no overlap for reductions)
    lambda lib, x, source: lib.sum(source, 1, True, out=x[:, :1]),  # the input's first column
    lambda lib, x, source: lib.amax(source, 0, True, out=x[:1]),  # its first row
    lambda lib, x, source: lib.mean(source, 1, False, out=x[:, 0]),  # its first column, strided
    lambda lib, x, source: lib.nansum(source, 1, True, out=x),  # itself, resized (torch's warning)
]


@pytest.mark.parametrize("k", range(len(ALIASED)))
def test_out_aliasing_the_input_computes_from_its_old_values(k):
    """docs/differences-from-torch.md ("Writes that read the memory they write"): the result computed from the
    input as it was before the call (torch's kernel may read what it wrote), as torch computes it on a copy."""
    results = []
    for lib, aliased in ((torch, False), (jt, True)):
        x = (lib.arange(8, dtype=lib.float32) * 0.5 + 1).reshape(4, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the resize's, compared elsewhere)
            ALIASED[k](lib, x, x if aliased else x.clone())
        results.append(x.numpy().tolist())
    assert results[1] == results[0]


def test_a_strided_out_takes_the_general_path_with_the_same_values():
    x = _input(jt, (4, 6), np.float32)
    out = jt.zeros(4, 2)[:, 0]  # (4,) with stride 2
    jt.sum(x, 1, out=out)
    assert out.numpy().tobytes() == jt.sum(x, 1).numpy().tobytes()


def test_under_a_profiler_or_trace_the_general_path_runs():
    x, out = jt.ones(3, 4), jt.zeros(3)
    with jt.profiler.profile() as prof:
        jt.sum(x, 1, out=out)
    assert out.tolist() == [4.0] * 3
    assert any("sum" in e.name for e in prof.events())


def test_a_traced_out_call_is_recorded():
    """Under `jitorch.compile` the trace's dispatch hook sees the out= call (the variant's first try steps
    aside): the compiled function's out holds the eager values."""
    @jt.compile
    def f(x, o):
        jt.sum(x, 1, out=o)
        return o * 2

    x = _input(jt, (4, 5), np.float32, seed=3)
    o = jt.zeros(4)
    got = f(x, o)
    np.testing.assert_allclose(got.numpy(), (jt.sum(x, 1) * 2).numpy(), rtol=1e-6, equal_nan=True)
    np.testing.assert_allclose(o.numpy(), jt.sum(x, 1).numpy(), rtol=1e-6, equal_nan=True)


def test_random_calls_write_the_plain_calls_bits():
    """Seed 44: 300 calls of random ops, shapes (sizes 1 to 9, up to 4 dims), dims and keepdim, float32 or
    float64: each served straight into out, with the plain call's bits."""
    rng = np.random.default_rng(44)
    for _ in range(300):
        name = OPS[rng.integers(len(OPS))]
        shape = tuple(int(n) for n in rng.integers(1, 10, rng.integers(1, 5)))
        if name == "prod" or rng.random() < 0.5:
            dim = int(rng.integers(-len(shape), len(shape)))
        else:
            dim = [int(d) for d in rng.choice(len(shape), rng.integers(1, len(shape) + 1), replace=False)]
        keepdim = bool(rng.random() < 0.5)
        x = _input(jt, shape, np.float32 if rng.random() < 0.5 else np.float64, seed=int(rng.integers(1 << 30)))
        plain = getattr(jt, name)(x, dim, keepdim)
        out = jt.empty(plain.shape, dtype=plain.dtype)
        with no_copy():
            getattr(jt, name)(x, dim, keepdim, out=out)
        assert out.numpy().tobytes() == plain.numpy().tobytes(), (name, shape, dim, keepdim)
