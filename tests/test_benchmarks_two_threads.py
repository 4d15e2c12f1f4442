"""benchmarks/two_threads.py at --quick sizes: per thread CPU and queueing, the team's counters, and the step's
spans split into those that forked onto the team and those that ran alone."""

from pathlib import Path

import jitorch as jt
from jitorch.runtime import threads
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "two_threads.py"


def test_a_quick_cnn_step_at_one_and_two_threads(capsys):
    bench = load_script(SCRIPT, "two_threads_benchmark")
    try:
        bench.main(["--models", "cnn", "--quick", "--steps", "1", "--rounds", "1", "--spans"])
    finally:
        jt.set_num_threads(1)
    out = capsys.readouterr().out
    assert "cnn, jitorch compiled, 1 thread: wall" in out and "cnn, jitorch compiled, 2 threads: wall" in out
    one = next(line for line in out.splitlines() if ", 1 thread:" in line)
    assert "forks 0.0 parts 0.0" in one and "workers 0.00" in one  # (no team at one thread)
    assert "gemm calls 0.0" in one  # (nor products' native BLAS calls)
    assert "products" in out and ("alone" in out or "forked" in out)


def test_spans_split_by_whether_a_fork_ran_inside_them(monkeypatch):
    """At two threads a split kernel's span holds a fork (the quick step's large products and kernels do
    not split: a kernel made large enough here does), and every category's times are nonnegative."""
    bench = load_script(SCRIPT, "two_threads_benchmark")
    monkeypatch.setitem(threads._settings, "threads", 2)
    step = jt.compile(lambda a: (a - 1).tanh())
    x = jt.ones(1 << 20)
    step(x)
    by = bench.spans(lambda: step(x), 2)
    assert by[("fused kernels", "forked")][1] == 1 and ("fused kernels", "alone") not in by
    assert all(ms >= 0 for ms, _ in by.values())


def test_in_turn_runs_each_forks_parts_on_the_calling_thread_and_times_them(monkeypatch):
    """A kernel that splits at two threads: its fork's parts run one after another here (the team gets no part),
    the work inside the fork is most of the step's, its largest part about half of it, and the result is the
    split run's."""
    bench = load_script(SCRIPT, "two_threads_benchmark")
    monkeypatch.setitem(threads._settings, "threads", 2)
    step = jt.compile(lambda a: (a - 1).tanh().sum())
    x = jt.linspace(-3, 3, 1 << 20)
    expected = step(x).item()
    results = []
    parts = threads.counters["parts"]
    total, inside, largest, forks = bench.in_turn(lambda: results.append(step(x).item()), 3)
    assert threads.counters["parts"] == parts and results == [expected] * 3
    assert forks >= 1 and 0 < largest < inside <= total
    assert largest <= 0.75 * inside


def test_the_session_groups_scheduling_is_read_where_linux_groups_by_session(tmp_path):
    """nice weighs a process only against its own session's where autogroup is on: the script says so."""
    bench = load_script(SCRIPT, "two_threads_benchmark")
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "autogroup").write_text("/autogroup-642 nice 0\n")
    assert bench.autogroup(str(tmp_path)) is None  # (no such setting: not grouped)
    (tmp_path / "sys" / "kernel" / "sched_autogroup_enabled").write_text("0\n")
    assert bench.autogroup(str(tmp_path)) is None
    (tmp_path / "sys" / "kernel" / "sched_autogroup_enabled").write_text("1\n")
    assert bench.autogroup(str(tmp_path)) == "autogroup-642 nice 0"


def test_gaps_count_the_serial_stretches_around_each_fork(monkeypatch):
    """`gaps`: a step whose one kernel splits (one fork per call) has two serial stretches per call, before and
    after its fork; the fork's time is inside, and the stretches' counts by length add up to two."""
    bench = load_script(SCRIPT, "two_threads_benchmark")
    monkeypatch.setitem(threads._settings, "threads", 2)
    step = jt.compile(lambda a: (a - 1).tanh().sum(0))
    x = jt.ones(1 << 10, 1 << 8)
    step(x)
    total, inside, serial, by_length = bench.gaps(lambda: step(x), 3)
    assert 0 < inside < total and abs(inside + serial - total) < 1e-9
    assert abs(sum(by_length.values()) - 2) < 1e-9 and list(by_length)[0] == f"<{bench.GAP_BOUNDS_US[0]}"


def test_step_spin_rows_set_the_held_spin_and_restore_it(capsys):
    """``--step-spin 0,1000``: a row per value at two threads (one at one thread), and the team's held spin is
    `STEP_SPIN_US` again afterwards."""
    bench = load_script(SCRIPT, "two_threads_benchmark")
    try:
        bench.main(["--models", "cnn", "--quick", "--steps", "1", "--rounds", "1", "--step-spin", "0,1000"])
    finally:
        jt.set_num_threads(1)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cnn,")]
    assert [r.split("| step spin")[-1].strip() if "step spin" in r else None for r in rows] == \
        [None, "0 µs", "1000 µs"]
    assert all("holds 1.0" in r for r in rows[1:]) and "holds 0.0" in rows[0]
    assert threads._native().hold_ns.value == threads.STEP_SPIN_US * 1000
