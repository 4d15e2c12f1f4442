"""What keeping per-row statistics instead of the log-probs would save in a cross-entropy step's logits pass.

    python benchmarks/log_softmax_stats.py [--rows 700] [--vocab 10000] [--rounds 7] [--quick]

The forward and backward over ``(rows, vocab)`` float32 logits of ``nll_loss(log_softmax(x), y)``, written out by
hand (no autograd) and compiled two ways:

    written   log_softmax's row kernel writes the log-probs; the gather and the backward's
              ``g - exp(lp) * sum(g)`` read them back
    stats     ``m = amax(x)``, ``s = sum(exp(x - m))`` per row (two reductions: the code generator has no kernel
              giving both in one pass); the gather computes ``(x[y] - m) - log(s)`` and the backward
              ``exp((x - m) - log(s))`` from the logits

Each round calls each compiled function ``--calls`` times in turn, timed in the calling thread's CPU time at one
thread; the median of the per-round times and of the ratios written/stats are printed, and each system's kernels
(their op lists).

The forward of a kernel giving both statistics in one pass is bounded by ``--bound``: log_softmax's row kernel
(``kernel.build_softmax``) against the same kernel built with its last pass (``(x - m) - log(s)`` stored for
every column) cut to the first column, so that it reads each row once, keeps it in cache for the max and the
exponentials' sum, and stores one element per row; the two kernels are called directly, alternated, in thread CPU
time.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time

import numpy as np

import jitorch as jt
from jitorch.codegen import cpu, kernel
from jitorch.ir.passes import fusion


def systems(rows, vocab):
    """{name: the step's loss and logits' gradient as a function of (logits, targets)}."""
    positions = jt.arange(vocab)

    def one_hot_grad(y):
        return jt.where(positions[None, :] == y[:, None], -1.0 / rows, 0.0)

    def written(x, y):
        lp = jt.nn.functional.log_softmax(x, 1)
        g = one_hot_grad(y)
        return -lp.gather(1, y[:, None]).mean(), g - lp.exp() * g.sum(1, keepdim=True)

    def stats(x, y):
        m = x.amax(1, keepdim=True)
        s = (x - m).exp().sum(1, keepdim=True)
        g = one_hot_grad(y)
        picked = (x.gather(1, y[:, None]) - m) - s.log()
        return -picked.mean(), g - ((x - m) - s.log()).exp() * g.sum(1, keepdim=True)
    return {"written": written, "stats": stats}


def row_kernels(rows, vocab):
    """(log_softmax's row kernel over (rows, vocab) float32, the same with its last pass cut to one column)."""
    graph = jt.compile(lambda x: jt.nn.functional.log_softmax(x, -1)).lower(jt.zeros(rows, vocab)).executable.graph
    group = next(g for g in fusion.fuse(graph) if kernel.row_softmax_of(g) is not None)
    full = kernel.build_softmax(group, "log_softmax_rows")
    target = type(kernel.CPU)
    map_loops = target.map_loops

    def first_column(self, bld, b, sizes, body, *rest, **named):
        return map_loops(self, bld, b, [1] if list(sizes) == [vocab] else sizes, body, *rest, **named)
    target.map_loops = first_column
    try:
        cut = kernel.build_softmax(group, "log_softmax_stats_bound")
    finally:
        target.map_loops = map_loops
    return cpu.link_kernel(full), cpu.link_kernel(cut)


def bound(rows, vocab, rounds, calls):
    """Print the row kernel's and the cut kernel's thread CPU ms per call (module docstring)."""
    x = (np.random.default_rng(0).standard_normal((rows, vocab)) * 3).astype(np.float32)
    kernels = row_kernels(rows, vocab)
    firsts = []
    for k in kernels:  # (the cut kernel computes what the full one does, in the column it keeps)
        out = np.full_like(x, np.nan)
        k.fn((ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data), 0, k.outer)
        firsts.append(out[:, 0])
    print(f"first columns equal: {np.array_equal(*firsts)}")
    times = [[], []]
    for r in range(rounds):
        for k, spent in zip(kernels, times):
            out = np.empty(x.size + 1024, x.dtype)[8 * r:8 * r + x.size]  # (another offset each round)
            args = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data)
            start = time.thread_time()
            for _ in range(calls):
                k.fn(args, 0, k.outer)
            spent.append((time.thread_time() - start) / calls * 1e3)
    print(f"({rows}, {vocab}) row kernel {statistics.median(times[0]):.2f} ms, its max and sum passes alone "
          f"{statistics.median(times[1]):.2f} ms; ratio median "
          f"{statistics.median(a / b for a, b in zip(*times)):.3f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=700)
    parser.add_argument("--vocab", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--bound", action="store_true", help="also time the row kernel against its first passes")
    parser.add_argument("--quick", action="store_true", help="(rows, vocab) = (12, 50), one round of one call")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.vocab, args.rounds, args.calls = 12, 50, 1, 1
    jt.set_num_threads(1)
    rng = np.random.default_rng(0)
    x = jt.tensor(rng.standard_normal((args.rows, args.vocab)).astype(np.float32))
    y = jt.tensor(rng.integers(0, args.vocab, (args.rows,)))
    compiled = {name: jt.compile(fn) for name, fn in systems(args.rows, args.vocab).items()}
    results = {}
    for name, fn in compiled.items():
        print(f"{name} kernels: {[k.ops for k in fn.lower(x, y).kernels]}")
        results[name] = fn(x, y)
    (la, ga), (lb, gb) = results.values()
    print(f"loss difference {abs(la.item() - lb.item()):.3g}, gradient's largest difference "
          f"{(ga - gb).abs().max().item():.3g}")
    times = {name: [] for name in compiled}
    for _ in range(args.rounds):
        for name, fn in compiled.items():
            start = time.thread_time()
            for _ in range(args.calls):
                fn(x, y)
            times[name].append((time.thread_time() - start) / args.calls * 1e3)
    ratio = statistics.median(w / s for w, s in zip(times["written"], times["stats"]))
    print(f"({args.rows}, {args.vocab}) thread CPU ms per call, median of {args.rounds} rounds: "
          + ", ".join(f"{name} {statistics.median(t):.2f}" for name, t in times.items())
          + f"; written/stats median {ratio:.3f}")
    if args.bound:
        bound(args.rows, args.vocab, args.rounds, args.calls)


if __name__ == "__main__":
    main()
