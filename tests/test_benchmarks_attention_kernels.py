"""benchmarks/attention_kernels.py: one round gives a row for each GPT shape and direction, both systems timed."""

from pathlib import Path

from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "attention_kernels.py"


def test_one_round_times_both_kernels_of_each_gpt_shape_against_torch(capsys):
    bench = load_script(SCRIPT, "attention_kernels_benchmark")
    results = bench.main(["--rounds", "1", "--reps", "1"])
    assert set(results) == {(name, d) for name, *_ in bench.SHAPES for d in ("forward", "backward")}
    assert all(ours > 0 and theirs > 0 and ratio > 0 for ours, theirs, ratio in results.values())
    out = capsys.readouterr().out
    assert out.count("gpt-4x128") == 2 and out.count("gpt-6x384") == 2
