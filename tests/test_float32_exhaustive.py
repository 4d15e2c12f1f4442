"""tools/float32_exhaustive.py: its error measure on results whose error is known, its report of wrong special
values, and a short run over a few chunks of the float32 bit patterns."""

import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools")]

import float32_exhaustive as tool  # noqa: E402


def test_errors_are_in_ulps_at_the_exact_value():
    exact = np.array([1.0 + 2.0 ** -24, 3.0, 2.0 ** -140], dtype=np.float64)  # the last one denormal
    got = np.array([1.0, np.nextafter(np.float32(3.0), np.float32(4.0)), 2.0 ** -140 + 2.0 ** -149], np.float32)
    np.testing.assert_allclose(tool.Tally._errors(got, exact), [0.5, 1.0, 1.0])


def test_tally_counts_inexact_results_and_reports_wrong_special_values():
    x = np.array([0.0, 1.0, 2.0, -1.0, 5.0], dtype=np.float32)
    exact = np.array([0.0, 1.0 + 2.0 ** -22, np.inf, np.nan, -0.0])
    got = np.array([0.0, 1.0, np.inf, 7.0, 0.0], dtype=np.float32)  # 7 for NaN, +0 for -0
    tally = tool.Tally()
    tally.add(x, got, exact, mean=True)
    assert tally.count == 1 and tally.inexact == 1
    assert tally.worst == 2.0 and tally.worst_at == 1.0
    assert tally.wrong_count == 2 and [w[0] for w in tally.wrong_specials] == [-1.0, 5.0]
    assert "2 WRONG special results" in tally.line("compiled")


def test_a_short_run_checks_compiled_exp_and_log(capsys):
    assert tool.main(["exp", "log", "--step", "1024"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if "compiled:" in line]
    assert len(lines) == 2 and "WRONG" not in out
    for line in lines:
        assert float(line.split("max ")[1].split(" ulp")[0]) < 1.0, line
