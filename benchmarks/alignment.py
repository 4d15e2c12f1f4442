"""What aligning a compiled step's arena buffers to cache lines buys: benchmarks/models.py's compiled training steps,
each call taking in turn an arena of aligned buffers (`allocator.aligned_bytes`, what the executor makes) and one of
NumPy's own allocations (16-byte aligned by malloc: what the executor made before session 57), in one process.

    python benchmarks/alignment.py [--models gpt-4x128,gpt-6x384,cnn] [--threads 1,2] [--steps 15] [--quick]

Per model and thread count: the median CPU per step with each arena (thread CPU at one thread, process CPU at
more, where the team's threads count), the median ratio aligned / NumPy's over the pairs of steps, and how many
of the NumPy arena's buffers happened to start a cache line. Read the ratio: both arenas serve the same step, the
same weights and the same per-call buffers, turn by turn.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import jitorch  # noqa: E402
import models  # noqa: E402
from jitorch.jit import executor  # noqa: E402
from jitorch.jit.kernel_runs import KernelRun  # noqa: E402
from jitorch.runtime import allocator  # noqa: E402
from timing import patched  # noqa: E402


def _graphs():
    """The compiled graphs alive that hold an arena (those of the step just called)."""
    return [g for g in gc.get_objects() if isinstance(g, executor.CompiledGraph) and g._arenas]


def pairs(name, threads, steps, quick):
    """(aligned s, NumPy's s, ratios aligned / NumPy's per pair, NumPy arena's buffers on a line, their count)."""
    jitorch.set_num_threads(threads)
    clock = time.thread_time if threads == 1 else time.process_time
    call = models.system_call("jitorch compiled", name, quick)
    for _ in range(4):  # (compiles; Adam's first compiled call traces again)
        call()
    graphs = _graphs()
    aligned = [list(g._arenas) for g in graphs]
    unaligned = [[patched(lambda g=g: executor.Arena(g.plan, g.steps, [u for u in g.runs if type(u) is KernelRun]),
                          allocator, "aligned_bytes", lambda n: np.empty(n, np.uint8))()] for g in graphs]
    on_line = [b.__array_interface__["data"][0] % allocator.ALIGNMENT == 0
               for arenas in unaligned for b in arenas[0].buffers]
    times = ([], [])
    for n in range(2 * steps + 2):
        side = n % 2
        for g, a, u in zip(graphs, aligned, unaligned):
            g._arenas[:] = (a, u)[side]
        start = clock()
        call()
        if n >= 2:  # (one untimed turn of each)
            times[side].append(clock() - start)
    ratios = [a / u for a, u in zip(*times)]
    return statistics.median(times[0]), statistics.median(times[1]), ratios, sum(on_line), len(on_line)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt-4x128,gpt-6x384,cnn")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--steps", type=int, default=15, help="pairs of timed steps")
    parser.add_argument("--quick", action="store_true", help="tiny models (for tests)")
    args = parser.parse_args(argv)
    print(f"load {os.getloadavg()[0]:.1f}")
    print(f"{'model':<11}{'threads':>8}{'aligned ms':>12}{'NumPy ms':>10}{'aligned/NumPy':>15}{'NumPy on a line':>17}")
    out = {}
    for threads in (int(t) for t in args.threads.split(",")):
        for name in args.models.split(","):
            a, u, ratios, lined, count = out[name, threads] = pairs(name, threads, args.steps, args.quick)
            print(f"{name:<11}{threads:>8}{a * 1e3:>12.2f}{u * 1e3:>10.2f}{statistics.median(ratios):>15.3f}"
                  f"{f'{lined}/{count}':>17}")
    print(f"load at the end {os.getloadavg()[0]:.1f}")
    return out


if __name__ == "__main__":
    main()
