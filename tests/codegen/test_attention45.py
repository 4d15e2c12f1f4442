"""The attention kernels' paths of session 45 (jitorch/codegen/attention.py): the transposing copy of whole
square blocks in registers (`_Tile.transpose_block`), register blocks of `block_rows()` rows (8 on AVX-512),
whose rows past the last whole block run one at a time, the softmax passes interleaved over 4 rows at a
time inside them, and the weights made by one division a row. Each against torch: shapes whose sizes are
not multiples of the blocks, odd head dims, L != S, masks, float64; and which path each shape took."""

import re

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.codegen import attention as kernels
from jitorch.nn import functional as F
from tests.codegen.test_attention import TOLERANCE, _arrays, _kernel_ir, _mask, _ours, _torch

# (query shape, key shape, dtype, causal): whole 16 x 16 (float32) or 8 x 8 (float64) blocks to transpose at
# L != S, L < 8 rows, L past whole 8-row blocks, head dims of one block but no whole register block of 2
# vectors (16, 8, 24), and ragged ones (odd head dims, S no whole number of lanes) that keep the element loop
CASES = [((2, 3, 64, 32), (2, 3, 64, 32), "float32", True), ((2, 2, 20, 16), (2, 2, 48, 16), "float32", True),
         ((2, 2, 5, 16), (2, 2, 32, 16), "float32", False), ((3, 13, 8), (3, 24, 8), "float64", True),
         ((2, 1, 29, 24), (2, 1, 16, 24), "float64", False), ((2, 2, 19, 64), (2, 2, 64, 64), "float32", True),
         ((2, 11, 33), (2, 17, 33), "float32", True), ((1, 2, 12, 7), (1, 2, 9, 7), "float64", True)]


@pytest.mark.parametrize("query, key, dtype, causal", CASES,
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else str(c))
def test_transposed_blocks_and_row_blocks_match_torch_eager_and_compiled(query, key, dtype, causal):
    arrays = _arrays((query, key), dtype, seed=45)
    scale = 1 / np.sqrt(query[-1])
    want = _torch(arrays, causal, scale)
    for compiled in (False, True):
        got, out = _ours(arrays, causal, scale, compiled)
        if not compiled:
            assert out.grad_fn.name() == "AttentionBackward0"
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, **TOLERANCE[dtype])


@pytest.mark.parametrize("query, key, mask_shape, kind, dtype", [
    ((2, 2, 20, 16), (2, 2, 32, 16), (2, 1, 20, 32), "bool", "float32"),
    ((2, 13, 8), (2, 16, 8), (13, 16), "additive", "float64")],
    ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else str(c))
def test_masked_kernels_with_transposed_blocks_match_torch(query, key, mask_shape, kind, dtype):
    """The masked forward at shapes whose keys are transposed as whole blocks, past 8-row blocks, L != S."""
    arrays = _arrays((query, key), dtype, seed=46)
    mask = _mask(mask_shape, kind, dtype, np.random.default_rng(3))
    q, k, v = (torch.from_numpy(a).requires_grad_() for a in arrays[:3])
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(mask), scale=0.3)
    out.backward(torch.from_numpy(arrays[3]))
    jq, jk, jv = (jt.from_numpy(a.copy()).requires_grad_() for a in arrays[:3])
    jout = F.scaled_dot_product_attention(jq, jk, jv, attn_mask=jt.from_numpy(mask), scale=0.3)
    (jout * jt.from_numpy(arrays[3])).sum().backward()
    assert jout.grad_fn.name() == "AttentionBackward0"
    for g, w in zip((jout, jq.grad, jk.grad, jv.grad), (out, q.grad, k.grad, v.grad)):
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), **TOLERANCE[dtype])


def _interleaves(text, lanes):
    """How many shuffles of ``text`` interleave two rows' lower halves (`transpose_block`'s first mask)."""
    low = ", ".join(f"i32 {j // 2 + (lanes if j % 2 else 0)}" for j in range(lanes))
    return len(re.findall(re.escape(f"<{lanes} x i32> <{low}>"), text))


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("dtype, D, blocks", [("float32", 32, True), ("float32", 16, True), ("float64", 8, True),
                                              ("float32", 33, False), ("float32", 8, False)])
def test_whole_square_blocks_are_transposed_in_registers_others_element_by_element(
        monkeypatch, direction, dtype, D, blocks):
    """The keys (forward) or values (backward) are transposed by blocks of one vector's lanes square where D
    is a whole number of them (one loop over the rounds per kernel, each round w/2 shuffles of lower halves
    and w/2 of upper ones), over S's whole vectors of rows; the rows after them (S a run-time length: a loop
    that runs none where S is whole vectors) and every row where D is not whole vectors element by element."""
    text = _kernel_ir(monkeypatch, direction, dtype, D, True)
    lanes = 16 if dtype == "float32" else 8
    assert _interleaves(text, lanes) == (lanes // 2 if blocks else 0)
    assert ('"tround' in text) == blocks and '"cc' in text


def test_register_blocks_take_8_rows_on_avx512_and_4_elsewhere(monkeypatch):
    """8 rows by 2 vectors of accumulators where the target has AVX-512's 32 vector registers; a narrower
    target (x86-64-v2, v3: a 64-byte vector in 2 or 4 registers) keeps 4 rows. The products' FMAs are
    emitted once per block: rows x vectors of them per product (2 products forward, 4 backward), and rows
    x 1 for the scores' last block of one vector (`test_the_scores_last_block_may_take_one_vector`)."""
    class Target:
        def __init__(self, features):
            self.features = features

        def required(self):
            return self.features
    for features, rows in (({"avx512f", "avx2", "fma"}, 8), ({"avx2", "fma"}, 4), ({"sse4.2"}, 4)):
        monkeypatch.setattr(kernels, "selected", lambda features=features: Target(features))
        assert kernels.block_rows() == rows
        for direction, products in (("forward", 2), ("backward", 4)):
            text = _kernel_ir(monkeypatch, direction, "float32", 32, True)
            assert text.count("fmul contract") == products * rows * kernels._VECS + rows


def test_the_softmax_runs_each_pass_for_4_rows_of_an_8_row_block_in_a_loop(monkeypatch):
    """On AVX-512 a row block has 8 rows; its softmax runs as a loop over groups of 4 rows, each pass one
    loop whose body runs the group's 4 rows (session 53: a loop per row and pass before), so that the passes'
    IR is not doubled."""
    monkeypatch.setattr(kernels, "block_rows", lambda: 8)
    text = _kernel_ir(monkeypatch, "forward", "float32", 32, True)
    heads = [m.group(1) for m in re.finditer(r'^"?(mx|ex|sm)(?:\.\d+)?"?:', text, re.M)]
    assert heads == ["sm", "mx", "ex"]
    assert text.count("call <16 x float> @\"jitorch.attention.exp.v16f32\"") == 4


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_weights_are_the_exponentials_times_the_rows_reciprocal(dtype):
    """One division a row, then a product per weight: the weights within an ulp or two of torch's softmax,
    each row summing to 1 within the dtype's rounding, on a causal 8-row-block tile."""
    rng = np.random.default_rng(45)
    B, L, D = 3, 24, 16
    q, k, v = (rng.standard_normal((B, L, D)).astype(dtype) for _ in range(3))
    out, p = np.empty_like(q), np.empty((B, L, L), dtype)
    kernel = kernels.attention_kernel("forward", dtype, L, L, D, True, 0.25, batch=(B,))
    kernel.run_tiles([q, k, v, out, p], B)
    scores = torch.from_numpy(q) @ torch.from_numpy(k).transpose(-2, -1) * 0.25
    scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    want = torch.softmax(scores, -1).numpy()
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(p, want, rtol=4 * eps, atol=4 * eps)
    np.testing.assert_allclose(p.sum(-1), 1, rtol=0, atol=L * eps)
    assert np.all(p[:, np.triu_indices(L, 1)[0], np.triu_indices(L, 1)[1]] == 0)


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("causal", [True, False])
def test_the_scores_last_block_may_take_one_vector(monkeypatch, direction, causal):
    """The scores (and the backward's dP) are computed in blocks of 2 vectors, then, behind a branch, one
    block of 1 vector where the columns up to a row block's last key (all S without the causal mask) end in
    its first vector: a causal GPT row block's scores end there half the time. (Values: the causal and ragged
    cases above.)"""
    blocks = []
    real = kernels._Tile.column_blocks

    def recording(self, b, ncols, body):
        real(self, b, ncols, lambda b, c0, vecs: blocks.append(vecs) or body(b, c0, vecs))
    monkeypatch.setattr(kernels._Tile, "column_blocks", recording)
    _kernel_ir(monkeypatch, direction, "float32", 16, causal)
    assert blocks == [2, 1]


@pytest.mark.parametrize("D, dtype", [(32, "float32"), (16, "float64"), (12, "float32")])
def test_heads_split_from_one_product_match_torch_eager_and_compiled(D, dtype):
    """q, k and v as a GPT's step has them, views of one (B, T, 3 * H * D) product whose rows hold all heads:
    the blocks of keys and values are transposed from rows 3 * H * D elements apart (D 12: element by
    element), the gradients written into their slices of one tensor."""
    B, T, H = 2, 40, 3
    x = np.random.default_rng(45).standard_normal((B, T, 3 * H * D)).astype(dtype)
    g = np.random.default_rng(46).standard_normal((B, H, T, D)).astype(dtype)

    def heads(t):
        return [t[:, :, n * H * D:(n + 1) * H * D].reshape(B, T, H, D).transpose(1, 2) for n in range(3)]
    tx = torch.from_numpy(x).requires_grad_()
    tout = torch.nn.functional.scaled_dot_product_attention(*heads(tx), is_causal=True)
    tout.backward(torch.from_numpy(g))

    def step(x, g):
        out = F.scaled_dot_product_attention(*heads(x), is_causal=True)
        (out * g).sum().backward()
        return out
    for run in (step, jt.compile(step)):
        jx = jt.from_numpy(x.copy()).requires_grad_()
        out = run(jx, jt.from_numpy(g))
        if run is step:
            assert out.grad_fn.name() == "AttentionBackward0"
        np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), **TOLERANCE[dtype])
        np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), **TOLERANCE[dtype])
