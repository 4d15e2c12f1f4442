"""The torch-style training programs in examples/programs/ run, in-process through their main(argv), for a few
tiny steps, eager and with --compile: losses are finite and, where a few steps suffice, fall; eager and compiled
runs of the same seed give the same losses, a checkpoint reloaded into a fresh model reproduces its outputs, and
samples are in range. Each also runs unchanged under torch."""

import math
import pathlib
import types
import warnings

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "examples" / "programs"


# tiny sizes: a few steps each
ARGV = {
    "gpt": ["--steps", "6", "--batch-size", "4", "--block-size", "16", "--n-layer", "1", "--n-embd", "32",
            "--sample-tokens", "6", "--warmup", "2"],
    "word_language_model": ["--steps", "6", "--batch-size", "4", "--emsize", "16", "--words", "5"],
    "dcgan": ["--steps", "4", "--batch-size", "4", "--nz", "8", "--ngf", "8", "--ndf", "8"],
    "vae": ["--steps", "5", "--batch-size", "8", "--train-size", "64", "--hidden", "32"],
    "mnist": ["--steps", "6", "--batch-size", "16", "--steps-per-epoch", "3", "--test-batch-size", "32"],
}


def program(name, library="jitorch"):
    """The program examples/programs/<name>.py as a module (it is a script, not a package), importing
    ``library`` under the name torch."""
    source = (PROGRAMS / f"{name}.py").read_text()
    if library != "jitorch":
        source = source.replace("import jitorch as torch", f"import {library} as torch")
        source = source.replace("jitorch.", f"{library}.")
    module = types.ModuleType(f"programs_{name}_{library}")
    exec(compile(source, str(PROGRAMS / f"{name}.py"), "exec"), module.__dict__)
    return module


def run_both(name, argv):
    """The program's results for ``argv``, eager and with --compile (which must compile its graphs rather
    than fall back to running them eagerly)."""
    main = program(name).main
    eager = main(argv)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = main(argv + ["--compile"])
    fallbacks = [str(w.message) for w in caught if str(w.message).startswith("jitorch.compile: running")]
    assert not fallbacks, fallbacks
    return eager, compiled


def assert_finite(values):
    assert values and all(math.isfinite(v) for v in values), values


def assert_same_losses(eager, compiled, rtol):
    np.testing.assert_allclose(compiled, eager, rtol=rtol)


def test_gpt_trains_reloads_and_samples_eager_and_compiled():
    eager, compiled = run_both("gpt", ARGV["gpt"])
    for run in (eager, compiled):
        assert_finite(run["losses"])
        assert run["losses"][-1] < run["losses"][0] - 0.2
        assert run["reloaded_loss"] == run["eval_loss"]
        for tokens in (run["greedy"], run["sampled"]):
            assert len(tokens) == len("First") + 6 and all(0 <= t < run["vocab_size"] for t in tokens)
    # under bfloat16 autocast the compiled graph may round at other places than eager does
    assert_same_losses(eager["losses"], compiled["losses"], rtol=1e-2)
    assert eager["greedy"] == compiled["greedy"]


def test_gpt_flash_and_written_out_attention_train_alike():
    # scaled_dot_product_attention(is_causal=True) against the masked softmax, in float32 with dropout
    argv = ARGV["gpt"] + ["--steps", "3", "--dtype", "float32", "--dropout", "0.1", "--sample-tokens", "1"]
    flash, manual = (program("gpt").main(argv + ["--attention", kind]) for kind in ("flash", "manual"))
    assert_same_losses(manual["losses"], flash["losses"], rtol=1e-5)


def test_lstm_language_model_trains_with_truncated_bptt_eager_and_compiled():
    eager, compiled = run_both("word_language_model", ARGV["word_language_model"])
    for run in (eager, compiled):
        assert_finite(run["losses"])
        assert run["losses"][-1] < run["losses"][0]
        assert run["reloaded_loss"] == run["eval_loss"]
        assert len(run["sample"]) == 5 and all(0 <= t < run["vocab_size"] for t in run["sample"])
    assert_same_losses(eager["losses"], compiled["losses"], rtol=1e-4)


def test_dcgan_trains_both_networks_eager_and_compiled():
    eager, compiled = run_both("dcgan", ARGV["dcgan"])
    for run in (eager, compiled):
        assert_finite(run["loss_D"] + run["loss_G"])
        assert run["samples"].shape == (8, 1, 16, 16)
        assert run["samples"].abs().max().item() <= 1.0  # tanh output
        assert run["reloaded_samples"].equal(run["samples"])
    assert_same_losses(eager["loss_D"], compiled["loss_D"], rtol=1e-4)
    assert_same_losses(eager["loss_G"], compiled["loss_G"], rtol=1e-4)


def test_vae_trains_a_compiled_train_step_and_reloads():
    eager, compiled = run_both("vae", ARGV["vae"])
    for run in (eager, compiled):
        assert_finite(run["losses"] + [run["test_loss"]])
        assert run["losses"][-1] < run["losses"][0]
        assert run["reloaded_sample"].equal(run["sample"])
        assert 0.0 <= run["sample"].min().item() and run["sample"].max().item() <= 1.0
    assert_same_losses(eager["losses"], compiled["losses"], rtol=1e-4)


@pytest.mark.parametrize("amp_dtype", ["bfloat16", "float16"])
def test_mnist_convnet_trains_under_autocast_eager_and_compiled(amp_dtype):
    eager, compiled = run_both("mnist", ARGV["mnist"] + ["--amp-dtype", amp_dtype])
    for run in (eager, compiled):
        assert_finite(run["losses"] + [run["test_loss"]])
        assert run["reloaded_accuracy"] == run["accuracy"]
        # float16 runs through a GradScaler, which keeps its scale when no step overflowed
        assert run["scale"] == (65536.0 if amp_dtype == "float16" else None)
    assert_same_losses(eager["losses"], compiled["losses"], rtol=2e-2)


@pytest.mark.parametrize("name", sorted(ARGV))
def test_the_same_program_runs_under_torch(name):
    # the programs are torch scripts: with torch imported in jitorch's place they run as they are
    result = program(name, "torch").main(ARGV[name])
    losses = result["losses"] if "losses" in result else result["loss_D"]
    assert_finite(losses)
