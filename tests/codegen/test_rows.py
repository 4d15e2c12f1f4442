"""Eager softmax and log_softmax through the compiled row kernel (jitorch/codegen/rows.py): values and
gradients against torch, special values, thread-count independence, and which calls take the kernel."""

import numpy as np
import pytest

import jitorch as jt
from jitorch.codegen import rows
from jitorch.ops import normalization, reductions

torch = pytest.importorskip("torch")

TOL = {"float32": dict(rtol=2e-6, atol=4e-6), "float64": dict(rtol=1e-13, atol=1e-14)}


@pytest.fixture
def calls(monkeypatch):
    """[(op name, dtype name, width, rows)] of the row kernels run while the test runs."""
    seen = []
    call = rows.RowKernel.__call__

    def counting(self, a):
        key = next(k for k, v in rows._kernels.items() if v is self)
        seen.append((*key, a.size // key[2]))
        return call(self, a)
    monkeypatch.setattr(rows.RowKernel, "__call__", counting)
    return seen


def _array(shape, dtype, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 4).astype(dtype)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(12, 64, 128), (3, 6000), (20000, 1)])
def test_large_last_dim_softmax_runs_the_kernel_within_tolerance_of_torch(calls, name, dtype, shape):
    a = _array(shape, dtype)
    got = getattr(jt.tensor(a), name)(-1)
    want = getattr(torch.from_numpy(a), name)(-1).numpy()
    # (rows of one element take the one-wide formula, exp(x - x) or x - x: no kernel)
    kernel_calls = [(name, dtype, shape[-1], a.size // shape[-1])] if shape[-1] > 1 else []
    assert calls == kernel_calls
    assert got.dtype is getattr(jt, dtype) and tuple(got.shape) == shape and got.is_contiguous()
    np.testing.assert_allclose(got.numpy(), want, **TOL[dtype])
    # the functional form and a dim given as its positive index take the same path
    np.testing.assert_array_equal(getattr(jt.nn.functional, name)(jt.tensor(a), dim=len(shape) - 1).numpy(),
                                  got.numpy())
    assert calls == kernel_calls * 2


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_infinities_and_nan_rows_are_torchs(calls, name):
    a = _array((256, 64), "float32")
    a[1, 3] = np.inf  # one +inf: NaN where torch gives NaN (inf - inf)
    a[2, :] = -np.inf  # a fully masked row: NaN
    a[3, ::2] = -np.inf  # half masked: zeros (softmax) / -inf (log_softmax) there
    a[4, 7] = np.nan
    a[5, :] = 1e30  # equal huge values: uniform
    got = getattr(jt.tensor(a), name)(-1).numpy()
    want = getattr(torch.from_numpy(a), name)(-1).numpy()
    assert len(calls) == 1
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], **TOL["float32"])


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_values_do_not_depend_on_the_number_of_threads(calls, name):
    a = _array((1024, 96), "float32")
    before = jt.get_num_threads()
    try:
        jt.set_num_threads(1)
        one = getattr(jt.tensor(a), name)(-1).numpy()
        jt.set_num_threads(2)
        two = getattr(jt.tensor(a), name)(-1).numpy()
    finally:
        jt.set_num_threads(before)
    assert len(calls) == 2
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_gradient_through_the_kernel_matches_torch(calls, name):
    a, g = _array((64, 256), "float64"), _array((64, 256), "float64", seed=1)
    x = jt.tensor(a, requires_grad=True)
    y = getattr(x, name)(-1)
    y.backward(jt.tensor(g))
    t = torch.tensor(a, requires_grad=True)
    getattr(t, name)(-1).backward(torch.from_numpy(g))
    assert y.grad_fn.name() == ("SoftmaxBackward0" if name == "softmax" else "LogSoftmaxBackward0")
    assert len(calls) == 1
    np.testing.assert_allclose(y.detach().numpy(), getattr(t, name)(-1).detach().numpy(), **TOL["float64"])
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), **TOL["float64"])


def test_other_calls_run_numpys_passes(calls):
    big = _array((128, 128), "float32")
    cases = [
        (jt.tensor(big), 0, None),  # not the last dim
        (jt.tensor(big).t(), -1, None),  # not contiguous
        (jt.tensor(big[:64]), -1, None),  # below ROW_KERNEL_MIN elements
        (jt.tensor(big.astype(np.int64)), -1, jt.float32),  # dtype= casts first: then float32, contiguous
    ]
    assert big[:64].size < reductions.ROW_KERNEL_MIN <= big.size
    for x, dim, dtype in cases:
        got = x.softmax(dim, dtype=dtype)
        want = torch.softmax(torch.from_numpy(x.numpy()), dim, dtype=getattr(torch, dtype.__repr__().split(".")[1])
                             if dtype else None)
        np.testing.assert_allclose(got.numpy(), want.numpy(), **TOL["float32"])
    assert [c[:3] for c in calls] == [("softmax", "float32", 128)]  # the int64 input's float32 copy alone


def test_half_input_computes_in_float32_through_the_kernel(calls):
    a = _array((128, 256), "float16")
    got = jt.tensor(a).softmax(-1)
    want = torch.from_numpy(a).softmax(-1).numpy()
    assert got.dtype is jt.float16 and calls == [("softmax", "float32", 256, 128)]
    np.testing.assert_allclose(got.numpy().astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-4)


def test_compiled_log_softmax_keeps_small_results_beside_a_large_max():
    """Regression: the kernel computed ``x - (max + log(sum))``, whose shift rounds at the max's scale: a row
    of equal logits 1e30 gave 0 instead of -log(64), and logits near 1000 lost four digits."""
    a = np.full((4, 64), 1e30, np.float32)
    a[1] = 1000.0
    a[1, 0] = 1000.5
    got = jt.compile(lambda x: x.log_softmax(-1))(jt.tensor(a)).numpy()
    want = torch.from_numpy(a).log_softmax(-1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got[0, 0] == pytest.approx(-np.log(64), rel=1e-6)


@pytest.fixture
def norm_calls(monkeypatch):
    """[(dtype name, weight, bias, rows, cols)] of the layer norm kernels run while the test runs."""
    seen = []
    call = rows.LayerNormKernel.__call__

    def counting(self, a, weight, bias, eps):
        key = next(k for k, v in rows._layer_norm_kernels.items() if v is self)
        seen.append((*key, *a.shape))
        return call(self, a, weight, bias, eps)
    monkeypatch.setattr(rows.LayerNormKernel, "__call__", counting)
    return seen


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,normalized", [((12, 64, 128), (128,)), ((4, 33, 65), (33, 65)), ((5000, 1), (1,))])
@pytest.mark.parametrize("affine", [(False, False), (True, False), (True, True)])
def test_layer_norm_runs_one_kernel_of_any_width_within_tolerance_of_torch(norm_calls, dtype, shape, normalized,
                                                                           affine):
    a = _array(shape, dtype) + 1
    params = [_array(normalized, dtype, seed=i + 1) if on else None for i, on in enumerate(affine)]
    got = jt.nn.functional.layer_norm(jt.tensor(a), normalized, *[p if p is None else jt.tensor(p) for p in params],
                                      eps=1e-3)
    want = torch.nn.functional.layer_norm(torch.from_numpy(a), normalized,
                                          *[p if p is None else torch.from_numpy(p) for p in params], eps=1e-3)
    width = int(np.prod(normalized))
    assert norm_calls == [(dtype, *affine, a.size // width, width)]
    assert got.dtype is getattr(jt, dtype) and tuple(got.shape) == shape
    np.testing.assert_allclose(got.numpy(), want.numpy(), **TOL[dtype])


def test_layer_norm_values_do_not_depend_on_the_number_of_threads(norm_calls):
    a = _array((1024, 96), "float32")
    before = jt.get_num_threads()
    try:
        jt.set_num_threads(1)
        one = jt.nn.functional.layer_norm(jt.tensor(a), (96,)).numpy()
        jt.set_num_threads(2)
        two = jt.nn.functional.layer_norm(jt.tensor(a), (96,)).numpy()
    finally:
        jt.set_num_threads(before)
    assert len(norm_calls) == 2
    np.testing.assert_array_equal(one, two)


def test_layer_norm_gradients_through_the_kernel_match_torch(norm_calls):
    a, g = _array((64, 128), "float64"), _array((64, 128), "float64", seed=3)
    w, b = _array((128,), "float64", seed=4), _array((128,), "float64", seed=5)
    jx, jw, jb = (jt.tensor(v, requires_grad=True) for v in (a, w, b))
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (a, w, b))
    jy = jt.nn.functional.layer_norm(jx, (128,), jw, jb)
    ty = torch.nn.functional.layer_norm(tx, (128,), tw, tb)
    jy.backward(jt.tensor(g))
    ty.backward(torch.from_numpy(g))
    assert len(norm_calls) == 1 and jy.grad_fn is not None
    np.testing.assert_allclose(jy.detach().numpy(), ty.detach().numpy(), **TOL["float64"])
    for j, t in ((jx, tx), (jw, tw), (jb, tb)):
        np.testing.assert_allclose(j.grad.numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_layer_norm_special_values_are_torchs(norm_calls):
    a = _array((64, 128), "float32")
    a[1, 5] = np.inf
    a[2, 6] = np.nan
    a[3, :] = 7.0  # a constant row: zero variance, eps alone
    got = jt.nn.functional.layer_norm(jt.tensor(a), (128,)).numpy()
    want = torch.nn.functional.layer_norm(torch.from_numpy(a), (128,)).numpy()
    assert len(norm_calls) == 1
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], **TOL["float32"])


def test_other_layer_norms_run_numpy(norm_calls):
    a = _array((64, 128), "float32")
    small = jt.nn.functional.layer_norm(jt.tensor(a[:1, :64]), (64,))  # below LAYER_NORM_KERNEL_MIN elements
    strided_weight = jt.tensor(_array((128, 2), "float32"))[:, 0]  # a weight that is not contiguous
    strided = jt.nn.functional.layer_norm(jt.tensor(a), (128,), strided_weight)
    half = jt.nn.functional.layer_norm(jt.tensor(a.astype(np.float16)), (128,))  # float32 rows: kernel
    np.testing.assert_allclose(small.numpy(), torch.nn.functional.layer_norm(torch.from_numpy(a[:1, :64]), (64,)).numpy(),
                               **TOL["float32"])
    want = torch.nn.functional.layer_norm(torch.from_numpy(a), (128,), torch.from_numpy(strided_weight.numpy()))
    np.testing.assert_allclose(strided.numpy(), want.numpy(), **TOL["float32"])
    assert half.dtype is jt.float16
    assert norm_calls == [("float32", False, False, 64, 128)]


def test_a_layer_norm_of_one_row_runs_the_kernel(norm_calls):
    # a GPT generating from a one-token prompt normalises one row of its width per layer norm
    a = _array((1, 1, 128), "float32")
    got = jt.nn.functional.layer_norm(jt.tensor(a), (128,))
    want = torch.nn.functional.layer_norm(torch.from_numpy(a), (128,))
    assert normalization.LAYER_NORM_KERNEL_MIN <= 128
    assert norm_calls == [("float32", False, False, 1, 128)]
    np.testing.assert_allclose(got.numpy(), want.numpy(), **TOL["float32"])


def test_a_layer_norm_of_a_strided_weight_runs_numpy_within_tolerance_of_torch(norm_calls):
    """The kernel reads weights and biases C-contiguous of the compute dtype (`normalization._kernel_reads`):
    a strided weight takes NumPy's passes."""
    a = _array((3, 64), "float32")
    w = _array((128,), "float32", seed=1)
    got = jt.nn.functional.layer_norm(jt.tensor(a), (64,), jt.tensor(w)[::2], jt.tensor(w)[:64])
    want = torch.nn.functional.layer_norm(torch.from_numpy(a), (64,), torch.from_numpy(w)[::2],
                                          torch.from_numpy(w)[:64])
    assert norm_calls == []
    np.testing.assert_allclose(got.numpy(), want.numpy(), **TOL["float32"])
    jt.nn.functional.layer_norm(jt.tensor(a), (64,), jt.tensor(w[::2]), jt.tensor(w)[:64])
    assert norm_calls == [("float32", True, True, 3, 64)]
