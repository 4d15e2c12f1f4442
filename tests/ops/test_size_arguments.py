"""A size given nothing at all is a missing argument, as torch's argument parser has it; an empty size is 0-d.

Found by the lead (session 42): ``x.view()``, ``x.reshape()``, ``jitorch.zeros()``, ``x.resize_()`` ... bound
an ``int...`` size given no value to ``()`` and returned (or resized to) a 0-d tensor where torch raises
TypeError, and ``x.permute()``/``x.repeat()``/``x.expand()`` raised RuntimeError instead.
"""

import pytest
import torch

import jitorch

METHODS = ["view", "reshape", "permute", "expand", "repeat", "new_zeros", "new_ones", "new_empty", "sum_to_size",
           "resize_"]
FACTORIES = ["zeros", "ones", "empty", "rand", "randn"]


def _raised(call):
    with pytest.raises(Exception) as info:
        call()
    return info.value


@pytest.mark.parametrize("name", METHODS)
def test_a_method_given_no_size_raises_torchs_type_error_and_leaves_the_tensor(name):
    ours, theirs = jitorch.ones(2, 1), torch.ones(2, 1)
    mine, torchs = _raised(getattr(ours, name)), _raised(getattr(theirs, name))
    assert type(torchs) is TypeError and isinstance(mine, TypeError)
    assert str(mine).splitlines()[0].split(" - ")[0] == str(torchs).splitlines()[0].split(" - ")[0]
    assert tuple(ours.shape) == (2, 1)


@pytest.mark.parametrize("name", FACTORIES)
def test_a_factory_given_no_size_raises_type_error(name):
    assert type(_raised(getattr(torch, name))) is TypeError
    assert isinstance(_raised(getattr(jitorch, name)), TypeError)


@pytest.mark.parametrize("size", [(), []])
def test_an_empty_size_is_still_0_d(size):
    x = jitorch.ones(1)
    assert x.view(size).shape == x.reshape(size).shape == jitorch.zeros(size).shape == jitorch.zeros(size=size).shape == ()
    assert jitorch.tensor(2.0).permute(size).shape == jitorch.tensor(2.0).expand(size).shape == ()


def test_the_transpose_of_a_0_d_tensor_is_itself():
    """``x.T`` permutes by every dim reversed, which is none for a 0-d tensor (torch: the identity)."""
    x = jitorch.tensor(3.0)
    assert x.T.shape == () and x.T.item() == 3.0
