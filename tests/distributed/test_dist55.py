"""Session 55: the hot all-reduce through MPI with its agreement written out and its slim lane, torch's
helpers and arguments that jitorch lacked (``barrier(timeout=)``, ``new_group(sort_ranks=)``,
``is_torchelastic_launched``, ``get_node_local_rank``), torchrun's command-line options that jitorchrun
refused, and the launcher naming the rank that failed first."""

import re

import pytest

import jitorch.distributed as dist
from jitorch.distributed.run import parse_args

from .test_collectives import launch


def test_hot_all_reduce_new_group_order_and_barrier_timeout_on_two_ranks():
    """dist55_check.py (its docstring lists the checks) on 2 ranks. Its last check leaves an MPI request
    pending on rank 0 (its barrier timed out), so MPI aborts that rank at exit, after its script returned, and
    mpiexec kills rank 1 then. Where rank 1 was killed before its script returned (it had printed its checks
    but not yet written that it was done), the launcher sees rank 1 end first and names it: a race of MPI's
    abort at exit that the launcher cannot see through, so either report passes here."""
    done = launch(2, "dist55_check.py")
    assert sorted(re.findall(r"rank (\d) of 2: 34 checks passed", done.stdout)) == ["0", "1"], done.stdout + done.stderr
    assert re.search(r"rank 0: barrier raised after 1 s: jitorch.distributed: barrier timed out after 1 s",
                     done.stdout), done.stdout
    failed = r"jitorchrun: a rank failed (\(rank 1 ended first\) )?\(mpiexec exited with \d+\)"
    assert done.returncode != 0 and re.search(failed, done.stderr), done.stderr


def test_torchruns_options_are_accepted():
    """A multi-node torchrun command line as torch's documentation writes it parses, its rendezvous given."""
    args = parse_args(["--nnodes=2", "--node-rank=1", "--nproc-per-node=4", "--rdzv-id=456", "--rdzv-backend=c10d",
                       "--rdzv-endpoint=host0:29400", "--rdzv-conf=timeout=900", "--max-restarts=0",
                       "--monitor-interval=5", "--start-method=spawn", "--role=trainer", "--run-path", "train.py",
                       "--lr", "0.1"])
    assert (args.nnodes, args.node_rank, args.nproc_per_node) == (2, 1, 4)
    assert (args.master_addr, args.master_port, args.rdzv_id) == ("host0", 29400, "456")
    assert (args.script, args.script_args) == ("train.py", ["--lr", "0.1"])


def test_restarts_are_refused_not_ignored(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--max-restarts", "3", "train.py"])
    assert "--max-restarts 3: restarting failed ranks is not supported" in capsys.readouterr().err


def test_the_node_local_rank_comes_from_the_launchers_environment(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert dist.get_node_local_rank(fallback_rank=3) == 3 and not dist.is_torchelastic_launched()
    with pytest.raises(RuntimeError, match="LOCAL_RANK is not in the environment"):
        dist.get_node_local_rank()
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "jitorchrun")
    assert dist.get_node_local_rank(fallback_rank=3) == 2 and dist.is_torchelastic_launched()
