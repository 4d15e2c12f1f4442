"""Eager training steps at one and two threads against torch's, per step and per op kind, in one process.

    python benchmarks/eager_threads.py [--models gpt-4x128,dcgan,cnn,generate] [--threads 1,2] [--rounds 5]
                                       [--steps 3] [--quick]

Per model (benchmarks/models.py), the jitorch eager and torch eager steps are built and warmed up, then timed in
turns: each round runs, at each thread count, ``--steps`` steps of each system (wall per step, and the calling
thread's CPU), the systems and thread counts alternating so that the shared machine's load falls on all of them
alike. Printed: the median over rounds of each system's wall ms per step, of the per-round ratios jitorch / torch at
each thread count (the ratio taken within a round, a few hundred ms apart, is steadier than either time), and of
jitorch's calling-thread CPU ms per step; `runtime.threads.counters` per jitorch step at each thread count (which
eager ops forked onto the team, and how many parts no worker came for); the machine's load (``os.getloadavg``)
before and after each model. At two threads on a machine with more runnable threads than cores, the workers seldom
get a core ("taken back" near "parts") and wall times say more about the load than about the step; two_threads.py
``--system "jitorch eager" --in-turn`` gives the step's serial part, which does not depend on it.
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
from jitorch.runtime import threads  # noqa: E402
import models  # noqa: E402
from timing import settle  # noqa: E402

SYSTEMS = ("jitorch eager", "torch eager")


def load():
    """The 1-minute load average, as a string."""
    return f"{os.getloadavg()[0]:.2f}"


def per_step(call, steps):
    """(wall s, calling thread's CPU s) per call of ``steps`` calls."""
    w0, t0 = time.perf_counter(), time.thread_time()
    for _ in range(steps):
        call()
    return (time.perf_counter() - w0) / steps, (time.thread_time() - t0) / steps


def measure(name, thread_counts, rounds, steps, quick):
    """({(system, n): [wall s per step per round]}, {n: [jitorch's thread CPU s per step per round]},
    {n: `threads.counters` per jitorch step})."""
    calls = models.system_calls(name, SYSTEMS, quick)
    models.set_threads(thread_counts[0])
    models.warm(calls, 3)
    walls, cpu, counted = collections.defaultdict(list), collections.defaultdict(list), {}
    for _ in range(rounds):
        for n in thread_counts:
            models.set_threads(n)
            for system, call in calls.items():
                if not callable(call):
                    continue
                call()  # (a thread count just set starts its pools)
                settle()
                before = dict(threads.counters)
                wall, thread_cpu = per_step(call, steps)
                walls[system, n].append(wall)
                if system == "jitorch eager":
                    cpu[n].append(thread_cpu)
                    counted[n] = {k: (threads.counters[k] - before[k]) / steps for k in before}
    models.set_threads(1)
    return walls, cpu, counted


def print_steps(name, walls, cpu, thread_counts):
    cells = []
    for n in thread_counts:
        je, te = walls.get(("jitorch eager", n)), walls.get(("torch eager", n))
        line = f"[{n}t] jitorch {statistics.median(je) * 1e3:.2f} ms" if je else f"[{n}t]"
        if cpu.get(n):
            line += f" (caller CPU {statistics.median(cpu[n]) * 1e3:.2f})"
        if te:
            line += f", torch {statistics.median(te) * 1e3:.2f} ms"
        if je and te:
            line += f", jitorch/torch {statistics.median(a / b for a, b in zip(je, te)):.2f}x"
        cells.append(line)
    print(f"{name}: " + "; ".join(cells), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt-4x128,dcgan,cnn,generate")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="tiny sizes (for tests)")
    args = p.parse_args(argv)
    thread_counts = [int(n) for n in args.threads.split(",")]
    print(f"load {load()}", flush=True)
    for name in args.models.split(","):
        walls, cpu, counted = measure(name, thread_counts, args.rounds, args.steps, args.quick)
        print_steps(name, walls, cpu, thread_counts)
        for n, c in counted.items():
            print(f"  [{n}t] per jitorch step: " + " ".join(f"{k} {v:.1f}" for k, v in c.items()))
        print(f"  (load {load()})", flush=True)


if __name__ == "__main__":
    main()
