"""Run on 3 ranks under the launcher (session 56's checks); prints "rank R of N: K checks passed".

- DDP's ``skip_all_reduce_unused_params``: buckets of parameters no rank used start no all-reduce (counted on
  the group's communicator), and training equals one process on the whole batch, their ``.grad`` left None;
  a parameter only rank 0 used is all-reduced on every rank (the ranks decide alike).
- DDP's ``mixed_precision``: a float64 model whose forward and backward run in float32 trains as one float32
  process on the whole batch (to float32 noise, and unlike float64), gradients reduced in float16 are
  float16 values, buffers are cast, and ``no_sync`` accumulates the copies' gradients.

- The fused lane (`collectives._Fused`): a tensor of 8 KB all-reduced again takes it after two calls (its
  agreement and data in one MPI all-reduce, no other started), values against NumPy at every call, with calls
  between that agree through it (a broadcast of the same dtype and shape, a 12-byte and a one-element
  all-reduce, a non-contiguous tensor of the hot signature, async, AVG of float64, int32, int64); disagreements in it
  (another shape, another op, another collective on one rank) raise on every rank naming each rank's call, the
  tensor unwritten, and the group goes on.
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
from jitorch.distributed import collectives
from jitorch.distributed.process_group import resolve
from jitorch.nn.parallel import DistributedDataParallel as DDP
from jitorch.nn.parallel.distributed import _MixedPrecision

dist.init_process_group(timeout=datetime.timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
assert size == 3


def fused_checks():
    pg = resolve(None)
    plain = pg.comm
    pg.comm = counting = Counting(plain)
    blocks = collectives._blocks(pg)

    def summed(t, values, op=dist.ReduceOp.SUM):
        """All-reduce rank r's ``values(r)`` in ``t``; check against NumPy."""
        t.copy_(jt.from_numpy(values(rank)))
        expected = np.sum([values(r) for r in range(size)], axis=0)
        dist.all_reduce(t, op=op)
        check(t, expected / size if op == dist.ReduceOp.AVG else expected)

    def call(r, k=0):
        return (np.arange(2048) % 89 + 10 * r + k).astype(np.float32)

    hot = jt.zeros(2048)
    for k in range(2):
        summed(hot, lambda r: call(r, k))
    assert blocks.lane.fused and blocks.lane.header == blocks.plans[(hot.dtype, hot._shape, dist.ReduceOp.SUM)].header
    started = counting.all_reduces
    for k in range(3):
        summed(hot, lambda r: call(r, k))
    assert counting.all_reduces == started and blocks.lane.fused  # (one MPI all-reduce, the lane's, per call)
    small, scalar, same = jt.zeros(3), jt.zeros(()), jt.zeros(2048)
    for between in range(8):
        if between == 0:  # the same dtype and shape, another collective: agrees in the lane
            same.fill_(float(rank))
            dist.broadcast(same, src=1)
            check(same, np.ones(2048))
        elif between == 1:  # 12 bytes: agreed in the lane, then an MPI all-reduce of their own
            summed(small, lambda r: np.full(3, r + 1.0, np.float32))
        elif between == 2:
            summed(scalar, lambda r: np.array(r + 1.0, np.float32))
        elif between == 3:  # the hot signature in a non-contiguous tensor: a contiguous copy through the lane
            strided = jt.zeros(4096)[::2]
            summed(strided, lambda r: call(r, 5))
        elif between == 4:  # another shape on rank 2: every rank raises, the tensors unwritten
            before = hot.clone()
            raises("rank 0: all_reduce(float32[2048]); rank 1: all_reduce(float32[2048]); rank 2: "
                   "all_reduce(float32[2049])", lambda: dist.all_reduce(hot if rank < 2 else jt.ones(2049)))
            check(hot, before.numpy())
        elif between == 5:  # another op on rank 1
            raises("the ranks disagree on the reduce op: rank 0: all_reduce(float32[2048], SUM); rank 1: "
                   "all_reduce(float32[2048], MAX)",
                   lambda: dist.all_reduce(hot, op=dist.ReduceOp.MAX if rank == 1 else dist.ReduceOp.SUM))
        elif between == 6:  # another collective on rank 0
            raises("rank 0: broadcast(float32[2048]); rank 1: all_reduce(float32[2048]); rank 2: "
                   "all_reduce(float32[2048])",
                   lambda: dist.broadcast(hot, src=0) if rank == 0 else dist.all_reduce(hot))
        elif between == 7:  # async: done when it returns, its work handle's wait() a no-op
            hot.copy_(jt.from_numpy(call(rank, 7)))
            dist.all_reduce(hot, async_op=True).wait()
            check(hot, np.sum([call(r, 7) for r in range(size)], axis=0))
        assert not blocks.lane.fused or between in (3, 7)  # (the hot signature keeps the group there)
        for k in range(3):
            summed(hot, lambda r: call(r, between + k))
        assert blocks.lane.fused
    # other dtypes and AVG: float64 averaged, int32 and int64 summed, each in its own fused lane
    wide, whole = jt.zeros(1024, dtype=jt.float64), jt.zeros(2048, dtype=jt.int32)
    for k in range(3):
        summed(wide, lambda r: np.linspace(r, r + k + 1, 1024), dist.ReduceOp.AVG)
        assert blocks.lane.fused or k == 0
    for k in range(3):
        summed(whole, lambda r: (np.arange(2048) * (r + 1) + k).astype(np.int32))
    assert blocks.lane.fused
    longs = jt.zeros(1024, dtype=jt.int64)
    for k in range(3):
        summed(longs, lambda r: (np.arange(1024) * (r + 1) + k + 2 ** 40).astype(np.int64))
    assert blocks.lane.fused and len(blocks.fused) == 4
    pg.comm = plain


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


fused_checks()
monitored_barrier_checks()
skip_checks()
mixed_precision_checks()
print(f"rank {rank} of {size}: {check.passed} checks passed", flush=True)
dist.destroy_process_group()
