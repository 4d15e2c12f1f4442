"""The products of a compiled GPT training step take their operands where they lie: each operand NumPy's matmul
hands to BLAS as it is (rows or columns of unit stride, so NumPy copies nothing before the call), each writes an
arena buffer or new memory of its result's layout, and no copy kernel makes an operand of a product. The
gradients are eager's within rounding."""

from __future__ import annotations

import numpy as np

import jitorch as jt
import jitorch.nn as nn
import jitorch.nn.functional as F
from jitorch.jit import gemm_words
from jitorch.jit.executor import EagerStep, KernelStep
from jitorch.ops import linalg

B, T, C, H, V = 2, 8, 16, 2, 11


class Block(nn.Module):
    """A GPT block (nanoGPT's layout): attention from one ``c_attn`` product, a 4x MLP, residuals."""

    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.out = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        q, k, v = self.c_attn(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.block, self.ln = nn.Embedding(V, C), Block(), nn.LayerNorm(C)
        self.head = nn.Linear(C, V, bias=False)

    def forward(self, idx):
        return self.head(self.ln(self.block(self.wte(idx))))


def _step(model, idx, targets):
    loss = F.cross_entropy(model(idx).view(-1, V), targets.view(-1))
    loss.backward()
    return loss


def _blas_ready(a):
    """Whether NumPy's matmul passes ``a``'s matrices to BLAS as they are: unit stride along rows or columns and
    the other stride at least the matrix's extent that way (NumPy's ``is_blasable2d``)."""
    item = a.itemsize
    s0, s1 = a.strides[-2:]
    m, n = a.shape[-2:]
    return (s1 == item and s0 % item == 0 and s0 // item >= n) or (s0 == item and s1 % item == 0 and s1 // item >= m)


def test_a_gpt_steps_products_take_their_operands_as_they_lie(monkeypatch):
    jt.manual_seed(0)
    model = Tiny()
    gen = jt.Generator().manual_seed(1)
    idx, targets = jt.randint(0, V, (B, T), generator=gen), jt.randint(0, V, (B, T), generator=gen)
    compiled = jt.compile(_step)
    ex = compiled.lower(model, idx, targets).executable
    products = [n for s in ex.steps if isinstance(s, EagerStep) for n in s.nodes if n.op.name in ("matmul", "mm", "bmm")]
    copies = {v for s in ex.steps if isinstance(s, KernelStep) and s.group.kind == "view" for v in s.outputs}
    assert len(products) >= 15 and not any(a in copies for n in products for a in n.args)

    calls = []
    product = linalg._product
    # (each product through `array_product`, whose calls of NumPy's matmul this watches, rather than the gemm call
    # kept for its operands: the same operands reach BLAS either way)
    monkeypatch.setattr(gemm_words, "product", lambda a, b, out: linalg.array_product(a, b, out))
    # (a product whose bias add is folded in, `executor.fold_biases_into_products`, likewise, its bias added after)
    monkeypatch.setattr(gemm_words, "biased_product",
                        lambda a, b, bias, out: np.add(linalg.array_product(a, b, out), bias, out=out))
    monkeypatch.setattr(linalg, "_product", lambda a, b, one_term, out=None, work=None: calls.append(
        (a, b, out, product(a, b, one_term, out, work))) or calls[-1][3])
    compiled(model, idx, targets)
    assert len(calls) == len(products)
    for a, b, out, result in calls:
        assert _blas_ready(a) and _blas_ready(b), (a.shape, a.strides, b.shape, b.strides)
        # (into its arena buffer, or new memory where it leaves the call as a gradient: no copy after)
        assert result.flags.c_contiguous and (out is None or result is out)
    assert sum(out is not None for *_, out, _ in calls) >= len(calls) // 2
    monkeypatch.setattr(linalg, "_product", product)
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    _step(model, idx, targets)
    for g, p in zip(grads, model.parameters()):  # (eager's within rounding: eager's GELU, norms and loss round
        # otherwise than their kernels)
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=0, atol=1e-5 * np.abs(g).max())
