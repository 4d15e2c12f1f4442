"""Eager training steps at one and two threads against torch's, per step and per op kind, in one process.

    python benchmarks/eager_threads.py [--models gpt-4x128,dcgan,cnn,generate] [--threads 1,2] [--rounds 5]
                                       [--steps 3] [--ops] [--top 15] [--quick]

Per model (benchmarks/models.py), the jitorch eager and torch eager steps are built and warmed up, then timed in
turns: each round runs, at each thread count, ``--steps`` unprofiled steps of each system (wall per step), the
systems and thread counts alternating so that the shared machine's load falls on all of them alike. Printed: the
median over rounds of each system's wall ms per step, and of the per-round ratios jitorch / torch at each thread
count (the ratio taken within a round, a few hundred ms apart, is steadier than either time).

``--ops`` also profiles each system's steps in every round (``jitorch.profiler`` and ``torch.profiler``: the self
wall time of each op, ``aten::<name>``, and of autograd's nodes) and prints per op kind the median ms per step at
each thread count under both, with jitorch's ratio two threads / one: the ops where the second thread did not
help. Profiling slows jitorch's small ops (their fast paths step aside), not what an op computes.

Also printed: the machine's load (``os.getloadavg``) before and after, and `runtime.threads.counters` per jitorch
step at each thread count (which eager ops forked onto the team).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(__file__))
import jitorch  # noqa: E402
from jitorch.runtime import threads  # noqa: E402
import models  # noqa: E402

SYSTEMS = ("jitorch eager", "torch eager")


def load():
    """The 1-minute load average, as a string."""
    return f"{os.getloadavg()[0]:.2f}"


def op_times(lib, call, steps):
    """{op name: self wall ms per step} of ``steps`` calls of ``call`` under ``lib``'s profiler."""
    if lib is jitorch:
        from jitorch.profiler import profile
    else:
        from torch.profiler import profile
    with profile() as prof:
        for _ in range(steps):
            call()
    return {e.key: e.self_cpu_time_total / 1e3 / steps for e in prof.key_averages()}


def wall_per_step(call, steps):
    t0 = time.perf_counter()
    for _ in range(steps):
        call()
    return (time.perf_counter() - t0) / steps


def measure(name, thread_counts, rounds, steps, quick, ops):
    """({(system, n): [wall s per step per round]}, {(system, n): [{op: ms}]}, {n: counters per jitorch step})."""
    calls = models.system_calls(name, SYSTEMS, quick)
    models.set_threads(thread_counts[0])
    models.warm(calls, 3)
    walls, profiles = collections.defaultdict(list), collections.defaultdict(list)
    counted = {}
    for _ in range(rounds):
        for n in thread_counts:
            models.set_threads(n)
            for system, call in calls.items():
                if not callable(call):
                    continue
                call()  # (a thread count just set starts its pools)
                time.sleep(models.SETTLE_S)
                before = dict(threads.counters)
                walls[system, n].append(wall_per_step(call, steps))
                if system == "jitorch eager":
                    counted[n] = {k: (threads.counters[k] - before[k]) / steps for k in before}
                if ops:
                    lib = jitorch if system.startswith("jitorch") else models.real_torch()
                    profiles[system, n].append(op_times(lib, call, steps))
    models.set_threads(1)
    return walls, profiles, counted


def print_steps(name, walls, thread_counts):
    cells = []
    for n in thread_counts:
        je, te = walls.get(("jitorch eager", n)), walls.get(("torch eager", n))
        line = f"[{n}t] jitorch {statistics.median(je) * 1e3:.2f} ms" if je else f"[{n}t]"
        if te:
            line += f", torch {statistics.median(te) * 1e3:.2f} ms"
        if je and te:
            line += f", jitorch/torch {statistics.median(a / b for a, b in zip(je, te)):.2f}x"
        cells.append(line)
    print(f"{name}: " + "; ".join(cells), flush=True)


def print_ops(profiles, thread_counts, top):
    """Per op kind, the median ms per step of each system at each thread count, jitorch's costliest (at the
    highest thread count) first."""
    def median(system, n, op):
        runs = profiles.get((system, n), [])
        return statistics.median(p.get(op, 0.0) for p in runs) if runs else 0.0
    last = thread_counts[-1]
    names = {op for p in profiles.get(("jitorch eager", last), []) for op in p}
    ranked = sorted(names, key=lambda op: -median("jitorch eager", last, op))[:top]
    heads = [f"je {n}t" for n in thread_counts] + [f"torch {n}t" for n in thread_counts]
    print(f"  {'op':<58}" + "".join(f"{h:>10}" for h in heads) + f"{'je ratio':>10}")
    for op in ranked:
        cells = [median("jitorch eager", n, op) for n in thread_counts]
        cells += [median("torch eager", n, op) for n in thread_counts]
        ratio = cells[len(thread_counts) - 1] / cells[0] if cells[0] else float("nan")
        print(f"  {op[:58]:<58}" + "".join(f"{c:10.3f}" for c in cells) + f"{ratio:10.2f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt-4x128,dcgan,cnn,generate")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--ops", action="store_true", help="per op kind, profiled")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--quick", action="store_true", help="tiny sizes (for tests)")
    args = p.parse_args(argv)
    thread_counts = [int(n) for n in args.threads.split(",")]
    print(f"load {load()}", flush=True)
    for name in args.models.split(","):
        walls, profiles, counted = measure(name, thread_counts, args.rounds, args.steps, args.quick, args.ops)
        print_steps(name, walls, thread_counts)
        for n, c in counted.items():
            print(f"  [{n}t] per jitorch step: " + " ".join(f"{k} {v:.1f}" for k, v in c.items()))
        if args.ops:
            print_ops(profiles, thread_counts, args.top)
        print(f"  (load {load()})", flush=True)


if __name__ == "__main__":
    main()
