"""Compiled row and full reductions against torch eager, taking turns in one process.

    python benchmarks/row_reductions.py [--quick] [--threads 1,2] [--gap MS] [--pin] [--parts]

16M float32 elements as rows of 9 to 4096 (``t.sum(1)``, ``t.amax(1)``), and the full sum: the shapes whose kernels
read a run of reduced elements (`jitorch/codegen/kernel.py`'s ``streamed_run``). The two systems take turns in
blocks of `BLOCK` timed calls, the first of each round alternating; a block begins once the other system's threads
went quiet after its last call (`timing.settle`), with one call untimed, and its calls follow each other (``--gap``:
that many ms apart, the worker then asleep at each call: jitorch's team spins `threads.SPIN_US` after a part,
torch's OpenMP workers about 4.4 ms). Taking turns call by call, as this script did until session 51, timed each
jitorch call 1 ms after a torch call, while a torch worker still spun on one of the two cores (process CPU time
during a sleep after a torch call at 2 threads: 1.08 ms in 1 ms, 4.4 ms in 5 to 100 ms; after a jitorch call
0.07-0.14): at 2 threads a 16M sum took 2.20 ms 1 ms after a torch call against 1.42 ms 30 ms after it or 1.46 ms 1
ms after a jitorch call (4096x4096 row max: 2.86, 2.29, 2.25 ms; medians of 25, load 13.6, the process at autogroup
nice -20), so its 2-thread table held jitorch to about one thread's time.

Medians of wall time per call and of the calling thread's CPU time (at one thread the fair measure on a shared
machine), the ratio jitorch / torch of the wall medians, and at two threads or more what became of jitorch's
forks (`jitorch.runtime.threads.counters` and the team's native counters): the share of the parts handed to a
worker that the calling thread took back because no worker had claimed them when its own part was done (the
call then runs as one thread's), and the spins that ended early because a yield showed the machine crowded
(`threads.CROWD_US`; the worker then sleeps, and the next fork must wake it).

``--parts`` then runs each case's jitorch call again at two threads or more with each fork's native parts recorded
(`where_parts_ran`): the parts taken back, those a worker ran on the forking thread's CPU, how long after the fork
a worker's part began, and the parts' lengths (the split's balance). On the 2-vCPU machine (load 16, the process at
autogroup nice -20, 90 calls of the 4096-wide row max): with the workers left to the kernel 14-50% of the parts
were taken back and 3-9 run on the forking thread's CPU; placed (`threads.PIN_WORKERS`), 3-8% and none, a worker's
part beginning 13-24 us after the fork, the two parts within 5% of each other. The whole table at 2 threads (same
conditions, JITORCH_PIN_WORKERS=0 then 1, separate processes): sum of 16M 2.16 -> 1.20 ms (93% -> 0% taken back),
rows of 9, 16 and 64 1.9-2.1x faster (2.40 -> 1.26 ms the 64-wide row sum), rows of 1024 and 4096 even (their
worker came in both: 0-11% taken back).

On the shared 2-core machine (load 13-16 from other work) the 2-thread table measures the scheduler more than
the kernels: a woken worker is placed on the core of the thread that woke it when no core is idle, and waits
there while that thread runs its own part, which then takes the worker's back (80-93% of the parts at load 13,
with the process at autogroup nice -20), while torch's OpenMP workers, which spin instead of sleeping, keep their
core. ``--pin`` pins the calling thread to one CPU and every other thread of the process (jitorch's worker,
torch's OpenMP workers) to the others, as a quiet machine would give each its core; with the process at high
priority (``setsid sh -c 'echo -20 > /proc/$$/autogroup; exec python benchmarks/row_reductions.py --pin'``, as
root) jitorch's second thread bought what torch's did: jitorch / torch at 2 threads 1.05 on the 16M sum and
1.05-1.19 on rows of 64 to 4096 (1.08 and 0.94-1.11 at 1 thread), its parts taken back 0-11% (load 14.3).
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import statistics
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import jitorch as jt  # noqa: E402
from jitorch.runtime import threads as team  # noqa: E402
from timing import settle  # noqa: E402

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


# Calls per block
BLOCK = 3


def timed(calls, rounds, gap=0.0):
    """{name: (median wall, median thread CPU)} of the ``calls`` (name -> function), in blocks taking turns (see
    the module docstring): ``rounds`` timed calls of each, ``gap`` seconds apart within a block."""
    names = list(calls)
    wall = {k: [] for k in names}
    cpu = {k: [] for k in names}
    for r, first in enumerate(range(0, rounds, BLOCK)):
        for k in names[r % len(names):] + names[:r % len(names)]:
            settle()
            calls[k]()
            for _ in range(min(BLOCK, rounds - first)):
                if gap:
                    time.sleep(gap)
                c0, t0 = time.thread_time(), time.perf_counter()
                calls[k]()
                t1, c1 = time.perf_counter(), time.thread_time()
                wall[k].append(t1 - t0)
                cpu[k].append(c1 - c0)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in names}


def pin_threads():
    """Pin the calling thread to the first CPU this process may run on and the process's other threads to the
    others (Linux; see ``--pin`` in the module docstring); False where there is one CPU or no /proc."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or not os.path.isdir("/proc/self/task"):
        return False
    me = threading.get_native_id()
    for tid in map(int, os.listdir("/proc/self/task")):
        try:
            os.sched_setaffinity(tid, cpus[:1] if tid == me else cpus[1:])
        except OSError:  # (a thread that has ended since the listing)
            continue
    return True


# `--parts`: a native part that runs a kernel's part and records where and when: its argument array holds the
# kernel's entry and argument array, then it writes the CPU the part began on, its thread id, and its start and end
# (CLOCK_MONOTONIC ns)
_PART_IR = """
declare i32 @sched_getcpu()
declare i64 @syscall(i64, ...)
declare i32 @clock_gettime(i32, i8*)

{now}

define void @recorded_part(i8* %a, i64 %lo, i64 %hi) {{
  %w = bitcast i8* %a to i64*
  %t0 = call i64 @now()
  %cpu = call i32 @sched_getcpu()
  %tid = call i64 (i64, ...) @syscall(i64 {gettid})
  %fi = load i64, i64* %w, align 8
  %pa = getelementptr i64, i64* %w, i64 1
  %ai = load i64, i64* %pa, align 8
  %fn = inttoptr i64 %fi to void (i8*, i64, i64)*
  %args = inttoptr i64 %ai to i8*
  call void %fn(i8* %args, i64 %lo, i64 %hi)
  %t1 = call i64 @now()
  %pc = getelementptr i64, i64* %w, i64 2
  %c64 = sext i32 %cpu to i64
  store i64 %c64, i64* %pc, align 8
  %pt = getelementptr i64, i64* %w, i64 3
  store i64 %tid, i64* %pt, align 8
  %p0 = getelementptr i64, i64* %w, i64 4
  store i64 %t0, i64* %p0, align 8
  %p1 = getelementptr i64, i64* %w, i64 5
  store i64 %t1, i64* %p1, align 8
  ret void
}}
"""
_GETTID = {"x86_64": 186, "aarch64": 178}


@functools.cache
def _recorded_part():
    """(the address of `_PART_IR`'s part, its engine, a function giving CLOCK_MONOTONIC ns), None where the team has
    no native code."""
    arch = team._arch()
    if arch is None:
        return None
    import llvmlite.binding as llvm

    libc = ctypes.CDLL(None)
    for name in ("sched_getcpu", "syscall", "clock_gettime"):
        llvm.add_symbol(name, ctypes.cast(getattr(libc, name), ctypes.c_void_p).value)
    engine = team._mcjit(_PART_IR.format(now=team.NOW_IR, gettid=_GETTID[arch]))
    return engine.get_function_address("recorded_part"), engine, lambda: time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def where_parts_ran(call, calls):
    """Run ``call`` ``calls`` times in blocks of `BLOCK` (each begun settled, as `timed` times them) with each fork's
    native parts recorded: per fork, the forking thread's CPU, and per part handed to a worker whether the forking
    thread took it back, the CPU it ran on, how long after the fork it began (the wake-up), and both parts'
    lengths. Returns medians and counts as a dict (empty where nothing forked)."""
    recorded = _recorded_part()
    if recorded is None:
        return {}
    address, _, now = recorded
    forks = []
    forked = team._forked

    def recording(parts, entry):
        if entry is None:
            return forked(parts, entry)
        words = [(ctypes.c_int64 * 6)(entry, args, -1, 0, 0, 0) for args, _, _ in parts]
        start = now()
        ran = forked([(ctypes.addressof(w), lo, hi) for w, (_, lo, hi) in zip(words, parts)], address)
        forks.append((start, words))
        return ran
    team._forked = recording
    try:
        for first in range(0, calls, BLOCK):
            settle()
            for _ in range(min(BLOCK, calls - first)):
                call()
    finally:
        team._forked = forked
    me = threading.get_native_id()
    handed = [(start, words[0], w) for start, words in forks for w in words[1:]]
    ran = [(start, mine, w) for start, mine, w in handed if w[3] != me]
    if not handed:
        return {}
    return {"parts": len(handed), "taken back": len(handed) - len(ran),
            "on its CPU": sum(w[2] == mine[2] for _, mine, w in ran),
            "start us": statistics.median((w[4] - start) / 1e3 for start, _, w in ran) if ran else float("nan"),
            "own part us": statistics.median((mine[5] - mine[4]) / 1e3 for _, mine, _ in handed),
            "worker part us": statistics.median((w[5] - w[4]) / 1e3 for _, _, w in ran) if ran else float("nan")}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4M elements, fewer rounds")
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    parser.add_argument("--gap", type=float, default=0.0, help="ms between calls within a block (default: none)")
    parser.add_argument("--pin", action="store_true", help="the calling thread on one CPU, the workers on the others")
    parser.add_argument("--parts", action="store_true",
                        help="at 2 threads or more, where each jitorch fork's parts ran (after the timing)")
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
    print(f"medians of {rounds} calls each, {args.gap:g} ms apart in blocks of {BLOCK}, wall (thread CPU); "
          f"load {os.getloadavg()[0]:.1f}")
    for threads in (int(t) for t in args.threads.split(",")):
        jt.set_num_threads(threads)
        torch.set_num_threads(threads)
        print(f"\n{threads} thread{'s' * (threads > 1)}")
        print(f"{'case':<26}{'jitorch compiled':>24}{'torch eager':>24}{'jt / torch':>12}{'taken back':>12}"
              f"{'crowded':>9}")
        native = team._native()
        for label, calls in prepared:
            for call in calls.values():
                call()
            if args.pin:  # (after the calls that start each system's workers at this thread count)
                pin_threads()
            parts, back = team.counters["parts"], team.counters["taken back"]
            crowded = native.crowded.value if native is not None else 0
            times = timed(calls, rounds, args.gap / 1e3)
            parts, back = team.counters["parts"] - parts, team.counters["taken back"] - back
            crowded = native.crowded.value - crowded if native is not None else 0
            (jw, jc), (tw, tc) = times["jitorch compiled"], times["torch eager"]
            print(f"{label:<26}{f'{jw * 1e3:.2f} ({jc * 1e3:.2f}) ms':>24}{f'{tw * 1e3:.2f} ({tc * 1e3:.2f}) ms':>24}"
                  f"{jw / tw:>12.2f}{f'{back / parts:.0%}' if parts else '-':>12}{crowded if parts else '-':>9}")
            where = where_parts_ran(calls["jitorch compiled"], rounds) if args.parts and threads > 1 else {}
            if where:
                print(f"{'':<4}parts: {where['parts']} handed to workers, {where['taken back']} taken back, "
                      f"{where['on its CPU']} run on the forking thread's CPU; "
                      f"a worker's part began {where['start us']:.1f} us after the fork (median); parts "
                      f"{where['own part us']:.0f} us (forking thread) / {where['worker part us']:.0f} us (worker)")
    placed = {n: t.placements for n, t in team._teams.items()}
    print(f"load at the end {os.getloadavg()[0]:.1f}; worker placement {team.PIN_WORKERS!r} "
          f"(`threads.PIN_WORKERS`), masks set per team: {placed}")


if __name__ == "__main__":
    main()
