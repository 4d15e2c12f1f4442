"""The eager shortcut of basic indexing (``x[0]``, ``x[:, 1]``, ``x[..., None, 1:3]``): the view made at
once, without the general path's chain of select/slice/unsqueeze, when it records no history. It must give
the chain's geometry, base and errors, and track its view as the chain does."""

import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
from jitorch.jit.tracer import trace
from jitorch.ops import indexing
from tests.support import general_path


def _item(draw, n):
    kind = draw(st.sampled_from(["int", "slice", "none", "ellipsis", "other"]))
    if kind == "int":
        return draw(st.integers(-n - 1, n))
    if kind == "slice":
        bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
        return slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, 3, -1, 0])))
    if kind == "none":
        return None
    if kind == "ellipsis":
        return Ellipsis
    # items the shortcut leaves to the general path: NumPy ints, bools, lists, a slice of NumPy ints
    return draw(st.sampled_from([np.int64(0), True, [0], slice(np.int64(0), None)]))


def _outcome(x, index):
    try:
        r = x[index]
    except Exception as e:  # noqa: BLE001 (the error itself is compared)
        return type(e), str(e)
    root = x if x._base is None else x._base
    return tuple(r.shape), r.stride(), r.storage_offset(), r._base is root, r.tolist()


@given(data=st.data(), shape=st.lists(st.integers(0, 4), max_size=4).map(tuple), transposed=st.booleans(),
       length=st.integers(1, 4), single=st.booleans())
def test_basic_indexing_shortcut_gives_the_general_paths_view_or_error(data, shape, transposed, length, single):
    x = jt.arange(float(np.prod(shape))).reshape(shape)
    if transposed and len(shape) >= 2:
        x = x.transpose(0, 1)
    index = tuple(_item(data.draw, x.shape[min(i, x.ndim - 1)] if x.ndim else 1) for i in range(length))
    if single:
        index = index[0]
    got = _outcome(x, index)
    with general_path():
        want = _outcome(x, index)
    assert got == want


def test_basic_indexing_matches_torch():
    t = torch.arange(60.0).reshape(3, 4, 5)
    x = jt.arange(60.0).reshape(3, 4, 5)
    for index in [0, -1, slice(1, None), (slice(None), 1), (Ellipsis, None, slice(1, 4, 2)), (1, None, -2, 3),
                  (slice(None, None, 2), Ellipsis, 0), ()]:
        r, s = x[index], t[index]
        assert r.shape == s.shape and r.stride() == s.stride() and r.storage_offset() == s.storage_offset()
        assert r.tolist() == s.tolist()


def test_basic_geometry_leaves_what_it_does_not_serve_to_the_general_path():
    x = jt.ones(2, 3)
    for index in [(0, 0, 0), (5,), (slice(0, 2, 0),), (slice(None, None, -1),), (Ellipsis, Ellipsis),
                  (np.int64(0),), (True,), ([0],), (slice(0.5, None),)]:
        assert indexing._basic_geometry(x, index) is None


@pytest.mark.parametrize("index, error", [
    (5, (IndexError, "index 5 is out of bounds for dimension 0 with size 2")),
    ((0, 0, 0), (IndexError, "too many indices for tensor of dimension 2")),
    ((slice(None), slice(0, 2, 0)), (ValueError, "slice step cannot be zero")),
])
def test_bad_basic_indices_raise_torchs_errors(index, error):
    with pytest.raises(error[0], match=re.escape(error[1])):
        jt.ones(2, 3)[index]
    with pytest.raises(error[0]):
        torch.ones(2, 3)[index]


def test_a_view_by_index_of_a_base_without_history_catches_up_when_the_base_gets_one():
    b = jt.zeros(2, 3)
    v, w = b[:, 1], b[1]
    b.copy_(jt.ones(2, 3, requires_grad=True) * 2)
    assert v.requires_grad and w.requires_grad and v.grad_fn is not None
    tb = torch.zeros(2, 3)
    tv = tb[:, 1]
    tb.copy_(torch.ones(2, 3, requires_grad=True) * 2)
    assert tv.requires_grad


def test_indexing_a_tensor_that_requires_grad_records_the_general_paths_nodes():
    x = jt.arange(6.0, requires_grad=True)
    y = x.reshape(2, 3)[:, 1]
    assert y.grad_fn.name() == "SelectBackward0"
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    with jt.no_grad():
        z = x.reshape(2, 3)[:, 1]
    assert z.grad_fn is None and z.requires_grad and z.is_leaf  # (torch's view made in no_grad mode)


def test_a_trace_sees_the_general_paths_view_ops():
    graph = trace(lambda a: a[:, 1] + a[0, None, 1:], jt.ones(3, 4))
    names = [n.op.name for n in graph.nodes]
    assert "select" in names and "slice" in names and "unsqueeze" in names
