"""DistributedDataParallel takes torch's arguments in torch's order, with torch's errors for those given wrongly,
and init_sync=False skips the construction's check and broadcast."""

import re

import pytest

import jitorch as jt
from jitorch.nn.parallel import DistributedDataParallel

from .checking import world_of_one


@pytest.mark.parametrize("arguments,error,message", [
    ({"delay_all_reduce_named_params": []}, ValueError,
     "delay_all_reduce_named_params and param_to_hook_all_reduce need to be set at the same time."),
    ({"param_to_hook_all_reduce": jt.zeros(1)}, ValueError, "need to be set at the same time"),
    ({"process_group": object(), "device_mesh": object()}, RuntimeError,
     "Cannot specify both process_group and device_mesh arguments.")])
def test_arguments_given_wrongly_raise_torchs_errors_before_any_group_is_needed(arguments, error, message):
    """(Session 57: device_mesh and the delayed all-reduce are implemented, tests/distributed/dist57_check.py;
    session 56: mixed_precision and skip_all_reduce_unused_params, dist56_check.py.)"""
    with pytest.raises(error, match=re.escape(message)):
        DistributedDataParallel(jt.nn.Linear(2, 2), **arguments)


def test_an_argument_torch_does_not_have_is_a_type_error():
    with pytest.raises(TypeError, match="bucket_size"):
        DistributedDataParallel(jt.nn.Linear(2, 2), bucket_size=4)


def test_init_sync_false_skips_the_check_and_the_broadcast_and_still_averages():
    code = ("import jitorch as jt, jitorch.distributed as dist\n"
            "from jitorch.nn.parallel import DistributedDataParallel as DDP\n"
            "calls = []\n"
            "for name in ('broadcast', 'all_gather_object'):\n"
            "    def counted(*a, _f=getattr(dist, name), _n=name, **k):\n"
            "        calls.append(_n); return _f(*a, **k)\n"
            "    setattr(dist, name, counted)\n"
            "dist.init_process_group(backend='gloo')\n"
            "for sync in (True, False):\n"
            "    calls.clear(); jt.manual_seed(0); m = jt.nn.Linear(3, 2)\n"
            "    ddp = DDP(m, init_sync=sync); ddp(jt.ones(4, 3)).sum().backward()\n"
            "    print(sync, sorted(set(calls)), m.weight.grad.tolist() == [[4.0] * 3] * 2)\n")
    done = world_of_one(code)
    assert done.stdout.splitlines() == ["True ['all_gather_object', 'broadcast'] True", "False [] True"], \
        done.stdout + done.stderr
