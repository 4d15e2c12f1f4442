"""from_numpy / as_tensor / tensor of NumPy arrays against torch: strides (size-1 and empty dims' included),
is_contiguous, memory sharing, values, and torch's errors for arrays it cannot wrap."""

import numpy as np
import pytest
import torch

import jitorch as jt

_A = np.arange(24, dtype=np.float32)

ARRAYS = {  # name -> a NumPy array torch wraps with its own strides
    "C": lambda: _A.reshape(2, 3, 4).copy(),
    "Fortran": lambda: np.asfortranarray(_A.reshape(2, 3, 4)),
    "sliced": lambda: _A.reshape(4, 6)[:, ::2],
    "offset slice": lambda: _A.reshape(4, 6)[1:3, 1:4],
    "row transposed to a column": lambda: np.ones((1, 5), np.float32).T,
    "Fortran column": lambda: np.asfortranarray(_A[:5].reshape(5, 1)),
    "inserted size-1 dim of a slice": lambda: _A.reshape(4, 1, 6)[:, :, ::2],
    "one sliced row": lambda: _A.reshape(4, 6)[:1, ::2],
    "one element of a stride-3 slice": lambda: _A[::3][:1],
    "empty": lambda: np.zeros((0, 3), np.float32),
    "empty transposed": lambda: np.zeros((3, 0), np.float32).T,
    "empty slice": lambda: _A.reshape(4, 6)[:, 6:],
    "empty 3-d": lambda: np.empty((2, 0, 3), np.float32),
    "broadcast": lambda: np.broadcast_to(_A[:3], (4, 3)),
    "broadcast size-1 dim": lambda: np.broadcast_to(_A[:3].reshape(1, 3), (1, 3)),
    "stride-0 size-1 dim": lambda: np.lib.stride_tricks.as_strided(_A, (1, 3), (0, 4)),
    "0-d": lambda: np.array(3.0, np.float32),
    "bool column of a row": lambda: np.array([[True, False]]).T,
    "int64 Fortran rows": lambda: np.asfortranarray(np.arange(24).reshape(6, 4))[::2],
}


def _describe(T, convert, arr, **kwargs):
    t = getattr(T, convert)(arr, **kwargs)
    shares = isinstance(arr, np.ndarray) and bool(arr.size) and t.data_ptr() == arr.ctypes.data
    return t.shape, t.stride(), t.storage_offset(), t.is_contiguous(), shares, t.tolist()


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
@pytest.mark.parametrize("convert", ["from_numpy", "as_tensor", "tensor"])
@pytest.mark.parametrize("name", ARRAYS)
def test_numpy_conversions_keep_numpys_strides_as_torch(name, convert):
    """from_numpy of a C-contiguous array with a size-1 dim (``np.ones((1, 5)).T``: NumPy strides (4, 20)) gave
    contiguous strides (1, 1) where torch keeps NumPy's (1, 5); an empty array got contiguous strides where
    torch keeps NumPy's ((0, 0) for ``np.zeros((0, 3))``, (6, 1) for ``a.reshape(4, 6)[:, 6:]``), and
    called itself non-contiguous. as_tensor shares as from_numpy; tensor copies with the same strides."""
    assert _describe(jt, convert, ARRAYS[name]()) == _describe(torch, convert, ARRAYS[name]())


@pytest.mark.parametrize("convert", ["as_tensor", "tensor"])
@pytest.mark.parametrize("name", ["Fortran", "row transposed to a column", "sliced", "empty slice"])
def test_numpy_conversions_to_another_dtype_keep_the_layout_as_torch(name, convert):
    """A converted copy is torch's preserve_format copy of the wrapped array."""
    assert (_describe(jt, convert, ARRAYS[name](), dtype=jt.float64)
            == _describe(torch, convert, ARRAYS[name](), dtype=torch.float64))


def test_from_numpy_of_a_size1_dim_shares_memory_both_ways():
    """The wrapping with NumPy's strides still shares the array's memory."""
    arr = np.zeros((1, 5), np.float32).T
    t = jt.from_numpy(arr)
    t[2, 0] = 7.0
    arr[4, 0] = 9.0
    assert arr[:, 0].tolist() == t[:, 0].tolist() == [0, 0, 7, 0, 9] and t.stride() == (1, 5)


def test_copy_into_a_view_of_a_from_numpy_size1_column_as_torch():
    """The overlap check that saw seed 7952488's layout through tensor() sees from_numpy's: a reshape of the
    [1, 5] wrapping of ``np.ones((5, 1)).T``-like data written with itself."""
    results = []
    for T in (torch, jt):
        x = T.from_numpy(np.ascontiguousarray(np.arange(5, dtype=np.int32).reshape(1, 5).T)).permute(1, 0)
        v = x.reshape(1, 5)
        v[0:] = x
        results.append((x.stride(), v.stride(), x.tolist()))
    assert results[1] == results[0]


_I = np.arange(10, dtype=np.int32)
UNWRAPPABLE = {  # name -> an array torch.from_numpy refuses (tensor and as_tensor wrap it first, so refuse too)
    "reversed": lambda: _A[::-1],
    "reversed rows of a slice": lambda: _A.reshape(4, 6)[::-1, ::2],
    "reversed size-1 dim": lambda: _A.reshape(1, 24)[::-1],
    "reversed one element": lambda: _A[:1][::-1],
    "big-endian": lambda: np.arange(6, dtype=">f4"),
    "stride not whole elements": lambda: np.lib.stride_tricks.as_strided(_I, (3,), (6,)),
    "negative stride not whole elements": lambda: np.lib.stride_tricks.as_strided(_I[9:], (3,), (-6,)),
}


def _error(T, convert, arr, **kwargs):
    with pytest.raises(Exception) as info:
        getattr(T, convert)(arr, **kwargs)
    return type(info.value), str(info.value)


@pytest.mark.parametrize("convert,to_float64", [("from_numpy", False), ("as_tensor", False), ("tensor", False),
                                                ("as_tensor", True), ("tensor", True)])
@pytest.mark.parametrize("name", UNWRAPPABLE)
def test_tensor_and_as_tensor_of_a_negative_stride_array_raise_as_torch(name, convert, to_float64):
    """jitorch.tensor and as_tensor copied an array with a negative stride (``a[::-1]``), and one with strides
    not whole elements (reading bytes across elements: [0, 131072, 3] from int32 0..9 at byte stride 6), and
    converted a big-endian one; torch wraps the array as from_numpy first and raises its ValueError, in its
    order (byte order, whole elements, then sign)."""
    kwargs = {"dtype": "float64"} if to_float64 else {}
    expected = _error(torch, convert, UNWRAPPABLE[name](), **{k: getattr(torch, v) for k, v in kwargs.items()})
    assert expected[0] is ValueError
    assert _error(jt, convert, UNWRAPPABLE[name](), **{k: getattr(jt, v) for k, v in kwargs.items()}) == expected


@pytest.mark.filterwarnings("ignore:Creating a tensor from a list of numpy.ndarrays")
@pytest.mark.parametrize("convert", ["as_tensor", "tensor"])
def test_nested_negative_stride_arrays_are_values_as_torch(convert):
    """Inside a list an array is a sequence of values (torch does not wrap it), so its strides do not matter."""
    data = [_A[:3][::-1], _A[:3]]
    assert _describe(jt, convert, data) == _describe(torch, convert, data)
