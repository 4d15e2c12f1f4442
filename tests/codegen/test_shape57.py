"""Session 57: the fused attention kernels (jitorch/codegen/attention.py) take L, S, the batch's sizes and
strides and the scale as run-time arguments, so eager ``scaled_dot_product_attention`` builds one kernel (one
LLVM text) per direction, dtype, head dim, causal/mask kind and layout, not one per sequence length: a user's
first call at each new length paid 0.5-0.8 s of LLVM per kernel. A row block's rows past the tile's last row
repeat it (`_Tile.block_of`), so lengths around the register blocks' edges take the same code."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.codegen import attention as kernels
from jitorch.nn import functional as F
from tests.codegen.test_attention import TOLERANCE

# around the edges of the 8- (or 4-) row blocks, of a 16-lane vector and of a 32-column register block
LENGTHS = (1, 7, 8, 9, 15, 16, 17, 31, 32, 33)


@pytest.fixture
def builds(monkeypatch):
    """The kernels built and the LLVM texts linked while the test runs (none taken from this process's
    earlier builds)."""
    built, texts = [], set()
    build = kernels._kernels._build
    monkeypatch.setattr(kernels._kernels, "_build", lambda *key: built.append(key) or build(*key))
    monkeypatch.setattr(kernels._kernels, "_made", {})
    link = kernels.cpu.link_kernel
    monkeypatch.setattr(kernels.cpu, "link_kernel", lambda source, cache=None: texts.add(source.llvm_ir) or
                        link(source, cache))
    return built, texts


def _check(L, S, D, dtype, causal, mask, seed):
    """Eager attention with history (the fused op, forward and backward) against torch's."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(dtype) for s in ((2, L, D), (2, S, D), (2, S, D), (2, L, D))]
    options = dict(is_causal=causal, scale=0.3)
    tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in arrays[:3])
    jq, jk, jv = (jt.from_numpy(a.copy()).requires_grad_() for a in arrays[:3])
    if mask is not None:
        options["attn_mask"] = torch.from_numpy(mask)
    want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, **options)
    want.backward(torch.from_numpy(arrays[3]))
    if mask is not None:
        options["attn_mask"] = jt.from_numpy(mask)
    got = F.scaled_dot_product_attention(jq, jk, jv, **options)
    assert got.grad_fn.name() == "AttentionBackward0"
    (got * jt.from_numpy(arrays[3])).sum().backward()
    for ours, theirs in ((got, want), (jq.grad, tq.grad), (jk.grad, tk.grad), (jv.grad, tv.grad)):
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), **TOLERANCE[dtype])


def test_one_kernel_serves_every_length_causal_and_masked(builds):
    """Self-attention at every length of `LENGTHS`, causal, and with a bool mask at L != S (a row with every
    key masked gives zeros, as torch's): torch's output and gradients, from 4 kernels and 4 LLVM texts in
    all (forward and backward, causal and not; the masked forward is its own kernel, its backward the
    unmasked one) where one per length and kind made 40."""
    built, texts = builds
    rng = np.random.default_rng(57)
    for n, L in enumerate(LENGTHS):
        _check(L, L, 16, "float32", True, None, n)
        S = LENGTHS[-1 - n]
        mask = rng.random((L, S)) < 0.7
        mask[0] = False  # (a row with every key masked)
        _check(L, S, 16, "float32", False, mask, n)
    assert sorted((key[0], key[3], key[5]) for key in built) == [
        ("backward", False, False), ("backward", True, False), ("forward", False, True), ("forward", True, False)]
    assert len(texts) == 4


def test_ragged_head_dims_and_float64_take_one_kernel_per_direction(builds):
    """float64 and a head dim of no whole register block (its rows copied into padded ones): one kernel per
    direction over lengths at the edges of an 8-lane vector and of the row blocks."""
    built, texts = builds
    for n, (L, S) in enumerate(((1, 1), (7, 9), (9, 7), (16, 17))):
        _check(L, S, 6, "float64", True, None, n)
    assert [key[:3] for key in built] == [("forward", "float64", 6), ("backward", "float64", 6)]
    assert len(texts) == 2


def test_the_kernel_is_bound_per_call_and_the_scale_is_a_run_time_value():
    """Two scales, two lengths and batches of one and two dims: one compiled kernel (the same machine code)
    bound to each call's arguments (L, S, the scale's bits, the batch's sizes, the strides; fewer than 2 batch
    dims padded with dims of one), each call torch's values."""
    rng = np.random.default_rng(5)
    bound = []
    for L, batch, scale in ((5, (2,), 0.25), (40, (3, 2), 1.5)):
        q, k, v = (rng.standard_normal((*batch, L, 8)).astype(np.float32) for _ in range(3))
        out, p = np.empty_like(q), np.empty((*batch, L, L), np.float32)
        kernel = kernels.attention_kernel("forward", np.float32, L, L, 8, False, scale, batch)
        kernel.run_tiles([q, k, v, out, p], int(np.prod(batch)))
        bound.append(kernel)
        want = torch.nn.functional.scaled_dot_product_attention(*map(torch.from_numpy, (q, k, v)), scale=scale)
        np.testing.assert_allclose(out, want.numpy(), **TOLERANCE["float32"])
    assert bound[0]._compiled is bound[1]._compiled
    assert list(bound[1]._params[:2]) == [40, 40] and bound[1]._params[2:3].view(np.float64)[0] == 1.5
    assert list(bound[0]._params[3:5]) == [1, 2] and list(bound[1]._params[3:5]) == [3, 2]
