"""benchmarks/models.py at its --quick sizes: the same torch-style model code runs under jitorch and torch, the
compiled whole step computes eager's first loss, and a profile of a first call is split into the compile stages."""

import cProfile
import math
from pathlib import Path

import pytest

import jitorch as jt
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "models.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT, "models_benchmark")


def test_quick_gpt_step_table_has_every_system_and_the_compiled_step_matches_eager(bench, capsys):
    systems = ["jitorch compiled", "jitorch eager", "torch eager"]
    tables, losses = bench.run_steps(["gpt-1x32"], systems, [1], quick=True)
    row = tables[1]["gpt-1x32"]
    assert all(isinstance(row[s], float) and row[s] > 0 for s in systems), row
    # one graph traced for the whole step: forward, backward and AdamW's update (first call sets its state)
    assert math.isclose(losses["gpt-1x32"]["jitorch compiled"], losses["gpt-1x32"]["jitorch eager"], rel_tol=1e-5)
    assert math.isfinite(losses["gpt-1x32"]["torch eager"])
    out = capsys.readouterr().out
    assert "1 thread: wall ms/step" in out and "1 thread: process CPU ms/step" in out and "gpt-1x32" in out


def test_models_load_from_the_example_programs_under_either_library(bench):
    torch = pytest.importorskip("torch")
    assert isinstance(bench.program("gpt", torch).GPT(5, 4, 1, 1, 8, 0.0), torch.nn.Module)
    assert isinstance(bench.program("gpt", jt).GPT(5, 4, 1, 1, 8, 0.0), jt.nn.Module)


def test_a_first_call_profile_splits_into_trace_compile_and_run_stages(bench, tmp_path):
    def step(x):
        return (x * 2.0 + 1.0).relu().sum()
    compiled = jt.compile(step)
    profiler = cProfile.Profile()
    profiler.runcall(compiled, jt.randn(7, 3))
    path = tmp_path / "first.prof"
    profiler.dump_stats(path)
    stage_s, self_s, incl_s, top = bench.breakdown(str(path))
    stages = {label: seconds for label, seconds, _ in stage_s}
    calls = {label: n for label, _, n in stage_s}
    assert stages["trace the step (all of it)"] > 0 and stages["compile the graph (all below)"] > 0
    assert stages["compile the graph (all below)"] >= stages["  fusion"] > 0
    assert stages["run the generated call"] > 0
    assert calls["  fusion"] == 1 and calls["  kernel LLVM IR build"] >= 1
    assert incl_s["jitorch/jit"] > 0 and any("jitorch/jit/compile.py" in where for _, where in top)


def test_quick_generation_runs_on_the_eager_systems_only(bench):
    systems = ["jitorch compiled", "jitorch eager", "torch eager"]
    tables, _ = bench.run_steps(["generate"], systems, [1], quick=True)
    row = tables[1]["generate"]
    assert "jitorch compiled" not in row  # the sampling loop is not compiled
    assert all(isinstance(row[s], float) and row[s] > 0 for s in ("jitorch eager", "torch eager")), row



def test_a_compiled_model_gives_the_whole_compiled_steps_gradients_from_split_graphs(bench):
    """jitorch.compile(model) with an eager backward: the call runs a forward graph and a backward graph cut
    from one joint trace (it does not recompute its forward), and the gradients are those of forward and
    backward compiled as one function, bit for bit. (DCGAN's batch norms: tests/jit/test_partition.py.)"""
    grads = []
    for compiled_model in (False, True):
        w = bench.workload(jt, "gpt-1x32", quick=True)
        model = jt.compile(w.nets[0]) if compiled_model else w.nets[0]

        def forward_backward(x, y):
            _, loss = model(x, y)
            loss.backward()
            return loss
        (forward_backward if compiled_model else jt.compile(forward_backward))(*w.batch)
        grads.append([p.grad for p in w.nets[0].parameters()])
    (entry,) = next(iter(model._by_mode.values())).cache.values()
    assert entry.split is not None and entry.backward is None
    for whole, split in zip(*grads):
        assert (whole == split).all()
