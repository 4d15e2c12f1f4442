"""benchmarks/import_time.py: one fresh process's figures, and -X importtime's line for the package."""

from pathlib import Path

from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "import_time.py"


def test_one_run_gives_every_figure_and_the_modules_the_import_loaded(capsys):
    bench = load_script(SCRIPT, "import_time_benchmark")
    results = bench.main(["--runs", "1", "--importtime", "1"])
    (row,) = results["this"]
    wall, cpu, *figures, modules = row
    assert len(figures) == len(bench.FIELDS) and all(f > 0 for f in figures)
    assert wall >= figures[0] and cpu >= figures[1]  # the process holds the import
    assert 150 < modules < 400
    out = capsys.readouterr().out
    assert f"{int(modules)} modules loaded by the import" in out and "-X importtime jitorch cumulative" in out
