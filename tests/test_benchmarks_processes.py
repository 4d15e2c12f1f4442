"""benchmarks/processes.py at its --quick sizes: both tables print a row per worker count and per size."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_quick_run_prints_both_tables():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "processes.py"), "--quick"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert done.returncode == 0, done.stderr
    rows = re.findall(r"^ +(\d) +\d+ +\d+ +\d+\.\d+x +\d+\.\d+x$", done.stdout, re.M)
    assert rows == ["0", "1", "2"], done.stdout
    assert len(re.findall(r"^ *\d+\.\d+MB( +\d+\.\d+){4}$", done.stdout, re.M)) == 2, done.stdout
