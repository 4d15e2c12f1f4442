"""The registry's eager shortcuts: view ops made without the general path, argument conversion of
int lists, in-place view ops that still retarget their tensor, and ``contiguous``'s copy."""

import numpy as np
import pytest
import torch

import jitorch as jt
from tests.support import general_path


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
    t = torch.ones(2, 3, requires_grad=True)
    with torch.no_grad():
        u = t.view(3, 2)
    # torch's view made in no_grad mode: it requires grad, as a leaf without history
    assert (y.grad_fn, y.requires_grad, y.is_leaf) == (u.grad_fn, u.requires_grad, u.is_leaf) == (None, True, True)


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


def test_contiguous_copies_a_strided_tensor_once_and_keeps_a_contiguous_one():
    x = jt.arange(24.0).reshape(2, 3, 4).transpose(0, 2)
    y = x.contiguous()
    assert y.is_contiguous() and y._base is None and y.data_ptr() != x.data_ptr()
    assert y.tolist() == torch.arange(24.0).reshape(2, 3, 4).transpose(0, 2).contiguous().tolist()
    assert y.contiguous() is y


def test_contiguous_of_a_tensor_that_requires_grad_records_its_copy_in_grad_mode_only():
    x = jt.ones(2, 3, requires_grad=True).t()
    assert x.contiguous().grad_fn is not None
    with jt.no_grad():
        y = x.contiguous()
    assert y.grad_fn is None and not y.requires_grad and y.is_contiguous()


@pytest.mark.parametrize("lib", [torch, jt], ids=["torch", "jitorch"])
def test_view_shortcuts_take_plain_ints_and_convert_the_rest_as_the_general_path(lib):
    """Plain ints and tuples of them skip the converter; other kinds, and sizes past int64, go through it."""
    x = lib.arange(6.0)
    m = x.view(2, 3)
    assert m.transpose(0, -1).stride() == (1, 3) and m.transpose(np.int64(1), 0).shape == (3, 2)
    assert m.unsqueeze(2).shape == (2, 3, 1) and m.unsqueeze(-1).stride() == (3, 1, 1) and m[-1].tolist() == [3, 4, 5]
    assert x.reshape((3, 2)).shape == (3, 2) and x.reshape(-1, 2).shape == (3, 2) and x.view(x.view(2, 3).shape).shape == (2, 3)
    assert m.t().reshape(6).tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]  # (not a view: a copy)
    with pytest.raises(IndexError, match="Dimension out of range"):
        m.transpose(0, 2)


def test_view_shortcut_of_a_tensor_that_requires_grad_records_its_node():
    x = jt.arange(6.0).requires_grad_()
    y = x.view(2, 3).transpose(0, 1)
    assert y.grad_fn.name() == "TransposeBackward0" and y._base is x
    (y * jt.arange(6.0).view(3, 2)).sum().backward()
    assert x.grad.tolist() == [0.0, 2.0, 4.0, 1.0, 3.0, 5.0]


def test_view_shortcut_leaves_sizes_past_int64_to_the_converter():
    x = jt.ones(0)
    with pytest.raises(TypeError, match="Overflow when unpacking long long"):  # (torch's message)
        x.reshape(2 ** 63, 0)
    with pytest.raises(TypeError, match="Overflow when unpacking long long"):
        x.view(-2 ** 63 - 1, 0)


# (call, whether torch raises): view ops whose geometry reads the shape tuple directly, on a (2, 1, 3) tensor,
# contiguous or transposed
_VIEW_CALLS = [
    lambda x: x.permute(2, 0, 1), lambda x: x.permute(-1, -3, 1), lambda x: x.permute((1, 0, 2)),
    lambda x: x.permute(0, 0, 1), lambda x: x.permute(0, 1), lambda x: x.permute(0, 1, 3),
    lambda x: x.squeeze(1), lambda x: x.squeeze(0), lambda x: x.squeeze(-2), lambda x: x.squeeze(3),
    lambda x: x.squeeze(), lambda x: x.squeeze((0, 1)),
    lambda x: x.expand(2, 1, 3), lambda x: x.expand(4, 2, 5, 3), lambda x: x.expand(-1, 4, -1),
    lambda x: x.expand(2, 1, 4), lambda x: x.expand(3), lambda x: x.expand(2, 2, 3, implicit=True),
    lambda x: x[0].t(), lambda x: x[0, 0].t(), lambda x: x[0, 0, 0].t(), lambda x: x.t(),
    lambda x: x.flatten(), lambda x: x.flatten(1), lambda x: x.flatten(0, 1), lambda x: x.flatten(-2, -1),
    lambda x: x.flatten(2, 2), lambda x: x.flatten(2, 0), lambda x: x.flatten(0, 3), lambda x: x[0, 0, 0].flatten(),
    lambda x: x.narrow(2, 1, 2), lambda x: x.narrow(-1, -2, 1), lambda x: x.narrow(2, 2, 2),
    lambda x: x.chunk(2, -1), lambda x: x.split(1, 0), lambda x: x.unbind(2),
]


def _view_outcome(lib, call, transposed):
    x = lib.arange(6.0).reshape(2, 1, 3)
    if transposed:
        x = lib.arange(6.0).reshape(3, 1, 2).permute(2, 1, 0)
    try:
        r = call(x)
    except Exception as e:  # noqa: BLE001 (the error type is compared)
        return type(e)
    parts = r if isinstance(r, tuple) else (r,)
    return [(tuple(p.shape), p.stride(), p.storage_offset(), p.tolist()) for p in parts]


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("call", _VIEW_CALLS)
def test_view_geometries_match_torch_and_the_general_path(call, transposed):
    got = _view_outcome(jt, call, transposed)
    with general_path():
        assert _view_outcome(jt, call, transposed) == got
    assert got == _view_outcome(torch, call, transposed)


def test_flatten_is_a_view_where_the_strides_allow_else_a_copy_or_the_tensor_itself():
    x = jt.arange(24.0).reshape(2, 3, 4)
    y = x.flatten(1)
    assert y._base is x._base and y.data_ptr() == x.data_ptr() and y.shape == (2, 12)
    z = x.transpose(0, 2).flatten()
    assert z.data_ptr() != x.data_ptr() and z.tolist() == torch.arange(24.0).reshape(2, 3, 4).transpose(0, 2).flatten().tolist()
    assert x.flatten(1, 1) is x and jt.tensor(2.0).flatten().shape == (1,)
    w = jt.arange(6.0, requires_grad=True).reshape(2, 3)
    assert w.flatten().grad_fn.name() == "ViewBackward0"
