"""Session 49: channels-last memory formats against torch: the strided helpers (torch's channels-last test, its
strides, ``suggest_memory_format``), ``is_contiguous`` in every format and ``empty(memory_format=)`` over 4-d
and 5-d layouts with size-1 and empty dims. The copies in a format are tests/ops/test_memory_format49.py."""

import itertools

import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops.views import suggest_memory_format
from jitorch.runtime.strided import channels_last_strides, is_channels_last_contiguous

# (shape, a permutation of it whose contiguous copy, permuted back, gives the strides): 4-d and 5-d layouts,
# size-1 and empty dims among them
SHAPES = [(2, 3, 4, 5), (1, 3, 1, 1), (2, 1, 4, 5), (2, 3, 1, 5), (0, 3, 4, 5), (2, 0, 4, 5), (3, 2, 1, 1),
          (1, 1, 1, 1), (2, 3, 4, 5, 6), (1, 2, 1, 3, 1)]


def _layouts(ndim):
    """Permutations (innermost order) giving an NCHW tensor other strides: contiguous, NHWC, a few others."""
    orders = list(itertools.permutations(range(ndim)))
    return orders[::max(1, len(orders) // 8)] + [(0, *range(2, ndim), 1)]


def _both(shape, order, sliced=False):
    """The same values as a torch and a jitorch tensor of ``shape`` laid out in dim order ``order`` (outermost
    first), optionally sliced along dim 2 (non-dense)."""
    data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) * 0.5 - 3
    back = np.argsort(order)
    out = []
    for L in (torch, jitorch):
        t = L.tensor(np.ascontiguousarray(data.transpose(order))).permute(*back.tolist())
        out.append(t[:, :, ::2] if sliced and shape[2] > 1 else t)
    return out


def _same(t, j, rtol=0):
    """Shape, strides and dtype of jitorch's ``j`` are torch's ``t``'s, and its values (exactly, or within
    ``rtol`` where the two libraries' math functions may differ by an ulp)."""
    assert tuple(j.shape) == tuple(t.shape)
    assert j.stride() == t.stride(), (j.stride(), t.stride())
    assert str(j.dtype).split(".")[1] == str(t.dtype).split(".")[1]
    np.testing.assert_allclose(j.numpy(), t.detach().numpy(), rtol=rtol, atol=0)


def _cases():
    for shape in SHAPES:
        for order in _layouts(len(shape)):
            for sliced in (False, True):
                yield shape, order, sliced


CASES = list(_cases())
FORMATS = ["contiguous_format", "channels_last", "channels_last_3d", "preserve_format"]


@pytest.mark.parametrize("shape, order, sliced", CASES)
def test_channels_last_test_strides_and_suggested_format_are_torchs(shape, order, sliced):
    t, j = _both(shape, order, sliced)
    assert j.stride() == t.stride()
    for name in FORMATS:
        assert j.is_contiguous(memory_format=getattr(jitorch, name)) == t.is_contiguous(
            memory_format=getattr(torch, name)), name
    assert is_channels_last_contiguous(j.shape, j.stride()) == t.is_contiguous(
        memory_format=torch.channels_last if t.ndim == 4 else torch.channels_last_3d)
    # torch's ``to`` aliases exactly where the format asked is the suggested one (to_will_alias)
    suggested = suggest_memory_format(j.shape, j.stride())
    for name in ("contiguous_format", "channels_last", "channels_last_3d"):
        torch_alias = _aliases(lambda: t.to(memory_format=getattr(torch, name)), t)
        assert (suggested is getattr(jitorch, name)) == torch_alias, name
        assert _aliases(lambda: j.to(memory_format=getattr(jitorch, name)), j) == torch_alias, name


def _aliases(call, x):
    try:
        return call() is x
    except RuntimeError:  # a channels-last format of another rank
        return False


@pytest.mark.parametrize("shape", SHAPES)
def test_channels_last_strides_are_torchs_empty_ones_size_0_dims_included(shape):
    fmt = "channels_last" if len(shape) == 4 else "channels_last_3d"
    assert channels_last_strides(shape) == torch.empty(shape, memory_format=getattr(torch, fmt)).stride()
    _same_empty(shape, fmt)


def _same_empty(shape, fmt):
    t = torch.empty(shape, memory_format=getattr(torch, fmt))
    j = jitorch.empty(shape, memory_format=getattr(jitorch, fmt))
    assert j.stride() == t.stride()
    assert j.is_contiguous() == t.is_contiguous()
    assert j.is_contiguous(memory_format=getattr(jitorch, fmt)) == t.is_contiguous(memory_format=getattr(torch, fmt))


def test_memory_formats_are_torchs_names_and_one_type():
    assert repr(jitorch.channels_last) == "jitorch.channels_last"
    assert repr(jitorch.channels_last_3d) == "jitorch.channels_last_3d"
    assert all(isinstance(getattr(jitorch, n), jitorch.memory_format) for n in FORMATS)
    assert len({id(getattr(jitorch, n)) for n in FORMATS}) == 4


