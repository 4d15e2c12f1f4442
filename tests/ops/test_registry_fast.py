"""The registry's eager shortcuts: view ops made without the general path, argument conversion of
int lists, and in-place view ops that still retarget their tensor."""

import numpy as np
import pytest

import jitorch as jt


def test_a_view_shares_storage_and_records_its_node_in_grad_mode():
    x = jt.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    y = x.transpose(-2, -1)
    assert y._base is x and y.data_ptr() == x.data_ptr() and y.stride() == (1, 3)
    assert y.grad_fn.name() == "TransposeBackward0"
    (y * jt.tensor([[1.0, 2.0]])).sum().backward()
    assert x.grad.tolist() == [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]


def test_a_view_under_no_grad_has_no_history():
    x = jt.ones(2, 3, requires_grad=True)
    with jt.no_grad():
        y = x.view(3, 2)
    assert y.grad_fn is None and not y.requires_grad


def test_views_of_several_outputs_record_one_node():
    x = jt.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    a, b = x.split(2)
    assert a.grad_fn is b.grad_fn and b.grad_fn.name() == "SplitBackward0"


def test_an_in_place_view_op_retargets_its_tensor():
    x = jt.ones(2, 3)
    assert x.transpose_(0, 1) is x and x.shape == (3, 2)


def test_view_sizes_accept_ints_of_other_kinds_and_refuse_bools():
    x = jt.ones(6)
    assert x.view(np.int64(2), 3).shape == (2, 3) and x.view([3, 2]).shape == (3, 2)
    with pytest.raises(TypeError, match=r"view\(\): argument 'size' \(position 2\) must be int, not bool"):
        x.view((True, 6))


def test_a_bad_view_raises_torchs_error():
    with pytest.raises(RuntimeError, match="view size is not compatible with input tensor's size and stride"):
        jt.ones(2, 3).t().view(6)
