"""benchmarks/step_profile.py at --quick sizes: a compiled step's profile split into its categories."""

from pathlib import Path

from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "step_profile.py"


def test_a_quick_lstm_step_profile_has_products_softmax_and_eager_recurrences(capsys):
    bench = load_script(SCRIPT, "step_profile_benchmark")
    plain, by = bench.profile_step("lstm", quick=True, steps=2)
    assert plain > 0 and set(by) == set(bench.CATEGORIES)
    # the decoder's and the recurrences' products, the log-softmax (its bias add inside), the fused cells' layers
    assert by["products"][1] >= 3 and by["softmax"][1] == 1 and by["eager steps"][1] >= 2
    assert all(ms >= 0 for ms, _ in by.values()) and by["products"][0] > 0
    bench.main(["--models", "cnn", "--quick", "--steps", "1"])
    out = capsys.readouterr().out
    assert "cnn, jitorch compiled (1 thread)" in out and "conv windows" in out and "copies" in out


def test_a_compiled_model_step_profile_sums_the_spans_of_its_forward_and_backward_graphs():
    bench = load_script(SCRIPT, "step_profile_benchmark")
    plain, by = bench.profile_step("cnn", quick=True, steps=2, system="jitorch.compile(model)")
    # the convolutions' and the linear layers' products of the forward graph and of the backward graph
    assert plain > 0 and by["products"][1] >= 8 and by["fused kernels"][1] >= 1
    assert set(by) == set(bench.CATEGORIES) and all(ms >= 0 for ms, _ in by.values())


def test_cpu_clock_times_every_span_in_thread_cpu_time():
    """Regression: --cpu-clock patched only ``time.perf_counter_ns``, while the recorder had bound its own clock at
    import: spans mixed the two clocks and printed ~1e9 ms."""
    import time
    from jitorch.profiler import recorder
    bench = load_script(SCRIPT, "step_profile_benchmark")
    before = time.perf_counter_ns, recorder._clock
    with bench.cpu_clock():
        plain, by = bench.profile_step("cnn", quick=True, steps=2)
    assert (time.perf_counter_ns, recorder._clock) == before
    assert 0 <= sum(ms for ms, _ in by.values()) < 20 * plain + 50


def test_by_op_splits_each_category_into_its_op_kinds_and_the_perf_map_names_the_kernels(capsys, tmp_path):
    bench = load_script(SCRIPT, "step_profile_benchmark")
    ops = {}
    _, by = bench.profile_step("lstm", quick=True, steps=2, by_op=ops)
    for kind in bench.CATEGORIES[:-1]:  # (the Python between spans has no op)
        ms, calls = by[kind]
        assert abs(sum(v[0] for (k, _), v in ops.items() if k == kind) - ms) < 1e-6
        assert abs(sum(v[1] for (k, _), v in ops.items() if k == kind) - calls) < 1e-6
    assert ("softmax", "log_softmax") in ops or any(k == "softmax" and "log_softmax" in op for k, op in ops)
    text = Path(bench.write_perf_map(str(tmp_path / "perf.map"))).read_text()
    lines = [line.split(" ", 2) for line in text.splitlines()]
    assert lines and all(int(a, 16) > 0 and int(n, 16) > 0 and name.startswith("jitorch") for a, n, name in lines)
    assert [int(a, 16) for a, _, _ in lines] == sorted(int(a, 16) for a, _, _ in lines)
    bench.main(["--models", "lstm", "--quick", "--steps", "1", "--by-op"])
    assert "log_softmax" in capsys.readouterr().out


def test_runs_times_a_step_with_runs_of_kernels_against_one_without(capsys):
    bench = load_script(SCRIPT, "step_profile_benchmark")
    ratio, (held, runs, kernels) = bench.runs_ratio("gpt-1x32", quick=True, steps=1, reps=3)
    assert ratio > 0 and 0 < 2 * runs <= held <= kernels
    bench.main(["--models", "lstm", "--quick", "--steps", "1", "--runs", "--reps", "1"])
    assert "runs of kernels: " in capsys.readouterr().out


def test_phases_time_the_parts_of_a_compiled_model_step_and_put_the_functions_back(capsys):
    from jitorch.autograd import engine
    from jitorch.jit import differentiable
    from jitorch.optim.optimizer import Optimizer
    bench = load_script(SCRIPT, "step_profile_benchmark")
    before = (engine._accumulate, differentiable._forward_split, Optimizer.step)
    total, by = bench.phase_times("gpt-1x32", quick=True, steps=2)
    assert (engine._accumulate, differentiable._forward_split, Optimizer.step) == before
    assert list(by) == [label for label, *_ in bench.PHASES] + ["outside"]
    # each phase the step makes was timed (gpt clips and zeroes with set_to_none), the graphs inside their calls
    assert all(by[label] > 0 for label in ("compiled call", "  forward graph", "backward", "  backward graph",
                                           "clip_grad_norm_", "optimizer step"))
    assert by["  forward graph"] <= by["compiled call"] and by["  backward graph"] <= by["backward"]
    assert total > by["compiled call"] + by["backward"]
    bench.main(["--models", "cnn", "--quick", "--steps", "1", "--phases"])
    out = capsys.readouterr().out
    assert "cnn, jitorch.compile(model) (1 thread)" in out and "optimizer step" in out
