"""A compiled training step with its runs' independent kernels dealt among the threads as one fork (`jit.kernel_runs`'s
shared groups: an optimizer's per-parameter updates) against the same step without (each kernel that splits forked
alone, the others on the calling thread), built in one process and interleaved.

    python benchmarks/shared_runs.py [--models gpt-4x128,dcgan,lstm,cnn] [--threads 2] [--reps 15] [--steps 3]
                                     [--quick]

Per model and thread count: the median over ``--reps`` turns of ``--steps`` steps of each system, wall-clock ms per
step (the process's time at more than one thread would count the workers' spinning), their ratio, the fastest turns,
the shared groups' kernels, and each system's forks of the thread team per step (`threads.counters`: which, unlike
the times, a busy machine does not change). At one thread both systems run the same program of kernels (shared groups fork
only at more than one thread). Timings on a shared machine are noisy: give the load (``uptime``) with them.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(__file__))
import jitorch  # noqa: E402
from jitorch.jit import executor  # noqa: E402
from jitorch.jit.compile import CompiledFunction  # noqa: E402
from jitorch.jit.kernel_runs import KernelRun  # noqa: E402
from jitorch.runtime import threads as team  # noqa: E402
import models  # noqa: E402


def build(name, shared, warmup=4, quick=False):
    """A warmed compiled step of model ``name`` (at benchmarks/models.py's ``quick`` sizes or not), its runs with
    shared groups or without, and the compiled functions it made."""
    w = models.workload(jitorch, name, quick)
    before = set(map(id, (o for o in gc.get_objects() if isinstance(o, CompiledFunction))))
    step = models.whole_step(jitorch, w)
    plain = executor.kernel_runs
    if not shared:  # (the calls' code is generated at their first run: without a memory, no group is shared)
        executor.kernel_runs = lambda steps, joins, memory=None: plain(steps, joins)
    try:
        for _ in range(warmup):
            step()
    finally:
        executor.kernel_runs = plain
    made = [o for o in gc.get_objects() if isinstance(o, CompiledFunction) and id(o) not in before]
    return step, made


def shared_kernels(functions):
    """The number of kernels in shared groups, and of groups, in the compiled ``functions``' graphs."""
    groups = [len(seg) for f in functions for entry in f.cache.values() if entry.executable is not None
              for unit in entry.executable.runs or () if type(unit) is KernelRun
              for seg, shared in zip(unit.segments, unit.shared) if shared]
    return sum(groups), len(groups)


def measure(name, threads, reps, steps, quick=False):
    """Print the row of model ``name`` at ``threads`` threads; returns (median ms with shared groups, without,
    kernels in shared groups)."""
    jitorch.set_num_threads(threads)
    (shared, made), (plain, _) = build(name, True, quick=quick), build(name, False, quick=quick)
    forks = {}
    for label, step in (("shared", shared), ("before", plain)):
        before = team.counters["forks"]
        step()
        forks[label] = team.counters["forks"] - before
    times = {"shared": [], "before": []}
    for _ in range(reps):
        for label, step in (("shared", shared), ("before", plain)):
            start = time.perf_counter()
            for _ in range(steps):
                step()
            times[label].append((time.perf_counter() - start) / steps * 1e3)
    a, b = statistics.median(times["shared"]), statistics.median(times["before"])
    kernels, groups = shared_kernels(made)
    print(f"  {name:10s} {threads}t  shared {a:8.2f}  before {b:8.2f}  ratio {a / b:5.3f}   fastest "
          f"{min(times['shared']):8.2f} / {min(times['before']):8.2f}   {kernels} kernels in {groups} shared groups, "
          f"forks per step {forks['shared']} / {forks['before']}", flush=True)
    return a, b, kernels


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt-4x128,dcgan,lstm,cnn")
    parser.add_argument("--threads", default="2")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="benchmarks/models.py's small sizes")
    args = parser.parse_args(argv)
    print(f"load: {os.getloadavg()[0]:.2f}; wall ms per step, medians of {args.reps} turns of {args.steps} steps")
    before = jitorch.get_num_threads()
    try:
        for threads in (int(t) for t in args.threads.split(",")):
            for name in args.models.split(","):
                measure(name, threads, args.reps, args.steps, args.quick)
    finally:
        jitorch.set_num_threads(before)


if __name__ == "__main__":
    main()
