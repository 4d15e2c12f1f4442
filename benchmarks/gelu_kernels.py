"""GELU's compiled kernels against the erf composition they replaced and torch's, interleaved in one process.

    PYTHONPATH=. python benchmarks/gelu_kernels.py [--shape 768x512] [--rounds 11] [--calls 20]

Times (thread CPU time per call, one thread, median over rounds; each round runs every system's forward and
backward ``--calls`` times in turn) the kernels `F.gelu` runs from 4096 elements (``x * Phi(x)`` and its
gradient, `jitorch.nn.functional._gelu_kernel`), the same code generator's kernels of the composition
``x * 0.5 * (1 + erf(x / sqrt(2)))`` and its gradient (F.gelu's before: float erf's two branches), and
torch's ``F.gelu`` and ``aten::gelu_backward``, on float32 inputs drawn from N(0, 2).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import torch

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.jit import eager_kernels


def erf_composition(x):
    """F.gelu's exact composition before `_normal_cdf`."""
    return x * 0.5 * (1.0 + (x * (1 / math.sqrt(2))).erf())


def erf_composition_grad(x, g):
    return F._composition_grad(erf_composition, x, g)


def per_call(fn, calls):
    start = time.thread_time()
    for _ in range(calls):
        fn()
    return (time.thread_time() - start) / calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="768x512")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    jt.set_num_threads(1)
    torch.set_num_threads(1)
    shape = tuple(int(n) for n in args.shape.split("x"))
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 2).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    form = F._GELU_FORMS["none"]
    new = (F._gelu_kernel(form, jt.float32), F._gelu_kernel(form, jt.float32, backward=True))
    old = (eager_kernels.kernel(erf_composition, "gelu_erf", "float32", 1),
           eager_kernels.kernel(erf_composition_grad, "gelu_erf_backward", "float32", 2))
    tx, tg = torch.from_numpy(x), torch.from_numpy(g)
    systems = {
        "jitorch Phi kernels": (lambda: new[0](x), lambda: new[1](x, g)),
        "jitorch erf kernels (before)": (lambda: old[0](x), lambda: old[1](x, g)),
        "torch": (lambda: torch.nn.functional.gelu(tx), lambda: torch.ops.aten.gelu_backward(tg, tx)),
    }
    times = {(name, part): [] for name in systems for part in ("forward", "backward")}
    for _ in range(args.rounds):
        for name, (fwd, bwd) in systems.items():
            times[name, "forward"].append(per_call(fwd, args.calls))
            times[name, "backward"].append(per_call(bwd, args.calls))
    print(f"float32 {args.shape}, 1 thread, thread CPU ms per call (median of {args.rounds} rounds)")
    for (name, part), ts in times.items():
        print(f"  {name:30s} {part:8s} {statistics.median(ts) * 1e3:7.3f}")


if __name__ == "__main__":
    main()
