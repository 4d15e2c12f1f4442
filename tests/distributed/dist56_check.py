"""Run on 3 ranks under the launcher (session 56's checks); prints "rank R of N: K checks passed".

- DDP's ``skip_all_reduce_unused_params``: buckets of parameters no rank used start no all-reduce (counted on
  the group's communicator), and training equals one process on the whole batch, their ``.grad`` left None;
  a parameter only rank 0 used is all-reduced on every rank (the ranks decide alike).
- DDP's ``mixed_precision``: a float64 model whose forward and backward run in float32 trains as one float32
  process on the whole batch (to float32 noise, and unlike float64), gradients reduced in float16 are
  float16 values, buffers are cast, and ``no_sync`` accumulates the copies' gradients.

- ``monitored_barrier``: passes when every rank calls it; on rank 0, names the rank that did not call it within
  the timeout (the first such rank, or with ``wait_all_ranks=True`` every one), while a rank that did call it
  raises once its group's timeout passes without rank 0's answer; nothing is left pending (the ranks then meet
  in a barrier and exit cleanly).
"""

import datetime
import time

import numpy as np

import jitorch as jt
import jitorch.distributed as dist
from checking import Counting, check, raises
from jitorch import nn
from jitorch.distributed.process_group import resolve
from jitorch.nn.parallel import DistributedDataParallel as DDP
from jitorch.nn.parallel.distributed import _MixedPrecision

dist.init_process_group(timeout=datetime.timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
assert size == 3


def monitored_barrier_checks():
    dist.monitored_barrier()
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=5), wait_all_ranks=True)
    check.passed += 1
    # rank 2 does not come: rank 0 names it after its 0.3 s; rank 1 gives up after its group's 0.5 s
    short = dist.new_group(timeout=datetime.timedelta(seconds=0.5))
    if rank == 0:
        began = time.monotonic()
        raises("[Rank 0]: Rank 2 failed to pass monitoredBarrier in 300 ms",
               lambda: dist.monitored_barrier(short, timeout=datetime.timedelta(seconds=0.3)))
        assert time.monotonic() - began < 5
    elif rank == 1:
        raises("Rank 1 successfully reached monitoredBarrier, but received errors while waiting for send/recv from "
               "rank 0", lambda: dist.monitored_barrier(short))
    dist.barrier()
    # ranks 1 and 2 do not come: the first of them, or (wait_all_ranks) both
    if rank == 0:
        raises("[Rank 0]: Rank 1 failed to pass monitoredBarrier in 200 ms",
               lambda: dist.monitored_barrier(timeout=0.2))
        raises("[Rank 0]: Ranks 1, 2 failed to pass monitoredBarrier in 200 ms",
               lambda: dist.monitored_barrier(timeout=0.2, wait_all_ranks=True))
    dist.barrier()
    dist.monitored_barrier()  # still usable: no message of the failed ones was left to match this one's
    check.passed += 1


class Branches(nn.Module):
    """Two heads, of which the forward uses ``b`` only where ``use_b`` says."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.trunk = nn.Linear(6, 3), nn.Linear(6, 3), nn.Linear(5, 6)
        self.use_b = False

    def forward(self, x):
        h = self.trunk(x).tanh()
        return self.a(h) + self.b(h) if self.use_b else self.a(h)


def batches(steps, dtype=jt.float32):
    gen = jt.Generator().manual_seed(7)
    return [(jt.randn(4 * size, 5, generator=gen).to(dtype), jt.randn(4 * size, 3, generator=gen).to(dtype))
            for _ in range(steps)]


def train(model, data, shard, sync=True):
    """SGD steps of ``model`` on ``data``, each rank on its rows when ``shard``."""
    opt = jt.optim.SGD(model.parameters(), lr=0.1)
    for x, y in data:
        if shard:
            x, y = x[rank::size], y[rank::size]
        opt.zero_grad()
        nn.MSELoss()(model(x), y).backward()
        opt.step()


def skip_checks():
    pg = resolve(None)
    plain = pg.comm
    counts = {}
    for skip in (False, True):
        jt.manual_seed(0)
        whole = Branches()
        ddp = DDP(Branches(), find_unused_parameters=True, skip_all_reduce_unused_params=skip, bucket_cap_mb=1e-5)
        whole.load_state_dict(ddp.module.state_dict())
        pg.comm = counting = Counting(plain)
        train(ddp, batches(3), shard=True)
        pg.comm = plain
        counts[skip] = counting.all_reduces
        train(whole, batches(3), shard=False)
        for (name, a), b in zip(ddp.module.named_parameters(), whole.parameters()):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=1e-6)
            assert (a.grad is None) == name.startswith("b."), name
        check.passed += 1
    # a bucket per parameter: b's two skipped in each of 3 steps
    assert counts[False] - counts[True] == 2 * 3, counts
    check.passed += 1
    # b used on rank 0 alone: every rank all-reduces its buckets, rank 0's gradient averaged with the others' zeros
    ddp = DDP(Branches(), find_unused_parameters=True, skip_all_reduce_unused_params=True, bucket_cap_mb=1e-5)
    ddp.module.use_b = rank == 0
    x, y = batches(1)[0]
    nn.MSELoss()(ddp(x), y).backward()
    grads = [None] * size
    dist.all_gather_object(grads, ddp.module.b.weight.grad.tolist())
    assert all(g == grads[0] for g in grads) and np.abs(grads[0]).sum() > 0, grads
    check.passed += 1


def mixed_precision_checks():
    jt.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    wide = model.double()
    single = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    single.load_state_dict({k: v.float() for k, v in wide.state_dict().items()})
    double = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)).double()
    double.load_state_dict(wide.state_dict())
    ddp = DDP(wide, mixed_precision=_MixedPrecision(param_dtype=jt.float32), bucket_cap_mb=1e-5)
    data = batches(2, jt.float64)
    train(ddp, data, shard=True)
    train(single, [(x.float(), y.float()) for x, y in data], shard=False)
    train(double, data, shard=False)
    apart = 0.0
    for a, b, c in zip(wide.parameters(), single.parameters(), double.parameters()):
        assert a.dtype == jt.float64 and a.grad.dtype == jt.float64
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=2e-6)
        apart = max(apart, np.abs(a.detach().numpy() - c.detach().numpy()).max())
    assert 1e-9 < apart < 1e-4, apart  # float32's rounding, which float64 training lacks
    check.passed += 1
    assert ddp(data[0][0]).dtype == jt.float32
    # reduced in float16: the gradients are float16 values (the average of float32 ones, to float16's precision;
    # bfloat16 alike, but importing ml_dtypes took 2 s of this script)
    jt.manual_seed(2)
    ddp = DDP(nn.Linear(5, 3), mixed_precision=_MixedPrecision(reduce_dtype=jt.float16))
    reference = nn.Linear(5, 3)
    reference.load_state_dict(ddp.module.state_dict())
    x, y = data[0][0].float(), data[0][1].float()
    nn.MSELoss()(ddp(x[rank::size]), y[rank::size]).backward()
    nn.MSELoss()(reference(x), y).backward()
    for p, r in zip(ddp.module.parameters(), reference.parameters()):
        assert p.grad.dtype == jt.float32 and bool((p.grad.to(jt.float16).float() == p.grad).all())
        np.testing.assert_allclose(p.grad.numpy(), r.grad.numpy(), rtol=2e-2, atol=1e-3)
    check.passed += 1
    # buffers cast to buffer_dtype (floating ones only); no_sync accumulates in param_dtype, then the synced
    # backward averages the lot
    ddp = DDP(nn.BatchNorm1d(3), mixed_precision=_MixedPrecision(buffer_dtype=jt.float16))
    assert [b.dtype for b in ddp.module.buffers()] == [jt.float16, jt.float16, jt.int64]
    ddp = DDP(nn.Linear(5, 3).double(), mixed_precision=_MixedPrecision(param_dtype=jt.float32))
    local = nn.Linear(5, 3)
    local.load_state_dict({k: v.float() for k, v in ddp.module.state_dict().items()})
    with ddp.no_sync():
        ddp(x[rank::size].double()).sum().backward()
    local(x[rank::size]).sum().backward()
    for p, r in zip(ddp.module.parameters(), local.parameters()):
        assert p.grad.dtype == jt.float64
        np.testing.assert_array_equal(p.grad.numpy(), r.grad.numpy().astype(np.float64))  # local, not averaged
    ddp(x[rank::size].double()).sum().backward()
    local(x[rank::size]).sum().backward()
    for p, r in zip(ddp.module.parameters(), local.parameters()):
        dist.all_reduce(r.grad, op=dist.ReduceOp.AVG)
        np.testing.assert_allclose(p.grad.numpy(), r.grad.numpy(), rtol=1e-6)
    check.passed += 1


monitored_barrier_checks()
skip_checks()
mixed_precision_checks()
print(f"rank {rank} of {size}: {check.passed} checks passed", flush=True)
dist.destroy_process_group()
