"""Eager causal attention that records history shares its mask per size and device
(`nn.functional._causal_future`) where it composes ops (the half types, autocast, CUDA: where the fused op
``_attention`` does not serve, which the first test stands in for by turning it off)."""

import numpy as np
import torch

import jitorch as jt
from jitorch.nn import functional as F


def test_causal_attention_matches_torch_and_reuses_its_mask(monkeypatch):
    monkeypatch.setattr(F, "_fused_attention", lambda *args: False)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 5, 4)).astype(np.float32) for _ in range(3))
    F._FUTURES.clear()
    for _ in range(2):
        args = [jt.from_numpy(a).requires_grad_() for a in (q, k, v)]
        got = F.scaled_dot_product_attention(*args, is_causal=True)
        assert got.grad_fn is not None and got.grad_fn.name() == "MatmulBackward0"
    want = torch.nn.functional.scaled_dot_product_attention(*map(torch.from_numpy, (q, k, v)), is_causal=True)
    np.testing.assert_allclose(got.detach().numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert list(F._FUTURES) == [(5, 5, jt.device("cpu"))]
    assert F._FUTURES[5, 5, jt.device("cpu")].tolist() == torch.ones(5, 5, dtype=torch.bool).triu(1).tolist()


def test_a_profile_sees_the_mask_made():
    from jitorch.profiler import profile
    F._FUTURES.clear()
    x = jt.ones(1, 1, 3, 2)
    with profile() as prof:
        F.scaled_dot_product_attention(x, x, x, is_causal=True)
    assert "aten::triu" in prof.key_averages().table() and not F._FUTURES


def test_each_emulated_device_gets_its_own_mask_seed_9700040():
    """Fuzz seed 9700040 (``--cuda --nets 0.5``): causal attention on an emulated device, then on a second one (the
    fuzzer's CUDA modes each run on a new `jitorch.cuda.emulated` device). The first device's mask was shared with
    the second, whose kernels read it outside its memory: "fake device: 1 bytes ... are outside device memory"."""
    F._FUTURES.clear()
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(3))
    want = torch.nn.functional.scaled_dot_product_attention(*map(torch.from_numpy, (q, k, v)), is_causal=True)
    for _ in range(2):
        with jt.cuda.emulated():
            args = [jt.from_numpy(a).to("cuda") for a in (q, k, v)]
            got = F.scaled_dot_product_attention(*args, is_causal=True).cpu()
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert len(F._FUTURES) == 2
