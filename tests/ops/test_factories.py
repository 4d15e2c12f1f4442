"""jitorch/ops/factories.py against torch: empty_strided, scalar_tensor, asarray (aliasing and copies), the
deprecated range, Tensor.new and new_empty_strided."""

import warnings

import numpy as np
import pytest
import torch

import jitorch as jt


def same_dtype(ours, theirs):
    return str(ours.dtype)[8:] == str(theirs.dtype)[6:]


@pytest.mark.parametrize("size, stride", [((2, 3), (1, 2)), ((2, 0), (1, 2)), ((), ()), ((4,), (3,))])
def test_empty_strided_owns_memory_of_torchs_extent(size, stride):
    ours, theirs = jt.empty_strided(size, stride), torch.empty_strided(size, stride)
    assert ours.stride() == theirs.stride() and ours.shape == theirs.shape and ours._base is None
    assert ours.untyped_storage().nbytes() == theirs.untyped_storage().nbytes()
    assert ours.fill_(2).tolist() == theirs.fill_(2).tolist()
    assert jt.ones(1, dtype=jt.int16).new_empty_strided(size, stride).dtype is jt.int16


def test_empty_strided_refuses_mismatched_ranks_as_torch():
    with pytest.raises(RuntimeError, match=r"dimensionality of sizes \(2\) must match dimensionality of strides "
                                           r"\(1\)"):
        jt.empty_strided((2, 3), (1,))


@pytest.mark.parametrize("value, dtype", [(3, None), (True, None), (2.5, None), (2, "int64")])
def test_scalar_tensor(value, dtype):
    ours = jt.scalar_tensor(value, dtype=dtype and getattr(jt, dtype))
    theirs = torch.scalar_tensor(value, dtype=dtype and getattr(torch, dtype))
    assert ours.shape == () and ours.item() == theirs.item() and same_dtype(ours, theirs)


def test_asarray_shares_a_tensors_memory_unless_it_must_copy():
    x = jt.arange(6.0)
    assert jt.asarray(x) is x
    assert jt.asarray(x, copy=True).data_ptr() != x.data_ptr()
    assert jt.asarray(x, dtype=jt.float64).dtype is jt.float64
    with pytest.raises(ValueError, match="can't alias tensor with dtype 'Float' into dtype 'Double'."):
        jt.asarray(x, dtype=jt.float64, copy=False)
    with pytest.raises(ValueError) as theirs:
        torch.asarray(torch.arange(6.0), dtype=torch.float64, copy=False)
    assert str(theirs.value) == "can't alias tensor with dtype 'Float' into dtype 'Double'."


def test_asarray_shares_a_numpy_arrays_memory_and_copies_python_data():
    n = np.arange(3.0)
    shared = jt.asarray(n)
    n[0] = 7
    assert shared.dtype is jt.float64 and shared.tolist() == [7.0, 1.0, 2.0]
    assert jt.asarray(n, copy=True).data_ptr() != n.__array_interface__["data"][0]
    for data in ([1, 2.5], 3, [[True], [False]]):
        ours, theirs = jt.asarray(data), torch.asarray(data)
        assert ours.tolist() == theirs.tolist() and same_dtype(ours, theirs)


def test_asarray_requires_grad_marks_the_tensor_itself_as_torch():
    x, t = jt.ones(2), torch.ones(2)
    assert jt.asarray(x, requires_grad=True) is x and x.requires_grad
    assert torch.asarray(t, requires_grad=True) is t and t.requires_grad


@pytest.mark.parametrize("args, kwargs", [((1, 4), {}), ((0, 1, 0.3), {}), ((1, 4), {"dtype": "int64"}),
                                          ((5, 1, -2), {}), ((0.1, 0.9, 0.1), {"dtype": "float64"})])
def test_range_includes_its_end_and_warns_as_torch(args, kwargs):
    dtype = kwargs.get("dtype")
    with pytest.warns(UserWarning, match="torch.range is deprecated"):
        ours = jt.range(*args, dtype=dtype and getattr(jt, dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.range(*args, dtype=dtype and getattr(torch, dtype))
    assert ours.tolist() == theirs.tolist() and same_dtype(ours, theirs)


@pytest.mark.parametrize("args, message", [((0, 1, 0), "step must be nonzero"),
                                           ((0, 1, -1), "upper bound and lower bound inconsistent with step sign")])
def test_range_errors(args, message):
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match=message):
        jt.range(*args)


def test_legacy_new_forms_as_torch():
    x, t = jt.arange(6.0).view(2, 3), torch.arange(6.0).view(2, 3)
    for args in [(), (2, 3), ((2, 3),), ([1, 2],), ("size", [2, 3])]:
        ours, theirs = (x.new(jt.Size(args[1])), t.new(torch.Size(args[1]))) if args[:1] == ("size",) else \
            (x.new(*args), t.new(*args))
        assert ours.shape == theirs.shape and same_dtype(ours, theirs)
    assert x.new([1, 2]).tolist() == [1.0, 2.0]
    alias = x.new(x)
    assert alias is not x and alias.data_ptr() == x.data_ptr()
    with pytest.raises(TypeError, match=r"expected jitorch.FloatTensor \(got jitorch.LongTensor\)"):
        x.new(jt.tensor([1, 2]))


def test_range_needs_an_end_as_torch():
    with pytest.raises(TypeError, match="end"):
        torch.range(3)
    with pytest.raises(TypeError, match="end"):
        jt.range(3)
