"""A write into a scaled dot-product attention's output before the backward raises exactly where torch's does.

torch's CPU attention saves its output only in its flash kernel's node: (batch, heads, L, E) inputs with contiguous
last dims and no mask or a 2- or 4-dim one that wants no gradient. Elsewhere (3-d inputs, a 3-d mask, a mask that
wants a gradient, a stepped last dim) it composes the math path, which saves the softmax weights: a write into the
output is then allowed and the gradients are those of the forward's function followed by the write. jitorch's fused
attention never reads its output in the backward; it raised for every call (fuzz seed 51000398: ``index_fill_`` into
a 3-d attention's output), stricter than torch. Each case here is checked against torch's outcome, eager and
compiled, and the gradients where it does not raise against torch's and gradcheck's.
"""

import numpy as np
import pytest
import torch

import jitorch as jt

# name -> (query's shape, key's and value's shape, mask: None, a shape, or (shape, "grad"), the query stepped)
CASES = {
    "3d": ((2, 1, 3), (2, 17, 3), None, False),
    "4d": ((2, 3, 4, 3), (2, 3, 5, 3), None, False),
    "4d-mask-2d": ((2, 3, 4, 3), (2, 3, 5, 3), (4, 5), False),
    "4d-mask-3d": ((2, 3, 4, 3), (2, 3, 5, 3), (3, 4, 5), False),
    "4d-mask-wanting-grad": ((2, 3, 4, 3), (2, 3, 5, 3), ((4, 5), "grad"), False),
    "4d-stepped-last-dim": ((2, 3, 4, 3), (2, 3, 5, 3), None, True),
}


def _inputs(lib, name, dtype=np.float64):
    q_shape, kv_shape, mask, stepped = CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    q = lib.tensor(rng.standard_normal((*q_shape[:-1], 2 * q_shape[-1])).astype(dtype), requires_grad=True)
    k, v = (lib.tensor(rng.standard_normal(kv_shape).astype(dtype), requires_grad=True) for _ in range(2))
    m = None
    if mask is not None:
        shape, wants = (mask, False) if isinstance(mask[-1], int) else (mask[0], True)
        m = lib.tensor(rng.standard_normal(shape).astype(dtype), requires_grad=wants)
    return q, k, v, m, stepped


def _attend(lib, q, k, v, m, stepped):
    query = q[..., ::2] if stepped else q[..., :q.shape[-1] // 2]
    return lib.nn.functional.scaled_dot_product_attention(query, k, v, attn_mask=m)


def _outcome(lib, name, compiled=False):
    """("raise",) where the backward raises the modified-by-an-inplace-operation error, else ("ok", gradients)."""
    q, k, v, m, stepped = _inputs(lib, name)
    fn = (lambda q, k, v, m: _attend(jt, q, k, v, m, stepped))
    out = jt.compile(fn)(q, k, v, m) if compiled else _attend(lib, q, k, v, m, stepped)
    out.index_fill_(0, lib.tensor([1]), 0.5)
    weights = lib.tensor(np.linspace(-1.0, 2.0, out.numel()).reshape(tuple(out.shape)))
    try:
        (out * weights).sum().backward()
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e)
        return ("raise",)
    leaves = [t for t in (q, k, v, m) if t is not None and t.requires_grad]
    return ("ok", [t.grad.detach().numpy() if lib is torch else t.grad.numpy() for t in leaves])


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_write_into_an_attention_output_raises_only_where_torchs_flash_node_saves_it(name, compiled):
    want = _outcome(torch, name)
    got = _outcome(jt, name, compiled)
    assert got[0] == want[0]
    if want[0] == "ok":
        for a, b in zip(got[1], want[1]):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_gradients_through_a_3d_attention_whose_output_is_written_pass_gradcheck():
    """Fuzz seed 51000398's shape: the gradients of attention followed by ``index_fill_`` of its output."""
    q, k, v, _, _ = _inputs(jt, "3d")

    def fn(q, k, v):
        out = jt.nn.functional.scaled_dot_product_attention(q[..., :3], k, v)
        return out.index_fill_(1, jt.tensor([0]), 1.0) * 1.5

    assert jt.autograd.gradcheck(fn, (q, k, v))
