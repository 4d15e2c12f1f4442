"""Regression tests of the defects session 48's full OpInfo sweep (tests/ops/opinfo_sweep.py --all) found, each
against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt

_DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32")


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
@pytest.mark.parametrize("self_dtype", _DTYPES)
@pytest.mark.parametrize("other_dtype", _DTYPES)
def test_ldexp_by_a_transposed_exponent_is_laid_out_as_torchs(self_dtype, other_dtype):
    """OpInfo ldexp, float32 samples #6/#7 transposed ((10, 1, 5) by a transposed (10, 5)): torch multiplies a
    float32 (or integer) self by ``pow(2.0, other)``, a new contiguous tensor, so the exponent's memory order
    takes no part ((50, 5, 1)); jitorch laid the result out in the transposed exponent's order ((50, 1, 10)),
    eagerly (its fast path) and through the method. Other float selves run torch's ldexp kernel on both."""
    def call(lib, how):
        x = lib.ones(10, 1, 5, dtype=getattr(lib, self_dtype))
        e = lib.ones(5, 10, dtype=getattr(lib, other_dtype)).t()
        if how == "method":
            return x.ldexp(e)
        if how == "compiled":
            return jt.compile(lambda a, b: jt.ldexp(a, b))(x, e)
        return lib.ldexp(x, e)
    want = call(torch, "function")
    for how in ("function", "method", "compiled"):
        got = call(jt, how)
        assert got.stride() == want.stride(), how
        assert str(got.dtype)[8:] == str(want.dtype)[6:]
        np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())


def test_native_layer_norm_mean_and_rstd_do_not_require_grad():
    """OpInfo native_layer_norm, every float64 sample: torch's mean and rstd results are not differentiable
    (``output_differentiability: [True, False, False]``); jitorch's required grad (3 differentiable results
    where torch has 1), so a backward through them ran where torch's raises."""
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, dtype=torch.float64, requires_grad=True)
    theirs = torch.native_layer_norm(x, [4], w, None, 1e-5)
    jx, jw = jt.tensor(x.detach().numpy(), requires_grad=True), jt.tensor(w.detach().numpy(), requires_grad=True)
    ours = jt.native_layer_norm(jx, [4], jw, None, 1e-5)
    assert [t.requires_grad for t in ours] == [t.requires_grad for t in theirs] == [True, False, False]
    for a, b in zip(theirs, ours):
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_native_layer_norm_of_a_half_type_rounds_mean_and_rstd_once(dtype):
    """OpInfo native_layer_norm, float16 sample #10 (one element, -8.4766): torch computes the mean and rstd
    in float32 and rounds once (rstd 316.25, the float16 nearest 1/sqrt(1e-5)); jitorch computed in float16
    (the variance's 1e-5 rounded first: 316.0)."""
    values = np.array([[-8.4766], [0.25], [3.0]], dtype=np.float32)
    theirs = torch.native_layer_norm(torch.tensor(values).to(getattr(torch, dtype)), [1], None, None, 1e-5)
    ours = jt.native_layer_norm(jt.tensor(values).to(getattr(jt, dtype)), [1], None, None, 1e-5)
    for a, b in zip(theirs[1:], ours[1:]):
        assert str(b.dtype)[8:] == dtype
        np.testing.assert_array_equal(b.float().numpy(), a.float().numpy())


def test_unfold_of_bool_input_as_torch():
    """OpInfo nn.functional.unfold, every bool sample: torch's im2col kernel serves bool; jitorch raised
    NotImplementedError ("im2col_out_cpu" not implemented for 'Bool')."""
    x = np.random.default_rng(0).random((2, 3, 4, 5)) > 0.5
    want = torch.nn.functional.unfold(torch.tensor(x), (2, 3), padding=1, stride=(1, 2))
    got = jt.nn.functional.unfold(jt.tensor(x), (2, 3), padding=1, stride=(1, 2))
    assert got.dtype is jt.bool
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
def test_fold_refuses_integer_input_as_torch(dtype):
    """Found beside unfold's bool case: torch's col2im kernel has no integer types (NotImplementedError
    "col2im_out_cpu" not implemented for 'Long'); jitorch's fold summed integers. Bool is served by both."""
    def call(lib, name):
        return lib.nn.functional.fold(lib.ones(1, 8, 4, dtype=getattr(lib, name)), (3, 3), 2)
    with pytest.raises(NotImplementedError) as theirs:
        call(torch, dtype)
    with pytest.raises(NotImplementedError) as ours:
        call(jt, dtype)
    assert str(ours.value) == str(theirs.value)
    np.testing.assert_array_equal(call(jt, "bool").numpy(), call(torch, "bool").numpy())


@pytest.mark.parametrize("name", ["linspace", "logspace"])
@pytest.mark.parametrize("bounds", [([1, 1], [3, 3]), (1, [3, 3]), ([1, 1], None), (None, [3, 3])])
def test_linspace_refuses_bound_tensors_of_any_dims_with_torchs_error(name, bounds):
    """OpInfo linspace/logspace (and their tensor_overload) error_inputs #2 (start and end of shape (2,)):
    torch raises RuntimeError "... only supports 0-dimensional start and end tensors, but got start with 1
    dimension(s) and end with 1 dimension(s)."; jitorch's Scalar argument raised TypeError."""
    def call(lib):
        start, end = (3 if b is None else lib.tensor(b) for b in bounds)
        return getattr(lib, name)(start, end, 2)
    with pytest.raises(RuntimeError) as theirs:
        call(torch)
    with pytest.raises(RuntimeError) as ours:
        call(jt)
    assert str(ours.value) == str(theirs.value)


_SPECIAL = [-np.inf, np.inf, np.nan, 0.0, -30.0, 30.0, 1e-8, -2.5]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("call", ["logsigmoid", "softplus", "softplus_negative_beta"])
def test_logsigmoid_and_softplus_of_infinities_are_torchs(call, dtype):
    """OpInfo nn.functional.logsigmoid, float32 reference sample #12 ([inf, inf, inf, -inf, ..., nan]): torch
    gives 0 at +inf; jitorch's ``(x - |x|) / 2`` gave inf - inf = NaN, silently, and so did softplus at -inf
    (and at +inf with a negative beta), which is built on it."""
    def run(lib):
        x = lib.tensor(np.array(_SPECIAL, dtype=dtype))
        f = lib.nn.functional
        if call == "logsigmoid":
            return f.logsigmoid(x)
        return f.softplus(x) if call == "softplus" else f.softplus(x, beta=-1.0)
    want, got = run(torch), run(jt)
    assert str(got.dtype)[8:] == dtype
    np.testing.assert_allclose(got.double().numpy(), want.double().numpy(), rtol=1e-3 if dtype == "float16" else 1e-6)


def test_logsigmoid_result_is_contiguous_as_torchs():
    """OpInfo nn.functional.logsigmoid, float32 reference sample #3 transposed (1029 x 917): torch's
    log_sigmoid_forward writes a contiguous result; jitorch's kept the input's transposed memory order."""
    x = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    want = torch.nn.functional.logsigmoid(torch.tensor(x).t())
    got = jt.nn.functional.logsigmoid(jt.tensor(x).t())
    assert got.stride() == want.stride() == (6, 1)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name, kwargs", [("elu", {"alpha": 0.8}), ("celu", {"alpha": 2.0}), ("selu", {})])
def test_elu_gradient_at_infinity_is_torchs(name, kwargs):
    """OpInfo nn.functional.elu/celu/selu, float64 reference sample #11 (inf and -inf among 100 elements): the
    gradient at +inf is torch's ``scale``; jitorch's where() masked ``0 * exp(inf)``, NaN, silently. (At NaN
    both give NaN for tensors of torch's vectorised size: docs/differences-from-torch.md, Autograd.)"""
    values = np.array([np.inf, -np.inf, 0.0, 1.5, -1.5] * 20)
    tx = torch.tensor(values, requires_grad=True)
    jx = jt.tensor(values, requires_grad=True)
    want = torch.autograd.grad(getattr(torch.nn.functional, name)(tx, **kwargs).sum(), tx)[0]
    got = jt.autograd.grad(getattr(jt.nn.functional, name)(jx, **kwargs).sum(), jx)[0]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_hardsigmoid_passes_no_gradient_at_nan():
    """OpInfo nn.functional.hardsigmoid, float64 reference sample #12: torch's backward passes the gradient
    only where -3 < x < 3 (0 at NaN); jitorch's, from hardtanh's, passed 1/6 there."""
    values = np.array([np.nan, np.inf, -np.inf, 3.0, -3.0, 0.0, 2.0])
    tx = torch.tensor(values, requires_grad=True)
    jx = jt.tensor(values, requires_grad=True)
    want = torch.autograd.grad(torch.nn.functional.hardsigmoid(tx).sum(), tx)[0]
    got = jt.autograd.grad(jt.nn.functional.hardsigmoid(jx).sum(), jx)[0]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(jt.nn.functional.hardsigmoid(jx).detach().numpy(),
                                  torch.nn.functional.hardsigmoid(tx).detach().numpy())


@pytest.mark.parametrize("start", [[1, 2], True, 1.0])
@pytest.mark.parametrize("how", ["function", "method"])
def test_narrow_refuses_a_start_tensor_not_0_dim_integral(start, how):
    """OpInfo narrow error_inputs #7 and #8: torch's narrow(Tensor start) overload raises RuntimeError "start must
    be an 0-dim integral Tensor."; jitorch raised TypeError for a 1-d start and took a 0-d bool as 1."""
    def call(lib):
        x = lib.ones(4, 5)
        s = lib.tensor(start)
        return x.narrow(1, s, 2) if how == "method" else lib.narrow(x, 1, s, 2)
    with pytest.raises(RuntimeError) as theirs:
        call(torch)
    with pytest.raises(RuntimeError) as ours:
        call(jt)
    assert str(ours.value) == str(theirs.value)
    assert tuple(jt.ones(4, 5).narrow(1, jt.tensor(1), 2).shape) == (4, 2)


def test_narrow_copy_of_a_dim_past_the_last_raises_torchs_runtime_error():
    """OpInfo narrow_copy error_inputs #1 (dim 3 of a 3-d tensor): torch's narrow_copy raises RuntimeError
    (its internal check); jitorch raised narrow's IndexError. A negative dim out of range is an IndexError in both."""
    for dim, kind in [(3, RuntimeError), (-4, IndexError)]:
        with pytest.raises(kind) as theirs:
            torch.narrow_copy(torch.ones(10, 5, 20), dim, 0, 0)
        with pytest.raises(kind) as ours:
            jt.narrow_copy(jt.ones(10, 5, 20), dim, 0, 0)
        assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("shape", [(0, 0), (0, 3), (3, 0), (2, 0, 0), (2, 0, 3), (2, 3, 0)])
@pytest.mark.parametrize("ord", [1, -1, np.inf, -np.inf, 2, -2, "nuc"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_matrix_norm_of_an_empty_matrix_as_torch(shape, ord, keepdim):
    """OpInfo linalg.norm float32 sample #68 (a 0x0 matrix, ord=inf): torch's largest row or column sum of none
    is 0; jitorch's amax over the empty dim raised IndexError (torch's smallest, ord -1 or -inf, raises so)."""
    def call(lib):
        return lib.linalg.matrix_norm(lib.ones(*shape), ord, keepdim=keepdim)
    try:
        want = call(torch)
    except IndexError:
        # (the message's dim may differ: torch reduces the first dim away before the second, jitorch keeps it)
        with pytest.raises(IndexError, match="to have non-zero size"):
            call(jt)
        return
    got = call(jt)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("reduce", ["amin", "amax", "sum", "prod", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_of_bool_as_torch(reduce, include_self):
    """OpInfo scatter_reduce.amin/amax, bool samples with include_self=False: torch starts the slots at the
    bool extremes; jitorch asked np.iinfo for bool's and raised ValueError ("Invalid integer data type 'b'").
    Found beside it: torch's mean has no bool kernel (NotImplementedError); jitorch's computed one."""
    x, src, idx = [True, False, True, False], [False, True, True, False], [0, 1, 0, 3]

    def call(lib):
        return lib.tensor(x).scatter_reduce(0, lib.tensor(idx), lib.tensor(src), reduce, include_self=include_self)
    if reduce == "mean":
        with pytest.raises(NotImplementedError) as theirs:
            call(torch)
        with pytest.raises(NotImplementedError) as ours:
            call(jt)
        assert str(ours.value) == str(theirs.value)
        return
    got = call(jt)
    assert got.dtype is jt.bool
    assert got.tolist() == call(torch).tolist()


@pytest.mark.parametrize("batch", [0, 2])
@pytest.mark.parametrize("which", ["rtol", "atol", "both"])
def test_matrix_rank_takes_tolerance_tensors_per_matrix(batch, which):
    """OpInfo linalg.matrix_rank float32 samples #42-#45 (a batch of matrices, rtol a tensor of one tolerance per
    matrix): torch compares each matrix's singular values with its own tolerance; jitorch broadcast the
    tolerances against the singular values' last dim and raised "The size of tensor a (5) must match..."."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((batch, 5, 5)).astype(np.float32)
    a[..., -1] = a[..., 0]  # rank 4
    tol = np.linspace(1e-3, 0.9, batch, dtype=np.float32)

    def call(lib):
        kwargs = {"rtol": lib.tensor(tol)} if which == "rtol" else {"atol": lib.tensor(tol * 3)} \
            if which == "atol" else {"atol": lib.tensor(tol), "rtol": lib.tensor(tol[::-1].copy())}
        return lib.linalg.matrix_rank(lib.tensor(a), **kwargs)
    want, got = call(torch), call(jt)
    assert got.dtype is jt.int64 and tuple(got.shape) == tuple(want.shape)
    assert got.tolist() == want.tolist()
