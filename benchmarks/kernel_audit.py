"""Roofline audit of a compiled training step's generated kernels (benchmarks/models.py's models).

    python benchmarks/kernel_audit.py [--models gpt-4x128,lstm,dcgan] [--top 10] [--steps 10] [--recompute]
                                      [--reductions] [--written-leaves]

Each model's whole compiled step is warmed up, then run under `jitorch.profiler.profile` with spans timed in the
calling thread's CPU time (1 thread). Each generated kernel's time per call (its spans, summed by kernel name) is
set against the bytes it moves: every input buffer read once, every output written once, at the sizes of the
values (a broadcast input counted at its own size). Effective GB/s is those bytes over the time; the bound is
this machine's streaming bandwidth at the same size, measured here as NumPy's ``np.add(a, b, out=c)`` over
float32 arrays of the kernel's bytes split in three (two read, one written), timed alike. ``%bound`` is the
kernel's GB/s over that. The top ``--top`` kernels by total time per step are printed, each with its ops,
shapes (inputs -> outputs) and kind.

``--recompute`` also times the whole step built with the recompute pass (`jitorch.ir.passes.recompute`)
against the same step built without it (``MAX_CONE`` 0), in this process, interleaved; ``--reductions`` the
step with the pass's copies into reductions' prologues against without them (``REDUCTIONS`` False);
``--written-leaves`` the step whose cones take the values written for readers across products as leaves against
without (``WRITTEN_LEAVES`` False).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(__file__))
import numpy as np  # noqa: E402

import jitorch  # noqa: E402
from jitorch.jit.executor import KernelStep  # noqa: E402
from jitorch.profiler import profile  # noqa: E402
import models  # noqa: E402
from step_profile import cpu_clock, with_over_without  # noqa: E402


def compiled_graphs(call):
    """The executables of the compiled function a `models.system_call` closure runs."""
    (compiled,) = [c.cell_contents for c in call.__closure__ if hasattr(c.cell_contents, "cache")]
    return [e.executable for e in compiled.cache.values() if e.executable is not None]


def kernel_sources(call):
    """{kernel name: its KernelSource} over the compiled step's graphs."""
    return {st.kernel.name: st.kernel.source for g in compiled_graphs(call) for st in g.steps
            if type(st) is KernelStep}


def nbytes(value):
    t = value.type
    return int(np.prod(t.shape, dtype=np.int64)) * t.dtype.itemsize


def stream_seconds(total_bytes, reps=20):
    """Thread CPU seconds of NumPy's a + b -> c over float32 arrays of ``total_bytes`` in all (median)."""
    n = max(1, total_bytes // 12)
    a, b, c = np.ones(n, np.float32), np.ones(n, np.float32), np.empty(n, np.float32)
    times = []
    for _ in range(reps):
        start = time.thread_time()
        np.add(a, b, out=c)
        times.append(time.thread_time() - start)
    return sorted(times)[len(times) // 2]


def audit(name, steps=10, top=10, quick=False):
    """Rows (ops, kind, shapes, MB moved, µs per call, calls per step, GB/s, % of the stream bound, ms per
    step), the most costly ``top`` kernels first."""
    jitorch.set_num_threads(1)
    call = models.system_call("jitorch compiled", name, quick)
    for _ in range(4):
        call()
    sources = kernel_sources(call)
    with cpu_clock(), profile() as prof:
        for _ in range(steps):
            call()
    total, count = collections.Counter(), collections.Counter()
    for event in prof.events():
        if event.kind == "kernel" and event.name in sources:
            total[event.name] += event.cpu_time_total
            count[event.name] += 1
    by_ops = collections.defaultdict(list)
    for kname in total:
        src = sources[kname]
        by_ops[("+".join(sorted(set(src.ops))), src.kind)].append(kname)
    rows = []
    for key, names in by_ops.items():
        for kname in names:
            src = sources[kname]
            moved = sum(nbytes(v) for v in src.inputs) + sum(nbytes(v) for v in src.outputs)
            per_call = total[kname] / count[kname]  # µs
            bound = stream_seconds(moved) * 1e6
            shapes = ",".join(str(list(v.type.shape)) for v in src.inputs) + " -> " + \
                ",".join(str(list(v.type.shape)) for v in src.outputs)
            rows.append((key[0], key[1], shapes, moved / 1e6, per_call, count[kname] / steps,
                         moved / per_call / 1e3, 100 * bound / per_call, total[kname] / steps / 1e3))
    rows.sort(key=lambda r: -r[-1])
    return rows[:top]


def recompute_ratio(name, steps=5, reps=11, threads=1, quick=False, setting=("MAX_CONE", 0)):
    """Median over ``reps`` interleaved turns (each system first in every other turn) of the step's CPU time
    with the recompute pass over without it (``setting``: the pass's module attribute and the value that turns
    it, or a part of it, off: `recompute.MAX_CONE` 0, the whole pass; `recompute.REDUCTIONS` False, its copies
    into reductions; `recompute.WRITTEN_LEAVES` False, its written leaves), both compiled in this process: thread CPU time at one thread, process CPU time at more."""
    from jitorch.ir.passes import recompute
    jitorch.set_num_threads(threads)
    attribute, off = setting
    calls, saved = {}, getattr(recompute, attribute)
    try:
        for label, value in (("without", off), ("with", saved)):
            setattr(recompute, attribute, value)  # (read when the step compiles, in its first calls)
            calls[label] = models.system_call("jitorch compiled", name, quick)
            for _ in range(4):
                calls[label]()
    finally:
        setattr(recompute, attribute, saved)
    return with_over_without(calls, steps, reps, threads)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt-4x128,lstm,dcgan")
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--quick", action="store_true", help="tiny sizes (for tests)")
    p.add_argument("--recompute", action="store_true",
                   help="also the step with the recompute pass against without, interleaved, at 1 and 2 threads")
    p.add_argument("--reductions", action="store_true",
                   help="also the step with the recompute pass's copies into reductions against without them")
    p.add_argument("--written-leaves", action="store_true",
                   help="also the step with the recompute pass's written leaves against without them")
    args = p.parse_args(argv)
    for name in args.models.split(","):
        for flag, what, setting in ((args.recompute, "recompute", ("MAX_CONE", 0)),
                                    (args.reductions, "copies into reductions", ("REDUCTIONS", False)),
                                    (args.written_leaves, "written leaves", ("WRITTEN_LEAVES", False))):
            if not flag:
                continue
            for threads in (1, 2):
                ratio = recompute_ratio(name, threads=threads, quick=args.quick, setting=setting)
                print(f"{name}: CPU time with/without {what} at {threads} thread(s): {ratio:.3f} "
                      "(median of 11 interleaved turns)")
        print(f"{name} (thread CPU time, 1 thread)")
        print(f"  {'ms/step':>7} {'calls':>5} {'µs/call':>8} {'MB':>6} {'GB/s':>6} {'%bound':>6}  kind ops  shapes")
        for ops, kind, shapes, mb, us, calls, gbs, pct, ms in audit(name, args.steps, args.top, args.quick):
            print(f"  {ms:7.3f} {calls:5.0f} {us:8.1f} {mb:6.2f} {gbs:6.1f} {pct:6.0f}  {kind} {ops}  {shapes}")


if __name__ == "__main__":
    main()
