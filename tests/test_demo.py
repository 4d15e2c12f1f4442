"""The README's main job: `jitorch demo` trains, compiles, exports and reloads."""

import os
import pathlib
import subprocess
import sys

import pytest

from jitorch.cli import main

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run_demo(*options):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "jitorch.demo", *options], capture_output=True, text=True,
                          env=env, timeout=300, cwd=ROOT)


def test_demo_learns_compiles_exports_and_reloads(tmp_path):
    path = tmp_path / "digits.jitorch"
    # five epochs: three ended at 0.847 to 0.855 test accuracy, as rounding moved with the eager ops
    done = run_demo("--epochs", "5", "--hidden", "64", "--quiet", "--export-to", str(path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "epoch 1 (eager)" in out and "epoch 5 (compiled)" in out
    accuracy = float(out.split("final test accuracy:")[1].split()[0])
    assert accuracy > 0.85
    assert "speed-up" in out and "fused kernels" in out and "add relu le" in out
    assert "predicts the same classes" in out and path.exists()
    assert "running eagerly" not in done.stderr  # the step compiled as one graph


def test_demo_rejects_a_single_epoch():
    done = run_demo("--epochs", "1")
    assert done.returncode == 2 and "at least 2" in done.stderr


def test_the_jitorch_command_passes_its_options_to_the_demo(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--epochs", "1"])
    assert exit_info.value.code == 2
    assert "at least 2" in capsys.readouterr().err
