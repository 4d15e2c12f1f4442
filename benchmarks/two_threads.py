"""How a training step (compiled or eager) uses a second thread: per thread CPU, time queued for a core, forks.

    python benchmarks/two_threads.py [--models gpt-4x128,lstm,cnn] [--threads 1,2] [--steps 5] [--rounds 3]
                                     [--system "jitorch.compile(model)"] [--spans] [--gaps] [--in-turn] [--quick]

Per model and thread count, the step of ``--system`` (a system of benchmarks/models.py, or "jitorch eager") is
warmed up, then run ``--rounds`` times ``--steps`` steps; the round of median wall time is printed per step:

    wall            wall ms
    cpu             process CPU ms (every thread)
    caller          the calling thread's CPU ms; its runqueue wait (ms runnable but not on a core: other
                    processes' load, or this process's own worker spinning on a shared core) after "queued"
    workers         the team's workers' CPU ms (their parts, and their spins between forks), and queued ms
    forks ...       `runtime.threads.counters` per step: forks onto the team, parts handed over, forks run
                    inline (the team busy), parts taken back (no worker had claimed them when the forking
                    thread was done with its own), waits whose spin a crowded core ended (`CROWD_US`), waits
                    that spun to their end and slept (the next raise wakes them), compiled calls that held the team
                    (`threads.hold`: waits spin `STEP_SPIN_US` meanwhile), and
                    products' parts run as native BLAS calls (`runtime.blas_calls`: no GIL hand-over)

On a machine shared with other work, wall time says little; a thread's CPU and queueing times say where it went
(Linux: /proc/self/task/<id>/schedstat; elsewhere the queued times are 0).

Where Linux groups processes by session (``kernel.sched_autogroup_enabled`` 1, as on this project's machine), a
process's nice value weighs it only against the processes of its own session: other sessions' work run at
``nice -n 19`` still takes an equal share of the cores per session. The script then prints the autogroup line
(``/proc/self/autogroup``: this session's group and its nice, which ``echo N > /proc/self/autogroup`` sets for
the session). At a load of 11 from such sessions, the gpt-4x128 step's worker was queued 162 ms per step and ran
3.6 (148 of its 155 parts taken back by the calling thread); with this session's group at nice -19, 14 and 26.

``--spans`` also profiles the step at the highest thread count (``jitorch.profiler``, in the calling thread's CPU
time, as ``step_profile.py --cpu-clock``) and sums its spans per category of step_profile.py, each split into
the spans that forked onto the team (or ran inside a fork: a pair of products) and those that ran on the calling
thread alone while the other threads had nothing to do: where the serial stretches are.

``--gaps`` times the step's serial stretches (the calling thread's CPU between the step's start, its forks and its
end) and counts them by length: a stretch longer than the workers' spin puts them to sleep.

``--in-turn`` runs the step at the highest thread count with each fork's parts run one after another on the calling
thread (what is split, and how, stays that of the thread count), timing each part in thread CPU: the step's work
outside forks is its serial stretch, and that plus each fork's largest part is its time on that many threads with
workers that never wait for a core or a hand-over. Neither depends on other processes' load, which on a shared
machine decides whether a worker gets a core at all (wall times at two threads then say little).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import os
import sys
import threading
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(__file__))
import jitorch  # noqa: E402
from jitorch.profiler import _profiling, profile  # noqa: E402
from jitorch.runtime import blas_calls, threads  # noqa: E402
import models  # noqa: E402
import step_profile  # noqa: E402

COUNTERS = ("forks", "parts", "inline", "taken back", "crowded", "slept", "holds", "gemm calls")
# Bounds (µs of the calling thread's CPU) of the serial stretches `--gaps` counts
GAP_BOUNDS_US = (20, threads.SPIN_US, 500, threads.STEP_SPIN_US)
_Span = collections.namedtuple("_Span", "name kind args")  # (what step_profile.category reads of an event)


def _schedstat(native_id):
    """(CPU ms, runqueue ms) of a thread of this process; (CPU ms, 0) where the kernel does not say."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as f:
            run, queued = f.read().split()[:2]
        return int(run) / 1e6, int(queued) / 1e6
    except OSError:
        return time.thread_time() * 1e3 if native_id == threading.get_native_id() else 0.0, 0.0


def _counters():
    native = threads._native()
    return dict(threads.counters, crowded=native.crowded.value if native is not None else 0,
                slept=native.slept.value if native is not None else 0,
                **{"gemm calls": blas_calls.counters["gemm calls"]})


def _threads_now():
    """{"caller": (cpu, queued), "workers": (cpu, queued)} for this thread and the team's workers, in ms."""
    workers = [_schedstat(t.native_id) for t in threading.enumerate() if t.name.startswith("jitorch-")]
    return {"caller": _schedstat(threading.get_native_id()),
            "workers": (sum(w[0] for w in workers), sum(w[1] for w in workers))}


def measure(call, steps, rounds):
    """The median-wall round of ``rounds`` runs of ``steps`` calls: {"wall", "cpu", "caller", "workers",
    counters...} per step (caller and workers: (CPU ms, queued ms))."""
    results = []
    for _ in range(rounds):
        c0, t0, p0, w0 = _counters(), _threads_now(), time.process_time(), time.perf_counter()
        for _ in range(steps):
            call()
        w1, p1, t1, c1 = time.perf_counter(), time.process_time(), _threads_now(), _counters()
        row = {"wall": (w1 - w0) * 1e3 / steps, "cpu": (p1 - p0) * 1e3 / steps}
        for who in ("caller", "workers"):
            row[who] = tuple((b - a) / steps for a, b in zip(t0[who], t1[who]))
        row.update({k: (c1[k] - c0[k]) / steps for k in COUNTERS})
        results.append(row)
    results.sort(key=lambda r: r["wall"])
    return results[len(results) // 2]


@contextlib.contextmanager
def timed_forks():
    """The list of (start, end) of each fork onto the team made inside, in the calling thread's CPU ns."""
    forks = []
    forked = threads._forked

    def timed(parts, entry):
        start = time.thread_time_ns()
        try:
            return forked(parts, entry)
        finally:
            forks.append((start, time.thread_time_ns()))
    threads._forked = timed
    try:
        yield forks
    finally:
        threads._forked = forked


def spans(call, steps):
    """{(category, "forked" or "alone"): (calling thread's CPU ms, spans) per step} of a profiled run."""
    with timed_forks() as forks, step_profile.cpu_clock(), profile():
        recorder = _profiling.RECORDER
        for _ in range(steps):
            call()
    me = threading.get_native_id()
    forks.sort()
    starts = [s for s, _ in forks]
    times, counts = collections.Counter(), collections.Counter()
    for name, kind, thread, start, end, args in recorder.spans:
        what = step_profile.category(_Span(name, kind, args if isinstance(args, dict) else {}))
        if what is None or thread != me:  # (a worker's spans are timed on its own clock)
            continue
        i = bisect.bisect_right(starts, end) - 1  # the last fork that started before the span ended
        inside = i >= 0 and forks[i][1] > start
        key = (what, "forked" if inside else "alone")
        times[key] += (end - start) / 1e6 / steps
        counts[key] += 1 / steps
    return {k: (times[k], counts[k]) for k in times}


def gaps(call, steps):
    """(caller's thread CPU ms per step, of it inside forks, the serial rest, {stretch length: count per step}) of
    ``steps`` calls: the stretches between a step's start, its forks and its end, by their calling thread's CPU
    (`GAP_BOUNDS_US`); a worker whose spin is shorter than a stretch falls asleep in it, and the next fork wakes it."""
    calls = []
    with timed_forks() as forks:
        for _ in range(steps):
            start = time.thread_time_ns()
            call()
            calls.append((start, time.thread_time_ns()))
    labels = [f"<{GAP_BOUNDS_US[0]}"] + [f"{a}-{b}" for a, b in zip(GAP_BOUNDS_US, GAP_BOUNDS_US[1:])] + \
        [f">={GAP_BOUNDS_US[-1]}"]
    counts, inside = collections.Counter(), 0
    for start, end in calls:
        edges = [start] + [t for fork in forks if start <= fork[0] < end for t in fork] + [end]
        for a, b in zip(edges[0::2], edges[1::2]):  # (a serial stretch, then a fork, ...)
            counts[labels[bisect.bisect_right(GAP_BOUNDS_US, (b - a) / 1e3)]] += 1 / steps
        inside += sum(b - a for a, b in zip(edges[1:-1:2], edges[2:-1:2]))
    total = sum(b - a for a, b in calls)
    return total / 1e6 / steps, inside / 1e6 / steps, (total - inside) / 1e6 / steps, {k: counts[k] for k in labels}


def in_turn(call, steps):
    """(thread CPU ms per step, of it the work inside forks, the sum of each fork's largest part, forks per step)
    of ``steps`` calls whose forks run their parts one after another on the calling thread."""
    forks = []  # per fork, each part's thread CPU ns

    def one_by_one(parts, entry):
        if len(parts) < 2:
            return False
        times = []
        for part in parts:
            start = time.thread_time_ns()
            if entry is None:  # (a Python call, as `threads.run_calls` hands over)
                fn, args = part
                fn(*args)
            else:  # (native code's (args, lo, hi), as `threads.run_chunks` hands over)
                threads.KERNEL_ENTRY(entry)(*part)
            times.append(time.thread_time_ns() - start)
        forks.append(times)
        return True
    forked, threads._forked = threads._forked, one_by_one
    try:
        start = time.thread_time_ns()
        for _ in range(steps):
            call()
        total = time.thread_time_ns() - start
    finally:
        threads._forked = forked
    per_step = 1e6 * steps
    return (total / per_step, sum(map(sum, forks)) / per_step, sum(map(max, forks)) / per_step,
            len(forks) / steps)


def autogroup(proc="/proc"):
    """The scheduler's grouping of this process where Linux groups by session ("autogroup-N nice K"), else None."""
    try:
        with open(os.path.join(proc, "sys/kernel/sched_autogroup_enabled")) as f:
            if f.read().strip() != "1":
                return None
        with open(os.path.join(proc, "self/autogroup")) as f:
            return f.read().strip().lstrip("/")
    except OSError:
        return None


def measured(name, args, call, n, spin):
    """Print `measure`'s row of ``call`` at ``n`` threads, waits spinning ``spin`` µs while a call holds the team."""
    native = threads._native()
    if native is not None:
        native.hold_ns.value = spin * 1000
    try:
        r = measure(call, args.steps, args.rounds)
    finally:
        if native is not None:
            native.hold_ns.value = threads.STEP_SPIN_US * 1000
    print(f"{name}, {args.system}, {n} thread{'s' if n > 1 else ''}: wall {r['wall']:.2f} "
          f"cpu {r['cpu']:.2f} | caller {r['caller'][0]:.2f} queued {r['caller'][1]:.2f} | workers "
          f"{r['workers'][0]:.2f} queued {r['workers'][1]:.2f} | " + " ".join(f"{k} {r[k]:.1f}" for k in COUNTERS) +
          (f" | step spin {spin} µs" if n > 1 else ""), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt-4x128,lstm,cnn")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--system", default=step_profile.SYSTEMS[0], choices=(*step_profile.SYSTEMS, "jitorch eager"))
    p.add_argument("--spans", action="store_true", help="per category: forked or alone (profiled)")
    p.add_argument("--in-turn", action="store_true", help="each fork's parts one after another: the serial stretch")
    p.add_argument("--gaps", action="store_true", help="serial stretches between forks, by length")
    p.add_argument("--step-spin", default=str(threads.STEP_SPIN_US),
                   help="µs of spin while a compiled call holds the team, one row each (0: the short spin alone)")
    p.add_argument("--quick", action="store_true", help="tiny sizes (for tests)")
    args = p.parse_args(argv)
    counts = [int(n) for n in args.threads.split(",")]
    group = autogroup()
    if group is not None:
        print(f"(scheduled by session: {group}; other sessions' nice values do not weigh against it)", flush=True)
    for name in args.models.split(","):
        jitorch.set_num_threads(max(counts))
        call = models.system_call(args.system, name, args.quick)
        for n in counts:
            jitorch.set_num_threads(n)
            for _ in range(4):  # (compiles; Adam's first compiled call traces again)
                call()
            for spin in [int(us) for us in args.step_spin.split(",")] if n > 1 else [threads.STEP_SPIN_US]:
                measured(name, args, call, n, spin)
        if args.spans:
            by = spans(call, args.steps)
            for (what, where), (ms, k) in sorted(by.items(), key=lambda kv: -kv[1][0]):
                print(f"  {what:14s} {where:6s} {ms:8.2f} ms {k:6.0f} spans")
        if args.gaps:
            total, inside, serial, by_length = gaps(call, args.steps)
            print(f"  caller CPU {total:.2f} ms: in forks {inside:.2f}, serial {serial:.2f} ({serial / total:.0%}) in "
                  "stretches of µs " + ", ".join(f"{k} {v:.1f}" for k, v in by_length.items()), flush=True)
        if args.in_turn:
            total, inside, largest, n_forks = in_turn(call, args.steps)
            alone = total - inside
            print(f"  in turn at {max(counts)} threads: {total:.2f} ms, forked {inside:.2f} in {n_forks:.0f} forks, "
                  f"alone {alone:.2f} ({alone / total:.0%}); at best {alone + largest:.2f} "
                  f"({(alone + largest) / total:.2f}x)", flush=True)
    jitorch.set_num_threads(1)


if __name__ == "__main__":
    main()
