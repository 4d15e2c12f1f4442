"""benchmarks/share_memory.py at its --quick sizes: a row per tensor size and one for a GPT, each timing the
referrer search, the counted holders and torch."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_quick_run_prints_the_tensor_and_module_rows():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "share_memory.py"), "--quick"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert done.returncode == 0, done.stderr
    assert re.search(r"^objects in the process: [\d,]+;", done.stdout, re.M), done.stdout
    rows = re.findall(r"^(share_memory_\(\), 1 MB|Module\.share_memory\(\), GPT 1 layers) +( +\d+\.\d+ms){3}$",
                      done.stdout, re.M)
    assert [r[0] for r in rows] == ["share_memory_(), 1 MB", "Module.share_memory(), GPT 1 layers"], done.stdout
