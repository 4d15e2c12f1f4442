"""benchmarks/compile_latency.py's stage timing: a first call's CPU time split into the compile stages by wrappers
(no profiler), which are put back afterwards, and the in-process steady measurement over new compilations."""

import gc
import importlib
from pathlib import Path

import pytest

import jitorch as jt
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "compile_latency.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT, "compile_latency_benchmark")


def _stage_functions(bench):
    found = []
    for _, module_name, path in bench.STAGES:
        owner = importlib.import_module(module_name)
        *parents, name = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        found.append(owner.__dict__[name])
    return found


def test_a_first_call_splits_into_stages_and_the_functions_are_put_back(bench):
    before = _stage_functions(bench)

    def step(x):
        return (x * 2.0 + 1.0).relu().sum()
    with bench.time_stages() as seconds:
        out = jt.compile(step)(jt.ones(5, 3))
        assert _stage_functions(bench) != before  # (wrapped while the block runs)
    assert out.item() == 45.0
    assert _stage_functions(bench) == before
    assert list(seconds) == [label for label, _, _ in bench.STAGES] + [bench.COLLECTOR]
    assert seconds["trace (forward, backward, optimizer)"] > 0 and seconds["run the generated call"] > 0
    compile_s = seconds["compile the graph (below)"]
    inner = [seconds[label] for label, _, _ in bench.STAGES if label.startswith("  ")]
    assert compile_s > 0 and all(s >= 0 for s in inner) and sum(inner) <= compile_s * 1.01 + 1e-4


def test_stage_functions_are_put_back_when_the_call_raises(bench):
    before, callbacks = _stage_functions(bench), list(gc.callbacks)
    with pytest.raises(RuntimeError, match="expected"):
        with bench.time_stages():
            raise RuntimeError("expected")
    assert _stage_functions(bench) == before and gc.callbacks == callbacks


def test_the_collectors_passes_inside_the_block_are_timed_and_its_callback_removed(bench):
    callbacks = list(gc.callbacks)
    with bench.time_stages() as seconds:
        gc.collect()
    assert seconds[bench.COLLECTOR] > 0 and gc.callbacks == callbacks


def test_steady_gives_the_least_stage_times_of_new_compilations_of_the_gpt_step(bench):
    best = bench.steady(layers=1, repeat=2, threads=0)  # (0: the thread count is left as the suite has it)
    assert list(best) == [label for label, _, _ in bench.STAGES] + [bench.COLLECTOR, "whole first call"]
    assert best["whole first call"] >= best["compile the graph (below)"] >= best["  passes"] > 0
    assert best["trace (forward, backward, optimizer)"] > 0 and best["run the generated call"] > 0
