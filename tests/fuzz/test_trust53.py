"""Session 53's fuzz campaigns: the generator's one-hot loss pattern on the emulated GPU (a device it left out hid
every CUDA check of the programs holding it), and the convolution patterns (``--convs``,
`generator.Generator.conv_pattern`) and the models' convolution stems (``--models --convs``, `models._conv_stem`)
that neither the program fuzzer nor the model fuzzer drew before: 1-d and 2-d convolutions, transposed or not,
channels-last half the time, checked in every mode with their gradients and the parts they reach
(`reach.Reach`), and trained under ``jitorch.compile(model)``."""

from dataclasses import replace

import pytest

import torch

import jitorch
from tests.fuzz.generator import _with_grad, generate, probe, valid
from tests.fuzz.models import check_model, generate_model
from tests.fuzz.oracle import CPU_MODES, MODES, check
from tests.fuzz.reach import Reach


pytestmark = pytest.mark.usefixtures("quiet_warnings")


def _alone(program, tag, which=0):
    """``program`` reduced to its ``which``-th statement tagged ``tag``, returning what it defines."""
    stmt = [s for s in program.body if s.tag == tag][which]
    alone = _with_grad(program.with_body((stmt,), stmt.defines))
    assert valid(alone)
    return alone


def test_one_hot_loss_pattern_runs_on_the_emulated_gpu_seed_53000009():
    """Fuzz seed 53000009 (``--cuda --losses 0.15 --nets 0.15 --chains 0.1 --out-views 0.3``, and 11 more of the
    first 57): the one-hot pattern ``T.where(T.arange(c) == q, w, 0).sum(...)`` made its ``arange`` on the CPU, so
    both CUDA modes raised a device mismatch that torch, on the CPU, did not: a generator bug, which hid each such
    program's CUDA checks. The ``arange`` is now on the program's device, and the statement runs alike in every
    mode, the emulated GPU's included (no gradient run: the error was the forward's)."""
    program, _ = generate(53000009, chains=0.1, out_views=0.3, losses=0.15, nets=0.15)
    alone = replace(_alone(program, "loss one-hot"), grad=False)
    assert "T.arange(4, device=D)" in alone.body[0].lines[0]
    found = check(alone, MODES).mismatches
    assert not found, "\n".join(str(m) for m in found)


def test_convolution_patterns_are_drawn_and_accepted():
    """Over a few seeds the convolution patterns are drawn, torch runs most of them, and they take every form:
    1-d and 2-d, transposed, channels-last input (made contiguous so or a permuted view), grouped, 'same' padded."""
    attempts = accepted = 0
    text = ""
    for seed in range(6):
        program, g = generate(seed, 6, convs=0.6)
        attempts, accepted = attempts + g.attempts.get("conv", 0), accepted + g.accepted.get("conv", 0)
        text += "\n".join(line for s in program.body if s.tag == "conv" for line in s.lines)
    assert accepted >= 0.8 * attempts > 0
    for form in ("conv1d(", "conv2d(", "conv_transpose", "memory_format=T.channels_last", ".permute(0, 3, 1, 2)",
                 "groups=2", "padding='same'"):
        assert form in text, form


def test_without_convs_a_seed_draws_the_program_it_drew_before():
    """``convs=0`` draws nothing more from the seed's generator: the suite's seeds and earlier reports still hold."""
    for seed, options in ((0, {}), (9680017, {"nets": 0.5}), (45100340, {"losses": 0.4})):
        program, g = generate(seed, **options)
        assert program == generate(seed, convs=0.0, **options)[0]
        assert "conv" not in g.attempts


def test_no_convolution_with_an_empty_output_seed_53700024():
    """Fuzz seed 53700024 (``--convs 0.3``): ``conv_transpose2d`` of a ``(3, 1, 3, 1)`` input by a ``(1, 2, 1, 2)``
    weight, padding 1, whose output width is 0: torch's oneDNN path returned an empty result, eager jitorch raised
    torch's native check's error (its native kernel raises it too: docs/differences-from-torch.md). No jitorch
    bug: the generator now draws no convolution with an empty output, and the seed's convolutions are not empty."""
    x, w = torch.ones(3, 1, 3, 1), torch.ones(1, 2, 1, 2)
    assert tuple(torch.nn.functional.conv_transpose2d(x, w, padding=1).shape) == (3, 2, 1, 0)
    with pytest.raises(RuntimeError, match=r"\(1 x 0\). Output size is too small"):
        jitorch.nn.functional.conv_transpose2d(jitorch.ones(3, 1, 3, 1), jitorch.ones(1, 2, 1, 2), padding=1)
    program, g = generate(53700024, 8, convs=0.3)
    env = probe(program, g.facts)
    convs = [name for s in program.body if s.tag == "conv" for name in s.defines]
    assert convs and all(env[name].value.numel() > 0 for name in convs)


def test_no_gelu_of_an_infinite_value_seed_53960133():
    """Fuzz seed 53960133 (``--cuda --nets 0.4``, 8 statements): ``x1.atanh_()`` made an input element +inf, and a
    GELU MLP of it gave ``gelu(inf)``: inf in every jitorch mode (the limit of ``x * Phi(x)``), NaN in torch 2.13, a
    documented difference (docs/differences-from-torch.md), not a jitorch bug. The network patterns (and the
    convolutions' tails) now apply GELU to no operand holding +inf; the seed's program keeps its first GELU MLP,
    over finite values, and runs alike."""
    program, _ = generate(53960133, 8, nets=0.4)
    assert program.body[0].tag == "atanh_" and "net gelu mlp" in [s.tag for s in program.body]
    assert jitorch.nn.functional.gelu(jitorch.tensor([float("inf")])).item() == float("inf")
    found = check(program, CPU_MODES).mismatches
    assert not found, "\n".join(str(m) for m in found)


def test_no_inexact_float_written_into_integers_seed_53020597():
    """Fuzz seed 53020597 (``--cuda --losses 0.1``): ``v0[::1] = T.corrcoef(x1)`` wrote a float correlation into an
    int64 tensor: a cast to integers, which truncated jitorch's diagonal 1.0 to 1 and torch's 0.99999... to 0 (both
    within the float tolerance: a generator bug, not jitorch's). Index assignment now writes no inexact float
    value into integers or bools (the suite's 120 seeds draw the programs they drew; two transform seeds lost such a
    statement at their end). The seed's program keeps its corrcoef and runs alike."""
    program, _ = generate(53020597, losses=0.1)
    tags = [s.tag for s in program.body]
    assert "corrcoef" in tags and "setitem" not in tags
    found = check(program, CPU_MODES).mismatches
    assert not found, "\n".join(str(m) for m in found)


def test_channels_last_grouped_convolution_runs_alike_with_its_gradients_seed_53800004():
    """Seed 53800004's (``convs=0.9``, 4 statements) second convolution: a channels-last input and weight, two
    groups, dilation 2, 'same' padding: torch, eager, compiled and the interpreter agree on values, layouts and
    the gradients of the input, weight and bias (all read from ``x1``); the compiled call traces the convolution
    of a channels-last input and is cut into a forward saving values for its backward."""
    program, _ = generate(53800004, 4, convs=0.9)
    alone = _alone(program, "conv", 1)
    assert "contiguous(memory_format=T.channels_last)" in alone.body[0].lines[0] and alone.grad
    with Reach() as reach:
        found = check(alone, CPU_MODES).mismatches
        reached = reach.program(alone.grad)
    assert not found, "\n".join(str(m) for m in found)
    assert {"conv traced", "conv channels_last", "gradient run", "split", "split saved"} <= reached


def test_model_convolution_stems_are_drawn_and_leave_other_seeds_as_they_were():
    """``convs`` gives models of one leading dim an image input and a convolution stem, channels-last at times, and
    draws nothing from the seed's own generator: without it (or where the stem is not drawn) a seed's model is
    the one it was."""
    stems = {}
    for seed in range(12):
        plain, conv = generate_model(seed), generate_model(seed, convs=0.9)
        assert plain == generate_model(seed, convs=0.0)
        tags = [t for t in conv.tags if t.startswith("conv stem")]
        if not tags:
            assert conv == plain
            continue
        stems[seed] = tags[0]
        assert len(conv.inputs[0][1]) == 4 and conv.forward[len(conv.forward) - len(plain.forward):] == plain.forward
    assert {"conv stem", "conv stem channels_last"} <= set(stems.values()), stems


def test_channels_last_convolution_stem_saves_its_input_alike_seed_3():
    """``generate_model(3, convs=0.9)``: a ``Conv2d`` stem (its weight channels-last) over an input written between
    the forward and its backward. The convolution saved that input for its weight's gradient, so torch, eager and
    ``jitorch.compile(model)`` all refuse the backward with the version check's RuntimeError, having recorded
    nothing that differs."""
    program = generate_model(3, convs=0.9)
    assert "conv stem channels_last" in program.tags and program.scenario_kind == "write input"
    outcome = check_model(program)
    assert not outcome.mismatches, "\n".join(str(m) for m in outcome.mismatches)
    for run in outcome.runs.values():
        assert run.error.startswith("RuntimeError: one of the variables needed for gradient computation has been "
                                    "modified by an inplace operation"), run.error
