"""Session 49: channels-last copies and factories of CUDA tensors (the fake device running the kernels) are laid
out as the CPU's, which are torch's: ``clone``/``contiguous``/``to`` in a memory format wrote a preserve_format
copy on the device, and a ``_like`` factory in a format took its input's layout."""

import numpy as np
import pytest

import jitorch as jt

CALLS = {
    "clone": lambda x, f: x.clone(memory_format=f),
    "contiguous": lambda x, f: x.contiguous(memory_format=f),
    "to(float64)": lambda x, f: x.to(jt.float64, memory_format=f),
    "zeros_like": lambda x, f: jt.zeros_like(x, memory_format=f),
    "full_like": lambda x, f: jt.full_like(x, 3.0, memory_format=f),
    "empty_like filled": lambda x, f: jt.empty_like(x, memory_format=f).fill_(2.0),
    "pointwise": lambda x, f: x.contiguous(memory_format=f) * 2 + 1,
}


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("shape, fmt", [((2, 3, 4, 5), "channels_last"), ((2, 3, 1, 1), "channels_last"),
                                        ((2, 3, 2, 3, 4), "channels_last_3d"), ((2, 3, 4, 5), "contiguous_format")])
def test_cuda_copies_in_a_memory_format_are_laid_out_as_the_cpus(fake, call, shape, fmt):
    x = jt.tensor(np.arange(np.prod(shape), dtype=np.float32).reshape(shape)).transpose(2, 3)
    want = CALLS[call](x, getattr(jt, fmt))
    got = CALLS[call](x.cuda(), getattr(jt, fmt))
    assert got.device.type == "cuda"
    assert got.stride() == want.stride()
    np.testing.assert_array_equal(got.cpu().numpy(), want.numpy())


def test_cuda_empty_in_a_channels_last_format_has_torchs_strides(fake):
    assert jt.empty(2, 3, 4, 5, device="cuda", memory_format=jt.channels_last).stride() == (60, 1, 15, 3)
    assert jt.empty(2, 3, 4, 5, 6, device="cuda", memory_format=jt.channels_last_3d).stride() == (360, 1, 90, 18, 3)
