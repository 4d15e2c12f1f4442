"""Session 46's audit of issue 20: the checks its "Done when" list asks for that the suite lacked, each run once
under the launcher (ranks are slow to start: one launch holds many checks)."""

import re

from .test_collectives import launch


def test_audit_checks_on_four_ranks():
    """Boolean reductions, rooted collectives' work handles, a group without rank 0 and a rank outside it,
    disagreeing ranks (collective, shape, dtype, all_to_all_single's splits, message sizes), a rank's tensors of
    two dtypes, DDP's error for an unused parameter (eager and compiled), DDP's buffers, object collectives with
    pickle unusable, and a DDP backward that a silent rank leaves waiting (audit_check.py)."""
    done = launch(4, "audit_check.py", timeout=120)
    ranks = sorted(int(r) for r in re.findall(r"rank (\d) of 4: \d+ audit checks passed", done.stdout))
    assert ranks == [0, 1, 2, 3], done.stdout + done.stderr
    timed_out = re.findall(r"rank (\d): DDP backward raised after (\d) s: jitorch.distributed: all_reduce timed out "
                           r"after 2 s: a rank died, or did not call the same collective", done.stdout)
    assert sorted(timed_out) == [("0", "2"), ("2", "2"), ("3", "2")], done.stdout
    assert done.returncode != 0  # MPI aborts at exit after a timeout (its requests are still pending)


def test_a_nanogpt_style_torch_script_runs_on_two_ranks_compiled():
    """nanogpt_check.py: torch's API as nanoGPT's train.py uses it (init_process_group, DDP(device_ids=None) of a
    compiled model with tied weights, no_sync and require_backward_grad_sync accumulation, set_epoch, an
    all-reduced loss, a checkpoint, destroy_process_group), against one process on every rank's batches."""
    done = launch(2, "nanogpt_check.py", "--compile", timeout=180)
    assert done.returncode == 0, done.stderr
    assert sorted(re.findall(r"rank (\d): nanogpt ddp == whole batch \(compiled\), 6 iterations", done.stdout)) == \
        ["0", "1"], done.stdout
    assert "eagerly" not in done.stderr  # the compiled model ran as graphs
