"""Session 56: the fused lane (an all-reduce's agreement and data in one MPI all-reduce), ``monitored_barrier``,
DDP's ``skip_all_reduce_unused_params`` and ``mixed_precision`` (dist56_check.py on 3 ranks), and torchrun's log
options in the launcher (``--log-dir``, ``--redirects``, ``--tee``, ``--local-ranks-filter``)."""

import os
import re
import subprocess
import sys

import pytest

from jitorch.distributed.run import parse_args

from .checking import world_of_one
from .test_collectives import ROOT, launch


def test_fused_lane_monitored_barrier_and_ddps_skip_and_mixed_precision_on_three_ranks():
    done = launch(3, "dist56_check.py")
    assert done.returncode == 0, done.stdout + done.stderr
    counts = dict(re.findall(r"rank (\d) of 3: (\d+) checks passed", done.stdout))
    # rank 0 raises in the monitored barriers the others skip: 3 checks more than rank 2's, 2 more than rank 1's
    assert counts == {"0": "59", "1": "57", "2": "56"}, done.stdout


SCRIPT = "import os, sys\nr = os.environ['LOCAL_RANK']\nprint(f'out {r}')\nprint(f'err {r}', file=sys.stderr)\n"


def test_the_launchers_log_options_write_torchruns_files_and_filter_the_console(tmp_path):
    """Rank 0's stdout redirected (file only), rank 1's both streams teed (file, and the console with torchrun's
    "[default1]:" heading); the console shows rank 1 alone, so rank 0's stderr, neither redirected nor teed, goes
    nowhere."""
    script = tmp_path / "hello.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, "-m", "jitorch.distributed.run", "--nproc-per-node", "2",
                           "--log-dir", str(tmp_path / "logs"), "--redirects", "0:1", "--tee", "1:3",
                           "--local-ranks-filter", "1", "--rdzv-id", "job7", str(script)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    (run,) = os.listdir(tmp_path / "logs")
    assert run.startswith("job7_"), run
    attempt = tmp_path / "logs" / run / "attempt_0"
    files = {str(p.relative_to(attempt)): p.read_text() for p in attempt.rglob("*.log")}
    assert files == {"0/stdout.log": "out 0\n", "1/stdout.log": "out 1\n", "1/stderr.log": "err 1\n"}, files
    assert done.stdout.splitlines() == ["[default1]:out 1"], done.stdout
    assert "err 0" not in done.stderr and "[default1]:err 1" in done.stderr, done.stderr


def test_log_options_parse_as_torchruns(capsys):
    args = parse_args(["--nproc-per-node", "4", "-r", "3", "-t", "0:1,2:2", "--local-ranks-filter", "0,2", "x.py"])
    assert (args.redirects, args.tee, args.local_ranks_filter) == ([3, 3, 3, 3], [1, 0, 2, 0], {0, 2})
    for bad in (["-r", "4"], ["--tee", "0:1,"], ["--redirects", "5:1"], ["--local-ranks-filter", "a"]):
        with pytest.raises(SystemExit):
            parse_args(["--nproc-per-node", "4", *bad, "x.py"])
    assert "names local rank 5, of 4 local ranks" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--hosts", "a,b", "--tee", "3", "x.py"])
    assert "start a launcher on each node instead" in capsys.readouterr().err


def test_mixed_precision_in_a_compiled_step_is_one_graph_with_its_casts():
    """(Refused until session 57: dist57_check.py trains it on 4 ranks.) The parameters' casts to param_dtype and
    the gradients' to the reduce dtype are nodes of the step's graph (here the parameters', constant in this step,
    are folded), before its all-reduce node."""
    code = ("import jitorch as jt, jitorch.distributed as dist\n"
            "from jitorch.nn.parallel import DistributedDataParallel as DDP\n"
            "from jitorch.nn.parallel.distributed import _MixedPrecision\n"
            "dist.init_process_group()\n"
            "ddp = DDP(jt.nn.Linear(3, 2).double(), mixed_precision=_MixedPrecision(param_dtype=jt.float32,\n"
            "          reduce_dtype=jt.float16))\n"
            "step = jt.compile(lambda x: ddp(x).sum().backward())\n"
            "x = jt.ones(4, 3, dtype=jt.float64)\n"
            "step(x)\n"
            "print(ddp.module.weight.grad.dtype, ddp.module.weight.grad.tolist())\n"
            "graph = str(jt.explain(step, x).graph)\n"
            "print([n in graph for n in ('_to_copy(%x, dtype=f32', 'f16[8] = _to_copy(', "
            "'f16[8] = _c10d_all_reduce(')])\n")
    done = world_of_one(code)
    assert done.stdout.splitlines() == ["jitorch.float64 [[4.0, 4.0, 4.0], [4.0, 4.0, 4.0]]", "[True, True, True]"], \
        done.stdout + done.stderr
