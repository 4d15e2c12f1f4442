"""Session 49: a channels-last ``clone``/``contiguous``/``_like`` factory inside ``vmap`` raises as torch's (jitorch
gave a contiguous result, per sample), and the other formats still batch as torch's."""

import numpy as np
import pytest
import torch

import jitorch


@pytest.mark.parametrize("call, message", [
    (lambda L, a: a.clone(memory_format=L.channels_last),
     r"^NYI: Tensor.clone\(memory_format\) inside vmap is only supported with memory_format "
     r"(jitorch|torch).preserve_format or (jitorch|torch).contiguous_format \(got ChannelsLast\)$"),
    (lambda L, a: a.contiguous(memory_format=L.channels_last), r"^NYI: "),
    (lambda L, a: L.zeros_like(a, memory_format=L.channels_last),
     r"^required rank 4 tensor to use channels_last format$"),
    (lambda L, a: L.full_like(a, 2.0, memory_format=L.channels_last),
     r"^required rank 4 tensor to use channels_last format$"),
])
def test_a_channels_last_copy_inside_vmap_raises_as_torch(call, message):
    for L in (torch, jitorch):
        with pytest.raises(RuntimeError, match=message):
            L.vmap(lambda a: call(L, a))(L.zeros(3, 2, 3, 4, 5))


@pytest.mark.parametrize("fmt", ["contiguous_format", "preserve_format"])
def test_other_memory_formats_batch_inside_vmap_as_torch(fmt):
    data = np.arange(360.0, dtype=np.float32).reshape(3, 2, 3, 4, 5)
    results = []
    for L in (torch, jitorch):
        x = L.tensor(data).transpose(3, 4)
        f = getattr(L, fmt)
        results.append([L.vmap(lambda a: a.clone(memory_format=f))(x),
                        L.vmap(lambda a: L.zeros_like(a, memory_format=f) + a)(x)])
    for t, j in zip(*results):
        np.testing.assert_array_equal(j.numpy(), t.numpy())
