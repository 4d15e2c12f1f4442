"""``import jitorch`` in fresh processes, and what the first eager ops then cost (issue 19: import in 0.3 s).

    python benchmarks/import_time.py [--runs 20] [--against /path/to/other/checkout] [--importtime 5]

Each run is a new interpreter (bytecode caches written beforehand, as an installed package has them) that imports
NumPy, then jitorch, then calls ``x + y`` and ``softmax`` once each on small tensors, then runs a first ``nn.Linear``
forward and backward, which loads jitorch.nn (`PROBE`). Per run: the whole process's wall time and CPU time (user +
system, from the parent's rusage), and inside it, the wall and process CPU time of ``import jitorch`` alone (NumPy
already loaded) and of each first call. Printed: min and median of each.
``--against`` runs another checkout (the baseline) alternately with this one, so both see the same load on a
shared machine. ``--importtime N`` adds the minimum over N runs of ``-X importtime``'s cumulative microseconds of
``jitorch`` (with NumPy imported first).
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

# the child's program: its own timings, one line of numbers
PROBE = """
import time
w, c = time.perf_counter, time.process_time
import numpy
w0, c0 = w(), c()
import jitorch as jt
w1, c1 = w(), c()
loaded = len(__import__("sys").modules)
x, y = jt.ones(4, 8), jt.ones(4, 8)
z = x + y
w2, c2 = w(), c()
s = jt.softmax(z, dim=-1)
w3, c3 = w(), c()
jt.nn.Linear(8, 4)(s).sum().backward()
w4, c4 = w(), c()
print(w1 - w0, c1 - c0, w2 - w1, c2 - c1, w3 - w2, c3 - c2, w4 - w3, c4 - c3, loaded)
"""
FIELDS = ("import wall", "import cpu", "first x+y wall", "first x+y cpu", "first softmax wall", "first softmax cpu",
          "first nn.Linear wall", "first nn.Linear cpu")


def environment(root):
    env = dict(os.environ, PYTHONPATH=root)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def one_run(root):
    """(process wall, process cpu, *the probe's FIELDS, modules loaded) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PROBE], env=environment(root), cwd=root, capture_output=True,
                          text=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return (wall, cpu, *map(float, done.stdout.split()))


def importtime(root, runs):
    """The minimum over ``runs`` of ``-X importtime``'s cumulative microseconds for the ``jitorch`` package."""
    best = None
    for _ in range(runs):
        err = subprocess.run([sys.executable, "-X", "importtime", "-c", "import numpy; import jitorch"],
                             env=environment(root), cwd=root, capture_output=True, text=True, check=True).stderr
        line = next(line for line in err.splitlines() if line.rstrip().endswith("| jitorch"))
        cumulative = int(line.split("|")[1])
        best = cumulative if best is None else min(best, cumulative)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--against", help="another checkout's root, run alternately as the baseline")
    parser.add_argument("--importtime", type=int, default=0, metavar="N")
    args = parser.parse_args(argv)
    roots = {"this": ROOT, **({"against": os.path.abspath(args.against)} if args.against else {})}
    for root in roots.values():
        compileall.compile_dir(os.path.join(root, "jitorch"), quiet=1)
    results = {label: [] for label in roots}
    for _ in range(args.runs):
        for label, root in roots.items():
            results[label].append(one_run(root))
    names = ("process wall", "process cpu", *FIELDS)
    for label, rows in results.items():
        print(f"{label} ({roots[label]}), {len(rows)} fresh processes, {int(rows[0][-1])} modules loaded by the import:")
        for i, name in enumerate(names):
            column = [row[i] * 1e3 for row in rows]
            print(f"  {name:20s} min {min(column):7.1f} ms   median {statistics.median(column):7.1f} ms")
        if args.importtime:
            print(f"  -X importtime jitorch cumulative, min of {args.importtime}: "
                  f"{importtime(roots[label], args.importtime) / 1e3:.1f} ms")
    return results


if __name__ == "__main__":
    main()
