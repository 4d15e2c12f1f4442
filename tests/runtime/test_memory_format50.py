"""Session 50: torch's ``suggest_memory_format`` takes a tensor with an empty dim as contiguous (its
``is_channels_last_strides_2d`` returns false at a size-0 dim), so the layout rules built on it (cat, roll, the
pooling and padding kernels) lay out such a tensor's results contiguously."""

import pytest
import torch

import jitorch
from jitorch.runtime.memory_format import channels_last, channels_last_3d, contiguous_format, suggest_memory_format


@pytest.mark.parametrize("shape, fmt", [((2, 4, 0, 8), channels_last), ((0, 4, 6, 8), channels_last),
                                        ((2, 0, 6, 8), channels_last), ((2, 4, 3, 0, 2), channels_last_3d)])
def test_suggest_memory_format_of_channels_last_strides_with_an_empty_dim_is_contiguous(shape, fmt):
    strides = torch.empty(shape, memory_format=getattr(torch, repr(fmt).split(".")[1])).stride()
    assert suggest_memory_format(shape, strides) is contiguous_format


def test_results_from_an_empty_channels_last_slice_are_laid_out_as_torchs():
    # roll by a dim's size is cat's of the whole dim and an empty slice: silently channels-last before
    results = {}
    for L in (torch, jitorch):
        x = L.arange(384.0).view(2, 4, 6, 8).contiguous(memory_format=L.channels_last)
        empty = x.narrow(2, 0, 0)
        outs = [x.roll(6, 2), L.cat([empty, empty], 1), L.cat([x.narrow(2, 0, 6), empty], 2), empty.clone(),
                L.nn.functional.max_pool2d(L.zeros(0, 4, 6, 8).contiguous(memory_format=L.channels_last), 2)]
        results[L] = [(o.stride(), o.numpy().tolist()) for o in outs]
    assert results[jitorch] == results[torch]
