"""The fused attention op ``_attention`` and its kernels (jitorch/codegen/attention.py): values and gradients
against torch, eager and compiled, float32 within float tolerance and float64 tight; the NumPy path where
no kernel serves; the tiles split on threads give the same bits; the CUDA path keeps the composition."""

import re
import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch import profiler
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.codegen import attention as kernels
from jitorch.codegen import mathlib
from jitorch.nn import functional as F
from jitorch.ops import attention
from jitorch.runtime import threads
from jitorch.runtime.cuda_backend import use_backend

TOLERANCE = {"float32": dict(rtol=1e-5, atol=2e-6), "float64": dict(rtol=1e-12, atol=1e-13)}
# (query shape, key shape, dtype, causal): GPT's tile (64 x 64 x 32), ragged sizes (no whole vectors, L > S and
# L < S), one tile with no batch dims, and head dims past one register block
CASES = [((2, 2, 64, 32), (2, 2, 64, 32), "float32", True), ((2, 3, 9, 5), (2, 3, 7, 5), "float64", True),
         ((2, 3, 9, 5), (2, 3, 7, 5), "float32", False), ((3, 6, 20), (3, 13, 20), "float64", True),
         ((5, 8), (5, 8), "float32", False), ((1, 2, 17, 70), (1, 2, 17, 70), "float64", False)]


def _arrays(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    (qs, ks) = shapes
    return [rng.standard_normal(s).astype(dtype) for s in (qs, ks, ks, qs)]  # q, k, v, grad_out


def _torch(arrays, causal, scale):
    q, k, v = (torch.from_numpy(a).requires_grad_() for a in arrays[:3])
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    out.backward(torch.from_numpy(arrays[3]))
    return [t.detach().numpy() for t in (out, q.grad, k.grad, v.grad)]


def _ours(arrays, causal, scale, compiled):
    q, k, v = (jt.from_numpy(a.copy()).requires_grad_() for a in arrays[:3])
    g = jt.from_numpy(arrays[3])

    def step(q, k, v, g):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        (out * g).sum().backward()
        return out
    out = (jt.compile(step) if compiled else step)(q, k, v, g)
    return [t.detach().numpy() for t in (out, q.grad, k.grad, v.grad)], out


def _spans(fn):
    """The op names a profiler saw while ``fn`` ran."""
    with profiler.profile() as prof:
        fn()
    return {e.key for e in prof.key_averages()}


@pytest.mark.parametrize("query, key, dtype, causal", CASES,
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else str(c))
def test_values_and_gradients_match_torch_eager_and_compiled(query, key, dtype, causal):
    arrays = _arrays((query, key), dtype)
    scale = 0.3 if query[-1] == 20 else 1 / np.sqrt(query[-1])
    want = _torch(arrays, causal, scale)
    for compiled in (False, True):
        got, out = _ours(arrays, causal, scale, compiled)
        if not compiled:  # the fused op made the node, not the composition
            assert out.grad_fn.name() == "AttentionBackward0"
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            np.testing.assert_allclose(g, w, **TOLERANCE[dtype])


def test_a_compiled_step_runs_the_fused_ops_and_no_softmax():
    arrays = _arrays(CASES[0][:2], "float32")
    q, k, v = (jt.from_numpy(a).requires_grad_() for a in arrays[:3])

    @jt.compile
    def step(q, k, v):
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    step(q, k, v)
    names = _spans(lambda: step(q, k, v))
    assert {"_attention", "_attention_backward"} <= names
    assert not any("softmax" in n for n in names)


def test_the_kernels_serve_gpts_tiles_and_refuse_what_overflows_the_stack():
    assert kernels.attention_kernel("forward", np.float32, 64, 64, 32, True, 0.125) is not None
    assert kernels.attention_kernel("backward", np.float64, 64, 64, 64, False, 0.125) is not None
    # the tile's buffers would take MBs of stack: the op composes NumPy products instead
    assert kernels.attention_kernel("backward", np.float32, 8, 4096, 64, True, 0.125) is None


@pytest.mark.parametrize("causal", [True, False])
def test_shapes_no_kernel_serves_take_numpys_products(monkeypatch, causal):
    """Where no kernel is registered (or one cannot be built) the op's NumPy path gives torch's values."""
    arrays = _arrays(((2, 3, 7, 6), (2, 3, 9, 6)), "float64")
    fused, _ = _ours(arrays, causal, 0.4, compiled=False)
    monkeypatch.setattr(attention, "ATTENTION_KERNEL", None)
    got, out = _ours(arrays, causal, 0.4, compiled=False)
    assert out.grad_fn.name() == "AttentionBackward0"
    for g, w, f in zip(got, _torch(arrays, causal, 0.4), fused):
        np.testing.assert_allclose(g, w, **TOLERANCE["float64"])
        np.testing.assert_allclose(g, f, **TOLERANCE["float64"])


def test_tiles_split_on_two_threads_give_one_threads_bits(monkeypatch):
    # (the thread count set through the settings the test restores: set_num_threads would also leave products
    # split for the tests after it)
    arrays = _arrays(((12, 4, 64, 32), (12, 4, 64, 32)), "float32")
    forks = threads.counters["forks"]
    monkeypatch.setitem(threads._settings, "threads", 1)
    one, _ = _ours(arrays, True, 0.125, compiled=False)
    assert threads.counters["forks"] == forks
    monkeypatch.setitem(threads._settings, "threads", 2)
    two, _ = _ours(arrays, True, 0.125, compiled=False)
    assert threads.counters["forks"] > forks
    for a, b in zip(one, two):
        assert np.array_equal(a, b)


def test_no_grad_dropout_and_half_types_keep_the_composition():
    q = jt.randn(1, 2, 4, 8, requires_grad=True)
    with pytest.raises(RuntimeError):  # (a mask of another float dtype: the composition refuses it, as torch)
        F.scaled_dot_product_attention(q, q, q, attn_mask=jt.ones(4, 4, dtype=jt.float64))
    assert F.scaled_dot_product_attention(q, q, q, attn_mask=jt.ones(3, 1, 4, 4, dtype=jt.bool)).grad_fn.name() != \
        "AttentionBackward0"  # (a mask of more batch than the scores: the composition broadcasts or refuses)
    assert F.scaled_dot_product_attention(q, q, q, dropout_p=0.5).grad_fn.name() != "AttentionBackward0"
    h = jt.randn(1, 2, 4, 8, dtype=jt.bfloat16, requires_grad=True)
    assert F.scaled_dot_product_attention(h, h, h).grad_fn.name() != "AttentionBackward0"
    with jt.no_grad():
        assert F.scaled_dot_product_attention(q, q, q, is_causal=True).grad_fn is None
    with pytest.raises(RuntimeError, match="attn_mask should not be set when is_causal"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=jt.ones(4, 4, dtype=jt.bool), is_causal=True)


# (query, key, mask shape, mask kind, dtype): a bool mask with a row of no keys, broadcast over the batch; an
# additive mask with a row of -inf broadcast over the heads at GPT's tile; a ragged one broadcast over the
# keys (a stride-0 column, copied); one tile of no batch dims
MASKED = [((2, 3, 9, 5), (2, 3, 7, 5), (9, 7), "bool", "float32"),
          ((2, 2, 64, 32), (2, 2, 64, 32), (2, 1, 64, 64), "additive", "float32"),
          ((2, 3, 17, 8), (2, 3, 33, 8), (3, 17, 1), "additive", "float64"),
          ((5, 8), (6, 8), (5, 6), "bool", "float64")]


def _mask(shape, kind, dtype, rng):
    if kind == "bool":
        mask = rng.random(shape) < 0.6
        mask[..., 1, :] = False  # (a query allowed no key: zeros, as torch's)
        return mask
    mask = rng.standard_normal(shape).astype(dtype)
    mask[..., 2, :] = -np.inf
    return mask


@pytest.mark.parametrize("query, key, mask_shape, kind, dtype", MASKED,
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else str(c))
def test_masked_values_and_gradients_match_torch_eager_and_compiled(query, key, mask_shape, kind, dtype):
    """A bool (True: allowed) or additive ``attn_mask`` fused into the forward kernel's scores, torch's
    semantics: rows with every key masked give zeros, forward and backward; an additive mask that requires
    grad (a learned bias) gets torch's gradient."""
    arrays = _arrays((query, key), dtype)
    mask = _mask(mask_shape, kind, dtype, np.random.default_rng(1))
    learned = kind == "additive"  # (an additive mask requiring grad: a learned bias; the scores' gradient)
    q, k, v = (torch.from_numpy(a).requires_grad_() for a in arrays[:3])
    tmask = torch.from_numpy(mask).requires_grad_(learned)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=tmask, scale=0.3)
    out.backward(torch.from_numpy(arrays[3]))
    want = [t.detach().numpy() for t in (out, q.grad, k.grad, v.grad)] + ([tmask.grad.numpy()] if learned else [])
    assert not np.isnan(want[0]).any() and np.all(want[0][..., 1, :] == 0) == (kind == "bool")

    def step(q, k, v, mask, g):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
        (out * g).sum().backward()
        return out
    for compiled in (False, True):
        q, k, v = (jt.from_numpy(a.copy()).requires_grad_() for a in arrays[:3])
        jmask = jt.from_numpy(mask.copy()).requires_grad_(learned)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (no eager fallback of the compiled step)
            out = (jt.compile(step) if compiled else step)(q, k, v, jmask, jt.from_numpy(arrays[3]))
        if not compiled:
            assert out.grad_fn.name() == "AttentionBackward0"
        got = [t.detach().numpy() for t in (out, q.grad, k.grad, v.grad)] + ([jmask.grad.numpy()] if learned else [])
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, **TOLERANCE[dtype])


def test_a_mask_takes_the_kernels_and_their_numpy_path_gives_the_same_values(monkeypatch):
    """A ragged additive mask with a row of -inf: the masked kernel (built, masked loads past the row's end)
    and the op's NumPy path agree, zero weights on the empty row."""
    arrays = _arrays(((2, 3, 9, 5), (2, 3, 7, 5)), "float64")
    mask = _mask((3, 9, 7), "additive", "float64", np.random.default_rng(2))
    q, k, v = (jt.from_numpy(a) for a in arrays[:3])
    built = []
    real = attention.ATTENTION_KERNEL

    def kernel_of(*args):
        built.append((args[0], args[-1], real(*args)))
        return built[-1][-1]
    monkeypatch.setattr(attention, "ATTENTION_KERNEL", kernel_of)
    kernel = [t.numpy() for t in jt.ops.registry.OPS["_attention"](q, k, v, jt.from_numpy(mask), False, 0.3)]
    assert [(direction, masked) for direction, masked, _ in built] == [("forward", True)] and built[0][2] is not None
    monkeypatch.setattr(attention, "ATTENTION_KERNEL", None)
    numpy = [t.numpy() for t in jt.ops.registry.OPS["_attention"](q, k, v, jt.from_numpy(mask), False, 0.3)]
    np.testing.assert_allclose(kernel[0], numpy[0], **TOLERANCE["float64"])
    np.testing.assert_allclose(kernel[1].view(np.float64), numpy[1].view(np.float64), **TOLERANCE["float64"])
    assert np.all(kernel[1].view(np.float64)[..., 2, :] == 0)


def test_the_ops_refuse_what_the_kernels_cannot_read():
    q = jt.randn(2, 4, 8)
    op = jt.ops.registry.OPS["_attention"]
    with pytest.raises(RuntimeError, match=r"of one batch shape, got \[2, 4, 8\], \[1, 4, 8\]"):
        op(q, jt.randn(1, 4, 8), jt.randn(1, 4, 8), None, False, 0.5)
    with pytest.raises(RuntimeError, match="float32 or float64"):
        op(q.half(), q.half(), q.half(), None, False, 0.5)
    with pytest.raises(RuntimeError, match=r"does not broadcast to the scores' shape \[2, 4, 4\]"):
        op(q, q, q, jt.ones(3, 4, 4, dtype=jt.bool), False, 0.5)
    with pytest.raises(RuntimeError, match="dtype bool or the query's"):
        op(q, q, q, jt.ones(4, 4, dtype=jt.int64), False, 0.5)
    _, reserve = op(q, q, q, None, False, 0.5)
    backward = jt.ops.registry.OPS["_attention_backward"]
    with pytest.raises(RuntimeError, match="expected the reserve of _attention"):
        backward(q, q, q, q, reserve[:, :3], False, 0.5, False)


def test_a_double_backward_raises_as_through_torchs_fused_kernels():
    q = jt.randn(1, 2, 4, 8, dtype=jt.float64, requires_grad=True)
    out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    (grad,) = jt.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError):
        grad.sum().backward()


def test_cuda_keeps_the_composition():
    """The CUDA lowering is not done: CUDA tensors (the fake device, running the generated kernels) compose
    matmul, softmax and matmul, with torch's values."""
    arrays = _arrays(((2, 2, 9, 8), (2, 2, 9, 8)), "float32")
    with use_backend(FakeBackend()):
        q, k, v, g = (jt.from_numpy(a).to("cuda") for a in arrays)
        for t in (q, k, v):
            t.requires_grad_()
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert out.grad_fn.name() != "AttentionBackward0" and out.device.type == "cuda"
        out.backward(g)
        got = [out.detach().cpu().numpy(), *(t.grad.cpu().numpy() for t in (q, k, v))]
    for a, w in zip(got, _torch(arrays, True, None)):
        np.testing.assert_allclose(a, w, **TOLERANCE["float32"])


def test_one_tensor_as_query_key_and_value_and_keys_broadcast_over_the_batch():
    """The kernels read their inputs where they lie: one tensor three times (self-attention's q = k = v) and
    keys and values expanded over the batch (stride 0), each gradient summed by autograd as torch's."""
    a = np.random.default_rng(1).standard_normal((2, 3, 9, 8))
    x, kv = jt.from_numpy(a).requires_grad_(), jt.from_numpy(a[:1].copy()).requires_grad_()
    tx, tkv = torch.from_numpy(a).requires_grad_(), torch.from_numpy(a[:1].copy()).requires_grad_()
    for lib, q, k in ((F, x, kv), (torch.nn.functional, tx, tkv)):
        lib.scaled_dot_product_attention(q, q, q, is_causal=True).square().sum().backward()
        lib.scaled_dot_product_attention(q, k.expand(2, 3, 9, 8), k.expand(2, 3, 9, 8)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), **TOLERANCE["float64"])
    np.testing.assert_allclose(kv.grad.numpy(), tkv.grad.numpy(), **TOLERANCE["float64"])


def _kernel_ir(monkeypatch, direction, dtype, D, causal):
    """The LLVM IR text a build of the kernel (contiguous buffers, one batch dim) hands to the linker (which
    keys the disk cache on it), built here, not taken from the cache: L and S are the kernel's run-time
    arguments."""
    seen = []
    link = kernels.cpu.link_kernel
    monkeypatch.setattr(kernels.cpu, "link_kernel", lambda source, cache: seen.append(source.llvm_ir) or
                        link(source, cache))
    monkeypatch.setattr(kernels, "cached_ir", lambda what, text, build, cache, fingerprint: build())
    assert kernels._build(direction, dtype, D, causal, 1, False, (D,) * 8) is not None
    (text,) = seen
    return text


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_the_kernels_ir_stays_small(monkeypatch, direction):
    """Every process builds a kernel's IR to look its code up in the disk cache: vector constants are spelled
    ``splat``/``zeroinitializer`` (llvmlite's lane-by-lane spelling was most of 60 KB) and each product's
    epilogue is emitted once, in a loop. GPT's tile's IR was 59-65 KB, then 26-34 KB; the next tile's prefetches
    and the forward's softmax emitted for each row of a row block (its passes interleaved, 12-16% faster) make
        it 39-46 KB; 8-row register blocks on AVX-512 (twice the broadcasts and FMAs per product), the blocks of
    the transposing copy and the scores' last block of one vector 78-80 KB (4-row blocks: 60-69 KB), whose
    optimisation and code took 35-40 ms more (cached: a later process builds none,
    `test_a_new_process_takes_the_kernels_ir_from_the_cache`). Session 57: L, S and the batch's strides are
    run-time values (one kernel for every length), their row blocks clamped at the tile's last row: 91-97 KB
    (4-row blocks: 73-77 KB), optimised in about main's time per kernel, built once per head dim."""
    text = _kernel_ir(monkeypatch, direction, "float32", 32, True)
    if mathlib._reads_splat():
        limits = {8: {"forward": 95_000, "backward": 100_000}, 4: {"forward": 80_000, "backward": 77_000}}
        assert len(text) < limits[kernels.block_rows()][direction]
        # (the backward's only vector constant since the scale became a run-time value is zero)
        assert "<float 0x" not in text and ("splat (float" in text) == (direction == "forward")
    else:  # (llvmlite 0.44's LLVM 15: the long spelling, as in `test_vector_constants_are_spelled_lane_by_lane...`)
        assert "splat" not in text
    rows = kernels.block_rows()  # (and the scores' last block of one vector: test_attention45)
    assert text.count("fmul contract") == {"forward": 2, "backward": 4}[direction] * rows * kernels._VECS + rows


@pytest.mark.parametrize("direction, memsets", [("forward", 2), ("backward", 2)])
def test_a_tile_prefetches_the_next_and_zeroes_what_follows_its_keys_without_a_call(monkeypatch, direction, memsets):
    """Each tile hints the next tile's rows into the cache (a GPT's heads lie a row of q, k and v apart, where
    no hardware prefetcher ran ahead: in a training step the kernels took 1.4-2x their time on warm data), and a
    row's weights (forward) or scores' gradients (backward) after its keys are zeroed in the loop that computes
    the others: a loop of their own became a ``memset`` call per row, which saved and restored every vector
    register around it. The memsets left are the stack buffers', once per call (the forward's keys and its
    row block's scores, which since session 57 every kernel has: whether S is whole register blocks is known
    at run time)."""
    text = _kernel_ir(monkeypatch, direction, "float32", 32, True)
    assert text.count('call void @"llvm.prefetch.p0"') >= 3
    assert str(kernels.cpu.optimise(text)).count("call void @llvm.memset") == memsets


def test_the_softmax_of_a_row_block_runs_each_pass_for_every_row_before_the_next(monkeypatch):
    """A row's softmax is a chain of dependent steps (its maximum, then the sum of its exponentials, each
    ended by a tree over the lanes); emitted one row after another, the core waited on each chain. The
    forward runs each pass for the 4 rows of a row block before the next pass (the rows' arithmetic is
    unchanged: same bits, 12-16% faster on GPT's tile), since session 53 in one loop per pass whose body
    runs the 4 rows: a maximum loop, then an exponential loop."""
    text = _kernel_ir(monkeypatch, "forward", "float32", 32, True)
    heads = [m.group(1) for m in re.finditer(r'^"?(mx|ex)(?:\.\d+)?"?:', text, re.M)]
    assert heads == ["mx", "ex"]


@pytest.mark.parametrize("S", [64, 48])
def test_the_weights_after_each_rows_keys_are_positive_zeros_over_whatever_the_buffer_held(S):
    """The forward writes every weight of a causal tile, zeros after the row's keys, over a buffer full of
    NaNs (as the arena hands out memory); its output is the composition's within tolerance, and the backward
    reading those weights gives torch's gradients."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 3, S, 32)).astype(np.float32) for _ in range(3))
    out, p = np.full((2, 3, S, 32), np.nan, np.float32), np.full((2, 3, S, S), np.nan, np.float32)
    kernel = kernels.attention_kernel("forward", np.float32, S, S, 32, True, 0.25, (2, 3))
    kernel.run_tiles([q, k, v, out, p], 6)
    future = np.triu(np.ones((S, S), bool), 1)
    assert (p[..., future] == 0).all() and not np.signbit(p[..., future]).any()
    tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True, scale=0.25)
    np.testing.assert_allclose(out, want.detach().numpy(), **TOLERANCE["float32"])
    grad_out = rng.standard_normal(out.shape).astype(np.float32)
    grads = [np.full(a.shape, np.nan, np.float32) for a in (q, k, v)]
    kernels.attention_kernel("backward", np.float32, S, S, 32, True, 0.25, (2, 3)).run_tiles(
        [q, k, v, p, grad_out, *grads], 6)
    want.backward(torch.from_numpy(grad_out))
    for got, t in zip(grads, (tq, tk, tv)):
        np.testing.assert_allclose(got, t.grad.numpy(), **TOLERANCE["float32"])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_exponentials_of_differences_below_the_floor_are_selected_out_as_positive_zeros(monkeypatch, dtype):
    """The forward's exponential pass selects the lanes whose difference from the row's maximum lies below
    ``_EXP_FLOOR`` (a causal row's -inf past its keys) to 0 before the exp and to +0 after it: exp computed on
    them rounded an underflowing product, a microcode assist on Intel cores (GPT's float32 tile forward 420 ->
    268 µs thread CPU on a Xeon), and the softmax's own exp (`_exp_nonpositive`, no clamps, one-step scaling)
    holds only above the floor, where its weights are no subnormals. Scores here are exact (integer keys,
    one-hot queries, scale 1) and reach each side of the floor: weights +0 below it, torch's softmax above it
    (within e**floor: the largest weight taken as 0)."""
    floor = kernels._EXP_FLOOR[dtype == "float64"]
    S, D = 48, 16
    k = np.zeros((1, S, D), dtype)
    k[0, :, 0] = -np.linspace(0, 1.2 * -floor, S).round()  # differences 0 down past the floor
    k[0, :, 1] = np.arange(S)  # (the second query's scores: all within range)
    q = np.zeros((1, S, D), dtype)
    q[0, ::2, 0] = 1
    q[0, 1::2, 1] = 1
    v = np.random.default_rng(0).standard_normal((1, S, D)).astype(dtype)
    out, p = np.full_like(q, np.nan), np.full((1, S, S), np.nan, dtype)
    kernels.attention_kernel("forward", dtype, S, S, D, False, 1.0, (1,)).run_tiles([q, k, v, out, p], 1)
    scores = q[0] @ k[0].T
    below = (scores - scores.max(axis=1, keepdims=True)) < floor
    assert below.any() and (p[0][below] == 0).all() and not np.signbit(p[0][below]).any()
    want = torch.softmax(torch.from_numpy(scores), dim=1).numpy()
    assert ((want > 0) & (want < np.finfo(dtype).tiny)).any()  # (subnormal weights: +0 here)
    np.testing.assert_allclose(p[0], want, rtol=TOLERANCE[dtype]["rtol"], atol=float(np.exp(floor)))
    assert (p[0][~below] > 0).all()
    text = _kernel_ir(monkeypatch, "forward", dtype, 32, True)
    assert re.search(r"= fcmp olt .*\n.*= select .*\n.*call .*jitorch\.attention\.exp", text)


def test_vector_constants_are_spelled_lane_by_lane_for_an_llvm_without_splat(monkeypatch):
    """llvmlite 0.44 (the oldest jitorch takes) carries LLVM 15, whose parser refuses ``splat (...)``: the
    kernels, built with the long spelling there, still link (regression: they failed to parse there)."""
    monkeypatch.setattr(mathlib, "_reads_splat", lambda: False)
    text = _kernel_ir(monkeypatch, "forward", "float32", 32, True)
    assert "splat" not in text and "<float 0x" in text
    kernels.cpu.optimise(text)


def test_a_ragged_tiles_transposing_copies_stay_loops(monkeypatch):
    """A short ragged tile (float64, 17 x 17 x 70) was unrolled over its transposing copy's rows, each a copy
    of the vectorised loop over the row: 350 KB of optimised IR, 1.2-1.9 s to compile both kernels. The row
    loop is marked to be kept, and the ragged rows are stored with masked stores, not lane by lane."""
    text = _kernel_ir(monkeypatch, "backward", "float64", 70, False)
    assert "llvm.loop.unroll.disable" in text and "llvm.masked.store" in text
    # against the same IR without the mark (a byte bound held on rocketlake, not with LLVM 15's AVX-512 code on
    # znver4: 346 KB kept, 788 KB unmarked; newest LLVM 154 against 407 KB, x86-64-v2 102-116 against 153-204 KB)
    kept = len(str(kernels.cpu.optimise(text)))
    unmarked = len(str(kernels.cpu.optimise(text.replace('!"llvm.loop.unroll.disable"', '!"llvm.loop.mustprogress"'))))
    assert kept < 0.75 * unmarked


def test_a_new_process_takes_the_kernels_ir_from_the_cache(monkeypatch, tmp_path):
    """The IR's text keys the object code, and building it was 15-25 ms of Python in each process's first
    call: a later process (a fresh cache object on the same folder) takes it from the cache by the kernel's
    parameters and builds none; other parameters or the long constant spelling build their own."""
    from jitorch.codegen.cache import KernelCache
    monkeypatch.setattr(kernels, "default_cache", lambda: KernelCache(tmp_path))
    layouts = tuple(kernels._contiguous((2,), *shape) for shape in ((9, 8), (7, 8), (7, 8), (9, 8), (9, 7)))
    args = ("forward", "float32", 8, True, 1, False, (8, 8, 8, 8, None))
    first = kernels._build(*args)
    built = []
    module = kernels._module
    monkeypatch.setattr(kernels, "_module", lambda *a: built.append(a[1:]) or module(*a))
    again = kernels._build(*args)
    assert built == [] and again.source.llvm_ir == first.source.llvm_ir
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 9, 8), (2, 7, 8), (2, 7, 8)))
    outs = [(np.empty((2, 9, 8), np.float32), np.empty((2, 9, 7), np.float32)) for _ in range(2)]
    for compiled, (out, p) in zip((first, again), outs):
        kernels.AttentionKernel(compiled, kernels._params(9, 7, 0.25, (2,), layouts), 9 * 7 * 8).run_tiles(
            [q, k, v, out, p], 2)
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])
    kernels._build(*args[:3], False, *args[4:])
    spelled_short = mathlib._reads_splat()  # (False on LLVM 15, which cannot parse the short spelling)
    monkeypatch.setattr(mathlib, "_reads_splat", lambda: False)
    assert kernels._build(*args) is not None
    assert len(built) == (2 if spelled_short else 1)
