"""Run under the launcher with one argument, what to check: all_reduce's plans per signature and the persistent
all-gather of the agreement (session 48). Prints "rank R of N: K checks passed".

- ``plans``: signatures called again (the plan's path) against NumPy, inline and through MPI, for every op; a
  tensor that is not its own buffer, or bfloat16, after a plan of its signature; the same tensor again through
  MPI (a persistent all-reduce bound to it: `bound`); ranks that disagree once both
  made plans for their own signatures (shape, count, op, the collective) raise on every rank, the tensor as it
  was, the group usable after; a new group and the world destroyed and made again.
- ``dims``: shapes of more than 9 dims that differ past the 9th (the header kept 9 dims only: the ranks agreed,
  and the inline data of the longer tensor was reduced with stale bytes of the shorter's block), in count or
  in order.
- ``timeout``: a call that timed out leaves the group's persistent all-gather started; the next call on that
  group raises, naming why, instead of starting it again (MPI: an error on an active request).
"""

import datetime
import sys
import time

import numpy as np

import jitorch as jt
import jitorch.distributed as dist
from checking import check, raises
from jitorch.distributed import collectives
from jitorch.distributed.process_group import resolve

collectives.FUSED_MAX = 0  # the slim lane and bound all-reduces checked here: fused lanes (session 56), which carry
# sums of up to 8 KB, would take some of these calls (dist56_check.py checks those)

mode = sys.argv[1]
dist.init_process_group(timeout=datetime.timedelta(seconds=2) if mode == "timeout" else None)
rank, size = dist.get_rank(), dist.get_world_size()
INLINE = collectives.INLINE
OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX")


def values(r, n, call, dtype=np.float32):
    """Rank ``r``'s values at its ``call``-th call: small integers, exact in every op's result."""
    return ((np.arange(n) + r + call) % 3 + 1).astype(dtype)


def expected(op, n, call, dtype=np.float32):
    rows = np.stack([values(r, n, call, dtype) for r in range(size)])
    return {"SUM": np.sum, "AVG": np.mean, "PRODUCT": np.prod, "MIN": np.min, "MAX": np.max}[op](
        rows, axis=0).astype(dtype)


def group_still_works(group=None):
    ones = jt.ones(3)
    dist.all_reduce(ones, group=group)
    check(ones, np.full(3, dist.get_world_size(group), np.float32))


def disagreeing(mine, message, op=lambda: dist.ReduceOp.SUM, call=None):
    """Each rank's tensor (``mine()``) raises ``message`` on every rank, the tensor as it was."""
    t = mine()
    before = t.clone()
    raises(message, lambda: (call or (lambda t: dist.all_reduce(t, op=op())))(t))
    assert jt.equal(t, before), "a disagreeing all_reduce wrote its output"
    group_still_works()


def plans():
    pg = resolve(None)
    for n in (1, 5, INLINE // 4, INLINE // 4 + 1, 30_000):  # inline up to INLINE // 4 floats, then MPI
        for op in OPS:
            for call in range(3):  # the first makes the plan; the others take it, with new tensors and values
                t = jt.from_numpy(values(rank, n, call))
                work = dist.all_reduce(t, op=getattr(dist.ReduceOp, op), async_op=call == 2)
                if work is not None:
                    work.wait()
                check(t, expected(op, n, call))
                assert (t.dtype, t._shape, getattr(dist.ReduceOp, op)) in pg.signatures.plans
    # a 0-d tensor, and integers and booleans, planned and again
    for call in range(2):
        t = jt.tensor(float(rank + call))
        dist.all_reduce(t)
        check(t, np.float32(sum(r + call for r in range(size))))
        i = jt.from_numpy(values(rank, 7, call, np.int64))
        dist.all_reduce(i, op=dist.ReduceOp.MAX)
        np.testing.assert_array_equal(i.numpy(), expected("MAX", 7, call, np.int64))
        b = jt.from_numpy(values(rank, 7, call) == 2)
        dist.all_reduce(b)
        np.testing.assert_array_equal(b.numpy(), np.any([values(r, 7, call) == 2 for r in range(size)], axis=0))
        check.passed += 2
    # the same signature from a tensor that is not its own buffer (a column: strided), and one whose size-1 dim
    # has another stride (contiguous, not the plan's strides): each after a plan of its signature
    for n in (4, 2000):
        plain = jt.from_numpy(values(rank, n, 0))
        dist.all_reduce(plain)
        base = jt.from_numpy(np.stack([values(rank, n, 1), values(rank, n, 2)], axis=1))
        column = base[:, 0]
        dist.all_reduce(column)
        check(base[:, 0], expected("SUM", n, 1))
        check(base[:, 1], values(rank, n, 2))
        wide = jt.from_numpy(values(rank, n, 1).reshape(n, 1)).t()  # (1, n), strides (1, 1)
        dist.all_reduce(jt.from_numpy(values(rank, n, 0).reshape(1, n)))
        dist.all_reduce(wide)
        check(wide, expected("SUM", n, 1).reshape(1, n))
    # bfloat16 reduces through a float32 copy: its plan is of float32 arrays, and a 0-d bfloat16 tensor (whose
    # strides, (), are every dtype's) must not take it as its own buffer
    for call in range(3):
        h = jt.tensor(float(rank + 1)).to(jt.bfloat16)
        dist.all_reduce(h)
        check(h.float(), np.float32(sum(range(1, size + 1))))
    # ranks that disagree: the first call makes each rank's plan of its own signature (a plan holds no
    # agreement: the call that made it raised), the second takes it
    last = size - 1
    for n in (3, 5000):  # inline, then MPI-sized
        mine = n + (rank == last)
        for _ in range(2):
            described = "; ".join(f"rank {r}: all_reduce(float32[{n + (r == last)}])" for r in range(size))
            disagreeing(lambda: jt.ones(mine), described)
            described = "; ".join(f"rank {r}: all_reduce(float32[{n}], {'MAX' if r == last else 'SUM'})"
                                  for r in range(size))
            disagreeing(lambda: jt.ones(n), "the ranks disagree on the reduce op: " + described,
                        op=lambda: dist.ReduceOp.MAX if rank == last else dist.ReduceOp.SUM)
            disagreeing(lambda: jt.ones(n), f"rank {last}: broadcast(float32[{n}])",
                        call=lambda t: dist.broadcast(t, src=0) if rank == last else dist.all_reduce(t))
        assert (jt.float32, (mine,), dist.ReduceOp.SUM) in pg.signatures.plans
        assert (jt.float32, (n,), dist.ReduceOp.MAX if rank == last else dist.ReduceOp.SUM) in pg.signatures.plans
    bound(pg)
    # a group of its own agrees on its own blocks; destroying the world frees every group's persistent all-gather
    # before its communicator, and a world made again plans afresh
    group = dist.new_group()
    for _ in range(2):
        group_still_works(group)
    assert resolve(group).signatures is not pg.signatures
    dist.destroy_process_group()
    dist.init_process_group()
    group_still_works()
    group_still_works()


def bound(pg):
    """A tensor all-reduced again through MPI runs a persistent all-reduce bound to its array, on every rank or
    none: new values each call (written in place), every op, async calls, another tensor of the signature while
    the bound one runs, ranks of which only some give the same tensor again, and plans dropped past
    `_PLANS_KEPT`, their bound all-reduces freed."""
    n = collectives.WIDE_INLINE // 4 + 100  # (up to WIDE_INLINE bytes, mid-sized all-reduces go inline)
    for op in OPS:
        t = jt.zeros(n)
        for call in range(4):
            t.copy_(jt.from_numpy(values(rank, n, call)))
            work = dist.all_reduce(t, op=getattr(dist.ReduceOp, op), async_op=call == 3)
            if work is not None:
                work.wait()
            check(t, expected(op, n, call))
        plan = pg.signatures.plans[(jt.float32, (n,), getattr(dist.ReduceOp, op))]
        assert plan.bound is not None and plan.bound_array() is t._array() and not plan.busy
    # the bound one running (async, not waited for) while another tensor of its signature all-reduces
    t, other = jt.zeros(n), jt.zeros(n)
    for call in range(3):
        t.copy_(jt.from_numpy(values(rank, n, call)))
        dist.all_reduce(t)
    t.copy_(jt.from_numpy(values(rank, n, 5)))
    work = dist.all_reduce(t, async_op=True)
    assert plan_of(pg, n).busy
    other.copy_(jt.from_numpy(values(rank, n, 6)))
    dist.all_reduce(other)
    work.wait()
    check(t, expected("SUM", n, 5))
    check(other, expected("SUM", n, 6))
    t.copy_(jt.from_numpy(values(rank, n, 7)))
    dist.all_reduce(t)
    check(t, expected("SUM", n, 7))
    # past BOUND_MAX bytes a tensor given again all-reduces as any other
    big = jt.zeros(collectives.BOUND_MAX // 4 + 1)
    for call in range(3):
        big.copy_(jt.from_numpy(values(rank, big.numel(), call)))
        dist.all_reduce(big)
        check(big, expected("SUM", big.numel(), call))
    assert plan_of(pg, big.numel()).bound is None
    # rank 0 gives one tensor each call, the others two in turn: no rank binds, every call is right
    pair = [jt.zeros(n), jt.zeros(n)]
    for call in range(4):
        mine = pair[0] if rank == 0 else pair[call % 2]
        mine.copy_(jt.from_numpy(values(rank, n, call)))
        dist.all_reduce(mine)
        check(mine, expected("SUM", n, call))
    # past _PLANS_KEPT signatures the plans go, their bound all-reduces freed; the next calls plan again
    kept = collectives._PLANS_KEPT
    collectives._PLANS_KEPT = 3
    try:
        tensors = [jt.zeros(n + k) for k in range(5)]
        for call in range(3):
            for k, t in enumerate(tensors):
                t.copy_(jt.from_numpy(values(rank, n + k, call)))
                dist.all_reduce(t)
                check(t, expected("SUM", n + k, call))
        assert len(pg.signatures.plans) <= 3
    finally:
        collectives._PLANS_KEPT = kept


def plan_of(pg, n, op=dist.ReduceOp.SUM):
    return pg.signatures.plans[(jt.float32, (n,), op)]


def dims():
    """Regression: 10-d tensors differing in the last dim only (and by count) raised nowhere: the header kept
    9 dims, so the ranks agreed; inline, the longer one's rows were reduced with the other block's stale bytes."""
    for last in (2, 2000):  # inline, then MPI-sized
        mine = last + rank % 2
        t = jt.ones(*(1,) * 9, mine)
        before = t.clone()
        described = "; ".join(f"rank {r}: all_reduce(float32[1, 1, 1, 1, 1, 1, 1, 1, 1, ... (10 dims, "
                              f"{last + r % 2} elements)])" for r in range(size))
        raises("the ranks disagree on the collective or on the tensors' dtype and shape: " + described,
               lambda: dist.all_reduce(t))
        assert jt.equal(t, before)
        group_still_works()
    # the same count, the dims past the 9th in another order
    t = jt.ones(*(1,) * 9, *((2, 3) if rank % 2 else (3, 2)))
    raises("the ranks disagree on the collective or on the tensors' dtype and shape", lambda: dist.all_reduce(t))
    assert jt.equal(t, jt.ones_like(t))
    same = jt.ones(*(1,) * 9, 2, 3)  # agreeing 11-d tensors still reduce
    dist.all_reduce(same)
    check(same, np.full((1,) * 9 + (2, 3), size, np.float32))


def timeout():
    """Rank 1 is late: the others time out, and their next call raises at once, naming why."""
    t = jt.ones(4)
    dist.all_reduce(t)  # the persistent all-gather is made
    if rank == 1:
        time.sleep(3)
    else:
        raises("all_reduce timed out after 2 s", lambda: dist.all_reduce(t))
        raises("an earlier collective on this group never finished", lambda: dist.all_reduce(t))
        check.passed += 1


{"plans": plans, "dims": dims, "timeout": timeout}[mode]()
print(f"rank {rank} of {size}: {check.passed} checks passed", flush=True)
if mode != "timeout":  # (after a timeout MPI aborts at exit: `mpi_backend.broken`)
    dist.destroy_process_group()
