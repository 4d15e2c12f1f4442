"""Session 53: all-reduces through MPI given again take the group's hot path (`collectives._Plan.run`), and the
gaps that session 53's audit of issue 20 found: init_process_group's ``rank``/``world_size`` against MPI's and its
default backend on a machine without CUDA (`dist53_check.py`, on 2 ranks of a plain ``mpiexec``), and a tensor
sent through a ``jitorch.multiprocessing`` pipe."""

import os
import re
import subprocess
import sys

import jitorch as jt
import jitorch.multiprocessing as mp
from jitorch.distributed.run import mpiexec

from .test_collectives import HERE, ROOT

FORK = mp.get_context("fork")


def test_hot_all_reduces_through_mpi_match_numpy_and_init_checks_its_arguments_against_mpi():
    """dist53_check.py (its docstring lists the checks) on 2 ranks."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    done = subprocess.run([mpiexec(), "-n", "2", sys.executable, str(HERE / "dist53_check.py")], capture_output=True,
                          text=True, timeout=120, cwd=HERE, env=dict(env, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(re.findall(r"rank (\d) of 2: 97 checks passed", done.stdout)) == ["0", "1"], done.stdout


def _write_through_pipe(end):
    t = end.recv()
    t[1:] = 7.0
    end.send((t.is_shared(), t.tolist()))
    assert end.recv() == "parent wrote"
    end.send(t.tolist())


def test_a_tensor_sent_through_a_pipe_shares_its_memory_both_ways():
    """Issue 20: a tensor sent through a ``jitorch.multiprocessing`` queue *or pipe* passes a handle to its
    storage, not the data: the child's writes reach the parent's tensor, and the parent's the child's."""
    mine, theirs = FORK.Pipe()
    x = jt.zeros(3)
    process = FORK.Process(target=_write_through_pipe, args=(theirs,))
    process.start()
    mine.send(x)
    assert mine.recv() == (True, [0.0, 7.0, 7.0])
    assert x.is_shared() and x.tolist() == [0.0, 7.0, 7.0]
    x[0] = 5.0
    mine.send("parent wrote")
    assert mine.recv() == [5.0, 7.0, 7.0]
    process.join(60)
    assert process.exitcode == 0
