"""Training steps on cores that other processes share: jitorch eager and compiled against torch eager.

    python benchmarks/contention.py                  # the demo's MLP and gpt-2x128, a busy process per core: minutes
    python benchmarks/contention.py --hogs 4 --models mlp
    python benchmarks/contention.py --quick          # tiny sizes, 1 busy process, few steps (the suite runs this)

A machine is seldom jitorch's alone: a test run, a second training job, a browser. Threads that spin-wait for
each other (OpenBLAS's at every product's barriers, a thread team's between parts) then wait for cores the
other processes hold, and a step can take many times its time on a quiet machine (the README demo's step under
two ``yes`` processes, session 52: torch eager 1.45 ms, jitorch eager 55-104 ms while NumPy's BLAS kept its
threads). Each model's systems take turns (`models.round_robin`: medians of wall time and of the process's CPU
time per step), first with the machine as it is, then with ``--hogs`` busy-loop processes running (stopped
whatever happens). No system sets a thread count: each runs as a user's program would, by default.

Session 53, the 2-core machine already at a load of 11 from other processes, plus 2 hogs (--models mlp --rounds 5
--steps 10): the demo step, jitorch eager 35.8 ms and compiled 0.79 ms (before the default thread policy, with
OpenBLAS's own threads: 429 and 201 ms), torch eager 132 ms (its two OpenMP threads spin-wait as OpenBLAS's do).

Models: ``mlp``, the README demo's step (``jitorch demo``: MLP 64-256-256-10, batch 64, cross-entropy, SGD with
momentum, on random digits); ``gpt-<layers>x<dims>``, benchmarks/models.py's nanoGPT step.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(__file__))
import jitorch  # noqa: E402
import models  # noqa: E402

SYSTEMS = ("torch eager", "jitorch eager", "jitorch compiled")
# (a process that only burns a core: what a second job's compute loop does to the cores)
HOG = "while True:\n    pass\n"


def mlp(lib, name, quick):
    """The README demo's training step (`jitorch.demo`) on random images of its data's shape."""
    hidden, batch = (32, 16) if quick else (256, 64)
    nn = lib.nn
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, 10))
    loss_fn = nn.CrossEntropyLoss()
    opt = lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = lib.rand(batch, 64), lib.randint(0, 10, (batch,))

    def step(nets, xb, yb):
        opt.zero_grad()
        loss = loss_fn(nets[0](xb), yb)
        loss.backward()
        opt.step()
        return loss
    return models.Workload((model,), (x, y), step)


models.BUILDERS["mlp"] = mlp


def start_hogs(n):
    """``n`` busy-loop processes."""
    return [subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.DEVNULL) for _ in range(n)]


def stop_hogs(hogs):
    for hog in hogs:
        hog.kill()
    for hog in hogs:
        hog.wait()


def measure(name, hogs, quick, rounds, per_round):
    """{(system, "quiet" or "hogs"): (wall ms, CPU ms)} of model ``name``'s step, without then with ``hogs``."""
    calls = models.system_calls(name, SYSTEMS, quick)
    models.warm(calls, 2)
    results = {}
    for load in ("quiet", "hogs"):
        running = start_hogs(hogs) if load == "hogs" else []
        try:
            wall, cpu = models.round_robin(calls, rounds, per_round)
        finally:
            stop_hogs(running)
        for system in wall:
            results[system, load] = (1e3 * wall[system], 1e3 * cpu[system])
    for system, call in calls.items():
        if not callable(call):
            print(f"  ({name}, {system}: {call})")
    return results


def print_table(rows, hogs):
    """One row per model and system: wall and CPU ms per step without and with the hogs, the slow-down the hogs
    caused, and the step's wall time with the hogs over torch eager's."""
    print(f"{'model':<12}{'system':<18}{'quiet ms':>9}{'cpu ms':>8}{f'{hogs} hogs ms':>11}{'cpu ms':>8}"
          f"{'slow-down':>10}{'/ torch':>9}")
    for name, results in rows:
        torch_ms = results.get(("torch eager", "hogs"), (None,))[0]
        for system in SYSTEMS:
            if (system, "quiet") not in results:
                continue
            (quiet, quiet_cpu), (loaded, loaded_cpu) = results[system, "quiet"], results[system, "hogs"]
            versus = f"{loaded / torch_ms:>8.2f}x" if torch_ms else f"{'-':>9}"
            print(f"{name:<12}{system:<18}{quiet:>9.3f}{quiet_cpu:>8.3f}{loaded:>11.3f}{loaded_cpu:>8.3f}"
                  f"{loaded / quiet:>9.2f}x{versus}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hogs", type=int, default=None, help="busy-loop processes (default: the cores, 1 with --quick)")
    p.add_argument("--models", default=None, help="comma-separated: mlp, gpt-<layers>x<dims> (default mlp,gpt-2x128;"
                                                  " mlp with --quick)")
    p.add_argument("--rounds", type=int, default=None, help="turns per system (default 7, 2 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="steps per turn (default 20, 3 with --quick)")
    p.add_argument("--quick", action="store_true", help="tiny sizes, few steps: checks that it runs")
    args = p.parse_args(argv)
    hogs = args.hogs if args.hogs is not None else (1 if args.quick else os.cpu_count() or 1)
    names = (args.models or ("mlp" if args.quick else "mlp,gpt-2x128")).split(",")
    rounds = args.rounds or (2 if args.quick else 7)
    steps = args.steps or (3 if args.quick else 20)
    print(f"jitorch {jitorch.__version__}: {hogs} busy processes on {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f}; jitorch threads {jitorch.get_num_threads()}")
    rows = [(name, measure(name, hogs, args.quick, rounds, steps)) for name in names]
    print_table(rows, hogs)
    print(f"(load average after: {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
