"""Every script in examples/ runs; eager_basics prints what the same script prints under torch."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def run(script):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300,
                          cwd=ROOT)


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(script):
    done = run(script)
    assert done.returncode == 0, done.stderr


def test_eager_basics_prints_what_torch_prints():
    # tests/data/eager_basics.torch.out is the script's output under `import torch` (torch 2.13),
    # with "torch." spelled "jitorch." (its one random tensor shows only its shape)
    expected = (ROOT / "tests/data/eager_basics.torch.out").read_text().splitlines()
    assert run(ROOT / "examples/eager_basics.py").stdout.splitlines() == expected
