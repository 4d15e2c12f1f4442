"""Run under the launcher: DDP on each rank's shard equals one process training on the whole batch.

Every rank builds the same data; rank r trains on its shard (rows r::N) with DDP, and also (alone) a copy of
the model on the whole batch. Gradients averaged over equal shards equal the whole batch's gradient, so after
each SGD step the two models must agree to float32 noise. Prints "rank R: ddp == whole batch" per mode.
"""

import sys
import threading

import jitorch as jt
import jitorch.distributed as dist
from jitorch import nn
from jitorch.nn.parallel import DistributedDataParallel as DDP
from jitorch.nn.parallel.distributed import _is_view_of

dist.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
compiled = "--compile" in sys.argv


def model():
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


jt.manual_seed(rank)  # different initial weights per rank: DDP must broadcast rank 0's
ddp = DDP(model(), bucket_cap_mb=0.0005)  # tiny buckets: several of them, started in order
jt.manual_seed(0)
whole = model()
whole.load_state_dict(ddp.module.state_dict())  # rank 0's weights, which the broadcast gave every rank
assert len(ddp._buckets) > 1
opt_ddp = jt.optim.SGD(ddp.parameters(), lr=0.1)
opt_whole = jt.optim.SGD(whole.parameters(), lr=0.1)
loss_fn = nn.MSELoss()


def step_ddp(x, y):
    opt_ddp.zero_grad()
    loss = loss_fn(ddp(x), y)
    loss.backward()
    opt_ddp.step()
    return loss


def step_whole(x, y):
    opt_whole.zero_grad()
    loss = loss_fn(whole(x), y)
    loss.backward()
    opt_whole.step()
    return loss


if compiled:
    step_ddp = jt.compile(step_ddp)
gen = jt.Generator().manual_seed(123)
for step in range(5):
    x = jt.randn(8 * size, 6, generator=gen)
    y = jt.randn(8 * size, 3, generator=gen)
    step_ddp(x[rank::size], y[rank::size])
    step_whole(x, y)
for (name, a), b in zip(ddp.module.named_parameters(), whole.parameters()):
    assert jt.allclose(a, b, atol=1e-6), (name, (a - b).abs().max().item())
if compiled:  # one graph, holding one all-reduce per bucket
    report = str(jt.explain(step_ddp, x[rank::size], y[rank::size]))
    assert report.count("eager: _c10d_all_reduce (external)") == len(ddp._buckets), report

# no_sync: gradients accumulate locally, and the next synced backward averages all that accumulated
reference = model()
reference.load_state_dict(ddp.module.state_dict())
ddp.zero_grad()
x1, x2, target = jt.randn(4, 6, generator=gen) + rank, jt.randn(4, 6, generator=gen) - rank, jt.zeros(4, 3)
with ddp.no_sync():
    loss_fn(ddp(x1), target).backward()
    loss_fn(reference(x1), target).backward()
for p, r in zip(ddp.parameters(), reference.parameters()):
    assert jt.allclose(p.grad, r.grad, atol=1e-6)  # local: not averaged
loss_fn(ddp(x2), target).backward()
loss_fn(reference(x2), target).backward()
for p, r in zip(ddp.parameters(), reference.parameters()):
    dist.all_reduce(r.grad, op=dist.ReduceOp.AVG)
    assert jt.allclose(p.grad, r.grad, atol=1e-6)
print(f"rank {rank}: progress thread {ddp._progress.threaded}", flush=True)


class GiveUp(jt.autograd.Function):
    """Identity whose backward raises: placed between the layers, after the last layer's buckets started."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise ValueError("backward gave up")


class GivingUp(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.last = nn.Linear(6, 16), nn.Linear(16, 3)

    def forward(self, x):
        return self.last(GiveUp.apply(self.first(x)))


# a backward that raises after some buckets started stops DDP's progress thread on its way out: left running it
# would still be inside MPI when the interpreter's exit finalizes MPI
if not compiled:
    jt.manual_seed(0)
    raising = DDP(GivingUp(), bucket_cap_mb=0.0001)
    try:
        raising(x1).sum().backward()
    except ValueError:
        pass
    else:
        raise AssertionError("backward did not raise")
    assert raising._buckets[0].work is not None and raising._buckets[-1].work is None  # some buckets started
    assert raising._progress.thread is None and threading.active_count() == 1, threading.enumerate()
    print(f"rank {rank}: a backward that raised left no thread", flush=True)


class Branches(nn.Module):
    """A layer every rank uses, one only rank 0 uses, and one no rank uses."""

    def __init__(self):
        super().__init__()
        self.shared, self.first, self.never = nn.Linear(3, 2), nn.Linear(3, 2), nn.Linear(3, 2)

    def forward(self, x, first):
        y = self.shared(x)
        return y + self.first(x) if first else y


# find_unused_parameters: a layer one rank used gets the average of its gradient and the others' zeros; one no
# rank used keeps .grad None, as torch leaves it (a gradient of zeros would still move it under Adam or weight
# decay); with gradient_as_bucket_view the averaged gradients are views of the buckets
for as_view in (False, True):
    jt.manual_seed(0)
    branches = DDP(Branches(), find_unused_parameters=True, gradient_as_bucket_view=as_view, bucket_cap_mb=0.0001)
    reference = Branches()
    reference.load_state_dict(branches.module.state_dict())

    def backward(model, x):
        model(x, rank == 0).sum().backward()
    x = jt.randn(4, 3, generator=gen) * (rank + 1)
    (jt.compile(backward) if compiled else backward)(branches, x)
    backward(reference, x)
    for (name, p), r in zip(branches.module.named_parameters(), reference.parameters()):
        if name.startswith("never"):
            assert p.grad is None and r.grad is None, name
            continue
        expected = jt.zeros_like(r) if r.grad is None else r.grad
        dist.all_reduce(expected, op=dist.ReduceOp.AVG)
        assert jt.allclose(p.grad, expected, atol=1e-6), name
        assert not as_view or compiled or any(_is_view_of(p.grad, part) for b in branches._buckets
                                              for q, part in b.slices() if q is p), name
print(f"rank {rank}: unused parameters keep no gradient", flush=True)

# ranks whose models differ are told so at construction, on every rank (their buckets would not agree)
try:
    DDP(nn.Linear(4, 2 + rank))
except RuntimeError as error:
    assert str(error) == ("DDP expects same model across all ranks: params[0] is jitorch.float32 of sizes [2, 4] "
                          "on rank 0, jitorch.float32 of sizes [3, 4] on rank 1"), str(error)
else:
    raise AssertionError("DDP accepted different models")
print(f"rank {rank}: ddp == whole batch ({'compiled' if compiled else 'eager'})", flush=True)
