"""benchmarks/attention_kernels.py's options of session 56: the arrays placed a given number of bytes past a
64-byte boundary (``--offset``), and the kernels timed where a compiled GPT training step calls them
(``--in-step``): their share of the step and their time when each call is made again at once."""

from pathlib import Path

import numpy as np
import pytest

from jitorch.codegen.attention import AttentionKernel
from jitorch.runtime.array_address import data_address
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "attention_kernels.py"


@pytest.mark.parametrize("offset", [0, 16, 48])
def test_an_offset_places_every_array_that_many_bytes_past_a_64_byte_boundary(offset):
    bench = load_script(SCRIPT, f"attention_kernels_benchmark56_{offset}")
    rng = np.random.default_rng(0)
    heads = bench._heads(2, 3, 16, 32, 3, rng, offset)
    assert all(data_address(h) % 64 == offset for h in heads)
    assert data_address(bench._normal((2, 16, 16), rng, offset)) % 64 == offset
    assert np.isfinite(heads[0]).all() and heads[0].std() > 0.5


def test_an_offset_is_a_multiple_of_4_below_64():
    bench = load_script(SCRIPT, "attention_kernels_benchmark56_bad")
    for bad in ("3", "64", "-4"):
        with pytest.raises(SystemExit):
            bench.main(["--offset", bad])


def test_in_step_times_the_kernels_as_a_compiled_step_calls_them_and_again(monkeypatch):
    bench = load_script(SCRIPT, "attention_kernels_benchmark56_step")
    calls = []
    run = AttentionKernel.run_tiles
    monkeypatch.setattr(AttentionKernel, "run_tiles", lambda *args: calls.append(args[2]) or run(*args))
    counting = AttentionKernel.run_tiles
    figures, step = bench.in_step("gpt-4x128", steps=1, quick=True)
    assert set(figures) == {"forward", "backward"}
    assert all(0 < kernels < step and again > 0 for kernels, again in figures.values())
    # a forward and a backward call per layer (4) in each of the 4 warm-up steps and the unpatched step, then
    # twice each in the timed step; the run_tiles it found is back in place after
    assert len(calls) == 2 * 4 * (4 + 1 + 2)
    assert AttentionKernel.run_tiles is counting


def test_in_step_with_a_baseline_takes_turns_between_the_two_versions_kernels(monkeypatch):
    """Each call the step makes runs this version's kernel in one turn and the baseline's, built for the same
    call, in the next; the registered kernel function is back in place after."""
    from jitorch.ops import attention as op
    bench = load_script(SCRIPT, "attention_kernels_benchmark56_turns")
    old = bench.baseline_kernels(Path(__file__).parents[1] / "jitorch" / "codegen" / "attention.py")
    ours, theirs = [], []
    for kernels, seen in ((AttentionKernel, ours), (old.__globals__["AttentionKernel"], theirs)):
        run = kernels.run_tiles
        monkeypatch.setattr(kernels, "run_tiles", lambda *args, run=run, seen=seen: seen.append(args[2]) or run(*args))
    registered = op.ATTENTION_KERNEL
    figures, step = bench.in_step("gpt-4x128", steps=1, quick=True, old=old)
    assert set(figures) == {"forward", "backward"}
    assert all(0 < new_s < step and old_s > 0 and ratio > 0 for new_s, old_s, ratio in figures.values())
    # 4 layers, a forward and a backward each: 4 warm-up steps, the unpatched one and this version's 2 turns;
    # old's 2 turns (the first untimed)
    assert (len(ours), len(theirs)) == (2 * 4 * (4 + 1 + 2), 2 * 4 * 2)
    assert op.ATTENTION_KERNEL is registered
