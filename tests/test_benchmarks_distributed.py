"""benchmarks/distributed.py at its --quick sizes: it launches itself on 1 and 2 ranks and prints its three
tables."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_quick_run_prints_the_three_tables():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "distributed.py"), "--quick"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    # all-reduce rows (4 B, 64 KB, 1 MB): mpi4py, jitorch, nonblocking, gloo, agreement, jitorch's share of mpi4py's
    # from the medians and from the 10th percentiles
    assert len(re.findall(r"^ *(\d+B|\d+\.\d+MB)( +\d+\.\d+){5} +\d+% +\d+%$", done.stdout, re.M)) == 3, done.stdout
    for system in ("jitorch eager", "jitorch compiled", "torch eager"):
        assert re.search(rf"^ *{system} +\d+\.\d+ +\d+\.\d+ +\d+%$", done.stdout, re.M), done.stdout
    assert re.search(r"^Overlap on an 8-layer MLP, \d+ buckets, 2 ranks", done.stdout, re.M), done.stdout
    for system in ("jitorch, hooks advance MPI", "jitorch, progress thread"):
        assert re.search(rf"^ *{system}( +\d+\.\d+){{4}} +-?\d+% +-?\d+% +\d+\.\d of \d+ *$", done.stdout,
                         re.M), done.stdout
    assert re.search(r"^ *torch DDP on gloo( +\d+\.\d+){3} +-?\d+%$", done.stdout, re.M), done.stdout
    # where the synced step's CPU goes, part by part
    assert re.search(r"^CPU of rank 0 per step .*: hooks' MPI tests \d+\.\d+, copy in \d+\.\d+, start \d+\.\d+, "
                     r"copy out \d+\.\d+, finish \d+\.\d+$", done.stdout, re.M), done.stdout
