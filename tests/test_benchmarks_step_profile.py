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
