"""Compiled row and full reductions against torch eager, taking turns in one process.

    python benchmarks/row_reductions.py [--quick] [--threads 1,2]

16M float32 elements as rows of 9 to 4096 (``t.sum(1)``, ``t.amax(1)``), and the full sum: the shapes whose
kernels read a run of reduced elements (`jitorch/codegen/kernel.py`'s ``streamed_run``). The two systems take
turns call by call, the first of each pair alternating, each call after a 1 ms sleep (on a loaded machine the
second call of a pair was preempted more often). Medians of wall time per call and of the calling thread's CPU
time (at one thread the fair measure on a shared machine), and the ratio jitorch / torch of the wall medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import jitorch as jt  # noqa: E402

try:
    import torch
except ImportError:
    torch = None


def cases(quick):
    """(label, array, function) of each case."""
    n = 1 << (22 if quick else 24)
    rng = np.random.default_rng(0)
    flat = rng.standard_normal(n, dtype=np.float32)
    out = [(f"sum of {n >> 20}M", flat, lambda t: t.sum())]
    for width in (9, 16, 64, 1024, 4096):
        rows = flat[:n - n % width].reshape(-1, width)
        out.append((f"row sum {rows.shape[0]}x{width}", rows, lambda t: t.sum(1)))
        out.append((f"row max {rows.shape[0]}x{width}", rows, lambda t: t.amax(1)))
    return out


def timed(calls, rounds):
    """{name: (median wall, median thread CPU)} of the ``calls`` (name -> function), taking turns."""
    names = list(calls)
    wall = {k: [] for k in names}
    cpu = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            time.sleep(0.001)
            c0, t0 = time.thread_time(), time.perf_counter()
            calls[k]()
            t1, c1 = time.perf_counter(), time.thread_time()
            wall[k].append(t1 - t0)
            cpu[k].append(c1 - c0)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in names}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4M elements, fewer rounds")
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    args = parser.parse_args(argv)
    if torch is None:
        sys.exit("torch is not installed: pip install -e '.[bench]'")
    rounds = 7 if args.quick else 21
    prepared = []
    for label, array, fn in cases(args.quick):
        x, tx = jt.from_numpy(array), torch.from_numpy(array)
        compiled = jt.compile(fn)
        np.testing.assert_allclose(compiled(x).numpy(), fn(tx).numpy(), rtol=1e-4, atol=1e-3)
        prepared.append((label, {"jitorch compiled": lambda c=compiled, x=x: c(x),
                                 "torch eager": lambda f=fn, t=tx: f(t)}))
    print(f"medians of {rounds} calls each, wall (thread CPU); load {os.getloadavg()[0]:.1f}")
    for threads in (int(t) for t in args.threads.split(",")):
        jt.set_num_threads(threads)
        torch.set_num_threads(threads)
        print(f"\n{threads} thread{'s' * (threads > 1)}")
        print(f"{'case':<26}{'jitorch compiled':>24}{'torch eager':>24}{'jt / torch':>12}")
        for label, calls in prepared:
            for call in calls.values():
                call()
            times = timed(calls, rounds)
            (jw, jc), (tw, tc) = times["jitorch compiled"], times["torch eager"]
            print(f"{label:<26}{f'{jw * 1e3:.2f} ({jc * 1e3:.2f}) ms':>24}{f'{tw * 1e3:.2f} ({tc * 1e3:.2f}) ms':>24}"
                  f"{jw / tw:>12.2f}")
    print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
