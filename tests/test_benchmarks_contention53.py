"""benchmarks/contention.py at its --quick sizes: a row per system of the demo's MLP step, each with its times without
and with a busy process, the slow-down and the ratio to torch eager's time."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_quick_run_prints_a_row_per_system():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "contention.py"), "--quick"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert done.returncode == 0, done.stderr
    assert "1 busy processes" in done.stdout, done.stdout
    number = r" +\d+\.\d+"
    rows = re.findall(rf"^mlp +(torch eager|jitorch eager|jitorch compiled)(?:{number}){{4}}{number}x +(\d+\.\d+)x$",
                      done.stdout, re.M)
    assert [system for system, _ in rows] == ["torch eager", "jitorch eager", "jitorch compiled"], done.stdout
    assert rows[0][1] == "1.00"  # (torch eager against itself)
