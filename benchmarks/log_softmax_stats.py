"""A cross-entropy step's logits pass with the log-probs written and with per-row statistics (the lse pass).

    python benchmarks/log_softmax_stats.py [--rows 700] [--vocab 10000] [--rounds 7] [--calls 5] [--quick]

The forward and backward over ``(rows, vocab)`` float32 logits of ``nll_loss(log_softmax(x), y)``, written out by
hand (no autograd: the function's graph is only that pass), compiled twice:

    written   without the lse pass: log_softmax's row kernel writes the log-probs; the gather and the backward's
              ``g - exp(lp) * sum(g)`` read them back
    stats     with it (`jitorch.ir.passes.lse`): the row kernel writes each row's max ``m`` and log-sum ``n``; the
              gather computes ``(x[y] - m) - n`` and the backward ``exp((x - m) - n)`` from the logits

Each round calls each compiled function ``--calls`` times in turn, timed in the calling thread's CPU time at one
thread; the median of the per-round times and of the ratios written/stats are printed, with each system's kernels
(their op lists) and whether the two give the same bits.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import jitorch as jt
from jitorch.ir.passes import lse


def step(x, y):
    """The loss and the logits' gradient of ``nll_loss(log_softmax(x, 1), y)`` (mean over the rows)."""
    rows, vocab = x.shape
    lp = jt.nn.functional.log_softmax(x, 1)
    g = jt.where(jt.arange(vocab)[None, :] == y[:, None], -1.0 / rows, 0.0)
    return -lp.gather(1, y[:, None]).mean(), g - lp.exp() * g.sum(1, keepdim=True)


def systems(x, y):
    """{"written": the step compiled without the lse pass, "stats": with it}, each called once (compiled)."""
    compiled, saved = {}, lse.run
    for name in ("written", "stats"):
        lse.run = saved if name == "stats" else (lambda graph: 0)
        try:
            compiled[name] = jt.compile(step)
            compiled[name](x, y)
        finally:
            lse.run = saved
    return compiled


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=700)
    parser.add_argument("--vocab", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="(rows, vocab) = (12, 50), one round of one call")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.vocab, args.rounds, args.calls = 12, 50, 1, 1
    jt.set_num_threads(1)
    rng = np.random.default_rng(0)
    x = jt.tensor(rng.standard_normal((args.rows, args.vocab)).astype(np.float32))
    y = jt.tensor(rng.integers(0, args.vocab, (args.rows,)))
    compiled = systems(x, y)
    results = {}
    for name, fn in compiled.items():
        print(f"{name} kernels: {[k.ops for k in fn.lower(x, y).kernels]}")
        results[name] = [t.numpy() for t in fn(x, y)]
    same = all(np.array_equal(a, b) for a, b in zip(*results.values()))
    print(f"same bits: {same}")
    times = {name: [] for name in compiled}
    for r in range(args.rounds):
        for name in compiled if r % 2 == 0 else reversed(compiled):
            start = time.thread_time()
            for _ in range(args.calls):
                compiled[name](x, y)
            times[name].append((time.thread_time() - start) / args.calls * 1e3)
    ratio = statistics.median(w / s for w, s in zip(times["written"], times["stats"]))
    print(f"({args.rows}, {args.vocab}) thread CPU ms per call, median of {args.rounds} rounds: "
          + ", ".join(f"{name} {statistics.median(t):.2f}" for name, t in times.items())
          + f"; written/stats median {ratio:.3f}")


if __name__ == "__main__":
    main()
