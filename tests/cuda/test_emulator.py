"""The kernel emulator: CUDA kernels' own NVPTX IR run on the host, a cooperative thread per CUDA thread.

The emulator's primitives are checked on hand-written kernels (special
registers, shuffles, shared memory across barriers, blocks stuck on a barrier
some threads skip, the threads' stacks); then the generated kernels (fused
pointwise chains, reductions over any dim, softmax rows, the tiled matmul) run
on the fake device for shapes, layouts and dtypes drawn by hypothesis, against
the CPU.
"""

import gc
import mmap
import threading
import weakref
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llvmlite import ir

import jitorch as jt
from jitorch.backends.cuda import emulator
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.codegen.errors import CompileError
from jitorch.codegen.memo import BoundedMemo
from jitorch.codegen.nvptx.ptx import optimised_text
from jitorch.codegen.nvptx.target import I64, SHARED, TRIPLE, _sreg, barrier, shuffle_xor
from jitorch.runtime.cuda_backend import use_backend
from tests import support
from tests.ops.samples import copy_layout
from tests.support import tensor_and_array

pytestmark = pytest.mark.skipif(not emulator.available(), reason="the kernel emulator needs Linux on x86-64 or AArch64")


def hand_written(name, body):
    """The optimised NVPTX IR of ``kernel(i64* out)`` whose body is ``body(builder, out)``."""
    module = ir.Module(name=name)
    module.triple = TRIPLE
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64.as_pointer()]), name)
    fn.calling_convention = "ptx_kernel"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    body(b, fn.args[0])
    b.ret_void()
    return optimised_text(str(module))


def test_special_registers_give_each_thread_its_place_in_a_3d_grid():
    def body(b, out):
        flat = b.add(b.mul(b.add(b.mul(_sreg(b, "ctaid.z"), _sreg(b, "nctaid.y")), _sreg(b, "ctaid.y")),
                           _sreg(b, "nctaid.x")), _sreg(b, "ctaid.x"))
        b.store(b.add(b.mul(_sreg(b, "ntid.x"), I64(1000)), _sreg(b, "tid.x")),
                b.gep(out, [b.add(b.mul(flat, _sreg(b, "ntid.x")), _sreg(b, "tid.x"))]))
    kernel = emulator.EmulatedKernel("sregs", hand_written("sregs", body))
    out = np.full(2 * 3 * 4 * 64, -1, np.int64)
    kernel([out.ctypes.data], (2, 3, 4), 64)
    np.testing.assert_array_equal(out.reshape(24, 64), 64 * 1000 + np.arange(64)[None, :].repeat(24, 0))
    assert kernel.serial  # no barrier, no shuffle: the threads run one after the other


def test_butterfly_shuffles_exchange_values_within_each_warp():
    def body(b, out):
        tid = _sreg(b, "tid.x")
        got = shuffle_xor(b, b.mul(tid, I64(3)), 5)  # an i64 travels as two 32-bit words
        b.store(got, b.gep(out, [tid]))
    kernel = emulator.EmulatedKernel("shuffle", hand_written("shuffle", body))
    out = np.zeros(128, np.int64)
    kernel([out.ctypes.data], (1,), 128)
    np.testing.assert_array_equal(out, 3 * (np.arange(128) ^ 5))
    assert not kernel.serial


def test_a_barrier_that_some_threads_skip_is_an_error_not_a_hang():
    def body(b, out):
        tid = _sreg(b, "tid.x")
        with b.if_then(b.icmp_unsigned("<", tid, I64(5))):
            barrier(b)
        b.store(tid, b.gep(out, [tid]))
    kernel = emulator.EmulatedKernel("divergent", hand_written("divergent", body))
    out = np.zeros(64, np.int64)
    with pytest.raises(RuntimeError, match=r"did not finish: in block \(0, 0, 0\), 5 threads wait on a barrier or "
                                           r"shuffle that others of the block never reach \(59 have returned\)"):
        kernel([out.ctypes.data], (1,), 64)


def test_a_block_stuck_on_a_barrier_is_named():
    """A later block of the grid whose first warp waits on a barrier the second skips: it is the one named, the
    blocks before it ran, the ones after it did not."""
    def body(b, out):
        block = _sreg(b, "ctaid.x")
        with b.if_then(b.icmp_unsigned("<", b.add(_sreg(b, "tid.x"), b.mul(block, I64(32))), I64(96))):
            barrier(b)
        b.store(I64(1), b.gep(out, [block]))
    kernel = emulator.EmulatedKernel("review_skip", hand_written("review_skip", body))
    out = np.zeros(4, np.int64)
    with pytest.raises(RuntimeError, match=r"did not finish: in block \(2, 0, 0\), 32 threads wait .* \(32 have"):
        kernel([out.ctypes.data], (4,), 64)
    np.testing.assert_array_equal(out, [1, 1, 1, 0])  # block 2's second warp stored; block 3 never ran


def test_lanes_on_a_shuffle_and_threads_on_a_barrier_never_meet():
    """Half a warp waits on a shuffle while every other thread waits on ``__syncthreads``: neither completes."""
    def body(b, out):
        tid = _sreg(b, "tid.x")
        with b.if_else(b.icmp_unsigned("<", tid, I64(16))) as (shuffling, syncing):
            with shuffling:
                b.store(shuffle_xor(b, tid, 1), b.gep(out, [tid]))
            with syncing:
                barrier(b)
    kernel = emulator.EmulatedKernel("mixed_wait", hand_written("mixed_wait", body))
    out = np.zeros(64, np.int64)
    with pytest.raises(RuntimeError, match=r"64 threads wait on a barrier or shuffle .* \(0 have returned\)"):
        kernel([out.ctypes.data], (1,), 64)


def _shared_tile(b, length):
    g = ir.GlobalVariable(b.module, ir.ArrayType(I64, length), "tile", addrspace=SHARED)
    g.linkage = "internal"
    g.initializer = ir.Constant(g.value_type, ir.Undefined)
    return lambda i: b.gep(g, [I64(0), i])


def _tiles_kernel(name, threads):
    """Each thread writes its slot of a shared tile, and after a barrier reads another thread's; twice."""
    def body(b, out):
        tid = _sreg(b, "tid.x")
        flat = b.add(b.mul(b.add(b.mul(_sreg(b, "ctaid.z"), _sreg(b, "nctaid.y")), _sreg(b, "ctaid.y")),
                           _sreg(b, "nctaid.x")), _sreg(b, "ctaid.x"))
        tile = _shared_tile(b, threads)
        b.store(b.add(b.mul(flat, I64(1000)), tid), tile(tid))
        barrier(b)
        mirrored = b.load(tile(b.sub(I64(threads - 1), tid)))
        barrier(b)
        b.store(b.mul(mirrored, I64(2)), tile(tid))
        barrier(b)
        b.store(b.load(tile(b.urem(b.add(tid, I64(1)), I64(threads)))), b.gep(out, [b.add(b.mul(flat, I64(threads)),
                                                                                      tid)]))
    return emulator.EmulatedKernel(name, hand_written(name, body))


def _tiles_result(blocks, threads):
    tid = np.arange(threads)
    return 2 * (np.arange(blocks)[:, None] * 1000 + (threads - 1 - (tid + 1) % threads)[None, :])


def test_shared_memory_passes_values_across_barriers_in_every_block_of_a_3d_grid():
    """A barrier released too early, a block seeing another's tile, or a thread run to its end without waiting
    would read a stale slot. 60 blocks in turn reuse the one tile."""
    kernel = _tiles_kernel("tiles", 64)
    assert not kernel.serial
    out = np.zeros((60, 64), np.int64)
    kernel([out.ctypes.data], (5, 4, 3), 64)
    np.testing.assert_array_equal(out, _tiles_result(60, 64))


def test_launches_on_two_os_threads_at_once_keep_their_own_threads_and_stacks():
    """Each OS thread's launch schedules its own CUDA threads (the running one is per OS thread) on stacks of
    its own: two kernels of as many threads, launched over and over at once, both give their results."""
    kernels = [_tiles_kernel(f"tiles_{i}", 128) for i in range(2)]
    outs = [np.zeros((20, 10, 128), np.int64) for _ in kernels]

    def launches(kernel, out):
        for repeat in range(20):
            kernel([out[repeat].ctypes.data], (10,), 128)
    workers = [threading.Thread(target=launches, args=pair) for pair in zip(kernels, outs)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for out in outs:
        np.testing.assert_array_equal(out, np.broadcast_to(_tiles_result(10, 128), out.shape))


def _guard_pages():
    """How many inaccessible one-page mappings the process has (a thread's stack guard, here or in libc)."""
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if line.split()[1] == "---p" and
                   (lambda lo, hi: int(hi, 16) - int(lo, 16))(*line.split()[0].split("-")) == mmap.PAGESIZE)


def test_launches_reuse_their_threads_stacks_and_leave_none_behind():
    """A launch maps its threads' stacks (a guard page under each) or takes a set an earlier launch gave back;
    launch after launch, finished or stuck, the process holds no more of them; a stuck block's stacks serve
    again."""
    def body(b, out):
        tid = _sreg(b, "tid.x")
        with b.if_then(b.icmp_unsigned("<", tid, b.load(out))):
            barrier(b)
        b.store(tid, b.gep(out, [b.add(tid, I64(1))]))
    kernel = emulator.EmulatedKernel("stacks", hand_written("stacks", body))
    all_reach, three_reach = np.zeros(129, np.int64), np.zeros(129, np.int64)
    all_reach[0] = 128
    three_reach[0] = 3
    kernel([all_reach.ctypes.data], (2,), 128)
    before = _guard_pages()
    for _ in range(3):
        with pytest.raises(RuntimeError, match="did not finish"):
            kernel([three_reach.ctypes.data], (2,), 128)
        kernel([all_reach.ctypes.data], (2,), 128)
        np.testing.assert_array_equal(all_reach[1:], np.arange(128))
    assert _guard_pages() == before


def test_the_emulator_keeps_its_most_recently_used_kernels_and_frees_the_others(monkeypatch):
    """A process that keeps making kernels holds the host code of a bounded number; one dropped is built
    again when it is launched again."""
    monkeypatch.setattr(emulator, "_programs", BoundedMemo(2, size=lambda program: 1))

    def storing(i):
        def body(b, out):
            b.store(I64(1000 + i), b.gep(out, [_sreg(b, "tid.x")]))
        return SimpleNamespace(name=f"stores_{i}", llvm_ir=hand_written(f"stores_{i}", body))

    kernels = [storing(i) for i in range(4)]
    programs = [weakref.ref(emulator.emulated(k)) for k in kernels]
    gc.collect()
    assert [p() is None for p in programs] == [True, True, False, False]
    assert emulator.emulated(kernels[3]) is programs[3]()  # kept: not built again
    out = np.zeros(32, np.int64)
    emulator.emulated(kernels[0])([out.ctypes.data], (1, 1, 1), 32)
    np.testing.assert_array_equal(out, np.full(32, 1000))


def test_unknown_gpu_intrinsics_are_refused():
    text = "declare i32 @llvm.nvvm.read.ptx.sreg.laneid()\n"
    with pytest.raises(CompileError, match="no host version of @llvm.nvvm.read.ptx.sreg.laneid"):
        emulator.host_ir(text)


def test_a_launch_checks_its_pointer_count():
    kernel = emulator.EmulatedKernel("sregs2", hand_written("sregs2", lambda b, out: None))
    with pytest.raises(ValueError, match="takes 1 pointers, got 2"):
        kernel([0, 0], (1,), 32)


DTYPES = (jt.float32, jt.float16, jt.int32)


def fake_device():
    """A fresh fake device per generated example (hypothesis reuses function-scoped fixtures)."""
    return use_backend(FakeBackend(emulate="ptx"))


def on_both(fake, fn, arr, layout):
    """``fn`` eagerly on a CPU tensor of ``arr`` in ``layout``, and compiled on the fake device's copy of it
    (same strides and offset); only the compiled call's launches stay recorded."""
    x, _ = tensor_and_array(arr, layout)
    on_device = copy_layout(x, "cuda")
    fake.launches.clear()
    return fn(x), jt.compile(fn)(on_device)


def shapes(max_side=40):
    return support.shapes(min_dims=1, max_dims=3, min_side=1, max_side=max_side)


@settings(max_examples=12)
@given(shape=shapes(), layout=st.sampled_from(support.LAYOUTS), dtype=st.sampled_from(DTYPES),
       seed=st.integers(0, 99))
def test_fused_pointwise_chains_match_the_cpu(shape, layout, dtype, seed):
    with fake_device() as fake:
        values = support.random_array(shape, dtype, np.random.default_rng(seed), -3, 3)
        cpu, cuda = on_both(fake, lambda t: ((t * 2 - 1).abs() + t).clamp(-4, 4) * (t > 0), values, layout)
        *copies, launch = fake.launches  # a graph's inputs are made compact first
        assert launch.ops == ["mul", "sub", "abs", "add", "clamp", "gt", "mul"]
        assert [c.ops for c in copies] in ([], [["copy"]])
        np.testing.assert_array_equal(cuda.cpu().numpy(), cpu.numpy())


def test_float_math_kernels_give_the_cpu_kernels_bits():
    """The generated kernels' float32 math (erf's two branches and their switch, GELU's forward and backward
    formulas, tanh, exp, a power by an odd half computed in double) is the same IR on both targets: the
    emulated GPU's results are the CPU kernels' bit for bit, specials and a vector tail included. But for a
    NaN's sign and payload, which LLVM leaves unspecified (the CPU target picks: ``abs(-nan) ** 1.5 + (-nan)
    ** 4`` is the first operand's +NaN on x86-64-v2, whose SSE add overwrites its first operand, and the
    second's -NaN under AVX's three-operand add): there both are NaN."""
    rng = np.random.default_rng(4)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 0.921875, 0.92187506, 3.92, 4.0, 4.5, 20.0],
                     np.float32)
    values = np.concatenate([edges, -edges, rng.uniform(-6, 6, 1021).astype(np.float32)])
    fns = [lambda t: t.erf(), lambda t: jt.nn.functional.gelu(t), lambda t: (t * 0.5).tanh() + t.exp(),
           lambda t: t.abs() ** 1.5 + t ** 4]
    x = jt.tensor(values)
    with fake_device() as fake:
        on_device = x.to("cuda")
        for fn in fns:
            fake.launches.clear()
            cuda = jt.compile(fn)(on_device).cpu()
            assert fake.launches and all(k.name.startswith("jitorch") for k in fake.launches)
            np.testing.assert_array_equal(_nan_bits_cleared(cuda), _nan_bits_cleared(jt.compile(fn)(x)))


def _nan_bits_cleared(t):
    """``t``'s float32 bits, with every NaN the one quiet NaN."""
    a = t.numpy()
    return np.where(np.isnan(a), np.float32(np.nan), a).view(np.uint32)


@settings(max_examples=10)
@given(shape=shapes(), layout=st.sampled_from(support.LAYOUTS), data=st.data())
def test_reductions_over_any_dim_match_the_cpu(shape, layout, data):
    with fake_device() as fake:
        dim = data.draw(st.integers(-len(shape), len(shape) - 1))
        keepdim = data.draw(st.booleans())
        name = data.draw(st.sampled_from(["sum", "mean", "amax", "amin", "prod"]))
        values = np.random.default_rng(len(shape)).uniform(-0.5, 0.5, shape).astype(np.float32)
        cpu, cuda = on_both(fake, lambda t: getattr(t.exp(), name)(dim, keepdim=keepdim), values, layout)
        assert cuda.shape == cpu.shape and name in fake.launches[-1].ops
        np.testing.assert_allclose(cuda.cpu().numpy(), cpu.numpy(), rtol=2e-5)


@settings(max_examples=8)
@given(rows=st.integers(1, 5), cols=st.integers(1, 700), log=st.booleans())
def test_softmax_rows_of_any_length_match_the_cpu(rows, cols, log):
    with fake_device() as fake:
        values = np.random.default_rng(cols).standard_normal((rows, cols)).astype(np.float32) * 4
        cpu, cuda = on_both(fake, lambda t: t.log_softmax(-1) if log else t.softmax(-1), values, "contiguous")
        np.testing.assert_allclose(cuda.cpu().numpy(), cpu.numpy(), rtol=1e-5, atol=1e-6)


@settings(max_examples=10)
@given(m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(1, 40), batch=st.sampled_from([(), (2,), (2, 1)]),
       half=st.booleans(), a_layout=st.sampled_from(support.LAYOUTS), b_layout=st.sampled_from(support.LAYOUTS))
def test_the_tiled_matmul_reads_any_layout_and_matches_the_cpu_at_tile_edges(m, n, k, batch, half, a_layout,
                                                                            b_layout):
    rng = np.random.default_rng(m * n * k)
    dtype = jt.float16 if half else jt.float32
    a, a_values = tensor_and_array(rng.standard_normal(batch + (m, k)).astype(dtype.np), a_layout)
    b, b_values = tensor_and_array(rng.standard_normal((k, n)).astype(dtype.np), b_layout)
    with fake_device() as fake:
        a_cuda, b_cuda = copy_layout(a, "cuda"), copy_layout(b, "cuda")
        fake.launches.clear()
        out = (a_cuda @ b_cuda).cpu()
        (launch,) = fake.launches  # no copy to make the operands compact
        assert launch.name.startswith("jitorch_matmul")
    expected = np.matmul(a_values.astype(np.float32), b_values.astype(np.float32)).astype(dtype.np)
    np.testing.assert_allclose(out.numpy().astype(np.float32), expected, rtol=2e-3 if half else 1e-5,
                               atol=2e-2 if half else 1e-5)


_SPLIT_WITH_EMPTY_PARTS = """
import numpy as np, jitorch as jt
from jitorch.codegen import kernel
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.runtime.cuda_backend import use_backend
kernel.SPLIT_MIN_WORK = 64  # (the shipped value is far above the CUDA target's 512 parts)
with use_backend(FakeBackend()):
    for n in (65, 600):  # no split (fewer elements than parts), then a split whose last 212 parts are empty
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        t = jt.tensor(x, device="cuda")
        for op in ("max", "mean") if n < 512 else ("mean",):
            got = float(jt.compile(lambda t: getattr(t, op)())(t).cpu())
            want = float(getattr(x.astype(np.float64), op)())
            assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), (n, op, got, want)
print("ok")
"""


def test_split_full_reduction_with_empty_parts_finishes_on_the_emulator():
    """A full reduction split into the CUDA target's 512 parts, at a SPLIT_MIN_WORK below 512 (65 elements:
    447 empty parts), never finished: the kernel combining the 512 partials was itself a full reduction of 512
    elements, split again into 512 parts, and so on. A reduction now splits only into fewer parts than it has
    elements. Run in a subprocess with a timeout, so that a regression fails fast rather than hanging."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run([sys.executable, "-c", _SPLIT_WITH_EMPTY_PARTS], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
