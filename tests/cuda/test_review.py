"""Review of the CUDA work (emulator, indexing kernels, error word, fake device): regressions for the bugs found."""

import threading
import time

import numpy as np
import pytest
from llvmlite import ir

import jitorch as jt
from jitorch.codegen.kernel import counted_loop
from jitorch.codegen.nvptx import emulator
from jitorch.codegen.nvptx.compile import optimised_text
from jitorch.codegen.nvptx.target import I64, TRIPLE, _sreg, barrier
from jitorch.runtime.cuda_backend import use_backend
from jitorch.runtime.cuda_fake import FakeBackend

needs_emulator = pytest.mark.skipif(not emulator.available(), reason="the kernel emulator needs POSIX thread barriers")


def _slow_kernel(name, iterations):
    """``out[tid] = f(iterations)`` after ``iterations`` steps of an LCG (no closed form: it stays slow), then
    a barrier: every thread of the block reaches it, late."""
    module = ir.Module(name=name)
    module.triple = TRIPLE
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64.as_pointer()]), name)
    fn.calling_convention = "ptx_kernel"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    acc = b.alloca(I64)
    b.store(I64(1), acc)
    counted_loop(b, I64(0), I64(iterations), I64(1),
                 lambda b, i: b.store(b.add(b.mul(b.load(acc), I64(6364136223846793005)), I64(1442695040888963407)),
                                      acc), "lcg")
    barrier(b)
    b.store(b.load(acc), b.gep(fn.args[0], [_sreg(b, "tid.x")]))
    b.ret_void()
    return emulator.EmulatedKernel(name, optimised_text(str(module)))


@needs_emulator
def test_a_slow_launch_is_waited_for_not_abandoned_as_hung():
    """A launch longer than the timeout whose threads all still make progress is not a hang: raising then would
    leave its threads running, writing into memory the caller frees after the error."""
    kernel = _slow_kernel("review_slow", 20_000_000)
    want = np.zeros(64, np.int64)
    kernel([want.ctypes.data], (1,), 64)
    assert len(set(want.tolist())) == 1
    got = np.zeros(64, np.int64)
    kernel([got.ctypes.data], (1,), 64, timeout=0.01)
    np.testing.assert_array_equal(got, want)


@needs_emulator
def test_a_block_stuck_on_a_barrier_still_raises():
    """The other side: threads that will never meet again are reported (after the timeout), not waited for."""
    module = ir.Module(name="review_skip")
    module.triple = TRIPLE
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64.as_pointer()]), "review_skip")
    fn.calling_convention = "ptx_kernel"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with b.if_then(b.icmp_unsigned("<", _sreg(b, "tid.x"), I64(32))):
        barrier(b)
    b.ret_void()
    kernel = emulator.EmulatedKernel("review_skip", optimised_text(str(module)))
    out = np.zeros(1, np.int64)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="did not finish"):
        kernel([out.ctypes.data], (1,), 64, timeout=0.2)
    assert time.monotonic() - start < 5


def test_the_graph_emulating_fake_device_reports_an_index_out_of_range():
    """Where the host has no thread barriers the fake device evaluates indexing kernels with NumPy: an index out
    of range must still reach the error word, or gather silently reads zeros there."""
    x = jt.arange(6.).reshape(2, 3)
    with use_backend(FakeBackend(emulate="graph")):
        got = x.cuda().gather(1, jt.tensor([[0, 2], [1, 3]]).cuda())
        with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 1 with size 3"):
            got.cpu()
        # reported once; the device stays usable
        np.testing.assert_array_equal(got.cpu().numpy(), [[0., 2.], [4., 0.]])
        y = jt.zeros(3).cuda().index_add(0, jt.tensor([0, -1]).cuda(), jt.ones(2).cuda())
        with pytest.raises(RuntimeError, match="index -1 is out of bounds for dimension 0 with size 3"):
            y.cpu()
        assert x.cuda().index_select(0, jt.tensor([1]).cuda()).cpu().tolist() == [[3., 4., 5.]]


def test_synchronize_reports_a_kernel_error_on_the_fake_device(fake):
    x = jt.arange(6.).reshape(2, 3).cuda()
    x.gather(1, jt.tensor([[5]]).cuda())
    with pytest.raises(RuntimeError, match="index 5 is out of bounds"):
        jt.cuda.synchronize()
    jt.cuda.synchronize()  # cleared: the device is usable


def test_like_factories_lay_out_an_expanded_input_alike_on_both_devices(fake):
    x = jt.ones(2, 3).t().expand(2, 3, 2)
    assert jt.zeros_like(x.cuda()).stride() == (6, 1, 3)  # torch's strides
    assert jt.zeros_like(x).stride() == (6, 1, 3)
    assert jt.empty_like(x.cuda(), device="cpu").stride() == (6, 1, 3)
