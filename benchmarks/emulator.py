"""The CUDA kernel emulator's cost per launch, in CPU seconds of the whole process (time.process_time, so the
threads of an emulator that runs CUDA threads as OS threads are counted too).

Cases: generated kernels launched through the fake device (a row reduction, a full reduction split into 512
blocks and its combining pass, the row softmax, the tiled matmul), and a hand-written block-wide tree
reduction over shared memory (a barrier per halving) at 256 and 512 threads per block. Each case is launched
``repeat`` times after a first launch that builds the kernel; the median CPU time per call is printed (a
generated case's call is the compiled function's, its launches and the download of its result).

    python benchmarks/emulator.py [--quick]
"""

import argparse
import os
import sys
import time

import numpy as np
from llvmlite import ir

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import jitorch as jt  # noqa: E402
from jitorch.backends.cuda import emulator  # noqa: E402
from jitorch.backends.cuda.fake import FakeBackend  # noqa: E402
from jitorch.codegen.nvptx.ptx import optimised_text  # noqa: E402
from jitorch.codegen.nvptx.target import I64, SHARED, TRIPLE, _sreg, barrier  # noqa: E402
from jitorch.runtime.cuda_backend import use_backend  # noqa: E402
from timing import median_time  # noqa: E402


def tree_sum(threads):
    """``out[block] = sum(tid)`` over a block of ``threads``, halving a shared tile with a barrier each step."""
    name = f"tree_sum_{threads}"
    module = ir.Module(name=name)
    module.triple = TRIPLE
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64.as_pointer()]), name)
    fn.calling_convention = "ptx_kernel"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    tile = ir.GlobalVariable(module, ir.ArrayType(I64, threads), "tile", addrspace=SHARED)
    tile.linkage = "internal"
    tile.initializer = ir.Constant(tile.value_type, ir.Undefined)
    tid = _sreg(b, "tid.x")

    def at(i):
        return b.gep(tile, [I64(0), i])
    b.store(tid, at(tid))
    half = threads // 2
    while half:
        barrier(b)
        with b.if_then(b.icmp_unsigned("<", tid, I64(half))):
            b.store(b.add(b.load(at(tid)), b.load(at(b.add(tid, I64(half))))), at(tid))
        half //= 2
    with b.if_then(b.icmp_unsigned("==", tid, I64(0))):
        b.store(b.load(at(I64(0))), b.gep(fn.args[0], [_sreg(b, "ctaid.x")]))
    b.ret_void()
    return emulator.EmulatedKernel(name, optimised_text(str(module)))


def measured(launch, repeat):
    """Median CPU seconds of the process per call of ``launch`` (after one untimed call)."""
    return median_time(launch, repeat, clock=time.process_time)


def generated_cases(quick):
    """name -> (function, input shape) run compiled on the fake device."""
    side = 32 if quick else 128
    return {
        "row sum (8 x 4096): 8 blocks of 256": (lambda t: t.sum(-1), (8, 4096)),
        "full sum (2^18): 512 blocks of 256 + 1": (lambda t: t.sum(), (1 << 18,)),
        "softmax rows (16 x 1000): 16 blocks of 256": (lambda t: t.softmax(-1), (16, 1000)),
        f"tiled matmul {side}^3 float32": (lambda t: t @ t, (side, side)),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 launches a case, a smaller matmul")
    args = parser.parse_args(argv)
    repeat = 3 if args.quick else 5
    rows = []
    for threads in (256, 512):
        kernel = tree_sum(threads)
        out = np.zeros(4, np.int64)
        rows.append((f"tree sum, 4 blocks of {threads}",
                     measured(lambda: kernel([out.ctypes.data], (4,), threads), repeat)))
        assert (out == threads * (threads - 1) // 2).all(), out
    with use_backend(FakeBackend(emulate="ptx")):
        for name, (fn, shape) in generated_cases(args.quick).items():
            x = jt.tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32), device="cuda")
            compiled = jt.compile(fn)
            rows.append((name, measured(lambda: compiled(x).cpu(), repeat)))
    for name, seconds in rows:
        print(f"{name:48s} {seconds * 1e3:10.2f} ms CPU per call")
    return rows


if __name__ == "__main__":
    main()
