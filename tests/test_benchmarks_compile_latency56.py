"""benchmarks/compile_latency.py's ``--baseline``: the warm first calls of another checkout timed in turn with this
tree's, their medians side by side, on the stages both trees time."""

from pathlib import Path

from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "compile_latency.py"


def test_the_baselines_and_this_trees_medians_are_printed_side_by_side(capsys):
    bench = load_script(SCRIPT, "compile_latency_benchmark56")
    labels = bench.stage_labels()

    def report(first, scale, skip=None):
        return {"first": first, "stages": {label: scale * (i + 1) / 1e3 for i, label in enumerate(labels)
                                           if label != skip}}
    ours = [report(0.30, 1.0), report(0.20, 1.0), report(0.25, 3.0)]
    theirs = [report(0.40, 2.0, skip=labels[1]), report(0.50, 2.0, skip=labels[1]), report(0.60, 2.0, skip=labels[1])]
    bench.print_compared(ours, theirs)
    lines = capsys.readouterr().out.splitlines()
    assert "medians of 3 processes each" in lines[0]
    rows = {line[:40].strip(): line[40:].split() for line in lines[1:]}
    # (a stage the baseline does not time is left out; the ratio is this tree's median over the baseline's)
    assert labels[1].strip() not in rows and len(rows) == len(labels)
    assert rows[labels[0].strip()] == ["2", "1", "0.50"] and rows["whole first call"] == ["500", "250", "0.50"]


def test_without_stages_only_the_whole_first_call_is_compared(capsys):
    bench = load_script(SCRIPT, "compile_latency_benchmark56b")
    bench.print_compared([{"first": 0.3, "stages": None}], [{"first": 0.6, "stages": None}])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[1].split()[-3:] == ["600", "300", "0.50"]
