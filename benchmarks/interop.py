"""Inter-op parallelism of compiled training steps (`jitorch.jit.interop`): the same compiled step with its
independent products run at once, and with it off, against torch eager and torch.compile(model).

    python benchmarks/interop.py [--models gpt-4x128,lstm,dcgan,cnn] [--threads 1,2] [--rounds 15] [--quick]
                                 [--no-torch]

Per model and thread count, in one process: the jitorch compiled step (one function, compiled once; `threads.INTEROP`
switched on or off before each of its turns), torch eager and torch.compile(model) take turns step by step for
``--rounds`` rounds (one step each per round, in an order that rotates each round), so that a shared machine's noise
falls on all of them alike. Printed: the median wall and process CPU ms per step of each, and the medians of the
per-round ratios (interop on ÷ off; jitorch compiled ÷ torch eager and ÷ torch.compile(model), with interop on and
off), which are steadier than the ratio of medians when other work comes and goes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402
from jitorch.runtime import threads  # noqa: E402
from timing import patched  # noqa: E402

ON, OFF = "jitorch compiled", "jitorch compiled, interop off"


def switched(call, on):
    """``call`` run with inter-op parallelism ``on`` (restored after)."""
    return patched(call, threads, "INTEROP", on)


def measure(name, n, rounds, quick, torch=True):
    """({system: [(wall s, CPU s) per round]}) of ``name``'s step at ``n`` threads (without torch's where not
    ``torch``)."""
    models.set_threads(n)
    calls = models.system_calls(name, ("jitorch compiled", "torch eager", "torch.compile(model)")[:3 if torch else 1],
                                quick)
    compiled = calls.pop("jitorch compiled")
    calls = {ON: switched(compiled, True), OFF: switched(compiled, False), **calls}
    models.warm(calls, 4)
    order = [s for s, c in calls.items() if callable(c)]
    times = {s: [] for s in order}
    for r in range(rounds):
        for s in order[r % len(order):] + order[:r % len(order)]:
            w, c = time.perf_counter(), time.process_time()
            calls[s]()
            times[s].append((time.perf_counter() - w, time.process_time() - c))
    return times


def ratio(times, a, b, k):
    """The median over rounds of ``a``'s time ÷ ``b``'s (``k``: 0 wall, 1 CPU), or "-"."""
    if a not in times or b not in times:
        return "-"
    return f"{statistics.median(x[k] / y[k] for x, y in zip(times[a], times[b])):.3f}"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt-4x128,lstm,dcgan,cnn")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--quick", action="store_true", help="tiny sizes (for tests)")
    p.add_argument("--no-torch", action="store_true", help="interop on and off only")
    args = p.parse_args(argv)
    for n in (int(t) for t in args.threads.split(",")):
        for name in args.models.split(","):
            times = measure(name, n, args.rounds, args.quick, not args.no_torch)
            print(f"{name}, {n} thread{'s' if n > 1 else ''}: median ms per step (wall / CPU)")
            for s, t in times.items():
                print(f"  {s:32s} {statistics.median(x[0] for x in t) * 1e3:8.2f} / "
                      f"{statistics.median(x[1] for x in t) * 1e3:8.2f}")
            print(f"  per-round ratios (wall / CPU): on÷off {ratio(times, ON, OFF, 0)} / {ratio(times, ON, OFF, 1)}")
            for other in ("torch eager", "torch.compile(model)"):
                for s in (ON, OFF):
                    print(f"    {s} ÷ {other}: {ratio(times, s, other, 0)} / {ratio(times, s, other, 1)}")


if __name__ == "__main__":
    main()
