"""Session 52: one-element all-reduces reduced in Python's floats (`collectives._Scalar`), a compiled DDP step's
all-reduces placed as their gradients are ready, DDP's default bucket cap, the launcher's SIGINT, and ranks that a
plain ``mpiexec -n 2`` started (`dist52_check.py`)."""

import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

import jitorch as jt
import jitorch.distributed as dist
from jitorch.distributed import threads
from jitorch.distributed.run import mpiexec

from .test_collectives import HERE, ROOT, stop_launcher_with


def test_scalar_all_reduces_match_numpy_bit_for_bit_compiled_ddp_reduces_early_and_sigint_stops_every_rank(tmp_path):
    """dist52_check.py on 2 ranks under the launcher (its docstring lists the checks); then SIGINT sent to the
    launcher stops every rank, as SIGTERM does (test_collectives)."""
    launcher = subprocess.Popen([sys.executable, "-m", "jitorch.distributed.run", "--nproc-per-node", "2",
                                 str(HERE / "dist52_check.py"), str(tmp_path)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                                cwd=ROOT, start_new_session=True)
    out, err = stop_launcher_with(launcher, tmp_path, signal.SIGINT, 240)
    assert "jitorchrun: a rank failed" in err, err
    assert sorted(re.findall(r"rank (\d) of 2: 310 checks passed", out)) == ["0", "1"], out + err


def test_ranks_of_a_plain_mpiexec_come_from_mpi():
    """``mpiexec -n 2 python script.py`` (the README's other way to start): no launcher, no RANK or WORLD_SIZE;
    the ranks and the world are MPI's, and a scalar all-reduce takes the hot path's values."""
    code = ("import os, jitorch as jt, jitorch.distributed as dist\n"
            "assert 'RANK' not in os.environ and 'WORLD_SIZE' not in os.environ\n"
            "dist.init_process_group()\n"
            "t = jt.ones(())\n"
            "for _ in range(3): dist.all_reduce(t, op=dist.ReduceOp.AVG)\n"
            "print(f'rank {dist.get_rank()} of {dist.get_world_size()}: {t.item()}', flush=True)\n"
            "dist.destroy_process_group()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    done = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=dict(env, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert sorted(re.findall(r"rank (\d) of 2: 1.0", done.stdout)) == ["0", "1"], done.stdout


@pytest.mark.parametrize("size", [3, 4])
def test_scalar_all_reduces_of_more_than_two_ranks_round_every_step_as_numpy(size):
    """Ranks that are threads (`threads.ThreadWorld`): a one-element float32 or float64 all-reduce by SUM, AVG
    or PRODUCT, every rank's value near the others' so that rounding each step to the dtype matters, is NumPy's
    reduction in rank order bit for bit (a sum rounded once at the end differs)."""
    ops = ("SUM", "AVG", "PRODUCT")
    rng = np.random.default_rng(52)
    values = {dtype: (rng.standard_normal((40, size)) * 2.0 ** rng.integers(-3, 4, (40, size))).astype(dtype)
              for dtype in ("float32", "float64")}

    def body(pg):
        got = {}
        for dtype, rows in values.items():
            for op in ops:
                t = jt.zeros(1, dtype=getattr(jt, dtype))
                got[dtype, op] = []
                for row in rows:
                    t.fill_(float(row[pg.rank()]))
                    dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=pg)
                    got[dtype, op].append(t.item())
                assert pg.signatures.hot[2].scalar is not None
        dist.destroy_process_group(pg)
        return got

    ufuncs = {"SUM": np.add, "AVG": np.add, "PRODUCT": np.multiply}
    for got in threads.run(size, body, timeout=120, backend="mpi", group_timeout=60):
        for (dtype, op), results in got.items():
            want = values[dtype][:, 0].copy()
            for r in range(1, size):
                want = ufuncs[op](want, values[dtype][:, r])
            if op == "AVG":
                want = want / np.array(size, dtype)
            np.testing.assert_array_equal(np.array(results, dtype), want)


def test_a_world_of_one_reduces_a_scalar_to_itself():
    """A group of one rank (no other cell to add): the value unchanged, AVG dividing by one."""
    def body(pg):
        t = jt.tensor([0.1])
        for _ in range(3):
            dist.all_reduce(t, op=dist.ReduceOp.AVG, group=pg)
        dist.destroy_process_group(pg)
        return t.tolist()
    assert threads.run(1, body, timeout=60, backend="mpi") == [[np.float32(0.1).item()]]


def test_the_distributed_extra_is_in_the_test_extra_and_the_readme_gives_its_install_and_launch_commands():
    """Issue 20's item 6: ``pip install -e ".[distributed]"`` installs mpi4py and MPICH, the test extra holds both
    (so the suite runs the ranks), and the README's commands are the install and the launch that
    test_collectives' DDP example test runs."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = lambda requirements: {re.split(r"[<>=\[ ]", r)[0] for r in requirements}  # noqa: E731
    assert names(extras["distributed"]) == {"mpi4py", "mpich"}
    assert set(extras["distributed"]) <= set(extras["test"])
    readme = (ROOT / "README.md").read_text()
    assert 'pip install -e ".[distributed]"' in readme
    assert "python -m jitorch.distributed.run --nproc-per-node 2 examples/train_ddp.py" in readme
