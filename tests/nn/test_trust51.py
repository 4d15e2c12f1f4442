"""Adversarial layouts of session 50's channels-last paths (stack, roll, flip, pads, pixel and channel shuffles,
`nn.functional._grad_as_kernel`) against torch: results' and input gradients' strides and values."""

import warnings

import numpy as np
import pytest
import torch

import jitorch as jt


def _strides_that_matter(t):
    """The strides of the dims of more than one element (torch's and jitorch's views normalise the others)."""
    return tuple(st for n, st in zip(t.shape, t.stride()) if n > 1)


@pytest.mark.parametrize("op", ["pixel_unshuffle", "channel_shuffle"])
def test_shuffle_of_one_channels_last_image_requiring_grad_stays_channels_last(op):
    """`_grad_as_kernel`'s identity was ``view_as``, which gives a dim of one element another stride: a channels-last
    batch of one image, (64, 1, 16, 4), became (4, 1, 16, 4), which suggests the contiguous format, so the shuffle's
    result under grad mode was contiguous where torch's (and jitorch's without grad) is channels-last."""
    values = np.random.default_rng(0).standard_normal((1, 4, 4, 4))
    x = jt.tensor(values).contiguous(memory_format=jt.channels_last).requires_grad_(True)
    t = torch.tensor(values).contiguous(memory_format=torch.channels_last).requires_grad_(True)
    got, want = getattr(jt.nn.functional, op)(x, 2), getattr(torch.nn.functional, op)(t, 2)
    compiled = jt.compile(lambda a: getattr(jt.nn.functional, op)(a, 2))(x)
    assert _strides_that_matter(got) == _strides_that_matter(want) == _strides_that_matter(compiled)
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    weights = np.random.default_rng(1).standard_normal(tuple(want.shape))
    (got * jt.tensor(weights)).sum().backward()
    (want * torch.tensor(weights)).sum().backward()
    assert _strides_that_matter(x.grad) == _strides_that_matter(t.grad)
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())


def test_shuffle_of_a_captured_channels_last_slice_requiring_grad_stays_compiled():
    """The identity that keeps the input's strides must be a view a graph can take of a captured slice (as_strided
    of a storage the slice does not fill made the compiled call run eagerly, with a warning)."""
    values = np.random.default_rng(2).standard_normal((2, 4, 6, 6))
    base = jt.tensor(values).contiguous(memory_format=jt.channels_last).requires_grad_(True)
    captured = base[:, :, 1:5, 1:5]
    compiled = jt.compile(lambda y: jt.nn.functional.pixel_unshuffle(captured, 2) * y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (a fallback to eager warns)
        got = compiled(jt.tensor(2.0))
    t = torch.tensor(values).contiguous(memory_format=torch.channels_last)[:, :, 1:5, 1:5]
    want = torch.nn.functional.pixel_unshuffle(t, 2) * 2
    assert got.stride() == want.stride()
    np.testing.assert_array_equal(got.detach().numpy(), want.numpy())
