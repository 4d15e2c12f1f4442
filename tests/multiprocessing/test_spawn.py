"""spawn and start_processes: results, and each way a process can fail, as torch.multiprocessing reports them."""

import os
import signal
import sys

import pytest

import jitorch as jt
import jitorch.multiprocessing as mp


def _fill_row(i, shared):
    shared[i] = i + 1.0


def test_spawn_runs_every_index_and_shares_tensor_arguments():
    shared = jt.zeros(2, 2)
    assert mp.spawn(_fill_row, args=(shared,), nprocs=2) is None
    assert shared.tolist() == [[1.0, 1.0], [2.0, 2.0]]


def _fail_on_one(i):
    if i == 1:
        raise ValueError("bad rank")


def test_a_raising_process_fails_the_join_with_its_traceback():
    with pytest.raises(mp.ProcessRaisedException, match="(?s)Process 1 terminated with the following error.*"
                                                        "ValueError: bad rank") as info:
        mp.start_processes(_fail_on_one, nprocs=2, start_method="fork")
    assert info.value.error_index == 1 and isinstance(info.value.pid, int)


def _exit_with(i, code):
    sys.exit(code)


def _kill_self(i):
    os.kill(os.getpid(), signal.SIGKILL)


def test_an_exit_code_or_a_signal_fails_the_join():
    with pytest.raises(mp.ProcessExitedException, match="process 0 terminated with exit code 3") as info:
        mp.start_processes(_exit_with, args=(3,), nprocs=1, start_method="fork")
    assert info.value.exit_code == 3
    with pytest.raises(mp.ProcessExitedException, match="process 0 terminated with signal SIGKILL") as info:
        mp.start_processes(_kill_self, nprocs=1, start_method="fork")
    assert info.value.signal_name == "SIGKILL"


def _wait_forever(i):
    if i == 0:
        raise RuntimeError("first")
    signal.pause()


def test_a_failure_terminates_the_other_processes():
    context = mp.start_processes(_wait_forever, nprocs=2, join=False, start_method="fork")
    with pytest.raises(mp.ProcessRaisedException, match="first"):
        while not context.join(timeout=60):
            pass
    assert not any(p.is_alive() for p in context.processes)


def test_spawn_warns_for_another_start_method():
    with pytest.warns(FutureWarning, match="only supports start_method=spawn"):
        mp.spawn(_fill_row, args=(jt.zeros(1, 1),), nprocs=1, start_method="fork")


def test_sharing_strategies():
    assert mp.get_all_sharing_strategies() == {"file_descriptor"}
    assert mp.get_sharing_strategy() == "file_descriptor"
    mp.set_sharing_strategy("file_descriptor")
    with pytest.raises(ValueError, match="file_system"):
        mp.set_sharing_strategy("file_system")
    assert jt.multiprocessing is mp
