"""Session 57: ``jitorch.distributed.device_mesh``, DDP's ``device_mesh`` and its delayed all-reduce
(``delay_all_reduce_named_params``/``param_to_hook_all_reduce``), checked by dist57_check.py on 4 ranks; the
launcher's notes that a killed rank can no longer leave half-written."""

import re

from jitorch.distributed.run import Ends, note

from .test_collectives import launch


def test_device_mesh_ddp_on_a_mesh_and_ddps_delayed_all_reduce_on_four_ranks():
    done = launch(4, "dist57_check.py")
    assert done.returncode == 0, done.stdout + done.stderr
    counts = dict(re.findall(r"rank (\d) of 4: (\d+) checks passed", done.stdout))
    assert counts == {str(r): "24" for r in range(4)}, done.stdout


def test_a_rank_killed_while_noting_its_error_leaves_the_launcher_no_half_written_note():
    """A rank that raised writes when and what into ``<rank>.raised``; mpiexec, stopping the job once another
    rank aborted it, could kill it between creating that file and writing it, and the launcher then failed to
    parse the empty file (ValueError: not enough values to unpack) instead of naming the rank that failed."""
    ends = Ends(0)
    ends.thread.join()
    with open(f"{ends.folder}/1.raised.tmp", "w") as f:
        f.write("12.5")  # (killed here)
    assert ends.first() is None
    note(ends.folder, "0.raised", "11.0 rank 0 (local rank 0) raised ValueError: x")
    assert ends.first() == "rank 0 (local rank 0) raised ValueError: x"
    ends.close()
