"""Every script in examples/ runs, once, and reaches what it claims: the training examples their accuracy,
falling loss and equal reloaded predictions, with compiled steps that compile as whole graphs instead of
falling back to eager Python; eager_basics prints what the same script prints under torch. A few run with
smaller options (OPTIONS)."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


# Smaller runs, through the scripts' own options, of the examples whose defaults train longer than their claims
# need (char_transformer's loss halves by step 40) or that claim nothing a shorter run would not show.
OPTIONS = {"char_transformer": ["--steps", "60"], "sequence_models": ["--steps", "12"],
           "cuda_without_a_gpu": ["--points", "16"]}


def run(script):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(script), *OPTIONS.get(script.stem, [])], capture_output=True,
                          text=True, env=env, timeout=300, cwd=ROOT)


def number_after(label, text):
    """The last number printed after ``label:`` in ``text``."""
    found = re.findall(rf"{re.escape(label)}:? (-?\d+\.\d+)", text)
    assert found, f"no {label!r} line in:\n{text}"
    return float(found[-1])


def compiles_whole_graphs(done):
    assert "jitorch.compile: running" not in done.stderr


def train_mlp(done):
    compiles_whole_graphs(done)
    assert number_after("final accuracy", done.stdout) >= 0.9
    assert "predictions equal: True" in done.stdout  # the reloaded state_dict
    assert re.search(r"step time: eager \d+\.\d+ ms, compiled \d+\.\d+ ms", done.stdout)
    assert re.search(r"kernels: \d+, in launch order", done.stdout)


def train_cnn(done):
    compiles_whole_graphs(done)
    assert number_after("before training: test accuracy", done.stdout) < 0.5
    assert number_after("final accuracy", done.stdout) >= 0.8


def char_transformer(done):
    compiles_whole_graphs(done)
    losses = [float(x) for x in re.findall(r"step +\d+: loss (\d+\.\d+)", done.stdout)]
    assert losses[0] > 3.0  # about log(vocabulary) at the start
    assert number_after("final loss", done.stdout) < losses[0] / 2
    assert re.search(r"greedy sample: 'The PyTorch paper.{20,}'", done.stdout)


def export_and_load(done):
    compiles_whole_graphs(done)
    assert number_after("final accuracy", done.stdout) >= 0.9
    for line in ("exported program == model in this process: True", "fresh process's outputs == model's: True",
                 "a batch of 3 through the same program: [3, 4]"):
        assert line in done.stdout


def hogwild(done):
    # the parent never trains: the accuracy it sees comes from the workers' writes into shared memory
    assert number_after("before training: test accuracy", done.stdout) < 0.5
    assert number_after("final accuracy", done.stdout) >= 0.9
    assert done.stdout.count("parameters shared: True") == 2


def train_ddp(done):  # a world of one here; tests/distributed runs it on two ranks
    compiles_whole_graphs(done)
    assert number_after("final accuracy", done.stdout) >= 0.9
    assert "rank 0: replicas equal: True, checkpoint reloads: True, compiled step: one graph with 1 all-reduce" \
        in done.stdout


def export_onnx(done):
    assert "weights named as in state_dict: True" in done.stdout
    assert number_after("max difference from jitorch", done.stdout) < 1e-4
    assert number_after("onnxruntime accuracy", done.stdout) >= 0.8
    assert "predictions equal: True" in done.stdout


def eager_basics(done):
    # tests/data/eager_basics.torch.out is the script's output under `import torch` (torch 2.13),
    # with "torch." spelled "jitorch." (its one random tensor shows only its shape)
    expected = (ROOT / "tests/data/eager_basics.torch.out").read_text().splitlines()
    assert done.stdout.splitlines() == expected


def profile_training(done):
    compiled, traced = re.search(r"kernels in the compiled step: (\d+), kernels in the trace: (\d+)", done.stdout).groups()
    assert int(compiled) > 10 and traced == compiled
    path = done.stdout.strip().splitlines()[-1].removeprefix("trace written to ")
    assert json.loads(pathlib.Path(path).read_text())["traceEvents"]


def per_sample_gradients(done):
    assert "per-sample gradients equal the loop: True" in done.stdout
    assert "per sample: ['_check_values']" in done.stdout  # every other op of the forward and backward batched


CLAIMS = {check.__name__: check for check in (train_mlp, train_cnn, char_transformer, export_and_load,
                                               export_onnx, eager_basics, hogwild, train_ddp, profile_training,
                                               per_sample_gradients)}


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_and_reaches_its_claims(script):
    done = run(script)
    assert done.returncode == 0, done.stderr
    CLAIMS.get(script.stem, lambda done: None)(done)


def test_every_claimed_example_exists():
    assert set(CLAIMS) | set(OPTIONS) <= {p.stem for p in EXAMPLES}
