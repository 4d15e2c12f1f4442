"""A profiled eager `F.gelu` runs the code an unprofiled call runs (its compiled kernel, or its NumPy passes), recorded
as one op, torch's ``aten::gelu``: it ran its composition, whose NumPy float64 Phi took 12 ms at (768, 512)
against the kernel's 0.9, so a profile showed GELU 10-40x too slow, as two ops (``_normal_cdf``, ``mul``), which
the profile records as they run."""

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.profiler import profile


def _bits(t):
    return t.detach().numpy().tobytes()


@pytest.mark.parametrize("shape", [(768, 512), (3, 5)], ids=["kernel", "numpy passes"])
@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
def test_a_profiled_gelu_is_one_aten_gelu_with_the_unprofiled_bits(shape, dtype):
    x = jt.randn(*shape, dtype=dtype, generator=jt.Generator().manual_seed(0))
    expected = F.gelu(x)
    with profile(record_shapes=True) as prof:
        got = F.gelu(x)
    assert _bits(got) == _bits(expected)
    assert [(e.name, e.input_shapes) for e in prof.events() if e.kind == "cpu_op"] == [("aten::gelu", [list(shape), []])]
    assert np.allclose(got.numpy(), torch.nn.functional.gelu(torch.from_numpy(x.numpy())).numpy(), rtol=1e-6,
                       atol=1e-6 if dtype is jt.float32 else 1e-12)


def test_a_profiled_gelu_recording_history_has_the_unprofiled_value_and_gradient():
    x = jt.randn(768, 512, generator=jt.Generator().manual_seed(1)).requires_grad_()
    g = jt.randn(768, 512, generator=jt.Generator().manual_seed(2))
    expected = F.gelu(x)
    expected.backward(g)
    expected_grad, x.grad = x.grad, None
    with profile() as prof:
        got = F.gelu(x)
        got.backward(g)
    assert _bits(got) == _bits(expected) and _bits(x.grad) == _bits(expected_grad)
    names = [e.name for e in prof.events() if e.kind == "cpu_op"]
    assert names.count("aten::gelu") == 1 and "aten::_normal_cdf" not in names


def test_a_traced_gelu_still_traces_its_composition():
    """A trace takes calls (its hook is no pass-on one): the graph gets the composition's ops, which fuse into the
    kernel that eager calls of `F.GELU_KERNEL_MIN` elements run (smaller ones take NumPy's passes, a few ulps off)."""
    x = jt.randn(64, 64, generator=jt.Generator().manual_seed(3))
    assert x.numel() >= F.GELU_KERNEL_MIN
    with profile() as prof:
        out = jt.compile(F.gelu)(x)
    traced = [e.name for e in prof.events() if e.kind == "traced_op"]
    assert "aten::_normal_cdf" in traced and "aten::gelu" not in traced
    assert _bits(out) == _bits(F.gelu(x))
