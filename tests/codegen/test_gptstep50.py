"""The GPT step's attention call path (session 50): the kernel memo keyed by the dtype's name whichever way the
dtype is spelled, and the tiles run over strided heads of one product (the GPT layout: q, k and v views of the
c_attn product's rows, the output written in [B, T, H, D] order) against torch, float32 and float64, forward
and gradients, eager and compiled."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.codegen import attention as kernels
from jitorch.nn import functional as F

TOLERANCE = {"float32": dict(rtol=1e-5, atol=2e-6), "float64": dict(rtol=1e-12, atol=1e-13)}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_attention_kernel_memo_is_one_entry_per_dtype_spelling(dtype):
    layouts = ((4 * 8 * 3, 8 * 3, 3),) * 5
    args = (16, 16, 8, True, 0.25, (2,), layouts)
    by_class = kernels.attention_kernel("forward", getattr(np, dtype), *args)
    assert by_class is not None
    # (each call binds its sizes to the one compiled kernel of the memo: session 57's run-time lengths)
    assert kernels.attention_kernel("forward", np.dtype(dtype), *args)._compiled is by_class._compiled
    assert kernels.attention_kernel("forward", dtype, *args)._compiled is by_class._compiled
    (key,) = [key for key, kernel in kernels._kernels.items() if kernel is by_class._compiled]
    assert key[:3] == ("forward", dtype, 8)


def _gpt_heads(lib, qkv, heads):
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = qkv.split(C, dim=2)
    return [t.view(B, T, heads, C // heads).transpose(1, 2) for t in (q, k, v)]


def _step(lib, F_, qkv, grad, heads):
    q, k, v = _gpt_heads(lib, qkv, heads)
    y = F_.scaled_dot_product_attention(q, k, v, is_causal=True)
    B, T, C3 = qkv.shape
    y = y.transpose(1, 2).contiguous().view(B, T, C3 // 3)
    (y * grad).sum().backward()
    return y


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("compiled", [False, True])
def test_attention_over_gpt_heads_matches_torch(dtype, compiled):
    B, T, H, D = 2, 64, 2, 32
    rng = np.random.default_rng(5)
    x = rng.standard_normal((B, T, 3 * H * D)).astype(dtype)
    g = rng.standard_normal((B, T, H * D)).astype(dtype)
    tq = torch.from_numpy(x.copy()).requires_grad_()
    ty = _step(torch, torch.nn.functional, tq, torch.from_numpy(g), H)
    jq = jt.from_numpy(x.copy()).requires_grad_()

    def step(q, grad):
        return _step(jt, F, q, grad, H)
    jy = (jt.compile(step) if compiled else step)(jq, jt.from_numpy(g))
    np.testing.assert_allclose(jy.detach().numpy(), ty.detach().numpy(), **TOLERANCE[dtype])
    np.testing.assert_allclose(jq.grad.numpy(), tq.grad.numpy(), **TOLERANCE[dtype])
    # the kernels ran over the heads where they lie: strided layouts (rows 3 * H * D elements apart; the row
    # strides of q, k and v are the kernel's constants, its key's last entry)
    built = {(key[0], key[1]) for key, kernel in kernels._kernels.items()
             if kernel is not None and key[2] == D and key[-1][:3] == (3 * H * D,) * 3}
    assert {("forward", dtype), ("backward", dtype)} <= built
