"""Run under the launcher (2 ranks or more): the agreement's two lanes (`collectives._Blocks`, session 51), and
DDP's synced step against a step without DDP. Prints "rank R of N: K checks passed".

- Mid-sized all-reduces (more than `collectives.INLINE`, at most `collectives.WIDE_INLINE` bytes) given in a row
  take the wide lane, where their data travels in the agreement's block: values against NumPy at every call,
  every op, sync and async, the first calls (through MPI) and those after (inline, the hot path), both ends of
  the size range; every lane switch the same on every rank.
- Small all-reduces and other collectives called in the wide lane travel in its block and take the group back
  to the narrow lane; 4 B and 4 KB all-reduces in turn stay in the narrow lane.
- Ranks that disagree while the group is in the wide lane (shape, dtype, op, another collective, a small
  all-reduce against a mid-sized one) raise on every rank naming each rank's call, no tensor written, and every
  rank is back in the narrow lane; the group works right afterwards. A new group has lanes of its own; a world
  destroyed and made again starts in the narrow lane.
- DDP: gradients after a synced backward equal the mean of every rank's gradients (computed without DDP), for
  ``gradient_as_bucket_view`` off and on, over several steps with ``zero_grad`` to None and to zeros, and a
  gradient kept from one step is not changed by the next.
"""

import numpy as np

import jitorch as jt
import jitorch.distributed as dist
from checking import check, raises
from jitorch.distributed import collectives
from jitorch.distributed.process_group import resolve
from jitorch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
last = size - 1
R = dist.ReduceOp
MID = (collectives.INLINE // 4 + 1, 1000, collectives.WIDE_INLINE // 4)  # float32 elements: the mid-sized range
NUMPY = {"SUM": np.sum, "AVG": np.mean, "PRODUCT": np.prod, "MIN": np.min, "MAX": np.max}


def values(r, n, call, dtype=np.float32):
    """Rank ``r``'s values at its ``call``-th call: small integers, exact in every op's result."""
    return ((np.arange(n) * 7 + r * 3 + call) % 3 + 1).astype(dtype)


def expected(op, n, call, dtype=np.float32):
    return NUMPY[op](np.stack([values(r, n, call, dtype) for r in range(size)]), axis=0).astype(dtype)


def lane(group=None):
    blocks = resolve(group).signatures
    return "wide" if blocks.lane is blocks.wide else "narrow"


def in_lane(name, group=None):
    assert lane(group) == name, f"the group is in the {lane(group)} lane, expected the {name} one"
    check.passed += 1


def reduced(t, op, n, call, async_op=False, group=None):
    t.copy_(jt.from_numpy(values(rank, n, call)))
    work = dist.all_reduce(t, op=getattr(R, op), async_op=async_op, group=group)
    if work is not None:
        work.wait()
    check(t, expected(op, n, call))


def widened(n=1024):
    """A tensor of ``n`` floats all-reduced until the group is in the wide lane."""
    t = jt.zeros(n)
    for call in range(collectives.WIDEN_AFTER + 1):
        reduced(t, "SUM", n, call)
    in_lane("wide")
    return t


def lanes():
    assert resolve(None).signatures is None  # (made at the group's first agreement)
    for n in MID:
        for op in NUMPY:
            t = jt.zeros(n)
            for call in range(6):
                reduced(t, op, n, call, async_op=call == 4)
            in_lane("wide")
            assert resolve(None).signatures.hot[0]() is t._arr, "a mid-sized tensor given again is not hot"
            small = jt.zeros(3)
            reduced(small, op, 3, 0)  # (in the wide lane's block)
            in_lane("narrow")
    # past WIDE_INLINE bytes, through MPI whatever the lane
    big = jt.zeros(collectives.WIDE_INLINE // 4 + 1)
    widened()
    for call in range(3):
        reduced(big, "SUM", big.numel(), call)
        in_lane("narrow")
    # 4 B and 4 KB in turn: the narrow lane throughout
    one, many = jt.zeros(1), jt.zeros(1024)
    for call in range(4):
        reduced(one, "SUM", 1, call)
        reduced(many, "MAX", 1024, call)
        in_lane("narrow")
    # other collectives in the wide lane
    widened()
    b = jt.from_numpy(values(rank, 5, 0))
    dist.broadcast(b, src=0)
    check(b, values(0, 5, 0))
    in_lane("narrow")
    widened()
    rows = [jt.zeros(4) for _ in range(size)]
    dist.all_gather(rows, jt.from_numpy(values(rank, 4, 1)))
    for r in range(size):
        check(rows[r], values(r, 4, 1))
    in_lane("narrow")


def disagreements():
    others = "; ".join(f"rank {r}: all_reduce(float32[1024])" for r in range(last))
    cases = (
        (lambda: jt.zeros(1025), None, f"{others}; rank {last}: all_reduce(float32[1025])"),
        (lambda: jt.zeros(1024, dtype=jt.float64), None, f"{others}; rank {last}: all_reduce(float64[1024])"),
        (lambda: jt.zeros(3), None, f"{others}; rank {last}: all_reduce(float32[3])"),
        (lambda: jt.zeros(1024), lambda u: dist.all_reduce(u, op=R.MAX), "the ranks disagree on the reduce op: "
         + "; ".join(f"rank {r}: all_reduce(float32[1024], {'MAX' if r == last else 'SUM'})" for r in range(size))),
        (lambda: jt.zeros(1024), lambda u: dist.broadcast(u, 0), f"{others}; rank {last}: broadcast(float32[1024])"),
    )
    for other, call, message in cases:
        t = widened()
        mine = other() if rank == last else t
        mine.copy_(jt.from_numpy(np.full(mine.shape, rank + 5.0)).to(mine.dtype))
        before = mine.clone()
        raises(message, lambda: (call if rank == last and call else dist.all_reduce)(mine))
        assert jt.equal(mine, before), "a disagreeing call wrote its tensor"
        in_lane("narrow")
        reduced(t, "SUM", 1024, 9)
    # a group of its own has its own lanes; a world made again starts narrow
    group = dist.new_group()
    t = jt.zeros(1024)
    for call in range(3):
        reduced(t, "MAX", 1024, call, group=group)
    in_lane("wide", group)
    in_lane("narrow")
    dist.destroy_process_group()
    dist.init_process_group()
    t = jt.zeros(1024)
    reduced(t, "SUM", 1024, 0)  # (the new world's first agreement makes its lanes: narrow, then one mid call)
    in_lane("narrow")
    reduced(t, "SUM", 1024, 1)
    in_lane("wide")


def mlp():
    return jt.nn.Sequential(jt.nn.Linear(6, 16), jt.nn.Tanh(), jt.nn.Linear(16, 16), jt.nn.Tanh(),
                            jt.nn.Linear(16, 3))


def ddp_gradients():
    """Every rank's DDP gradients equal the mean of the ranks' gradients computed without DDP, whichever way
    the gradients are kept (their own memory, views of the buckets) and zeroed (to None, to zeros); with
    gradients of their own memory, one kept from a step is not changed by the next step that sets them to None
    (as torch: zeroing to zeros writes the same tensor)."""
    gen = jt.Generator().manual_seed(7)
    batches = [[(jt.randn(4, 6, generator=gen), jt.randn(4, 3, generator=gen)) for _ in range(size)]
               for _ in range(3)]
    for as_view in (False, True):
        jt.manual_seed(rank)  # different weights per rank: DDP broadcasts rank 0's
        ddp = DDP(mlp(), bucket_cap_mb=0.0004, gradient_as_bucket_view=as_view)
        assert len(ddp._buckets) > 2
        plain = mlp()
        plain.load_state_dict(ddp.module.state_dict())
        kept = []
        for step, batch in enumerate(batches):
            none = step != 1
            ddp.zero_grad(set_to_none=none)
            jt.nn.functional.mse_loss(ddp(batch[rank][0]), batch[rank][1]).backward()
            means = []
            for x, y in batch:
                plain.zero_grad()
                jt.nn.functional.mse_loss(plain(x), y).backward()
                means.append([p.grad.numpy().copy() for p in plain.parameters()])
            for got, *rows in zip(ddp.module.parameters(), *means):
                np.testing.assert_allclose(got.grad.numpy(), np.mean(rows, axis=0), rtol=1e-5, atol=1e-7)
                check.passed += 1
            kept.append([(p.grad, p.grad.numpy().copy()) for p in ddp.module.parameters()])
        if not as_view:
            for grad, values in kept[1]:  # (zeroed in place by step 1's zero_grad, set to None by step 2's)
                np.testing.assert_array_equal(grad.numpy(), values)
                check.passed += 1


lanes()
disagreements()
ddp_gradients()
print(f"rank {rank} of {size}: {check.passed} checks passed", flush=True)
