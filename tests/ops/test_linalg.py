"""Matrix products and einsum against NumPy: values, dtypes, shapes, layouts, out=, errors."""

from __future__ import annotations

import os
import re
import signal
import time
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
from jitorch.ops import linalg
from tests.support import FLOAT_DTYPES, INT_DTYPES, LAYOUTS, assert_close, tensor_and_array
from tests.blas_reference import chosen_matmul

NUMERIC = INT_DTYPES + FLOAT_DTYPES  # bool products raise, as in torch


def small_values(shape, dtype, seed):
    """Integer values in [-4, 4] ([0, 4] unsigned): products are exact in float32/float64,
    so any difference from NumPy is a bug, not rounding."""
    rng = np.random.default_rng(seed)
    low = 0 if dtype is jt.uint8 else -4
    return rng.integers(low, 5, size=shape).astype(dtype.np)


def wide(a):
    """Values widened to the type NumPy references compute in."""
    return a.astype(np.float64 if a.dtype.kind not in "iub" else np.int64)


def expected_in(values, dtype):
    """A wide reference cast to ``dtype``; integers wrap as torch's do."""
    return np.asarray(values).astype(dtype.np if dtype not in (jt.float16, jt.bfloat16) else np.float64)


def make(shape, dtype, layout, seed):
    return tensor_and_array(small_values(shape, dtype, seed), layout)


@st.composite
def matmul_shapes(draw, da, db):
    """Shapes of a ``da``-D and a ``db``-D operand, with broadcasting batch dims (some of size 1)."""
    n, k, m = draw(st.integers(0, 4)), draw(st.integers(0, 4)), draw(st.integers(0, 4))
    batch = (draw(st.integers(0, 3)), draw(st.integers(0, 3)))

    def side(ndim, core):
        dims = batch[2 - max(ndim - 2, 0):]
        return tuple(1 if draw(st.booleans()) else x for x in dims) + core

    return side(da, (n, k) if da >= 2 else (k,)), side(db, (k, m) if db >= 2 else (k,))


# matmul and its fixed-rank relatives ---------------------------------------------------

@pytest.mark.parametrize("da", [1, 2, 3, 4])
@pytest.mark.parametrize("db", [1, 2, 3, 4])
@given(st.data(), st.sampled_from(NUMERIC), st.sampled_from(LAYOUTS), st.sampled_from(LAYOUTS),
       st.integers(0, 2 ** 16))
def test_matmul_matches_numpy(da, db, data, dtype, layout_a, layout_b, seed):
    sa, sb = data.draw(matmul_shapes(da, db))
    (ta, a), (tb, b) = make(sa, dtype, layout_a, seed), make(sb, dtype, layout_b, seed + 1)
    result = jt.matmul(ta, tb)
    assert result.dtype is dtype
    assert_close(result, expected_in(np.matmul(wide(a), wide(b)), dtype))


PRODUCTS = {  # op -> shapes of its operands from (batch, n, k, m)
    "mm": lambda b, n, k, m: ((n, k), (k, m)),
    "bmm": lambda b, n, k, m: ((b, n, k), (b, k, m)),
    "mv": lambda b, n, k, m: ((n, k), (k,)),
    "dot": lambda b, n, k, m: ((k,), (k,)),
    "vdot": lambda b, n, k, m: ((k,), (k,)),
}


@pytest.mark.parametrize("op", PRODUCTS)
@given(st.lists(st.integers(0, 4), min_size=4, max_size=4), st.sampled_from(NUMERIC), st.sampled_from(LAYOUTS),
       st.sampled_from(LAYOUTS), st.integers(0, 2 ** 16))
def test_fixed_rank_products_match_numpy(op, sizes, dtype, layout_a, layout_b, seed):
    sa, sb = PRODUCTS[op](*sizes)
    (ta, a), (tb, b) = make(sa, dtype, layout_a, seed), make(sb, dtype, layout_b, seed + 1)
    for result in (getattr(jt, op)(ta, tb), getattr(ta, op)(tb)):
        assert result.dtype is dtype
        assert_close(result, expected_in(np.matmul(wide(a), wide(b)), dtype))


def test_matmul_operator_and_method():
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    b = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    ta, tb = jt.tensor(a), jt.tensor(b)
    for result in (ta @ tb, ta.matmul(tb), jt.matmul(ta, tb)):
        assert_close(result, a @ b)
    with pytest.raises(TypeError):
        ta @ 3


def test_integer_products_wrap_like_torch():
    a = jt.full((2, 3), 100, dtype=jt.uint8)
    b = jt.ones(3, 2, dtype=jt.uint8)
    assert (a @ b).tolist() == [[44, 44], [44, 44]]  # 300 mod 256
    assert jt.dot(jt.full((3,), 100, dtype=jt.int8), jt.ones(3, dtype=jt.int8)).item() == 44


@pytest.mark.parametrize("op, sa, sb", [
    ("matmul", (2, 3, 4), (4, 5)), ("mm", (2, 3), (3, 4)), ("bmm", (2, 3, 4), (2, 4, 5)),
    ("mv", (2, 3), (3,)), ("dot", (3,), (3,)),
])
def test_out_resizes_and_returns_out(op, sa, sb):
    (ta, a), (tb, b) = make(sa, jt.float32, "contiguous", 1), make(sb, jt.float32, "contiguous", 2)
    out = jt.empty(0)
    result = getattr(jt, op)(ta, tb, out=out)
    assert result is out
    assert_close(out, np.matmul(a, b))


def _spy_matmul(monkeypatch):
    """The operands of every np.matmul call from now on."""
    seen = []
    real = np.matmul

    def spy(x, y, *args, **kwargs):
        seen.append((x, y))
        return real(x, y, *args, **kwargs)
    monkeypatch.setattr(np, "matmul", spy)
    return seen


def test_float_products_hand_the_tensors_memory_to_numpy(monkeypatch):
    """A large float32 product must cost what np.matmul costs: no copy on the way,
    transposed matrices included (BLAS reads them as they are)."""
    a, b = jt.ones(64, 32), jt.ones(32, 16)
    seen = _spy_matmul(monkeypatch)
    calls = [(a, b, lambda: a @ b), (a, b, lambda: jt.mm(a, b)), (a, a, lambda: a.transpose(0, 1) @ a)]
    for x, y, call in calls:
        seen.clear()
        call()
        assert len(seen) == 1
        assert np.shares_memory(seen[0][0], x._array()) and np.shares_memory(seen[0][1], y._array())


def test_half_types_compute_in_float32_and_keep_their_dtype():
    a = np.full((4, 300), 0.1, dtype=np.float32)
    for dtype in (jt.float16, jt.bfloat16):
        ta = jt.tensor(a).to(dtype)
        result = ta @ ta.transpose(0, 1)
        assert result.dtype is dtype
        # float32 accumulation: each entry is 300 * x**2 rounded once to the half type
        x = float(jt.tensor(a[0, 0]).to(dtype).item())
        assert_close(result, np.full((4, 4), 300 * x * x), rtol=1e-2, atol=0)


def test_bool_products_raise_unless_empty():
    t = jt.ones(2, 3, dtype=jt.bool)
    with pytest.raises(NotImplementedError, match=re.escape("\"addmm_impl_cpu_\" not implemented for 'Bool'")):
        t @ t.transpose(0, 1)
    with pytest.raises(NotImplementedError, match=re.escape("\"dot\" not implemented for 'Bool'")):
        jt.dot(t[0], t[0])
    # torch skips its kernels for empty products, so these work
    assert jt.mm(jt.ones(0, 3, dtype=jt.bool), jt.ones(3, 4, dtype=jt.bool)).shape == (0, 4)
    assert jt.bmm(jt.ones(1, 2, 0, dtype=jt.bool), jt.ones(1, 0, 4, dtype=jt.bool)).tolist() == [[[False] * 4] * 2]


def test_empty_bmm_of_two_dtypes_takes_the_second():
    assert jt.bmm(jt.ones(1, 2, 0), jt.ones(1, 0, 4, dtype=jt.float64)).dtype is jt.float64


def _t(*shape, dtype=jt.float32):
    return jt.ones(shape, dtype=dtype)


D = jt.float64
PRODUCT_ERRORS = [
    (lambda: jt.mm(_t(2, 3), _t(4, 5)), RuntimeError, "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"),
    (lambda: jt.matmul(_t(3), _t(4, 5)), RuntimeError, "mat1 and mat2 shapes cannot be multiplied (1x3 and 4x5)"),
    (lambda: jt.matmul(_t(2, 3), _t(4)), RuntimeError, "size mismatch, got input (2), mat (2x3), vec (4)"),
    (lambda: jt.matmul(_t(2, 2, 3), _t(4)), RuntimeError, "size mismatch, got input (4), mat (4x3), vec (4)"),
    (lambda: jt.matmul(_t(2, 2, 3), _t(2, 4, 5)), RuntimeError,
     "Expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: [2, 4]."),
    (lambda: jt.matmul(_t(2, 2, 3), _t(3, 3, 5)), RuntimeError,
     "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 0"),
    (lambda: jt.matmul(_t(), _t(3)), RuntimeError,
     "both arguments to matmul need to be at least 1D, but they are 0D and 1D"),
    (lambda: jt.matmul(_t(3), _t(4)), RuntimeError,
     "inconsistent tensor size, expected tensor [3] and src [4] to have the same number of elements, but got 3 "
     "and 4 elements respectively"),
    (lambda: jt.bmm(_t(2, 2, 3), _t(2, 4, 5)), RuntimeError,
     "Expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: [2, 4]."),
    (lambda: jt.mm(_t(3), _t(3, 3)), RuntimeError, "self must be a matrix"),
    (lambda: jt.mm(_t(2, 3), _t(3)), RuntimeError, "mat2 must be a matrix"),
    (lambda: jt.bmm(_t(2, 3), _t(2, 3, 5)), RuntimeError, "batch1 must be a 3D tensor"),
    (lambda: jt.mv(_t(2, 3), _t(3, 1)), RuntimeError, "vector + matrix @ vector expected, got 1, 2, 2"),
    (lambda: jt.dot(_t(3, 1), _t(3)), RuntimeError, "1D tensors expected, but got 2D and 1D tensors"),
    (lambda: jt.mm(_t(2, 3), _t(3, 3, dtype=D)), RuntimeError,
     "expected m1 and m2 to have the same dtype, but got: float != double"),
    (lambda: jt.matmul(_t(2, 3, dtype=jt.int64), _t(3, 3)), RuntimeError,
     "expected m1 and m2 to have the same dtype, but got: long int != float"),
    (lambda: jt.mm(_t(2, 3, dtype=jt.float16), _t(3, 3)), RuntimeError,
     "expected m1 and m2 to have the same dtype, but got: c10::Half != float"),
    (lambda: jt.matmul(_t(2, 3), _t(3, dtype=D)), RuntimeError,
     "addmv input tensors must have the same dtype, but got Double, Float, and Double"),
    (lambda: jt.dot(_t(3), _t(3, dtype=D)), RuntimeError,
     "dot : expected both vectors to have same dtype, but found Float and Double"),
    (lambda: jt.bmm(_t(2, 2, 3), _t(2, 3, 5, dtype=D)), RuntimeError, "expected scalar type Float but found Double"),
    # larger matrices take torch's BLAS or per-matrix kernels, which word it otherwise
    (lambda: jt.bmm(_t(2, 20, 20), _t(2, 20, 20, dtype=D)), RuntimeError,
     "expected scalar type Double but found Float"),
    (lambda: jt.bmm(_t(2, 20, 20), _t(2, 20, 20, dtype=jt.int64)), RuntimeError,
     "expected m1 and m2 to have the same dtype, but got: float != long int"),
    (lambda: jt.mv(_t(2, 3, dtype=jt.bool), _t(3, dtype=jt.bool)), NotImplementedError,
     "\"addmv_impl_cpu\" not implemented for 'Bool'"),
    (lambda: jt.bmm(_t(1, 2, 3, dtype=jt.bool), _t(1, 3, 2, dtype=jt.bool)), NotImplementedError,
     "\"bmm\" not implemented for 'Bool'"),
    (lambda: jt.outer(_t(2, 3), _t(3)), RuntimeError, "outer: Expected 1-D argument self, but got 2-D"),
    (lambda: jt.outer(_t(2), _t(3, 1)), RuntimeError, "outer: Expected 1-D argument vec2, but got 2-D"),
    (lambda: jt.addmm(_t(2, 2), _t(2, 4), _t(4, 3)), RuntimeError,
     "The expanded size of the tensor (3) must match the existing size (2) at non-singleton dimension 1.  "
     "Target sizes: [2, 3].  Tensor sizes: [2, 2]"),
    (lambda: jt.addmm(_t(2, 1, 3), _t(2, 4), _t(4, 3)), RuntimeError,
     "expand(torch.FloatTensor{[2, 1, 3]}, size=[2, 3]): the number of sizes provided (2) must be greater or "
     "equal to the number of dimensions in the tensor (3)"),
    (lambda: jt.addmm(_t(3, dtype=D), _t(2, 4), _t(4, 3)), RuntimeError,
     "self and mat2 must have the same dtype, but got Double and Float"),
    (lambda: jt.addmm(_t(3), _t(2, 4), _t(3)), RuntimeError, "mat2 must be a matrix, got 1-D tensor"),
    (lambda: jt.baddbmm(_t(2, 3, dtype=D), _t(5, 2, 4), _t(5, 4, 3)), RuntimeError,
     "Input dtypes must be the same, got: input double, batch1: float, batch2: float"),
    (lambda: jt.baddbmm(_t(2, 2, 3), _t(5, 2, 4), _t(5, 4, 3)), RuntimeError,
     "The expanded size of the tensor (5) must match the existing size (2) at non-singleton dimension 0.  "
     "Target sizes: [5, 2, 3].  Tensor sizes: [2, 2, 3]"),
]


@pytest.mark.parametrize("call, exc, message", PRODUCT_ERRORS)
def test_product_errors(call, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        call()


# outer, addmm, baddbmm -----------------------------------------------------------------

@pytest.mark.parametrize("op", ["outer", "ger"])
@given(st.integers(0, 4), st.integers(0, 4), st.sampled_from([jt.bool] + NUMERIC),
       st.sampled_from([jt.bool] + NUMERIC), st.integers(0, 2 ** 16))
def test_outer_promotes_like_mul(op, n, m, da, db, seed):
    (ta, a), (tb, b) = make((n,), da, "strided", seed), make((m,), db, "contiguous", seed + 1)
    result = getattr(jt, op)(ta, tb)
    dtype = jt.promote_types(da, db)
    assert result.dtype is dtype
    assert_close(result, expected_in(np.multiply.outer(wide(a), wide(b)), dtype))


@given(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3), st.integers(0, 5), st.sampled_from(NUMERIC),
       st.sampled_from([(1, 1), (2, 3), (0, -1)]), st.integers(0, 2 ** 16))
def test_addmm_and_baddbmm_match_numpy(n, k, m, which_input, dtype, scales, seed):
    beta, alpha = scales
    input_shape = [(), (1,), (m,), (1, 1), (n, m), (n, 1)][which_input]  # all broadcast to (n, m)
    (ti, i), (t1, m1), (t2, m2) = (make(s, dtype, "contiguous", seed + j)
                                   for j, s in enumerate([input_shape, (2, n, k), (2, k, m)]))
    expected = beta * wide(i) + alpha * np.matmul(wide(m1), wide(m2))
    assert_close(jt.baddbmm(ti, t1, t2, beta=beta, alpha=alpha), expected_in(expected, dtype))
    expected = beta * wide(i) + alpha * np.matmul(wide(m1[0]), wide(m2[0]))
    assert_close(jt.addmm(ti, t1[0], t2[0], beta=beta, alpha=alpha), expected_in(expected, dtype))


def test_addmm_with_beta_zero_ignores_input_and_inplace_writes():
    nan_input = jt.full((3,), float("nan"))
    result = jt.addmm(nan_input, jt.ones(2, 4), jt.ones(4, 3), beta=0)
    assert result.tolist() == [[4.0] * 3] * 2
    target = jt.ones(2, 3)
    assert target.addmm_(jt.ones(2, 4), jt.ones(4, 3), alpha=2) is target
    assert target.tolist() == [[9.0] * 3] * 2


def test_integer_addmm_truncates_float_scalars_like_torch():
    ones = jt.ones(3, dtype=jt.int64)
    result = jt.addmm(ones, jt.ones(2, 4, dtype=jt.int64), jt.ones(4, 3, dtype=jt.int64), beta=0.5, alpha=2.5)
    assert result.tolist() == [[8] * 3] * 2


# einsum ---------------------------------------------------------------------------------

EQUATIONS = [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("ij,jk->ki", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]), ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ij->ji", [(2, 3)]), ("ji", [(2, 3)]), ("Ba", [(2, 3)]), ("ii", [(3, 3)]), ("ii->i", [(3, 3)]),
    ("ij->", [(2, 3)]), ("ij->j", [(2, 3)]), ("i,j->ij", [(3,), (4,)]), ("i,i->", [(3,), (3,)]), ("i,i", [(3,), (3,)]),
    ("ij,ij->ij", [(2, 3), (2, 3)]), ("ij,ij->ij", [(2, 3), (1, 3)]), ("ij,j->i", [(2, 3), (3,)]),
    ("ij,kl->", [(2, 3), (3, 4)]), ("ii,ij->j", [(3, 3), (3, 2)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]), ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...ii->...i", [(2, 3, 3)]), ("i...->...", [(2, 3)]), ("...", [(2, 3)]), ("a...b->b...a", [(2, 3, 4, 5)]),
    ("i j , j k -> i k", [(2, 3), (3, 4)]), ("->", [()]), ("", [()]), ("ij,jk->ik", [(0, 3), (3, 4)]),
    ("ij,jk->ik", [(2, 0), (0, 4)]), ("ij->", [(0, 3)]),
]


@pytest.mark.parametrize("equation, shapes", EQUATIONS)
@given(st.sampled_from([jt.float32, jt.float64, jt.int64, jt.float16]), st.sampled_from(LAYOUTS),
       st.integers(0, 2 ** 16))
def test_einsum_matches_numpy(equation, shapes, dtype, layout, seed):
    pairs = [make(s, dtype, layout, seed + i) for i, s in enumerate(shapes)]
    tensors, arrays = [t for t, _ in pairs], [wide(a) for _, a in pairs]
    expected = expected_in(np.einsum(equation, *arrays), dtype)
    for result in (jt.einsum(equation, *tensors), jt.einsum(equation, tensors)):
        assert result.dtype is dtype
        assert_close(result, expected)


@pytest.mark.parametrize("equation, shape", [("ij->ji", (2, 3)), ("ij->ij", (2, 3)), ("ii->i", (3, 3))])
def test_einsum_result_owns_its_memory(equation, shape):
    """NumPy answers transposes and diagonals with views; a result must not alias its input."""
    x = jt.ones(*shape)
    assert not np.shares_memory(jt.einsum(equation, x)._array(), x._array())


def test_einsum_meta_rule_needs_no_data():
    a, b = jt.empty(2, 1, 3, 4, device="meta"), jt.empty(5, 4, 2, device="meta")
    result = jt.einsum("...ij,...jk->...ik", a, b)
    assert result.device.type == "meta" and result.shape == (2, 5, 3, 2)


# (equation, shapes, dtypes, result dtype): torch's schedule sums labels private to one
# operand first (integers sum as int64), then contracts with bmm or a promoting product.
EINSUM_DTYPES = [
    ("ij->", [(2, 3)], [jt.int8], jt.int64),
    ("ij->i", [(2, 3)], [jt.bool], jt.int64),
    ("ii->i", [(3, 3)], [jt.bool], jt.bool),
    ("i,j->ij", [(3,), (4,)], [jt.float32, jt.float64], jt.float64),
    ("i,j->ij", [(3,), (4,)], [jt.bool, jt.bool], jt.bool),
    ("ij,kl->", [(2, 3), (3, 4)], [jt.int8, jt.int8], jt.int64),
    ("ij,kl->ij", [(2, 3), (3, 4)], [jt.float32, jt.float64], jt.float64),
    ("ij,k->k", [(2, 3), (3,)], [jt.int8, jt.int8], jt.int64),
    ("ij,jk->ik", [(2, 1), (3, 4)], [jt.bool, jt.bool], jt.int64),
    ("ij,jk->ik", [(0, 3), (3, 4)], [jt.float32, jt.float64], jt.float64),
    ("ij,jk->ik", [(2, 3), (3, 4)], [jt.int8, jt.int8], jt.int8),
]


@pytest.mark.parametrize("equation, shapes, dtypes, dtype", EINSUM_DTYPES)
def test_einsum_result_dtype_follows_torch(equation, shapes, dtypes, dtype):
    pairs = [make(s, d, "contiguous", i) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    result = jt.einsum(equation, *[t for t, _ in pairs])
    assert result.dtype is dtype
    assert_close(result, expected_in(np.einsum(equation, *[wide(a) for _, a in pairs]), dtype))


def _einsum(equation, *shapes, dtypes=None):
    dtypes = dtypes or [jt.float32] * len(shapes)
    return lambda: jt.einsum(equation, *[jt.ones(*s, dtype=d) for s, d in zip(shapes, dtypes)])


EINSUM_ERRORS = [
    (_einsum("ij,jk->ik", (2, 3), (3, 4), dtypes=[jt.float32, jt.float64]), RuntimeError,
     "expected scalar type Float but found Double"),
    (_einsum("ij,j->", (2, 3), (3,), dtypes=[jt.int8, jt.int8]), RuntimeError,
     "expected scalar type Long but found Char"),
    (_einsum("ij,jk->ik", (2, 3), (3, 4), dtypes=[jt.bool, jt.bool]), NotImplementedError,
     "\"bmm\" not implemented for 'Bool'"),
    (_einsum("ij,jk->ik", (2, 3)), RuntimeError,
     "einsum(): fewer operands were provided than specified in the equation"),
    (_einsum("ij->ik", (2, 3), (3, 4)), RuntimeError,
     "einsum(): more operands were provided than specified in the equation"),
    (_einsum("ij,jk->ik", (2, 3, 1), (3, 4)), RuntimeError,
     "einsum(): the number of subscripts in the equation (2) does not match the number of dimensions (3) for "
     "operand 0 and no ellipsis was given"),
    (_einsum("...ij", (3,)), RuntimeError,
     "einsum(): the number of subscripts in the equation (2) is more than the number of dimensions (1) for operand 0"),
    (_einsum("ij,jk->il", (2, 3), (3, 4)), RuntimeError,
     "einsum(): output subscript l does not appear in the equation for any input operand"),
    (_einsum("ij,jk->iik", (2, 3), (3, 4)), RuntimeError,
     "einsum(): output subscript i appears more than once in the output"),
    (_einsum("i1,jk->ik", (2, 3), (3, 4)), RuntimeError,
     "einsum(): invalid subscript given at index 1 in the equation string, subscripts must be in [a-zA-Z]"),
    (_einsum("ij->ij->", (2, 3)), RuntimeError,
     "einsum(): invalid subscript given at index 6 in the equation string, subscripts must be in [a-zA-Z]"),
    (_einsum("ii->i", (2, 3)), RuntimeError,
     "einsum(): subscript i is repeated for operand 0 but the sizes don't match, 3 != 2"),
    (_einsum("ij,jk->ik", (2, 3), (4, 4)), RuntimeError,
     "einsum(): subscript j has size 4 for operand 1 which does not broadcast with previously seen size 3"),
    (_einsum("...ij,...jk->...ik", (2, 3, 3, 4), (5, 4, 2)), RuntimeError,
     "einsum(): dimension 0 covered by ellipsis in operand 1has size 5 which does not broadcast with previously "
     "seen ellipsis with size 3 for the respective dimension"),
    (_einsum("ij,jk->i.k", (2, 3), (3, 4)), RuntimeError,
     "einsum(): found '.' for output that is not part of any ellipsis (...)"),
    (_einsum("...i->......", (2, 3)), RuntimeError,
     "einsum(): found '.' for output but an ellipsis (...) was already found"),
    (_einsum("ij.,jk->ik", (2, 3), (3, 4)), RuntimeError,
     "einsum(): found '.' for operand 0 that is not part of any ellipsis"),
    (_einsum("...i...,jk->ik", (2, 3), (3, 4)), RuntimeError,
     "einsum(): found '.' for operand 0 for which an ellipsis was already found"),
    (_einsum("ij"), ValueError, "einsum(): must specify the equation string and at least one operand"),
]


@pytest.mark.parametrize("call, exc, message", EINSUM_ERRORS)
def test_einsum_errors(call, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        call()


@pytest.mark.parametrize("sa, sb, native", [
    ((12, 4, 64, 32), (12, 4, 32, 64), False),   # attention's batches: split by batch
    ((1, 4, 64, 64), (3, 1, 64, 128), False),    # a broadcast batch dim: the operand of size 1 goes whole
    ((64, 32), (6, 32, 64 * 12), False),         # an operand without batch dims
    ((768, 128), (128, 512), True),              # split by rows
    ((64, 1024), (1024, 256), True),             # more columns than rows: split by columns
    ((6, 128, 128), (128, 512), True),           # a batch of rows times a matrix: one product of rows
])
@pytest.mark.parametrize("compiled", [False, True])
def test_large_products_split_on_the_workers(monkeypatch, sa, sb, native, compiled):
    """Parts that are one gemm call each (2-D) run as native BLAS calls on the team (`runtime.blas_calls`), others
    as Python parts of NumPy's matmul."""
    from threadpoolctl import threadpool_info
    from jitorch.runtime import blas_calls, threads
    monkeypatch.setitem(threads._settings, "threads", None)
    monkeypatch.setitem(threads._settings, "split_products", False)
    parts = []
    real_run_parts = threads.run_parts

    def counting(fn, args):
        parts.append((fn, len(args)))
        return real_run_parts(fn, args)
    monkeypatch.setattr(threads, "run_parts", counting)
    # (a compiled call makes a split product's parts' calls from kept words, jit/gemm_words.py: the same calls)
    gemm_calls = lambda: blas_calls.counters["gemm calls"] + blas_calls.counters["words calls"]  # noqa: E731
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    f = jt.compile(lambda x, y: x @ y) if compiled else (lambda x, y: x @ y)
    blas = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    try:
        jt.set_num_threads(2)
        assert {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"} == {1}
        forks, gemms = threads.counters["forks"], gemm_calls()
        part_calls = blas_calls.counters["part calls"]
        got = f(jt.from_numpy(a), jt.from_numpy(b))
        assert threads.counters["forks"] == forks + 1  # a worker ran the second part
    finally:
        jt.set_num_threads(blas[0])
    np.testing.assert_allclose(got.numpy(), np.matmul(a, b), rtol=1e-5, atol=1e-4)
    assert got.numpy().tobytes() == chosen_matmul(a, b).tobytes()  # (each element the same BLAS dot product)
    # two parts: one on a worker, one on the calling thread (MKL: its fixed parts, `linalg.mkl_parts`, in two runs)
    if native:
        rows = a.reshape(-1, a.shape[-1])
        mkl_parts = (linalg.mkl_parts(rows.shape[0], b.shape[-1], rows.shape[0] * rows.shape[1] * b.shape[-1])
                     if blas_calls.runs_mkl(rows, b) else None)
        made = gemm_calls() if mkl_parts is None else blas_calls.counters["part calls"]
        assert (parts, made) == ([], (gemms if mkl_parts is None else part_calls) + (mkl_parts or 2))
    else:
        assert (parts, gemm_calls()) == ([(linalg._matmul, 2)], gemms)


def test_small_products_and_products_before_set_num_threads_run_whole(monkeypatch):
    from jitorch.runtime import threads
    monkeypatch.setitem(threads._settings, "split_products", False)
    monkeypatch.setattr(threads, "run_parts", lambda fn, parts: pytest.fail("a product split"))
    a = jt.randn(768, 128)
    assert threads.product_parts() == 1
    assert_close(a @ a.t(), a.numpy() @ a.numpy().T, rtol=1e-5, atol=1e-4)
    monkeypatch.setitem(threads._settings, "split_products", True)
    monkeypatch.setitem(threads._settings, "threads", 2)
    assert threads.product_parts() == 2
    small = jt.randn(64, 64)
    assert_close(small @ small, small.numpy() @ small.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, operands", [((600, 300), lambda x: (x, x.t())), ((300, 600), lambda x: (x.t(), x)),
                                             ((4, 200, 64), lambda x: (x, x.mT))])
def test_a_product_with_its_own_transpose_has_the_bits_of_one_thread(monkeypatch, shape, operands):
    """NumPy computes ``x @ x.T`` (its operands one memory) with BLAS syrk, whose sums round otherwise than gemm's
    in some OpenBLAS builds (NumPy 1.26's wheel here), and the parts of a split product are gemm calls: such a
    product is computed in row parts (gemm calls) on one thread too (`linalg._syrk`), so split on two threads it
    has one thread's bits."""
    from threadpoolctl import threadpool_limits
    from jitorch.runtime import threads
    x = jt.from_numpy(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    a, b = operands(x)
    assert linalg._syrk(a.numpy(), b.numpy()) and not linalg._syrk(a.numpy(), b.numpy().copy())
    with threadpool_limits(limits=1, user_api="blas"):  # (as set_num_threads leaves BLAS where products split)
        monkeypatch.setitem(threads._settings, "threads", 2)
        monkeypatch.setitem(threads._settings, "split_products", False)  # (an earlier set_num_threads sets it)
        forks = threads.counters["forks"]
        whole = (a @ b).numpy()
        assert threads.counters["forks"] == forks  # (split_products is off: one thread)
        monkeypatch.setitem(threads._settings, "split_products", True)
        forks = threads.counters["forks"]
        split = (a @ b).numpy()
    assert threads.counters["forks"] == forks + 1
    assert split.tobytes() == whole.tobytes()
    np.testing.assert_allclose(whole, (torch.from_numpy(a.numpy()) @ torch.from_numpy(b.numpy())).numpy(),
                               rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("compiled", [False, True])
def test_products_meeting_inf_times_zero_warn_nothing(monkeypatch, split, compiled):
    # torch neither warns nor raises where a product multiplies inf by 0; NumPy 2's matmul warned
    # ("invalid value encountered in matmul") from eager's product, a compiled graph's product written into
    # its arena, and the parts of a split product on the workers (whose error state is their own)
    from jitorch.runtime import threads
    monkeypatch.setitem(threads._settings, "threads", 2)
    monkeypatch.setitem(threads._settings, "split_products", split)
    a = np.ones((512, 128), np.float32)
    a[5, 7] = np.inf
    b = np.zeros((128, 256), np.float32)
    f = jt.compile(lambda x, y: (x @ y) + 1) if compiled else (lambda x, y: (x @ y) + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = f(jt.from_numpy(a), jt.from_numpy(b)).numpy()
    want = torch.from_numpy(a) @ torch.from_numpy(b) + 1
    np.testing.assert_array_equal(got, want.numpy())  # NaN in row 5, 1 elsewhere
    assert np.isnan(got[5]).all() and (np.delete(got, 5, 0) == 1).all()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX's")
def test_a_forked_child_splits_products_on_workers_of_its_own(monkeypatch):
    # the parent's worker threads do not exist in a forked child (a DataLoader worker): a part handed to
    # the parent's team there would wait forever
    from jitorch.runtime import threads
    monkeypatch.setitem(threads._settings, "threads", 2)
    monkeypatch.setitem(threads._settings, "split_products", True)
    a, w = jt.randn(768, 128), jt.randn(128, 512)
    want = a.numpy() @ w.numpy()
    a @ w  # the parent's workers start
    pid = os.fork()
    if pid == 0:  # (the child leaves through os._exit, never through pytest)
        os._exit(0 if np.allclose((a @ w).numpy(), want, rtol=1e-5, atol=1e-4) else 3)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the forked child's product never finished")


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", [jt.float32, jt.float64, jt.int64])
def test_one_term_products_multiply_without_numpys_matmul(monkeypatch, compiled, dtype):
    # a column times a row (DCGAN's first transposed convolution's gradient: (1, 4096, 1) @ (1, 1, 64), the
    # column a transposed view): NumPy's matmul runs it in a plain C loop, 4-5x slower than its multiply
    col = jt.from_numpy(small_values((2, 1, 300), dtype, 1)).transpose(1, 2)  # (2, 300, 1), not contiguous
    row = jt.from_numpy(small_values((1, 5), dtype, 2))  # broadcast over the batch
    f = jt.compile(lambda x, y: x @ y) if compiled else (lambda x, y: x @ y)
    seen = _spy_matmul(monkeypatch)
    got = f(col, row)
    assert seen == []
    want = torch.from_numpy(col.numpy()) @ torch.from_numpy(row.numpy())
    assert got.dtype is dtype and tuple(got.shape) == (2, 300, 5)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    if dtype.is_floating_point:  # inf times 0 is NaN without a warning, as torch gives it
        a = np.full((64, 1), np.inf, dtype.np)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = f(jt.from_numpy(a), jt.zeros(1, 3, dtype=dtype)).numpy()
        assert np.isnan(out).all()
    with pytest.raises(RuntimeError, match=r"cannot be multiplied \(4x1 and 4x5\)"):  # not a broadcast multiply
        jt.ones(4, 1, dtype=dtype) @ jt.ones(4, 5, dtype=dtype)


@pytest.mark.parametrize("compiled", [False, True])
def test_small_transposed_batches_reach_blas_in_rows(monkeypatch, compiled):
    # attention's q @ k.transpose(-2, -1): OpenBLAS's small-matrix kernel for a transposed right operand
    # runs at about half speed, so a batch of them is copied into rows first; the values stay torch's
    from jitorch.runtime import threads
    # one part (an earlier set_num_threads in the process splits products: CI's minimum-versions run, whose
    # codegen and runtime tests come first in a worker, had two np.matmul calls here)
    monkeypatch.setitem(threads._settings, "split_products", False)
    rng = np.random.default_rng(0)
    qkv = jt.from_numpy(rng.standard_normal((12, 64, 3 * 128)).astype(np.float32))

    def heads(x):
        q, k, _ = x.split(128, dim=2)
        return [t.view(12, 64, 4, 32).transpose(1, 2) for t in (q, k)]

    def scores(x):
        q, k = heads(x)
        return q @ k.transpose(-2, -1)
    f = jt.compile(scores) if compiled else scores
    eager = scores(qkv)
    q, k = heads(qkv)
    seen = _spy_matmul(monkeypatch)
    got = f(qkv)
    assert len(seen) == 1
    a, b = seen[0]
    assert np.shares_memory(a, qkv._array()) and b.flags.c_contiguous and not np.shares_memory(b, qkv._array())
    tq, tk = (torch.from_numpy(t.numpy()) for t in (q, k))
    np.testing.assert_allclose(got.numpy(), (tq @ tk.transpose(-2, -1)).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got.numpy(), eager.numpy())
    # few rows of q per matrix, or large matrices: the copy would cost more than it saves; a batch broadcast
    # by stride 0: the copy would hold each repeat
    seen.clear()
    big, one = jt.randn(2, 1152, 384), jt.randn(64, 32)
    q[:, :, :8] @ k.transpose(-2, -1)
    jt.randn(2, 256, 384) @ big.transpose(1, 2)
    got = q @ one.t().expand(12, 4, 32, 64)
    assert [np.shares_memory(y, t._array()) for (_, y), t in zip(seen, (qkv, big, one))] == [True] * 3
    assert [y.strides[-2] for _, y in seen] == [4, 4, 4]  # handed to BLAS as the transposed views they are
    np.testing.assert_allclose(got.numpy(), (tq @ torch.from_numpy(one.numpy()).t()).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 2)), ((1, 1), (1, 1)),
                                    ((2, 3, 4), (4,)), ((2, 3, 4), (4, 2)), ((3, 4), (2, 4, 5)), ((0, 4), (4, 3))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_small_products_give_array_products_bits(shapes, dtype):
    """A small product's shortcut skips `array_product`'s split decision: the same NumPy call, the same bits."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(dtype) if dtype != np.int64 else rng.integers(-9, 9, s) for s in shapes)
    got = jt.from_numpy(a) @ jt.from_numpy(b)
    want = np.asarray(linalg.array_product(a, b))
    assert got.shape == want.shape and got.dtype.np == want.dtype
    np.testing.assert_array_equal(got.numpy(), want)


def test_product_shortcuts_give_the_general_paths_results_and_leave_it_their_errors():
    """mm/bmm/mv/dot/matmul's shortcut (`linalg._fast_path`): served for their ranks (a one-term product and a
    small matrix product made with their known geometry), the general path's bits and contiguous strides;
    bmm of unequal batches and mm of other ranks go to the general path, which raises torch's errors."""
    from jitorch.ops import registry
    from tests.support import general_path
    rng = np.random.default_rng(0)
    f = lambda *s: jt.tensor(rng.standard_normal(s).astype(np.float32))  # noqa: E731
    calls = [("mm", f(3, 1), f(1, 4)), ("mm", f(1, 1), f(1, 1)), ("mm", f(2, 3), f(3, 2)), ("matmul", f(2, 3), f(3, 2)),
             ("matmul", f(1, 3).t(), f(1, 4)), ("bmm", f(2, 2, 3), f(2, 3, 1)), ("mv", f(2, 3), f(3)), ("dot", f(3), f(3))]
    for name, a, b in calls:
        got = registry.OPS[name].fast((a, b))
        assert got is not None
        with general_path():
            want = getattr(jt, name)(a, b)
        assert got.shape == want.shape and got.stride() == want.stride() == got.contiguous().stride()
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    for name, a, b in [("bmm", f(2, 2, 3), f(3, 3, 2)), ("mm", f(2, 3), f(3)), ("mv", f(2, 3), f(3, 1))]:
        assert registry.OPS[name].fast((a, b)) is None
    message = "Expected size for first two dimensions of batch2 tensor to be: [2, 3] but got: [3, 3]."  # (torch's)
    with pytest.raises(RuntimeError, match=re.escape(message)):
        jt.bmm(f(2, 2, 3), f(3, 3, 2))


@pytest.mark.parametrize("sa,sb", [((1, 4, 5, 8), (1, 4, 8, 5)), ((3, 2, 7), (3, 7, 1)), ((2, 0, 3, 4), (2, 0, 4, 2)),
                                   ((2, 1, 3, 4), (1, 5, 4, 2))])  # (the last broadcasts: the rules' own path)
def test_small_batched_products_are_one_matmul_with_its_bits(sa, sb, monkeypatch):
    """A small product of batches of one shape goes to `_matmul` at once (`array_product`'s first rule for
    them), as the later rules would: NumPy's matmul's bits, into ``out`` too."""
    from jitorch.ops import linalg as L
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    calls = []
    matmul = L._matmul
    monkeypatch.setattr(L, "_matmul", lambda *args: calls.append(1) or matmul(*args))
    want = chosen_matmul(a, b)
    np.testing.assert_array_equal(L.array_product(a, b).view(np.uint32), want.view(np.uint32))
    out = np.empty_like(want)
    assert L.array_product(a, b, out) is out
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    assert calls == [1, 1]
