"""jitorch.distributed across 2 and 4 ranks started by the launcher: every collective against NumPy, DDP against
one process on the whole batch, and each fault (mismatched tensors, a rank that never joins, dies or raises)
ending in an error, never a hang."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import jitorch as jt
import jitorch.distributed as dist

from .checking import world_of_one

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def launch(nproc, script, *args, timeout=120, **variables):
    """Run ``script`` on ``nproc`` ranks; on a timeout the launcher's whole process group goes, ranks included."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), **variables)
    process = subprocess.Popen([sys.executable, "-m", "jitorch.distributed.run", "--nproc-per-node", str(nproc),
                                str(HERE / script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env, cwd=ROOT, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.parametrize("nproc", [2, 4])
def test_every_collective_matches_numpy(nproc):
    done = launch(nproc, "collectives_check.py")
    assert done.returncode == 0, done.stderr
    # mpiexec interleaves the ranks' output, not always at line ends: find the reports anywhere in it
    ranks = sorted(int(r) for r, n in re.findall(r"rank (\d+) of (\d+): \d+ checks passed", done.stdout))
    assert ranks == list(range(nproc)), done.stdout


def test_mismatched_shapes_raise_on_every_rank_naming_each_ranks_shape():
    done = launch(2, "faults_check.py", "mismatch")
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        assert (f"rank {rank}: all_reduce: the ranks disagree on the collective or on the tensors' dtype and shape: "
                "rank 0: all_reduce(float32[2]); rank 1: all_reduce(float32[3])") in done.stdout
        assert (f"rank {rank}: all_reduce: the ranks disagree on the collective or on the tensors' dtype and shape: "
                "rank 0: all_reduce(float32[2]); rank 1: all_reduce(float64[2])") in done.stdout


def test_contiguous_tensors_are_mpis_buffers_themselves():
    """Zero-copy: MPI reads and writes a contiguous tensor's own memory; other layouts and bfloat16 go through a
    contiguous copy, written back when the collective has finished."""
    from jitorch.distributed.collectives import _buffer

    t = jt.arange(6.0)
    array, _ = _buffer(t, reducing=True)
    assert np.shares_memory(array, t.numpy()) and array.ctypes.data == t.data_ptr()
    view = jt.zeros(3, 2).t()
    array, write_back = _buffer(view, reducing=False)
    assert not np.shares_memory(array, view.numpy())
    array[...] = np.arange(6.0).reshape(2, 3)
    write_back()
    assert view.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    half = jt.ones(4, dtype=jt.bfloat16)
    array, _ = _buffer(half, reducing=True)
    assert array.dtype == np.float32 and not np.shares_memory(array, half.view(jt.int16).numpy())


def test_a_rank_that_never_joins_times_the_others_out():
    done = launch(2, "faults_check.py", "silent")
    assert "rank 0: jitorch.distributed: all_reduce timed out after 2 s" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("nproc,fault", [(2, "kill"), (4, "kill"), (2, "raise")])
def test_a_rank_that_dies_or_raises_stops_the_run_with_an_error(nproc, fault):
    done = launch(nproc, "faults_check.py", fault, timeout=60)
    assert done.returncode != 0
    assert done.stdout.count("trained 3 steps") == nproc
    assert "jitorchrun: a rank failed" in done.stderr
    if fault == "raise":  # the raising rank aborts the job: no rank waits for it until the group's timeout
        assert "ValueError: rank 1 gave up" in done.stderr and "timed out" not in done.stdout + done.stderr
        assert "jitorchrun: a rank failed (rank 1 (local rank 1) raised ValueError: rank 1 gave up)" in done.stderr
    else:  # the launcher names the rank whose process ended first (with others seen ended at the same look)
        assert re.search(r"jitorchrun: a rank failed \((rank 1|ranks [\d, ]*\b1\b[\d, ]*) ended first\)",
                         done.stderr), done.stderr


def test_a_world_of_one_needs_no_launcher():
    code = ("import jitorch as jt, jitorch.distributed as dist\n"
            "dist.init_process_group(backend='gloo')\n"
            "t = jt.ones(2); dist.all_reduce(t); print(dist.get_rank(), dist.get_world_size(), t.tolist(),"
            " dist.get_backend())\n")
    done = world_of_one(code)
    assert done.stdout.split("\n")[0] == "0 1 [1.0, 1.0] gloo", done.stderr


def test_init_errors_as_torch():
    with pytest.raises(ValueError, match="Invalid backend: 'carrier-pigeon'"):
        dist.init_process_group("carrier-pigeon")
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        dist.get_rank()
    assert dist.is_available() and not dist.is_initialized()


@pytest.mark.parametrize("nproc,mode,thread", [(2, "eager", "1"), (4, "eager", "0"), (2, "compiled", ""),
                                               (4, "compiled", "")])
def test_ddp_on_shards_equals_one_process_on_the_whole_batch(nproc, mode, thread):
    # thread "1": a thread advances the all-reduces during backward; "0": the gradient hooks do
    done = launch(nproc, "ddp_check.py", *(["--compile"] if mode == "compiled" else []),
                  JITORCH_DDP_PROGRESS_THREAD=thread)
    assert done.returncode == 0, done.stderr
    if thread:
        assert len(re.findall(rf"rank \d: progress thread {thread == '1'}", done.stdout)) == nproc, done.stdout
    assert len(re.findall(r"rank \d: unused parameters keep no gradient", done.stdout)) == nproc, done.stdout
    if mode == "eager":  # with the progress thread ("1") or without
        assert len(re.findall(r"rank \d: a backward that raised left no thread", done.stdout)) == nproc, done.stdout
    assert sorted(re.findall(rf"rank (\d+): ddp == whole batch \({mode}\)", done.stdout)) == \
        [str(r) for r in range(nproc)], done.stdout
    assert "eagerly" not in done.stderr  # the compiled step is one graph, collectives included


def test_the_ddp_example_on_two_ranks():
    done = launch(2, "../../examples/train_ddp.py", timeout=300)
    assert done.returncode == 0, done.stderr
    assert len(re.findall(r"replicas equal: True, checkpoint reloads: True, compiled step: one graph with 1 "
                          r"all-reduce nodes", done.stdout)) == 2, done.stdout
    assert "steps on each of 2 ranks" in done.stdout
    assert float(re.findall(r"final accuracy: (\d\.\d+)", done.stdout)[-1]) >= 0.9


def stop_launcher_with(launcher, pid_dir, sig, wait_s):
    """Wait (at most ``wait_s``) until both ranks wrote their pid files into ``pid_dir``, send ``sig`` to the launcher,
    and check that it fails and that no rank outlives it; the launcher's (stdout, stderr). A launcher that ends or
    times out before both ranks started raises with its output. Whatever fails, no rank is left running."""
    try:
        deadline = time.monotonic() + wait_s
        while len(list(pid_dir.glob("rank*.pid"))) < 2 and launcher.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = [int(p.read_text()) for p in pid_dir.glob("rank*.pid")]
        if len(pids) < 2:  # (a rank failed before it wrote its pid: its traceback)
            launcher.kill()
            out, err = launcher.communicate()
            raise AssertionError(f"{len(pids)} of 2 ranks started\n{out}{err}")
        launcher.send_signal(sig)
        out, err = launcher.communicate(timeout=30)
        assert launcher.returncode != 0, err
        time.sleep(0.5)
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
        return out, err
    finally:
        try:
            os.killpg(launcher.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_launcher_forwards_sigterm_to_every_rank(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    launcher = subprocess.Popen([sys.executable, "-m", "jitorch.distributed.run", "--nproc-per-node", "2",
                                 str(HERE / "faults_check.py"), "wait", str(tmp_path)], env=env, cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    stop_launcher_with(launcher, tmp_path, signal.SIGTERM, 60)


def test_the_launcher_is_installed_as_jitorchrun():
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "jitorchrun"]
    assert script.value == "jitorch.distributed.run:main"
