"""The scan, statistics, lookup, arrangement, diagonal, selection and window ops against torch: the semantics
the registry-wide samples do not pin down (ties, NaN, interpolation modes, ranges, warnings, wrap), errors,
gradients, one compiled-vs-eager check per family, and a run on the emulated CUDA device.

(Every op also runs in tests/ops/test_against_torch.py and tests/autograd/test_registry_gradcheck.py on
its samples from tests/ops/samples.py.)"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.runtime.cuda_backend import use_backend

NAN = float("nan")
INF = float("inf")


def _to_jt(v):
    if isinstance(v, torch.Tensor) and v.dtype is torch.bfloat16:
        return jt.from_numpy(v.detach().float().numpy().copy()).to(jt.bfloat16)
    if isinstance(v, torch.Tensor):
        return jt.from_numpy(v.detach().numpy().copy())
    if isinstance(v, (list, tuple)):
        return type(v)(_to_jt(x) for x in v)
    if isinstance(v, torch.dtype):
        return getattr(jt, str(v).split(".")[1])
    return v


def _assert_like(got, want):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _assert_like(g, w)
        return
    assert tuple(got.shape) == tuple(want.shape)
    assert got.dtype.name == str(want.dtype).split(".")[1]
    np.testing.assert_allclose(got.float().numpy(), want.detach().float().numpy(), rtol=1e-5, atol=1e-6)


def same(name, *args, **kwargs):
    """``jitorch.<name>`` on copies of the arguments gives torch's results, or raises torch's error."""
    try:
        want = getattr(torch, name)(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 (any error torch raises is the one expected)
        with pytest.raises(type(e)) as info:
            getattr(jt, name)(*_to_jt(args), **{k: _to_jt(v) for k, v in kwargs.items()})
        assert str(info.value) == str(e)
        return
    _assert_like(getattr(jt, name)(*_to_jt(args), **{k: _to_jt(v) for k, v in kwargs.items()}), want)


# Pointwise: addcmul, addcdiv -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int8, torch.int64])
@pytest.mark.parametrize("value", [1, 2, -1.7, 0.5])
def test_addcmul_and_addcdiv_match_torch(dtype, value):
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(3, 1, generator=g) * 5).to(dtype), (torch.randn(4, generator=g) * 5).to(dtype)
    c = (torch.randn(3, 4, generator=g) * 5 + 20).to(dtype)
    same("addcmul", a, b, c, value=value)
    same("addcdiv", a, b, c, value=value)


def test_addcmul_float32_is_fused_as_torchs_multiply_add():
    g = torch.Generator().manual_seed(1)
    a, b, c = (torch.randn(2000, generator=g) * 50 for _ in range(3))
    got = jt.addcmul(*_to_jt((a, b, c)), value=0.5).numpy()
    assert np.array_equal(got, torch.addcmul(a, b, c, value=0.5).numpy())


def test_addcdiv_of_integers_and_numbers_as_tensors_are_refused_as_torch():
    i = torch.tensor([1, 2, 3])
    same("addcdiv", i, i, i)
    same("addcmul", torch.tensor([True]), torch.tensor([True]), torch.tensor([True]))
    with pytest.raises(TypeError, match=r"addcmul\(\): argument 'tensor1' \(position 2\) must be Tensor, not float"):
        jt.addcmul(jt.ones(2), 2.0, jt.ones(2))


def test_addcmul_in_place_and_gradients():
    x = jt.ones(3)
    assert x.addcmul_(jt.ones(3), jt.full((3,), 2.0), value=3) is x and x.tolist() == [7.0, 7.0, 7.0]
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        jt.ones(3, dtype=jt.int64).addcdiv_(jt.ones(3), jt.ones(3))
    t = [torch.randn(3, 4, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    torch.addcdiv(*t, value=0.5).sum().backward()
    j = [_to_jt(v).requires_grad_() for v in t]
    jt.addcdiv(*j, value=0.5).sum().backward()
    for mine, theirs in zip(j, t):
        np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-12)


def test_addcmul_compiles_into_one_fused_kernel_equal_to_eager():
    def fn(x, a, b):
        return jt.addcmul(x, a, b, value=0.5).relu()
    args = [jt.randn(4, 5), jt.randn(4, 5), jt.randn(5)]
    low = jt.compile(fn).lower(*args)
    assert [k.ops for k in low.kernels] == [["addcmul", "relu"]]
    assert np.array_equal(jt.compile(fn)(*args).numpy(), fn(*args).numpy())


# Scans, differences, integrals ------------------------------------------------------------------------------

def test_running_extremes_take_the_latest_tie_and_keep_nan():
    x = torch.tensor([[1.0, 3, 3, 2, NAN, 5, NAN], [0, -1, 2, 2, 1, 7, 7]])
    for name in ("cummax", "cummin"):
        same(name, x, 1)
        same(name, x.int(), 0)
        same(name, torch.tensor([True, False, True]), 0)


def test_logcumsumexp_keeps_infinities_and_refuses_integers():
    same("logcumsumexp", torch.tensor([-float("inf"), 1.0, float("inf"), 2.0]), 0)
    same("logcumsumexp", torch.tensor([1, 2]), 0)


@pytest.mark.parametrize("name", ["cummax", "cummin", "logcumsumexp"])
def test_scan_gradients_match_torch(name):
    t = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    j = _to_jt(t).requires_grad_()
    r, q = getattr(torch, name)(t, 1), getattr(jt, name)(j, 1)
    (r if name == "logcumsumexp" else r[0]).pow(2).sum().backward()
    (q if name == "logcumsumexp" else q[0]).pow(2).sum().backward()
    np.testing.assert_allclose(j.grad.numpy(), t.grad.numpy(), rtol=1e-10)


def test_diff_orders_prepend_append_and_errors():
    y = torch.randn(3, 4, 5)
    for n, d in ((1, -1), (2, 0), (0, 1), (5, 2)):
        same("diff", y, n, d)
    same("diff", y, 1, 1, prepend=torch.ones(3, 1, 5, dtype=torch.int64), append=torch.zeros(3, 2, 5))
    same("diff", torch.tensor([True, False, False]))
    same("diff", torch.tensor(1.0))
    same("diff", y, -1)
    same("diff", y, prepend=torch.zeros(4))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_diff_of_order_zero_into_out_under_grad_copies_as_torch(compiled):
    """Fuzz seed 7203191: ``diff(x, 0, out=o)`` with x requiring grad raised the out= autograd guard; torch's
    order 0 copy_-s self into out (out requires grad, CopyBackwards), refused only when out itself requires grad
    and must be resized. Orders above 0 keep the guard (sub's), as torch's."""
    def program(T, x):
        o = T.zeros(0)
        r = T.diff(x[None], 0, out=o)
        return r is o, o * 2
    want = program(torch, torch.arange(6.0).view(2, 3).requires_grad_())
    fn = jt.compile(lambda x: program(jt, x)) if compiled else lambda x: program(jt, x)
    x = jt.arange(6.0).view(2, 3).requires_grad_()
    got = fn(x)
    assert got[0] is want[0] is True and got[1].tolist() == want[1].tolist() and got[1].requires_grad
    got[1].sum().backward()
    assert x.grad.tolist() == [[2.0] * 3] * 2
    for T in (torch, jt):
        with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
            T.diff(T.ones(3, requires_grad=True), 0, out=T.zeros(1, requires_grad=True))
        with pytest.raises(RuntimeError, match=r"sub\(\): functions with out=\.\.\. arguments"):
            T.diff(T.ones(3, requires_grad=True), 1, out=T.zeros(0))


@pytest.mark.parametrize("kwargs", [{}, {"spacing": 2.0}, {"spacing": [1.0, 2.0, 3.0]}, {"dim": 1, "edge_order": 2},
                                    {"spacing": [torch.tensor([0.0, 1, 3])], "dim": 0},
                                    {"spacing": [torch.tensor([0.0, 1, 3]), torch.tensor([0, 1, 3, 4.0])],
                                     "dim": [0, 1], "edge_order": 2}])
def test_gradient_matches_torch(kwargs):
    same("gradient", torch.randn(3, 4, 5), **kwargs)


def test_gradient_errors():
    y = torch.randn(3, 4)
    same("gradient", y, spacing=[1.0])
    same("gradient", y, edge_order=3)
    same("gradient", torch.ones(2, 2, dtype=torch.uint8))
    same("gradient", torch.ones(1, 4))
    same("gradient", torch.randn(5), spacing=None)


def test_trapezoid_family_matches_torch():
    y, xs = torch.randn(3, 4, 5), torch.tensor([0.0, 1, 3, 6, 7])
    same("trapezoid", y)
    same("trapezoid", y, dx=2, dim=0)
    same("trapezoid", y, xs)
    same("trapz", y, xs)
    same("trapz", y, dx=3)
    same("trapezoid", torch.tensor([1, 2, 3]))
    same("trapezoid", torch.zeros(2, 0))
    same("cumulative_trapezoid", y, xs)
    same("cumulative_trapezoid", y, dim=0)
    same("trapezoid", y, torch.tensor([1.0, 2]))
    same("trapezoid", torch.tensor(1.0))


def test_scans_compile_equal_to_eager():
    def fn(x):
        return x.cummax(1).values + jt.logcumsumexp(x, 1) + jt.diff(x, 1, 1, prepend=x[:, :1])
    x = jt.randn(3, 6)
    np.testing.assert_allclose(jt.compile(fn)(x).numpy(), fn(x).numpy(), rtol=1e-6)


# Order statistics and moments ---------------------------------------------------------------------------------

def test_mode_picks_the_smallest_most_frequent_value_at_its_last_index():
    x = torch.tensor([[1.0, 3, 3, 2, 2, 5], [4, 4, 1, 1, 0, 0]])
    same("mode", x, 1)
    same("mode", x.int(), 0, True)
    same("mode", torch.zeros(0, 3), 0)


def test_nanmedian_ignores_nan():
    y = torch.tensor([[1.0, NAN, 3, 2], [5, NAN, NAN, 1.0]])
    same("nanmedian", y)
    same("nanmedian", y, 1)
    same("nanmedian", torch.tensor([True]))


def test_aminmax_matches_torch():
    same("aminmax", torch.tensor([[1, 5], [3, 2]]))
    same("aminmax", torch.randn(3, 4), dim=0, keepdim=True)
    same("aminmax", torch.zeros(0))
    same("aminmax", torch.zeros(0, 3), dim=0)


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile_and_nanquantile_match_torch(interpolation):
    z = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(2))
    y = torch.tensor([[1.0, NAN, 3, 2], [5, NAN, NAN, 1.0]])
    for q in (0.3, torch.tensor([0.0, 0.25, 0.5, 1.0])):
        same("quantile", z, q, interpolation=interpolation)
        same("quantile", z, q, 1, True, interpolation=interpolation)
        same("nanquantile", y, q, 1, interpolation=interpolation)
        same("quantile", y, q, 1, interpolation=interpolation)


def test_quantile_errors():
    z = torch.randn(3, 4)
    for args in ((torch.zeros(0), 0.5), (z.double(), torch.tensor(0.5)), (z, 1.5), (z, torch.tensor([1.5])),
                 (z.int(), 0.5), (z, torch.ones(2, 2))):
        same("quantile", *args)
    same("quantile", z, 0.5, interpolation="foo")


def test_quantile_gradient_matches_torch():
    t = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    j = _to_jt(t).requires_grad_()
    torch.quantile(t, torch.tensor([0.3, 0.8], dtype=torch.float64), 1).sum().backward()
    jt.quantile(j, jt.tensor([0.3, 0.8], dtype=jt.float64), 1).sum().backward()
    np.testing.assert_allclose(j.grad.numpy(), t.grad.numpy(), rtol=1e-12)


def test_cov_and_corrcoef_match_torch():
    w = torch.randn(3, 6)
    same("cov", w)
    same("cov", w[0])
    same("cov", w, correction=0)
    same("cov", w, fweights=torch.tensor([1, 2, 0, 3, 1, 1]), aweights=torch.rand(6))
    same("cov", torch.randn(2, 2, 2))
    same("cov", w, fweights=torch.ones(6))
    same("corrcoef", w)
    same("corrcoef", torch.tensor([[1, 2, 3], [3, 1, 0]]))
    with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
        jt.cov(jt.ones(2, 1))


def test_statistics_compile_equal_to_eager():
    def fn(x):
        return jt.quantile(x, 0.3, 1) + jt.aminmax(x, dim=1).max + x.msort()[0]
    x = jt.randn(4, 4)
    np.testing.assert_allclose(jt.compile(fn)(x).numpy(), fn(x).numpy(), rtol=1e-6)


# Lookups and counts --------------------------------------------------------------------------------------------

def test_searchsorted_and_bucketize_match_torch():
    b, v = torch.tensor([1, 3, 5, 7, 9]), torch.tensor([[3, 6, 9], [3, 6, 9]])
    same("bucketize", v, b, right=True)
    same("bucketize", 3, b)
    same("bucketize", v, b, out_int32=True)
    same("searchsorted", torch.tensor([[1, 3, 5], [2, 4, 6]]), torch.tensor([[3], [5]]), side="right")
    same("searchsorted", b, 4)
    same("searchsorted", torch.tensor([3, 1, 2]), torch.tensor([2]), sorter=torch.tensor([1, 2, 0]))
    same("bucketize", v, torch.ones(2, 2))
    same("searchsorted", torch.ones(2, 3), torch.ones(3, 1))
    same("searchsorted", b, v, side="left", right=True)
    same("searchsorted", b, v, side="foo")


def test_isin_unique_consecutive_and_bincount_match_torch():
    same("isin", torch.tensor([1, 2, 3]), torch.tensor([2, 5]))
    same("isin", 2, torch.tensor([1, 2]))
    same("unique_consecutive", torch.tensor([1, 1, 2, 2, 3, 1, 1, 2]), return_inverse=True, return_counts=True)
    same("unique_consecutive", torch.tensor([[1, 1], [1, 1], [2, 3]]), dim=0, return_counts=True)
    same("bincount", torch.tensor([0, 1, 1, 3]), weights=torch.tensor([0.5, 1, 1, 2]), minlength=6)
    same("bincount", torch.tensor([0, 1]), weights=torch.tensor([1, 2]))
    for args in ((torch.tensor([-1]),), (torch.tensor([1.0]),), (torch.tensor([1, 2]), torch.tensor([1.0]))):
        same("bincount", *args)


def test_histc_and_histogram_match_torch():
    r = torch.randn(1000, generator=torch.Generator().manual_seed(3)) * 3
    same("histc", r, 17)
    same("histc", r.half(), 7, -2, 2)
    # torch counts a bfloat16 histogram in bfloat16 per thread, where 256 + 1 rounds to 256: its result depends
    # on its thread count (tests/conftest.py sets one), jitorch's counts are exact, as torch's with two threads
    # or more (each thread's counts stay below 256 here)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        same("histc", r.bfloat16(), 9)
    finally:
        torch.set_num_threads(threads)
    same("histc", torch.tensor([2.0, 2]), bins=3)
    same("histogram", r, 17)
    same("histogram", r.double(), 11, range=(-1.0, 3.0), density=True)
    same("histogram", r, torch.tensor([-1.0, 0.0, 2.5]), weight=torch.rand(1000))
    same("histogram", torch.zeros(0), 2)
    for args in ((torch.tensor([1, 2]),), (torch.tensor([1.0, 2]), 0), (torch.tensor([1.0, 2]), 10, 3, 1),
                 (torch.tensor([1.0, float("inf")]),)):
        same("histc", *args)
    same("histogram", torch.tensor([1, 2]), 3)
    same("histogram", r, 3, range=(2.0, 1.0))


def test_lookups_compile_equal_to_eager():
    def fn(x, b):
        return jt.searchsorted(b, x) + jt.bucketize(x, b, right=True)
    x, b = jt.randn(3, 4), jt.tensor([-1.0, 0.0, 0.5, 2.0])
    assert jt.equal(jt.compile(fn)(x, b), fn(x, b))


# Arrangements -------------------------------------------------------------------------------------------------

def test_rot90_and_splits_match_torch():
    x = torch.arange(6.0).reshape(2, 3)
    for args in ((), (2, [1, 0]), (-1,), (0,), (1, [0]), (1, [0, 0])):
        same("rot90", x, *args)
    same("rot90", torch.ones(3), 1)
    a7 = torch.arange(7)
    for arg in (3, [1, 5], torch.tensor(3), torch.tensor([2, 9]), 0, [5, 2], torch.tensor([1.0])):
        same("tensor_split", a7, arg)
    same("hsplit", a7, 2)
    same("vsplit", torch.arange(8), 2)
    same("dsplit", torch.ones(2, 2, 4), [1])
    parts = jt.tensor_split(jt.arange(7.0), 3)
    assert all(p._base is not None for p in parts)  # views, as torch's


def test_grids_and_combinations_match_torch():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jt.meshgrid(jt.ones(2), jt.ones(3))
    assert [str(w.message) for w in caught] == [
        "torch.meshgrid: in an upcoming release, it will be required to pass the indexing argument."]
    same("meshgrid", torch.tensor([1, 2]), torch.tensor([3, 4, 5]), torch.tensor([6, 7, 8, 9]), indexing="xy")
    same("meshgrid", torch.ones(2), indexing="foo")
    same("meshgrid", torch.ones(2), torch.ones(2).int(), indexing="ij")
    same("cartesian_prod", torch.tensor([1, 2]), torch.tensor([3, 4, 5]))
    same("combinations", torch.tensor([1.0, 2, 3, 4]), 3)
    same("combinations", torch.tensor([1, 2, 3]), 3, True)
    same("combinations", torch.tensor([1, 2]), 3)
    same("block_diag", torch.ones(2, 2), torch.tensor([1, 2, 3]), torch.tensor(5.0))
    same("block_diag", torch.ones(2, 2, 2))
    same("atleast_3d", torch.ones(3))
    same("atleast_2d", torch.tensor(1.0), torch.ones(2))


def test_arrangements_compile_equal_to_eager():
    def fn(x):
        a, b = jt.meshgrid(x[0], x[1], indexing="ij")
        return jt.rot90(a * b, 1, [0, 1]).sum() + jt.block_diag(x, x).sum()
    x = jt.randn(2, 3)
    np.testing.assert_allclose(jt.compile(fn)(x).numpy(), fn(x).numpy(), rtol=1e-6)


# Diagonals and writes into views -------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, wrap", [((5, 3), True), ((5, 3), False), ((2, 2, 2), False), ((3, 5), True)])
def test_fill_diagonal_matches_torch(shape, wrap):
    want = torch.zeros(shape).fill_diagonal_(2, wrap=wrap)
    x = jt.zeros(shape)
    assert x.fill_diagonal_(2, wrap=wrap) is x
    assert np.array_equal(x.numpy(), want.numpy())


def test_fill_diagonal_errors_and_gradient():
    with pytest.raises(RuntimeError, match="dimensions must larger than 1"):
        jt.zeros(3).fill_diagonal_(1)
    with pytest.raises(RuntimeError, match="all dimensions of input must be of equal length"):
        jt.zeros(2, 2, 3).fill_diagonal_(1)
    leaf = jt.ones(3, 3, requires_grad=True)
    (leaf * 2).fill_diagonal_(0).sum().backward()
    assert leaf.grad.tolist() == [[0.0, 2, 2], [2, 0, 2], [2, 2, 0]]


def test_diag_family_and_view_scatters_match_torch():
    same("diag", torch.tensor([1, 2]), 1)
    same("diag", torch.arange(6).reshape(2, 3), -1)
    same("diag", torch.tensor(1.0))
    same("diagflat", torch.ones(2, 2), -1)
    same("diag_embed", torch.randn(2, 3, 4), -2, 2, 0)
    same("diag_embed", torch.ones(3), 0, 0, 0)
    same("slice_scatter", torch.zeros(4, 3), torch.ones(2, 3), 0, None, None, 2)
    same("slice_scatter", torch.zeros(4, 3), torch.ones(3, 3), 0, 1, 3)
    same("select_scatter", torch.zeros(2, 3), torch.ones(3), 0, 1)
    same("diagonal_scatter", torch.zeros(3, 3), torch.ones(3, dtype=torch.int64))
    same("tril_indices", 3, 4, 1)
    same("triu_indices", 4, 2, 1, dtype=torch.int32)
    same("tril_indices", -1, 2)
    same("vander", torch.tensor([1, 2, 3], dtype=torch.int8))
    same("vander", torch.tensor([1.0, 2]), 4, True)
    same("vander", torch.ones(2), -1)


def test_diagonals_compile_equal_to_eager():
    def fn(x):
        return jt.diag_embed(x, 1).sum(0) + jt.diagonal_scatter(jt.zeros(4, 4), x[0, :3], 1)
    x = jt.randn(2, 3)
    np.testing.assert_allclose(jt.compile(fn)(x).numpy(), fn(x).numpy(), rtol=1e-6)


# Selections, distances, windows ---------------------------------------------------------------------------------

def test_selections_match_torch():
    x = torch.arange(12.0).reshape(3, 4)
    same("take_along_dim", x, torch.tensor([[0, 1, 0, 1]]), 0)
    same("take_along_dim", x, torch.tensor([5, 0]))
    same("take_along_dim", x, torch.tensor([0]), 1)
    mask = torch.tensor([[True, False, True, False], [False] * 4, [True] * 4])
    same("masked_scatter", x, mask, torch.arange(10.0) * -1)
    same("masked_scatter", x, mask, torch.ones(2))
    same("masked_scatter", x, mask.int(), torch.ones(9))
    same("unravel_index", torch.tensor([[1234], [5678]]), (10, 10, 10, 10))
    same("unravel_index", torch.tensor([1]), (2, -3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's beta warning
        y = torch.ones(3, 2)
        same("index_reduce", y, 0, torch.tensor([0, 0, 2]), torch.tensor([[2.0, 3], [4, 5], [6, 7]]), "mean",
             include_self=False)
        same("index_reduce", torch.ones(3, 2, dtype=torch.int64), 0, torch.tensor([0, 0, 2]),
             torch.tensor([[2, 3], [4, 5], [6, 8]]), "mean")
        same("index_reduce", y, 0, torch.tensor([0]), torch.ones(1, 2), "sum")


def test_masked_scatter_gradient_matches_torch():
    mask = torch.tensor([[True, False, True], [False, True, True]])
    t, s = torch.randn(2, 3, dtype=torch.float64, requires_grad=True), torch.randn(6, dtype=torch.float64,
                                                                                   requires_grad=True)
    j, js = _to_jt(t).requires_grad_(), _to_jt(s).requires_grad_()
    (t.masked_scatter(mask, s) * torch.arange(6.0, dtype=torch.float64).view(2, 3)).sum().backward()
    (j.masked_scatter(_to_jt(mask), js) * jt.arange(6.0, dtype=jt.float64).view(2, 3)).sum().backward()
    assert np.array_equal(j.grad.numpy(), t.grad.numpy()) and np.array_equal(js.grad.numpy(), s.grad.numpy())


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.5, float("inf")])
def test_cdist_and_renorm_match_torch(p):
    same("cdist", torch.randn(2, 5, 3), torch.randn(4, 3), p)
    if p > 0:
        same("renorm", torch.randn(3, 4, 2) * 3, p, 1, 1.0)


def test_cdist_and_renorm_errors():
    same("cdist", torch.ones(2, 3), torch.ones(2, 4))
    same("cdist", torch.ones(2, 3).half(), torch.ones(2, 3).half())
    same("cdist", torch.ones(2, 3), torch.ones(2, 3), compute_mode="use_mm_for_euclid_dist")
    with pytest.raises(ValueError, match="foo is not a valid value for compute_mode"):
        jt.cdist(jt.ones(2, 3), jt.ones(2, 3), compute_mode="foo")
    same("renorm", torch.ones(3), 2, 0, 1)
    same("renorm", torch.ones(3, 2), 1, 0, -1)


@pytest.mark.parametrize("name", ["hann_window", "hamming_window", "blackman_window", "bartlett_window",
                                  "kaiser_window"])
def test_windows_match_torch(name):
    for n in (0, 1, 2, 5, 8):
        same(name, n)
        same(name, n, False)
        same(name, n, dtype=torch.float64)
    same(name, -1)


def test_selections_and_distances_compile_equal_to_eager():
    def fn(x, i):
        return jt.take_along_dim(x, i, 1).sum() + jt.cdist(x, x).sum() + x.renorm(2, 0, 1.0).sum()
    x, i = jt.randn(3, 4), jt.tensor([[0, 3], [1, 1], [2, 0]])
    np.testing.assert_allclose(jt.compile(fn)(x, i).numpy(), fn(x, i).numpy(), rtol=1e-5)


def test_new_ops_run_on_the_emulated_cuda_device():
    x = jt.randn(3, 4)
    with use_backend(FakeBackend(emulate="ptx")):
        d = x.to("cuda")
        results = [jt.addcmul(d, d, d, value=0.5), d.cummax(1).values, jt.logcumsumexp(d, 0), jt.diff(d),
                   jt.quantile(d, 0.5, 1), jt.diag_embed(d[0]), jt.searchsorted(jt.sort(d[0]).values, d),
                   jt.cdist(d, d), jt.rot90(d), jt.histc(d, 4)]
        assert all(r.device.type == "cuda" for r in results)
        host = [r.cpu() for r in results]
    expected = [jt.addcmul(x, x, x, value=0.5), x.cummax(1).values, jt.logcumsumexp(x, 0), jt.diff(x),
                jt.quantile(x, 0.5, 1), jt.diag_embed(x[0]), jt.searchsorted(jt.sort(x[0]).values, x),
                jt.cdist(x, x), jt.rot90(x), jt.histc(x, 4)]
    for got, want in zip(host, expected):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("correction", [0, 1, 3])
@pytest.mark.parametrize("weights", ["aweights", "fweights"])
@pytest.mark.parametrize("shape", [(), (1,), (2, 1)])
def test_cov_of_one_weighted_observation_has_torchs_values_and_keeps_its_input(shape, weights, correction):
    """Fuzz seed 7100612: torch 2.13's cov of a single observation with weights writes zeros into its input
    (its result is 0, or NaN without degrees of freedom); jitorch gives the same result and leaves the input
    (docs/differences-from-torch.md; the fuzzer gives such a cov no weights)."""
    values = np.arange(1.0, 1.0 + np.prod(shape, dtype=int)).reshape(shape)
    results = []
    for lib in (torch, jt):
        x = lib.tensor(values, dtype=lib.float16)
        w = lib.tensor([2.0] if shape else 2.0, dtype=lib.float16) if weights == "aweights" else \
            lib.tensor([2] if shape else 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (degrees of freedom <= 0)
            results.append((x.cov(correction=correction, **{weights: w}).tolist(), x.tolist()))
    (got, kept), (want, _) = results[1], results[0]
    np.testing.assert_array_equal(got, want)
    assert kept == values.tolist()
    if shape:  # weights of a wider dtype: torch's product of the zeroed input (float16) refuses them
        for lib in (torch, jt):
            with pytest.raises(RuntimeError, match="expected m1 and m2 to have the same dtype"), \
                    warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lib.tensor(values, dtype=lib.float16).cov(correction=correction, aweights=lib.tensor([2.0]))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", ["cumsum_", "cumprod_"])
def test_inplace_scans_compute_in_self_dtype_as_torch(name, compiled):
    """Fuzz seeds 7103413, 7200013: ``x.cumsum_(0)`` of a bool ``x`` raised jitorch's cast error (an int64 result
    into bool); torch's in-place scan is the scan into ``out=self``, in self's dtype: a bool 0-d or empty ``x``
    is copied, a longer one has no kernel (NotImplementedError); int8 wraps as its own dtype."""
    def scan(x):
        getattr(x, name)(0)
        return x
    run = jt.compile(scan) if compiled else scan
    for values, dtype in ((False, "bool"), (True, "bool"), ([], "bool"), ([100, 27, 3, -7], "int8")):
        want = scan(torch.tensor(values, dtype=getattr(torch, dtype)))
        got = run(jt.tensor(values, dtype=getattr(jt, dtype)))
        assert got.dtype is getattr(jt, dtype) and got.tolist() == want.tolist()
    with pytest.raises(NotImplementedError, match=f"\"{name[:-1]}_out_cpu\" not implemented for 'Bool'"):
        run(jt.tensor([True, False]))


@pytest.mark.parametrize("weight_shape", [(2, 1), (2,), (1, 2), (3,)])
def test_histogram_takes_weights_of_as_many_elements_in_any_shape_as_torch(weight_shape):
    """Fuzz seed 7200679: histogram of a [1, 1, 2] input with weights of shape [2, 1] raised; torch reads the
    input and the weights flattened (a weight of another element count is refused, naming both as flat)."""
    results = []
    for lib in (torch, jt):
        x = lib.tensor([[0.5], [1.5]]).unfold(0, 2, 2)
        weight = lib.arange(1.0, 1.0 + np.prod(weight_shape)).reshape(weight_shape)
        try:
            hist, edges = lib.histogram(x, 2, weight=weight, density=True)
            results.append((hist.tolist(), edges.tolist()))
        except RuntimeError as e:
            results.append(str(e))
    assert results[1] == results[0]
    assert isinstance(results[0], str) == (weight_shape == (3,))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32, torch.float32])
@pytest.mark.parametrize("density", [False, True])
def test_histogram_by_edges_takes_half_types_as_torch(dtype, density):
    """Fuzz seed 7300360: histogram of a bfloat16 tensor by a tensor of edges raised histogramdd's refusal; torch's
    histogram_cpu takes the half types (a number of bins still refuses them, an integer input either way)."""
    def run(T, x, bins):
        try:
            r = T.histogram(x, bins, density=density)
        except NotImplementedError as e:
            return str(e)
        return [t.double().tolist() for t in r] + [str(r[0].dtype).split(".")[1]]
    data = torch.tensor([[1.0, 2.0], [3.0, 4.0], [2.5, 1.125]]).to(dtype)
    for edges in (torch.tensor([1.0, 2.0, 3.0]).to(dtype), torch.tensor([1.125, 1.125]).to(dtype), 3):
        got = run(jt, jt.tensor(data.double().numpy()).to(getattr(jt, str(dtype)[6:])),
                  edges if isinstance(edges, int) else jt.tensor(edges.double().numpy()).to(getattr(jt, str(dtype)[6:])))
        want = run(torch, data, edges)
        if isinstance(want, str):
            assert got == want
        else:
            np.testing.assert_allclose(np.array(got[0], float), np.array(want[0], float))
            assert got[1:] == want[1:]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_take_along_dim_wraps_indices_along_its_dim_as_torch(compiled):
    """Fuzz seed 7300457: torch 2.13's take_along_dim with a dim takes indices modulo the dim's size (``-4`` and
    ``5`` of 3 elements are 2, any index of one element 0); jitorch raised gather's out-of-bounds error. Without a
    dim torch still refuses them (gather), and a dim of no elements with indices is torch's remainder error."""
    def program(T, x, i):
        return T.take_along_dim(x, i, 0), T.take_along_dim(x.view(1, 6), i.view(1, -1).clamp(-6, 5), 1)
    want = program(torch, torch.arange(6.0), torch.tensor([-4, 5, 3, -1, 0, 100]))
    fn = jt.compile(lambda x, i: program(jt, x, i)) if compiled else lambda x, i: program(jt, x, i)
    got = fn(jt.arange(6.0), jt.tensor([-4, 5, 3, -1, 0, 100]))
    assert [g.tolist() for g in got] == [w.tolist() for w in want]
    for T in (torch, jt):
        with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 0 with size 3"):
            T.take_along_dim(T.arange(3.0), T.tensor([3]))
        with pytest.raises(RuntimeError, match="^ZeroDivisionError$"):
            T.take_along_dim(T.zeros(0), T.tensor([1]), 0)


@pytest.mark.parametrize("row", [[1.0, NAN, NAN], [1.0, NAN, 3.0, -INF, INF, NAN, 2.0], [NAN, 2.0, 2.0, NAN, NAN, 0.0],
                                 [NAN, NAN, 1.0, 1.0], [2.0, 1.0, NAN, 1.0, 2.0, 2.0], [1.0, 1.0, 0.0, 0.0]])
def test_mode_counts_nans_one_by_one_as_torch(row):
    """Found comparing with torch (stop 35): torch's mode scans its sorted row for runs of equal values, and NaN
    equals nothing, so NaNs never make a run; jitorch counted them together (``[1, nan, nan]``: NaN, torch's 1).
    (Where NaNs lead torch's sorted row, or a row has more than 16 elements, torch's choice follows its unstable
    sort: docs/differences-from-torch.md.)"""
    got, want = jt.tensor(row).mode(), torch.tensor(row).mode()
    assert (got.values.tolist(), got.indices.item()) == (want.values.tolist(), want.indices.item())
