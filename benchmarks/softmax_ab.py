"""The row softmax kernels of two source trees, timed against each other in one process.

    cd OLD_TREE && PYTHONPATH=. python benchmarks/softmax_ab.py dump /tmp/old.json
    cd NEW_TREE && PYTHONPATH=. python benchmarks/softmax_ab.py dump /tmp/new.json
    PYTHONPATH=. python benchmarks/softmax_ab.py run /tmp/old.json /tmp/new.json

``dump`` writes each case's kernel IR as this tree's code generator makes it (for the CPU ``JITORCH_CPU``
selects: dump and run under the same one); ``run`` links both IRs and calls each kernel directly (one thread),
in rounds that alternate them, timing each round in thread CPU time. The output buffers lie at another
offset each round (a kernel that reads its input and writes its output in one loop runs at a speed that
depends on where the two lie against each other, 4 KB apart or not); the ratio new/old is each round's, and
its median and quartiles over the 11 rounds are printed.
"""

from __future__ import annotations

import ctypes
import json
import statistics
import sys
import time
from dataclasses import replace

import numpy as np

import jitorch as jt
from jitorch.codegen import cpu
from jitorch.jit.executor import KernelStep

F = jt.nn.functional
CASES = [("log_softmax", "float64", (128, 1000)), ("softmax", "float64", (128, 1024)),
         ("softmax", "float64", (256, 96)), ("softmax", "float32", (768, 64)), ("softmax", "float32", (256, 128)),
         ("softmax", "float32", (128, 1000)), ("log_softmax", "float32", (128, 1000)),
         ("log_softmax", "float32", (4, 50257)), ("softmax", "float32", (2048, 33)),
         ("softmax", "float64", (128, 1000)), ("log_softmax", "float64", (256, 100))]
SHIFTS = [0, 8, 16, 24, 40, 64, 200, 512, 1000, 3, 100]  # elements: the output's offset in each round


def source(op, dtype, shape):
    """The KernelSource of ``op`` over the last dim of a ``shape`` tensor of ``dtype``."""
    x = jt.zeros(*shape, dtype=getattr(jt, dtype))
    ex = jt.compile(lambda x: getattr(F, op)(x, -1)).lower(x).executable
    return next(s.kernel.source for s in ex.steps if isinstance(s, KernelStep))


def run(old, new):
    for case in CASES:
        src = source(*case)
        kernels = [cpu.link_kernel(replace(src, llvm_ir=irs[repr(case)])) for irs in (old, new)]
        x = (np.random.default_rng(0).standard_normal(case[2]) * 3).astype(case[1])
        ratios, times = [], [[], []]
        reps = max(3, int(2e6 // x.size))
        for shift in SHIFTS:
            outs = [np.empty(x.size + 1024, x.dtype)[shift:shift + x.size] for _ in kernels]
            args = [(ctypes.c_void_p * 2)(x.ctypes.data, o.ctypes.data) for o in outs]
            for k, a in zip(kernels, args):
                k.fn(a, 0, k.outer)
            spent = []
            for k, a in zip(kernels, args):
                t0 = time.thread_time()
                for _ in range(reps):
                    k.fn(a, 0, k.outer)
                spent.append((time.thread_time() - t0) / reps)
            for i in range(2):
                times[i].append(spent[i])
            ratios.append(spent[1] / spent[0])
        ratios.sort()
        print(f"{case[0]:12s} {case[1]} {str(case[2]):13s} old {statistics.median(times[0]) * 1e6:8.1f} us  "
              f"new {statistics.median(times[1]) * 1e6:8.1f} us  new/old {statistics.median(ratios):.3f} "
              f"(quartiles {ratios[2]:.3f} {ratios[8]:.3f})")


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        with open(sys.argv[2], "w") as f:
            json.dump({repr(case): source(*case).llvm_ir for case in CASES}, f)
    else:
        run(*(json.load(open(p)) for p in sys.argv[2:4]))
