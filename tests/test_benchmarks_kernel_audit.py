"""benchmarks/kernel_audit.py at --quick sizes: a compiled step's kernels against the machine's stream bound."""

from pathlib import Path

from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "kernel_audit.py"


def test_quick_gpt_audit_lists_its_kernels_by_cost_and_times_the_recompute_pass(capsys):
    bench = load_script(SCRIPT, "kernel_audit_benchmark")
    rows = bench.audit("gpt-1x32", steps=2, top=5, quick=True)
    assert 0 < len(rows) <= 5
    costs = [row[-1] for row in rows]
    assert costs == sorted(costs, reverse=True)
    for ops, kind, shapes, mb, us, calls, gbs, pct, ms in rows:
        assert kind in ("pointwise", "reduction", "softmax") and "->" in shapes
        assert mb > 0 and us > 0 and calls > 0 and gbs > 0 and pct > 0
    bench.main(["--models", "gpt-1x32", "--quick", "--steps", "1", "--top", "3", "--recompute"])
    out = capsys.readouterr().out
    assert "CPU time with/without recompute at 1 thread(s)" in out and "%bound" in out
