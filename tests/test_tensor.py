"""The Tensor itself: metadata, storage sharing, the NumPy bridge, the version
counter, the Python protocol, conversions (to/type/casts), devices, dtype
aliases and repr (expected strings are torch's output, checked interactively)."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
from tests.runtime.test_casts import assert_as_torch
from tests.support import ALL_DTYPES, FLOAT_DTYPES, LAYOUTS, assert_close, random_array, shapes, tensor_and_array, \
    to_numpy

# Metadata -------------------------------------------------------------------------------


@given(shapes(min_dims=1, max_dims=4), st.sampled_from(ALL_DTYPES), st.sampled_from(LAYOUTS))
def test_metadata_agrees_with_the_numpy_view(shape, dtype, layout):
    x, expected = tensor_and_array(random_array(shape, dtype, np.random.default_rng(0)), layout)
    view = x.numpy()
    assert x.shape == x.size() == expected.shape and isinstance(x.shape, jt.Size)
    assert x.dim() == x.ndim == len(shape) and x.numel() == expected.size == math.prod(shape)
    assert x.dtype is dtype and x.device == jt.device("cpu") and x.element_size() == dtype.itemsize
    assert x.nbytes == x.numel() * dtype.itemsize
    for d in range(-len(shape), len(shape)):
        assert x.size(d) == shape[d]
        if x.numel():
            assert x.stride(d) * dtype.itemsize == view.strides[d]
    assert x.stride() == tuple(x.stride(d) for d in range(len(shape)))
    if x.numel():
        assert x.data_ptr() == view.__array_interface__["data"][0]
        assert x.data_ptr() == x.untyped_storage().data_ptr() + x.storage_offset() * dtype.itemsize
    assert_close(x, expected)


def test_contiguity_and_offsets():
    x = jt.ones(2, 3)
    assert x.is_contiguous() and x.stride() == (3, 1) and x.storage_offset() == 0
    assert not x.t().is_contiguous() and x.t().stride() == (1, 3)
    assert jt.ones(2, 1).t().is_contiguous()  # size-1 dims may have any stride
    assert jt.ones(0, 3).t().is_contiguous()  # so may empty tensors
    row = x[1]
    assert row.storage_offset() == 3 and row.is_contiguous()
    assert x[:, 1].stride() == (3,) and not x[:, 1].is_contiguous()
    assert jt.tensor(5.0).stride() == () and jt.tensor(5.0).dim() == 0


def test_views_share_storage_and_copies_do_not():
    x = jt.arange(6.0)
    for view in (x.view(2, 3), x[1:], x.view(2, 3).t(), x.detach()):
        assert view.untyped_storage() is x.untyped_storage()
    for copy in (x.clone(), x + 0, jt.tensor(x.numpy()), x.to(jt.float64)):
        assert copy.untyped_storage() is not x.untyped_storage()
    y = x.view(2, 3)
    y[0, 0] = 10
    assert x[0].item() == 10


@pytest.mark.parametrize("call,match", [
    (lambda: jt.ones(2).size(2), r"Dimension out of range \(expected to be in range of \[-1, 0\], but got 2\)"),
    (lambda: jt.ones(2).stride(-2), r"Dimension out of range \(expected to be in range of \[-1, 0\], but got -2\)"),
    (lambda: jt.tensor(1.0).size(0), "Dimension specified as 0 but tensor has no dimensions"),
])
def test_dim_queries_raise_index_error(call, match):
    with pytest.raises(IndexError, match=match):
        call()


# The NumPy bridge -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("order", ["C", "F", "sliced"])
def test_from_numpy_shares_memory_both_ways(dtype, order):
    base = np.asarray(random_array((4, 6), dtype, np.random.default_rng(1)))
    arr = {"C": base, "F": np.asfortranarray(base), "sliced": base[1:, ::2]}[order]
    t = jt.from_numpy(arr)
    assert t.dtype is dtype and t.shape == arr.shape
    arr[0, 0] = arr[1, 1]
    assert t[0, 0].item() == t[1, 1].item()
    t.fill_(1)
    assert np.all(arr == 1)
    assert np.shares_memory(t.numpy(), arr)


@pytest.mark.parametrize("arr,exc,match", [
    (np.arange(4)[::-1], ValueError, "At least one stride in the given numpy array is negative"),
    (np.arange(4, dtype=">i4"), ValueError, "byte order different from the native byte order"),
    (np.arange(4, dtype=np.complex64), TypeError, "can't convert np.ndarray of type complex64"),
    (np.array([1 + 2j]), TypeError, "can't convert np.ndarray of type complex128"),
    ([1, 2], TypeError, r"expected np.ndarray \(got list\)"),
])
def test_from_numpy_errors(arr, exc, match):
    with pytest.raises(exc, match=match):
        jt.from_numpy(arr)


def test_numpy_shares_memory():
    t = jt.arange(4.0)
    a = t.numpy()
    a[0] = 7
    assert t[0].item() == 7
    t.add_(1)
    assert a.tolist() == [8.0, 2.0, 3.0, 4.0]
    assert np.shares_memory(np.asarray(t), a)
    assert np.asarray(t, dtype=np.int64).tolist() == [8, 2, 3, 4]
    assert jt.ones(2, dtype=jt.bfloat16).numpy().dtype == jt.bfloat16.np


@pytest.mark.parametrize("call,exc,match", [
    (lambda: jt.ones(2, requires_grad=True).numpy(), RuntimeError,
     r"Can't call numpy\(\) on Tensor that requires grad. Use tensor.detach\(\).numpy\(\) instead."),
    (lambda: jt.ones(2, device="meta").numpy(), TypeError, "can't convert meta device type tensor to numpy"),
])
def test_numpy_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# The version counter ---------------------------------------------------------------------------

IN_PLACE_WRITES = [
    ("add_", lambda x: x.add_(1)),
    ("copy_", lambda x: x.copy_(jt.zeros(3))),
    ("fill_", lambda x: x.fill_(2)),
    ("zero_", lambda x: x.zero_()),
    ("setitem", lambda x: x.__setitem__(0, 5.0)),
    ("out=", lambda x: jt.add(jt.ones(3), 1, out=x)),
    ("iadd", lambda x: x.__iadd__(1)),
    ("uniform_", lambda x: x.uniform_()),
]


@pytest.mark.parametrize("write", [w for _, w in IN_PLACE_WRITES], ids=[n for n, _ in IN_PLACE_WRITES])
def test_every_in_place_write_bumps_the_version(write):
    x = jt.ones(3)
    view = x[1:]
    before = x._version
    write(x)
    assert x._version == before + 1
    assert view._version == x._version  # views share their base's counter


def test_reads_and_views_do_not_bump_the_version():
    x = jt.ones(3)
    x + 1, x.view(3, 1), x.numpy(), x.tolist(), repr(x)
    assert x._version == 0


# The Python protocol -------------------------------------------------------------------------

def test_len_and_iteration():
    x = jt.arange(6).view(3, 2)
    assert len(x) == 3
    rows = list(x)
    assert [r.tolist() for r in rows] == [[0, 1], [2, 3], [4, 5]]
    assert [v.item() for v in jt.tensor([1.5, 2.5])] == [1.5, 2.5]
    assert len(jt.zeros(0, 4)) == 0 and list(jt.zeros(0, 4)) == []


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_scalar_conversions(dtype):
    t = jt.tensor([[1]], dtype=dtype)
    assert int(t) == 1 and float(t) == 1.0 and bool(t) is True
    assert t.item() == 1 and type(t.item()) is (float if dtype.is_floating_point else bool if dtype is jt.bool
                                                else int)
    assert bool(jt.zeros((), dtype=dtype)) is False
    if not dtype.is_floating_point:
        assert [10, 20, 30][jt.tensor([1], dtype=dtype)] == 20


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_item_of_a_cached_array_gives_torchs_value_and_tells_the_value_watchers(dtype):
    """``item()`` reads a one-element tensor's cached array at once, unless a value watcher (a tracer) listens."""
    value = 0.1 if dtype.is_floating_point else True if dtype is jt.bool else 3
    t, want = jt.tensor([[value]], dtype=dtype), torch.tensor([[value]], dtype=getattr(torch, str(dtype).split(".")[1]))
    t._array()
    assert t.item() == want.item() and type(t.item()) is type(want.item())

    class Watcher:
        read = []

        def values_read(self, tensor):
            self.read.append(tensor)

    from jitorch.tensor import VALUE_WATCHERS
    VALUE_WATCHERS.append(Watcher())
    try:
        assert t.item() == want.item() and Watcher.read == [t]
    finally:
        VALUE_WATCHERS.pop()


def test_scalar_conversion_values():
    assert int(jt.tensor(2.7)) == 2 and int(jt.tensor(-2.7)) == -2
    assert float(jt.tensor(True)) == 1.0
    assert jt.tensor(1.5, dtype=jt.bfloat16).item() == 1.5
    assert jt.tensor(0.1).item() == np.float32(0.1).item()
    assert math.isnan(jt.tensor(math.nan).item())


@pytest.mark.parametrize("call,exc,match", [
    (lambda: jt.ones(2).item(), RuntimeError, "a Tensor with 2 elements cannot be converted to Scalar"),
    (lambda: jt.ones(0).item(), RuntimeError, "a Tensor with 0 elements cannot be converted to Scalar"),
    (lambda: bool(jt.ones(2)), RuntimeError, "Boolean value of Tensor with more than one value is ambiguous"),
    (lambda: bool(jt.ones(0)), RuntimeError, "Boolean value of Tensor with no values is ambiguous"),
    (lambda: int(jt.ones(2)), ValueError, "only one element tensors can be converted to Python scalars"),
    (lambda: float(jt.ones(0)), ValueError, "only one element tensors can be converted to Python scalars"),
    (lambda: [1, 2][jt.tensor(1.0)], TypeError,
     "only integer tensors of a single element can be converted to an index"),
    (lambda: [1, 2][jt.tensor([0, 1])], TypeError, "only integer tensors of a single element"),
    (lambda: len(jt.tensor(1.0)), TypeError, "len\\(\\) of a 0-d tensor"),
    (lambda: iter(jt.tensor(1.0)), TypeError, "iteration over a 0-d tensor"),
    (lambda: format(jt.ones(2), ".2f"), TypeError, "unsupported format string passed to Tensor.__format__"),
])
def test_protocol_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@given(shapes(max_dims=3), st.sampled_from(ALL_DTYPES))
def test_tolist_matches_numpy(shape, dtype):
    arr = np.asarray(random_array(shape, dtype, np.random.default_rng(2)))
    t = jt.tensor(arr, dtype=dtype)
    expected = arr.astype(np.float32).tolist() if dtype in (jt.float16, jt.bfloat16) else arr.tolist()
    assert t.tolist() == expected


def test_hash_is_identity_and_format():
    a, b = jt.ones(1), jt.ones(1)
    assert hash(a) == hash(a) and len({a, b}) == 2 and {a: 1}[a] == 1
    assert f"{jt.tensor(2.5):.2f}" == "2.50" and f"{jt.tensor(3)}" == "3"
    assert f"{jt.ones(2)}" == "tensor([1., 1.])"


# Conversions: to, type and the named casts ----------------------------------------------------

CAST_VALUES = np.array([-1.5, 300.0, -300.0, 1e10, math.nan, math.inf, -2.7, 255.9, 127.5, -128.9, 0.0, -0.0])


@pytest.mark.parametrize("src", FLOAT_DTYPES)
@pytest.mark.parametrize("dst", ALL_DTYPES)
def test_casts_follow_c_conversions(src, dst):
    """Floats truncate toward zero into integers, out-of-range values wrap as C
    casts do on x86 (torch's results, the oracle), anything non-zero becomes True."""
    x = jt.tensor(CAST_VALUES, dtype=src)
    r = x.to(dst)
    assert r.dtype is dst and r.shape == x.shape
    assert_as_torch(r.numpy(), x.numpy(), dst)


@given(shapes(max_dims=3), st.sampled_from(ALL_DTYPES), st.sampled_from(ALL_DTYPES), st.sampled_from(LAYOUTS))
def test_to_over_dtypes_and_layouts(shape, src, dst, layout):
    x, expected = tensor_and_array(random_array(shape, src, np.random.default_rng(3)), layout)
    r = x.to(dst)
    assert r.dtype is dst and (r is x) == (src is dst)
    if src is not dst:
        assert r.untyped_storage() is not x.untyped_storage()
    assert_as_torch(r.numpy(), expected, dst)


def test_casts_keep_dense_layouts_like_torch():
    assert jt.ones(2, 3).t().to(jt.float64).stride() == (1, 3)  # torch's preserve_format
    assert jt.ones(2, 3).t()[::2].double().stride() == (1, 2)
    assert jt.ones(4, 6)[::2, ::3].double().stride() == (2, 1)


def test_truncation_and_bool_casts():
    assert jt.tensor([1.7, -1.7, 2.5, -2.5]).int().tolist() == [1, -1, 2, -2]
    assert jt.tensor([0.5, 0.0, -0.0, math.nan]).bool().tolist() == [True, False, False, True]
    assert jt.tensor([70000, -1]).short().tolist() == [4464, -1]
    assert jt.tensor([True, False]).float().tolist() == [1.0, 0.0]
    assert jt.tensor([1.0039, 1.0078125, 3.14159]).bfloat16().float().tolist() == [1.0, 1.0078125, 3.140625]


def test_to_returns_self_unless_something_changes():
    x = jt.ones(2)
    assert x.to("cpu") is x and x.to(jt.float32) is x and x.to(x) is x and x.to(None) is x
    assert x.to(jt.float32, copy=True) is not x and x.to(jt.float32, False, True) is not x
    other = jt.zeros(1, dtype=jt.int8)
    assert x.to(other).dtype is jt.int8
    assert x.to("cpu", jt.int32).dtype is jt.int32 and x.to(jt.device("cpu"), jt.int16).dtype is jt.int16
    assert x.to(device="cpu", dtype=jt.float64).dtype is jt.float64
    assert x.to(dtype=float).dtype is jt.float64 and x.to(dtype=int).dtype is jt.int64
    assert x.type_as(other).dtype is jt.int8
    m = x.to("meta")
    assert m.device == jt.device("meta") and m.to(jt.int64).device == jt.device("meta")


@pytest.mark.parametrize("method,dtype", [
    ("float", jt.float32), ("double", jt.float64), ("half", jt.float16), ("bfloat16", jt.bfloat16),
    ("int", jt.int32), ("long", jt.int64), ("short", jt.int16), ("char", jt.int8), ("byte", jt.uint8),
    ("bool", jt.bool),
])
def test_named_casts(method, dtype):
    assert getattr(jt.ones(2, dtype=jt.float64), method)().dtype is dtype


@pytest.mark.parametrize("dtype,name", [
    (jt.float32, "jitorch.FloatTensor"), (jt.float64, "jitorch.DoubleTensor"), (jt.float16, "jitorch.HalfTensor"),
    (jt.bfloat16, "jitorch.BFloat16Tensor"), (jt.int64, "jitorch.LongTensor"), (jt.int32, "jitorch.IntTensor"),
    (jt.int16, "jitorch.ShortTensor"), (jt.int8, "jitorch.CharTensor"), (jt.uint8, "jitorch.ByteTensor"),
    (jt.bool, "jitorch.BoolTensor"),
])
def test_type_names(dtype, name):
    x = jt.zeros(1, dtype=dtype)
    assert x.type() == name
    assert jt.ones(1).type(name).dtype is dtype
    assert jt.ones(1).type(name.replace("jitorch", "torch")).dtype is dtype
    assert jt.ones(1).type(dtype).dtype is dtype


@pytest.mark.parametrize("call,exc,match", [
    (lambda: jt.ones(2).to("cuda"), RuntimeError, "CUDA is not available"),
    (lambda: jt.ones(2).cuda(), RuntimeError, "CUDA is not available"),
    (lambda: jt.ones(2, device="meta").to("cpu"), NotImplementedError, "Cannot copy out of meta tensor; no data!"),
    (lambda: jt.ones(2).to("blah"), RuntimeError, "Expected one of cpu, cuda, meta device type at start of device "
                                                  "string: blah"),
    (lambda: jt.ones(2).to(np.float64), TypeError, "to\\(\\) received an invalid combination of arguments"),
    (lambda: jt.ones(2).to(other=jt.ones(1)), TypeError, "unexpected keyword argument 'other'"),
])
def test_conversion_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# Devices and dtypes ---------------------------------------------------------------------------

def test_device_parsing_and_comparison():
    d = jt.device("cuda:1")
    assert d.type == "cuda" and d.index == 1 and str(d) == "cuda:1"
    assert repr(d) == "device(type='cuda', index=1)" and repr(jt.device("cpu")) == "device(type='cpu')"
    assert jt.device("cuda", 1) == d and jt.device(d) == d and jt.device(1) == d
    assert jt.device("cuda") != d and jt.device("cuda").index is None
    assert hash(jt.device("cuda", 1)) == hash(d) and len({d, jt.device("cuda:1"), jt.device("cpu")}) == 2
    assert jt.ones(1).device == jt.device("cpu") and jt.ones(1).device.type == "cpu"
    assert jt.ones(1, device="meta").is_meta and jt.ones(1).is_cpu and not jt.ones(1).is_cuda


@pytest.mark.parametrize("args,exc,match", [
    (("blah",), RuntimeError, "Expected one of cpu, cuda, meta device type at start of device string: blah"),
    (("cuda:x",), RuntimeError, "Invalid device string: 'cuda:x'"),
    (("cuda:-1",), RuntimeError, "Invalid device string: 'cuda:-1'"),
    (("cuda", -1), RuntimeError, "Device index must not be negative"),
    (("cuda:1", 1), RuntimeError, "type \\(string\\) must not include an index because index was passed explicitly"),
    ((3.5,), TypeError, "device\\(\\) expected a string or int, got float"),
])
def test_device_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        jt.device(*args)


def test_dtype_aliases_and_properties():
    assert jt.float is jt.float32 and jt.double is jt.float64 and jt.half is jt.float16
    assert jt.long is jt.int64 and jt.int is jt.int32 and jt.short is jt.int16
    assert repr(jt.float32) == "jitorch.float32" and str(jt.bool) == "jitorch.bool"
    assert jt.bfloat16.itemsize == 2 and jt.float64.is_floating_point and not jt.int8.is_floating_point
    assert jt.int8.is_signed and not jt.uint8.is_signed
    assert jt.ones(1, dtype=jt.float16).is_floating_point() and jt.ones(1, dtype=jt.int8).is_signed()


# repr ----------------------------------------------------------------------------------------

REPRS = [
    ("jt.tensor([1., 2., 3.])", "tensor([1., 2., 3.])"),
    ("jt.tensor([0.1, 2.5])", "tensor([0.1000, 2.5000])"),
    ("jt.tensor(3.5)", "tensor(3.5000)"),
    ("jt.tensor(3)", "tensor(3)"),
    ("jt.tensor(True)", "tensor(True)"),
    ("jt.tensor(-0.)", "tensor(-0.)"),
    ("jt.tensor([True, False])", "tensor([ True, False])"),
    ("jt.tensor([1, -20, 300])", "tensor([  1, -20, 300])"),
    ("jt.tensor([1e-5, 1.])", "tensor([1.0000e-05, 1.0000e+00])"),
    ("jt.tensor([1e9, 1.])", "tensor([1.0000e+09, 1.0000e+00])"),
    ("jt.tensor([1234., 1.])", "tensor([1.2340e+03, 1.0000e+00])"),
    ("jt.tensor([123456789., 1.])", "tensor([1.2346e+08, 1.0000e+00])"),
    ("jt.tensor([-1e-3, 1e3])", "tensor([-1.0000e-03,  1.0000e+03])"),
    ("jt.tensor([float('nan'), 1.5])", "tensor([   nan, 1.5000])"),
    ("jt.tensor([float('inf'), -float('inf'), 0.])", "tensor([inf, -inf, 0.])"),
    ("jt.tensor([[1., 2.], [3., 4.]])", "tensor([[1., 2.],\n        [3., 4.]])"),
    ("jt.tensor([[[1, 2], [3, 4]], [[5, 6], [7, 8]]])",
     "tensor([[[1, 2],\n         [3, 4]],\n\n        [[5, 6],\n         [7, 8]]])"),
    ("jt.tensor([[True, False], [False, False]])", "tensor([[ True, False],\n        [False, False]])"),
    ("jt.arange(2000)", "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])"),
    ("jt.arange(2000.)",
     "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n        1.9990e+03])"),
    ("jt.arange(2000).view(40, 50)",
     "tensor([[   0,    1,    2,  ...,   47,   48,   49],\n        [  50,   51,   52,  ...,   97,   98,   99],\n"
     "        [ 100,  101,  102,  ...,  147,  148,  149],\n        ...,\n"
     "        [1850, 1851, 1852,  ..., 1897, 1898, 1899],\n        [1900, 1901, 1902,  ..., 1947, 1948, 1949],\n"
     "        [1950, 1951, 1952,  ..., 1997, 1998, 1999]])"),
    ("jt.arange(30.) / 7",
     "tensor([0.0000, 0.1429, 0.2857, 0.4286, 0.5714, 0.7143, 0.8571, 1.0000, 1.1429,\n"
     "        1.2857, 1.4286, 1.5714, 1.7143, 1.8571, 2.0000, 2.1429, 2.2857, 2.4286,\n"
     "        2.5714, 2.7143, 2.8571, 3.0000, 3.1429, 3.2857, 3.4286, 3.5714, 3.7143,\n"
     "        3.8571, 4.0000, 4.1429])"),
    ("jt.arange(24, dtype=jt.int16).view(2, 12) * 1000",
     "tensor([[    0,  1000,  2000,  3000,  4000,  5000,  6000,  7000,  8000,  9000,\n         10000, 11000],\n"
     "        [12000, 13000, 14000, 15000, 16000, 17000, 18000, 19000, 20000, 21000,\n         22000, 23000]], "
     "dtype=jitorch.int16)"),
    ("jt.arange(9., dtype=jt.float64) / 7",
     "tensor([0.0000, 0.1429, 0.2857, 0.4286, 0.5714, 0.7143, 0.8571, 1.0000, 1.1429],\n"
     "       dtype=jitorch.float64)"),
    ("jt.zeros(0, 3)", "tensor([], size=(0, 3))"),
    ("jt.zeros(0)", "tensor([])"),
    ("jt.zeros(0, dtype=jt.int64)", "tensor([], dtype=jitorch.int64)"),
    ("jt.zeros(2, 0, 3, dtype=jt.int32)", "tensor([], size=(2, 0, 3), dtype=jitorch.int32)"),
    ("jt.zeros(3, dtype=jt.int32)", "tensor([0, 0, 0], dtype=jitorch.int32)"),
    ("jt.tensor([1, 2], dtype=jt.uint8)", "tensor([1, 2], dtype=jitorch.uint8)"),
    ("jt.zeros(2, dtype=jt.float64)", "tensor([0., 0.], dtype=jitorch.float64)"),
    ("jt.tensor([0.5, 1.5], dtype=jt.float16)", "tensor([0.5000, 1.5000], dtype=jitorch.float16)"),
    ("jt.tensor(2.5, dtype=jt.bfloat16)", "tensor(2.5000, dtype=jitorch.bfloat16)"),
    ("jt.ones(2, 3, device='meta')", "tensor(..., device='meta', size=(2, 3))"),
    ("jt.ones(2, device='meta', dtype=jt.int64)", "tensor(..., device='meta', size=(2,), dtype=jitorch.int64)"),
    ("jt.ones(2, requires_grad=True)", "tensor([1., 1.], requires_grad=True)"),
    ("jt.ones(2, dtype=jt.float16, requires_grad=True)", "tensor([1., 1.], dtype=jitorch.float16, requires_grad=True)"),
]


@pytest.mark.parametrize("expr,expected", REPRS)
def test_repr_matches_torch(expr, expected):
    assert repr(eval(expr)) == expected
    assert str(eval(expr)) == expected


def test_repr_of_strided_views_reads_their_elements():
    assert repr(jt.arange(6).view(2, 3).t()) == "tensor([[0, 3],\n        [1, 4],\n        [2, 5]])"
    assert repr(jt.arange(6.0)[::2]) == "tensor([0., 2., 4.])"


def test_repr_names_other_default_dtypes():
    jt.set_default_dtype(jt.float64)
    try:
        assert repr(jt.tensor([1.5])) == "tensor([1.5000])"
        assert repr(jt.tensor([1.5], dtype=jt.float32)) == "tensor([1.5000], dtype=jitorch.float32)"
    finally:
        jt.set_default_dtype(jt.float32)


PRINT_OPTIONS = [
    (dict(precision=2), "tensor([[0.00, 0.33, 0.67, 1.00],\n        [1.33, 1.67, 2.00, 2.33],\n"
                        "        [2.67, 3.00, 3.33, 3.67]])", "tensor([1.00e-05, 1.00e+00, 2.00e+00])"),
    (dict(sci_mode=False), "tensor([[0.0000, 0.3333, 0.6667, 1.0000],\n        [1.3333, 1.6667, 2.0000, 2.3333],\n"
                           "        [2.6667, 3.0000, 3.3333, 3.6667]])", "tensor([0.0000, 1.0000, 2.0000])"),
    (dict(sci_mode=True), "tensor([[0.0000e+00, 3.3333e-01, 6.6667e-01, 1.0000e+00],\n"
                          "        [1.3333e+00, 1.6667e+00, 2.0000e+00, 2.3333e+00],\n"
                          "        [2.6667e+00, 3.0000e+00, 3.3333e+00, 3.6667e+00]])",
     "tensor([1.0000e-05, 1.0000e+00, 2.0000e+00])"),
    (dict(threshold=5, edgeitems=1), "tensor([[0.0000,  ..., 1.0000],\n        ...,\n        [2.6667,  ..., 3.6667]])",
     "tensor([1.0000e-05, 1.0000e+00, 2.0000e+00])"),
    (dict(edgeitems=0, threshold=3), "tensor([...], size=(3, 4))",
     "tensor([1.0000e-05, 1.0000e+00, 2.0000e+00], size=(3,))"),
    (dict(linewidth=30), "tensor([[0.0000, 0.3333,\n         0.6667, 1.0000],\n        [1.3333, 1.6667,\n"
                         "         2.0000, 2.3333],\n        [2.6667, 3.0000,\n         3.3333, 3.6667]])",
     "tensor([1.0000e-05,\n        1.0000e+00,\n        2.0000e+00])"),
    (dict(profile="short"), "tensor([[0.00, 0.33, 0.67, 1.00],\n        [1.33, 1.67, 2.00, 2.33],\n"
                            "        [2.67, 3.00, 3.33, 3.67]])", "tensor([1.00e-05, 1.00e+00, 2.00e+00])"),
]


@pytest.mark.parametrize("options,matrix,vector", PRINT_OPTIONS)
def test_set_printoptions(options, matrix, vector):
    jt.set_printoptions(**options)
    try:
        assert repr(jt.arange(12.0).view(3, 4) / 3) == matrix
        assert repr(jt.tensor([1e-5, 1.0, 2.0])) == vector
    finally:
        jt.set_printoptions(profile="default")
    assert repr(jt.tensor([0.1])) == "tensor([0.1000])"


def test_set_printoptions_rejects_unknown_profiles():
    with pytest.raises(ValueError, match="profile must be one of"):
        jt.set_printoptions(profile="tiny")


def test_namespace_detach_and_get_device_are_the_tensor_methods_as_torchs():
    x = jt.ones(3, requires_grad=True) * 2
    d = jt.detach(x)
    assert not d.requires_grad and d.data_ptr() == x.data_ptr() and d.const_data_ptr() == x.data_ptr()
    assert jt.get_device(x) == -1 == torch.get_device(torch.ones(1))
    y = x.clone()
    assert jt.detach_(y) is y and y.grad_fn is None and not y.requires_grad


# resize_, resize_as_, set_ (against torch) ------------------------------------------------------------------

def test_resize_keeps_the_elements_in_place_and_grows_into_new_memory():
    for lib in (jt, torch):
        x = lib.arange(6.0)
        assert x.resize_(2, 2) is x and x.tolist() == [[0.0, 1.0], [2.0, 3.0]] and x.stride() == (2, 1)
        x.resize_((3, 3))
        assert x[:2].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
        view = lib.arange(6.0)[1:]
        assert view.resize_(2, 2).tolist() == [[1.0, 2.0], [3.0, 4.0]] and view.storage_offset() == 1
        assert lib.arange(6.0).resize_as_(lib.ones(3, 1)).shape == (3, 1)
        with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
            lib.ones(2, requires_grad=True).resize_(3)


def test_set_shares_a_tensors_or_storages_memory_as_torch():
    for lib in (jt, torch):
        b = lib.arange(6.0).view(2, 3)
        a = lib.zeros(3)
        assert a.set_(b) is a and a.shape == (2, 3) and a.data_ptr() == b.data_ptr() and a.stride() == (3, 1)
        assert lib.zeros(3).set_(b, 1, (2, 2), (1, 2)).tolist() == [[1.0, 3.0], [2.0, 4.0]]
        assert lib.zeros(3).set_(b.untyped_storage(), 1, (2, 2)).tolist() == [[1.0, 2.0], [3.0, 4.0]]
        empty = lib.zeros(3).set_()
        assert empty.shape == (0,) and empty.tolist() == []
        reread = lib.zeros(1, dtype=lib.int64).set_(b.untyped_storage())
        assert reread.tolist() == [4575657221408423936, 4629700418010611712, 4656722015783223296]
        with pytest.raises(RuntimeError, match="Could not set tensor of type long int to a tensor of type float"):
            lib.zeros(3).set_(lib.arange(3))


def test_set_refuses_a_geometry_beyond_the_storage():
    with pytest.raises(RuntimeError, match="out of bounds for storage of size 24"):
        jt.zeros(1).set_(jt.ones(6), 2, (3, 3))
