"""The training examples reach what they claim (accuracy, falling loss, equal reloaded predictions), and
their compiled steps compile as whole graphs instead of falling back to eager Python."""

import functools
import re

import pytest

from .test_examples import ROOT, run

TRAINING = ["train_mlp", "train_cnn", "char_transformer", "export_and_load"]


@functools.cache
def output(name):
    """The finished run of examples/<name>.py (one run per test process, shared by the tests below)."""
    done = run(ROOT / "examples" / f"{name}.py")
    assert done.returncode == 0, done.stderr
    return done


def number_after(label, text):
    """The last number printed after ``label:`` in ``text``."""
    found = re.findall(rf"{re.escape(label)}:? (-?\d+\.\d+)", text)
    assert found, f"no {label!r} line in:\n{text}"
    return float(found[-1])


@pytest.mark.parametrize("name", TRAINING)
def test_compiled_steps_do_not_fall_back_to_eager(name):
    assert "jitorch.compile: running" not in output(name).stderr


@pytest.mark.parametrize("name, least", [("train_mlp", 0.9), ("train_cnn", 0.8), ("export_and_load", 0.9)])
def test_classifier_accuracy(name, least):
    assert number_after("final accuracy", output(name).stdout) >= least


def test_mlp_reloaded_state_dict_predicts_the_same():
    assert "predictions equal: True" in output("train_mlp").stdout


def test_mlp_reports_eager_and_compiled_step_times_and_kernels():
    out = output("train_mlp").stdout
    assert re.search(r"step time: eager \d+\.\d+ ms, compiled \d+\.\d+ ms", out)
    assert re.search(r"kernels: \d+, in launch order", out)


def test_cnn_starts_at_chance():
    assert number_after("before training: test accuracy", output("train_cnn").stdout) < 0.5


def test_char_transformer_loss_falls_and_it_samples_the_text():
    out = output("char_transformer").stdout
    losses = [float(x) for x in re.findall(r"step +\d+: loss (\d+\.\d+)", out)]
    assert losses[0] > 3.0  # about log(vocabulary) at the start
    assert number_after("final loss", out) < losses[0] / 2
    assert re.search(r"greedy sample: 'The PyTorch paper.{20,}'", out)


@pytest.mark.parametrize("line", ["exported program == model in this process: True",
                                  "fresh process's outputs == model's: True",
                                  "a batch of 3 through the same program: [3, 4]"])
def test_exported_program_matches_the_model(line):
    assert line in output("export_and_load").stdout
