"""Every kernel kind the CUDA backend generates is PTX that ptxas assembles for sm_80 and sm_90.

No GPU is needed: `.lower(..., device="cuda")` runs the NVPTX code generator on
any machine, and ptxas (the nvidia-cuda-nvcc wheel) is the check that the
driver would load the result. Kernels are collected per test and assembled in
one parallel batch per architecture.
"""

import re
import time
import zlib

import numpy as np
import pytest

import jitorch as jt
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.codegen.cache import KernelCache
from jitorch.codegen.errors import CompileError
from jitorch.codegen.memo import BoundedMemo
from jitorch.codegen.nvptx import ptx
from jitorch.codegen.nvptx.ptx import check_intrinsics
from jitorch.codegen.nvptx.matmul import matmul_kernel
from jitorch.codegen.nvptx.ptxas import assemble
from jitorch.codegen.nvptx.target import NVPTX
from jitorch.jit import TraceError
from jitorch.ops import registry
from jitorch.runtime.cuda_backend import use_backend
from tests.codegen.test_compiled import CHAINS
from tests.jit.test_trace_ops import split_tensors
from tests.ops.samples import bind, samples

ARCHS = ("sm_80", "sm_90")


def cuda_kernels(fn, *args):
    """The CUDA kernels (`PtxKernel`) of ``fn`` compiled for these arguments."""
    return jt.compile(fn, fullgraph=True).lower(*args, device="cuda").executable.kernels


def emulated_outputs(fn, args):
    """(``fn``'s compiled outputs for ``args`` moved to the emulated GPU, as NumPy arrays; the number of jitorch
    kernels launched): the PTX run by the kernel emulator."""
    with use_backend(FakeBackend(emulate="ptx")) as fake:
        out = jt.compile(fn)(*[a.to("cuda") for a in args])
        launched = len([k for k in fake.launches if k.name.startswith("jitorch")])
        return [t.cpu().numpy() for t in (out if isinstance(out, tuple) else (out,))], launched


def assert_assembles(kernels):
    """ptxas accepts every kernel's PTX for every architecture in ARCHS."""
    texts = {k.asm: k.name for k in kernels}
    assert texts, "no kernels generated"
    for arch in ARCHS:
        errors = [(name, err) for (text, name), err in zip(texts.items(), assemble(list(texts), arch)) if err]
        assert not errors, f"ptxas -arch={arch} rejected {errors[:3]}"


def test_kernels_carry_ptx_and_llvm_ir():
    x = jt.randn(8, 5)
    (k,) = jt.compile(lambda x: (x * 2).exp() + 1).lower(x, device="cuda").kernels
    assert k.ops == ["mul", "exp", "add"]
    assert ".target sm_80" in k.asm and ".entry" in k.asm
    assert "nvptx64-nvidia-cuda" in k.llvm_ir
    assert k.name in k.asm


def test_a_kernel_just_compiled_to_ptx_is_not_optimised_again_for_its_llvm_ir(monkeypatch):
    """The emulator runs ``llvm_ir`` right after the PTX is made from the same optimised module: O3 ran twice."""
    calls = []
    optimise = ptx.optimise
    monkeypatch.setattr(ptx, "optimise", lambda text: calls.append(text) or optimise(text))
    unique = 1 + time.time_ns() % 1000003 / 1e7  # a kernel no cache holds yet
    (k,) = cuda_kernels(lambda x: (x * unique).exp(), jt.randn(8, 5))
    assert len(calls) == 1  # for the PTX
    assert "exp" in k.llvm_ir
    assert len(calls) == 1
    assert k.llvm_ir == str(optimise(k.source_ir))


def _store_kernel(i):
    """A small NVPTX kernel module of its own (it stores the number ``i``)."""
    return (f"define ptx_kernel void @jitorch_memo_{i}(float addrspace(1)* %p) {{\n"
            f"  store float {i}.5, float addrspace(1)* %p\n  ret void\n}}\n")


def test_the_ptx_memo_stays_within_its_bound_and_what_it_dropped_comes_from_the_disk_cache(monkeypatch, tmp_path):
    """A process making ever new kernels keeps at most the memo's limit of PTX in memory; a dropped
    kernel's PTX is read back from the kernel cache, not made again by LLVM."""
    emitted = []
    emit = ptx._emit_ptx
    memo = BoundedMemo(3 * len(emit(_store_kernel(0))) + 20)  # room for three of these kernels' PTX
    monkeypatch.setattr(ptx, "_emit_ptx", lambda text: emitted.append(text) or emit(text))
    monkeypatch.setattr(ptx, "_memory", memo)
    cache = KernelCache(tmp_path, memory_limit=0)  # nothing kept by the cache itself: its hits read the disk
    texts = [_store_kernel(i) for i in range(12)]
    made = [ptx.ptx_of(text, f"jitorch_memo_{i}", cache) for i, text in enumerate(texts)]
    # a 32-bit store of i.5's bits (LLVM 15 names it st.global.u32 and moves the bits to a register first)
    assert all(re.search(r"st\.global\.[bu]32\b", p) and str(np.float32(i + 0.5).view(np.uint32)) in p
               and f"jitorch_memo_{i}" in p for i, p in enumerate(made))
    assert len(memo) == 3 and memo.total <= memo.limit
    assert emitted == texts  # LLVM made each kernel's PTX once
    again = ptx.ptx_of(texts[0], "jitorch_memo_0", cache)
    assert again == made[0] and emitted == texts
    assert cache.info().disk_hits == 1
    assert len(memo) == 3 and memo.total <= memo.limit


def test_cuda_kernel_list_is_the_cpus_but_for_the_softmax_prologue():
    x, w = jt.randn(16, 8), jt.randn(8, 4)
    fn = lambda x, w: ((x @ w).relu().sum(0), (x * 3).softmax(-1))  # noqa: E731
    cpu = jt.compile(fn).lower(x, w).kernels
    cuda = jt.compile(fn).lower(x, w, device="cuda").kernels
    # the same groups, but for the softmax's pointwise prologue, which only the CPU backend evaluates inside
    # the softmax kernel (`executor.softmax_prologues`): on CUDA it stays a kernel of its own before it
    assert [k.ops for k in cpu] == [["relu", "sum"], ["mul", "softmax"]]
    assert [k.ops for k in cuda] == [["relu", "sum"], ["mul"], ["softmax"]]


def _lowerable_op_kernels():
    kernels = []
    for name in sorted(registry.OPS):
        op = registry.OPS[name]
        for sample in samples(name, seed=zlib.crc32(name.encode()))[:1]:
            tensors, rebuild = split_tensors(bind(op, sample.clone()))
            try:
                kernels += cuda_kernels(lambda *ts: registry.call(op, rebuild(ts)), *tensors)
            except (TraceError, RuntimeError, TypeError, ValueError):
                continue  # not traceable (data-dependent, or not an op on tensors): nothing to lower
    return kernels


def test_every_registry_op_that_lowers_assembles():
    kernels = _lowerable_op_kernels()
    lowered = {op for k in kernels for op in k.ops}
    # the math library, integer ops, casts and reductions all made it into kernels
    assert {"exp", "erf", "atan2", "bitwise_xor", "_to_copy", "sum", "amax", "softmax", "where"} <= lowered | {
        "where"}, sorted(lowered)
    assert_assembles(kernels)


def test_fused_attention_has_no_cuda_lowering_and_cuda_tensors_compose_it():
    """The fused attention ops (CPU tile kernels, jitorch/codegen/attention.py) lower to no CUDA kernel, so
    ``scaled_dot_product_attention`` never makes them for CUDA tensors: traced on CUDA tensors (the fake
    device) a training step keeps the composition, whose products, masked scores and softmax (and its
    backward) lower to kernels that assemble."""
    for name in ("_attention", "_attention_backward"):
        op = registry.OPS[name]
        tensors, rebuild = split_tensors(bind(op, samples(name, seed=0)[0]))
        assert cuda_kernels(lambda *ts: registry.call(op, rebuild(ts)), *tensors) == []

    def step(q, k, v):
        out = jt.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()
        return out
    with use_backend(FakeBackend()):
        q, k, v = (jt.randn(2, 2, 9, 8).to("cuda").requires_grad_() for _ in range(3))
        lowered = jt.compile(step, fullgraph=True).lower(q, k, v, device="cuda")
    names = [node.op.name for node in lowered.graph.nodes]
    assert "_attention" not in names and "_attention_backward" not in names
    assert names.count("matmul") == 6 and "softmax" in names
    kernels = lowered.executable.kernels
    assert {"softmax", "masked_fill"} <= {op for k in kernels for op in k.ops}
    assert_assembles(kernels)


def test_col2im_and_padded_copies_keep_their_composites_on_cuda():
    """The gather kernels of col2im and padded copies (CPU, jitorch/codegen/windows.py) have no CUDA lowering:
    on CUDA tensors (the fake device) ``_as_strided_add`` and ``as_strided_scatter`` stay eager steps that run
    their composites (index_add, a copy and a write), each from zeros the call fills (the unfilled zeros are a
    host writer's), and the step's values equal the CPU's, whose kernels gather."""
    def step(conv, x):
        loss = conv(x).tanh().sum()
        loss.backward()
        return loss

    jt.manual_seed(0)
    conv, x = jt.nn.Conv2d(3, 4, 3, 2, 1), jt.randn(2, 3, 9, 9, requires_grad=True)
    expected = step(conv, x).item(), x.grad.numpy().copy(), conv.weight.grad.numpy().copy()
    with use_backend(FakeBackend()):
        conv.to("cuda")
        conv.zero_grad()
        xc = x.detach().to("cuda").requires_grad_()
        compiled = jt.compile(step, fullgraph=True)
        ex = compiled.lower(conv, xc, device="cuda").executable
        names = [n.op.name for s in ex.steps for n in getattr(s, "nodes", ())]
        assert "_as_strided_add" in names and "as_strided_scatter" in names
        assert not any(getattr(s, "unfilled", None) for s in ex.steps)
        loss = compiled(conv, xc)
        got = loss.item(), xc.grad.to("cpu").numpy(), conv.weight.grad.to("cpu").numpy()
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5)
    for a, b in zip(got[1:], expected[1:]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
def test_fused_chains_assemble(dtype):
    x, y, z = (jt.randn(4, 17, dtype=dtype) for _ in range(3))
    kernels = [k for fn in CHAINS.values() for k in cuda_kernels(fn, x, y, z)]
    kernels += cuda_kernels(lambda a: a.t() * 2 + a.t().exp(), jt.randn(5, 3, dtype=dtype))
    assert_assembles(kernels)


def test_float32_erf_and_powers_by_numbers_assemble():
    """float32 erf and GELU's Phi (float arithmetic, llvm.minnum, a division) and powers by integers and odd
    halves (products and sqrt in double, no pow): ptxas accepts them."""
    x = jt.randn(4, 17)
    kernels = cuda_kernels(lambda t: jt.nn.functional.gelu(t) + t.erf() + t.abs() ** 1.5 + t ** -4 + t ** 7, x)
    assert any({"erf", "_normal_cdf", "pow"} <= set(k.ops) for k in kernels)
    assert all("jitorch.math.pow" not in k.source_ir for k in kernels)
    assert_assembles(kernels)


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64, jt.int32, jt.int64, jt.bool, jt.float16, jt.bfloat16])
def test_reductions_over_every_dim_and_full(dtype):
    x = jt.ones(3, 4, 5, dtype=dtype)
    fns = [lambda t, d=d: t.sum(d) for d in (0, 1, 2, (0, 2))] + [lambda t: t.amax(), lambda t: t.amin(1)]
    if dtype.is_floating_point:
        fns += [lambda t: t.mean(-1, keepdim=True) * 2, lambda t: (t * t).sum(0).sqrt()]
    kernels = [k for fn in fns for k in cuda_kernels(fn, x)]
    assert "block" in {k.mode for k in kernels}
    assert_assembles(kernels)


def test_large_full_reduction_is_split_over_blocks():
    x = jt.ones(1 << 19)
    (k,) = cuda_kernels(lambda t: t.sum(), x)
    assert k.source.split[0] == NVPTX.split_parts and k.mode == "block"
    assert k.grid(multiprocessors=132) == (NVPTX.split_parts, 256)
    assert "shfl.sync.bfly" in k.asm and "bar.sync" in k.asm and ".shared" in k.asm
    assert_assembles([k])


def test_row_reduction_uses_shuffles_and_a_block_per_row():
    (k,) = cuda_kernels(lambda t: t.sum(-1), jt.ones(100, 300))
    assert k.mode == "block" and k.grid(multiprocessors=108) == (100, 256)
    assert k.asm.count("shfl.sync.bfly") == 5


def test_pointwise_is_a_grid_stride_loop_over_all_elements():
    (k,) = cuda_kernels(lambda a, b: a + b, jt.ones(3, 1000), jt.ones(1000))
    assert k.mode == "thread" and k.outer == 3000
    assert k.grid(multiprocessors=10) == (12, 256)
    assert k.grid(multiprocessors=1) == (12, 256) and cuda_kernels(
        lambda a: a * 2, jt.ones(1 << 20))[0].grid(multiprocessors=1) == (32, 256)


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
def test_softmax_assembles(dtype):
    x = jt.randn(7, 300, dtype=dtype)
    kernels = cuda_kernels(lambda t: t.softmax(-1), x) + cuda_kernels(lambda t: t.log_softmax(-1), x)
    assert [k.ops for k in kernels] == [["softmax"], ["log_softmax"]]
    assert all(k.mode == "block" for k in kernels)
    assert_assembles(kernels)


def test_matmul_kernels_assemble():
    kernels = [matmul_kernel((100, 70), (70, 130), jt.float32), matmul_kernel((1, 1), (1, 1), jt.float32),
               matmul_kernel((3, 1, 8, 16), (5, 16, 4), jt.float16), matmul_kernel((2, 64, 64), (64, 64), jt.float32)]
    assert kernels[2].out_shape == (3, 5, 8, 4) and kernels[2].grid()[0] == (1, 1, 15)
    assert kernels[0].grid() == ((3, 2, 1), 256)
    assert kernels[0].asm.count("fma.rn.f32") == 256  # a 16-deep step of 4 x 4 micro-tiles, unrolled
    assert_assembles(kernels)


def test_matmul_kernel_errors():
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(4x3 and 5x2\)"):
        matmul_kernel((4, 3), (5, 2), jt.float32)
    with pytest.raises(RuntimeError, match=r"size of tensor a \(2\) must match the size of tensor b \(3\)"):
        matmul_kernel((2, 4, 3), (3, 3, 2), jt.float32)
    with pytest.raises(CompileError, match="float64 is not float32 or float16"):
        matmul_kernel((4, 3), (3, 2), jt.float64)


def test_intrinsics_outside_the_allowlist_are_refused_before_llvm():
    with pytest.raises(CompileError, match="llvm.exp.f32 has no NVPTX lowering"):
        check_intrinsics("declare float @llvm.exp.f32(float)\n")
    check_intrinsics("declare float @llvm.fma.f32(float, float, float)\ndeclare i32 @llvm.nvvm.read.ptx.sreg.tid.x()")


def test_copy_kernels_of_strided_views_assemble():
    from tests.codegen.test_compiled import windows_matmul
    kernels = cuda_kernels(windows_matmul, jt.randn(2, 3, 6, 6), jt.randn(4, 27))
    assert [k.ops[0] for k in kernels] == ["as_strided"]
    assert_assembles(kernels)
