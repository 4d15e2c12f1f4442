"""Session 53's attention changes: the forward softmax's own exponential (`_exp_nonpositive`), its passes one
loop per row group, and the op's per-call plans (`ops.attention._PLANS`): values and gradients against torch
on shapes that reach each branch, with the fused kernels asserted to have run."""

import numpy as np
import pytest
import torch
from llvmlite import ir

import jitorch as jt
from jitorch.codegen import attention as kernels
from jitorch.codegen import cpu, mathlib
from jitorch.codegen.kernel import I64, KernelSource, counted_loop
from jitorch.codegen.lanes import VECTOR_BYTES
from jitorch.codegen.target import CPU
from jitorch.nn import functional as F
from jitorch.ops import attention

TOLERANCE = {"float32": dict(rtol=1e-5, atol=2e-6), "float64": dict(rtol=1e-12, atol=1e-13)}


def _exp_kernel(dtype):
    """A compiled ``y = _exp_nonpositive(x)`` over whole vectors, called as the attention kernels are."""
    t = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    w = VECTOR_BYTES // np.dtype(dtype).itemsize
    vt = ir.VectorType(t, w)
    name = f"test_attention53_exp_{dtype}"
    module = ir.Module(name=name)
    module.triple = CPU.triple
    body = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, t.as_pointer(), t.as_pointer()]),
                       name + "_body")
    body.linkage = "internal"
    b = ir.IRBuilder(body.append_basic_block("entry"))
    x, y = body.args[2:]

    def each(b, n):
        at = b.mul(n, I64(w))
        v = b.load(b.bitcast(b.gep(x, [at]), vt.as_pointer()), align=4)
        b.store(mathlib.run(b, kernels._exp_nonpositive, v), b.bitcast(b.gep(y, [at]), vt.as_pointer()), align=4)
    counted_loop(b, body.args[0], body.args[1], I64(1), each, "v")
    b.ret_void()
    CPU.add_entry(module, body, [0, 1], 0, "thread")
    source = KernelSource(name, "test", ["exp"], [0], [1], 0, 0, llvm_ir=str(module))
    return kernels.AttentionKernel(cpu.link_kernel(source), np.zeros(1, np.int64), 1), w


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_softmax_exponential_is_within_an_ulp_of_exp_down_to_the_floor(dtype):
    """`_exp_nonpositive` (no clamps, 2**q added to the exponent field) against exp in long double over
    [floor, 0]: uniform differences, small ones as most of a softmax's, 0, -0 and the floor itself."""
    rng = np.random.default_rng(53)
    floor = kernels._EXP_FLOOR[dtype == "float64"]
    x = np.concatenate([rng.uniform(floor, 0, 60_000), -rng.exponential(1.0, 60_000),
                        [0.0, -0.0, floor, floor / 2, -np.finfo(dtype).tiny]]).astype(dtype)
    kernel, w = _exp_kernel(dtype)
    x = np.concatenate([x, np.zeros(-len(x) % w, dtype)])
    y = np.full_like(x, np.nan)
    kernel.run_tiles([x, y], len(x) // w)
    want = np.exp(x.astype(np.longdouble))
    ulps = np.abs((y.astype(np.longdouble) - want) / np.spacing(y).astype(np.longdouble))
    assert ulps.max() <= 1.0
    assert (y[x == 0] == 1).all() and (y > 0).all()


@pytest.mark.parametrize("payload", [0x7FC00000, 0x7FC001FF, 0x7FC00101, 0xFFC000FF])
def test_a_nan_score_of_any_payload_makes_its_rows_weights_nan(payload):
    """Regression: `_exp_nonpositive` adds the low bits of a NaN's payload into the exponent field, which made
    a row with a NaN score (a query holding a NaN with low payload bits set) weights of numbers, silently;
    the softmax keeps NaN lanes NaN: that row's weights and output are NaN, as torch's, the other rows'
    torch's values."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 16, 16)).astype(np.float32) for _ in range(3))
    q[0, 5, 3] = np.array([payload], np.uint32).view(np.float32)[0]
    out, p = np.empty_like(q), np.empty((1, 16, 16), np.float32)
    kernels.attention_kernel("forward", np.float32, 16, 16, 16, False, 0.25, (1,)).run_tiles([q, k, v, out, p], 1)
    want = torch.nn.functional.scaled_dot_product_attention(*map(torch.from_numpy, (q, k, v)), scale=0.25).numpy()
    assert np.isnan(want[0, 5]).all() and np.isnan(out[0, 5]).all() and np.isnan(p[0, 5]).all()
    rest = np.arange(16) != 5
    np.testing.assert_allclose(out[0, rest], want[0, rest], **TOLERANCE["float32"])


def _recording(monkeypatch):
    """The registered kernel function wrapped to record (direction, whether a kernel came back) per call."""
    built, real = [], attention.ATTENTION_KERNEL

    def kernel_of(*args):
        kernel = real(*args)
        built.append((args[0], kernel is not None))
        return kernel
    monkeypatch.setattr(attention, "ATTENTION_KERNEL", kernel_of)
    return built


def _torch(q, k, v, g, mask, causal, scale):
    tq, tk, tv = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=None if mask is None else torch.from_numpy(mask), is_causal=causal, scale=scale)
    out.backward(torch.from_numpy(g))
    return [t.detach().numpy() for t in (out, tq.grad, tk.grad, tv.grad)]


def _ours(q, k, v, g, mask, causal, scale):
    tq, tk, tv = (jt.from_numpy(a).requires_grad_() for a in (q, k, v))
    out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=None if mask is None else jt.from_numpy(mask),
                                         is_causal=causal, scale=scale)
    assert out.grad_fn.name() == "AttentionBackward0"
    out.backward(jt.from_numpy(g))
    return [t.detach().numpy() for t in (out, tq.grad, tk.grad, tv.grad)]


# (query shape, key shape, dtype, causal, mask kind): GPT's tile (the row groups' loops over 1 to 4 vectors),
# L > S and L < S causal, odd head dims (padded rows), a remainder of single rows, bool and additive masks
# (a row with every key masked), float64 (8 lanes a vector)
CASES = [((1, 2, 64, 32), (1, 2, 64, 32), "float32", True, None),
         ((2, 21, 12), (2, 13, 12), "float32", True, None),
         ((2, 11, 5), (2, 37, 5), "float64", True, None),
         ((3, 19, 16), (3, 19, 16), "float64", False, None),
         ((2, 10, 7), (2, 33, 7), "float32", False, "bool"),
         ((1, 2, 9, 16), (1, 2, 17, 16), "float64", False, "additive")]


@pytest.mark.parametrize("query, key, dtype, causal, mask_kind", CASES,
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else str(c))
def test_values_and_gradients_match_torch_with_the_fused_kernels(monkeypatch, query, key, dtype, causal, mask_kind):
    rng = np.random.default_rng(sum(query) + sum(key))
    q, g = (rng.standard_normal(query).astype(dtype) for _ in range(2))
    k, v = (rng.standard_normal(key).astype(dtype) for _ in range(2))
    q *= 3  # (scores over a wider range: weights from ~1 down to the floor)
    mask = None
    if mask_kind == "bool":
        mask = rng.random((query[-2], key[-2])) < 0.5
        mask[3] = False  # (a query allowed no key: zeros, as torch's)
    elif mask_kind == "additive":
        mask = rng.standard_normal((query[-2], key[-2])).astype(dtype)
        mask[2] = -np.inf
    scale = 1 / np.sqrt(query[-1])
    built = _recording(monkeypatch)
    got = _ours(q, k, v, g, mask, causal, scale)
    assert built == [("forward", True), ("backward", True)]
    for mine, theirs in zip(got, _torch(q, k, v, g, mask, causal, scale)):
        # (the gradients' sums cancel: the absolute tolerance scales with their largest values)
        tolerance = TOLERANCE[dtype]
        np.testing.assert_allclose(mine, theirs, rtol=tolerance["rtol"],
                                   atol=tolerance["atol"] * max(1.0, np.abs(theirs).max()))


def test_a_call_takes_its_plan_from_the_last_call_of_its_shapes_and_strides(monkeypatch):
    """The op works out a call's kernel (its layouts, its key) once per shapes and strides and registered
    kernel function: a second call of the same arrays' layout asks the registered function for nothing; an
    input the kernels cannot read where it lies (keys whose rows are columns of an array) is copied, each
    call, and the values are torch's."""
    rng = np.random.default_rng(5)
    whole = rng.standard_normal((2, 24, 3, 2, 8)).astype(np.float32)  # (GPT's heads: views of one product)
    q, k, v = (whole[:, :, n].transpose(0, 2, 1, 3) for n in range(3))
    g = rng.standard_normal(q.shape).astype(np.float32)
    built = _recording(monkeypatch)
    first = _ours(q, k, v, g, None, True, 0.3)
    again = _ours(q, k, v, g, None, True, 0.3)
    assert built == [("forward", True), ("backward", True)]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    columns = np.ascontiguousarray(k.swapaxes(-2, -1)).swapaxes(-2, -1)
    got = _ours(q, columns, v, g, None, True, 0.3)
    assert built[2:] == [("forward", True), ("backward", True)]
    plans = [plan for key, plan in attention._PLANS.items() if key[0] is attention.ATTENTION_KERNEL]
    assert sorted(plan[1] for plan in plans) == [(), (), (1,), (1,)]  # (the keys copied, forward and backward)
    for mine, theirs in zip(got, _torch(q, columns, v, g, None, True, 0.3)):
        np.testing.assert_allclose(mine, theirs, **TOLERANCE["float32"])
