"""Run under the launcher: all_reduce's agreement block carrying small tensors' data (session 47).

A tensor of at most `collectives.INLINE` bytes is reduced from the agreement's gathered blocks, so the call makes
no MPI all-reduce of its own (counted on a wrapper of the group's communicator); a larger one is agreed on, then
all-reduced by MPI. Each path against NumPy for every op and dtype (results bitwise equal on every rank), and ranks
that disagree (on dtype, shape, count, op, or the collective; inline, MPI-sized, and one of each) raising on
every rank with the tensor left as it was, the group usable after each. Prints "rank R of N: K checks passed".
"""

import numpy as np

import jitorch as jt
import jitorch.distributed as dist
from checking import Counting, check
from jitorch.distributed import collectives
from jitorch.distributed.process_group import resolve

dist.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
pg = resolve(None)


pg.comm = counting = Counting(pg.comm)
INLINE = collectives.INLINE
ELEMENTS = {"inline": 7, "boundary": INLINE // 4, "mpi": INLINE // 4 + 1, "large": 70_000}


def values(r, n, dtype):
    """Rank ``r``'s values: small distinct integers (exact in every dtype), bools alternating by rank."""
    if dtype == "bool":
        return (np.arange(n) + r) % 3 == 0
    return ((np.arange(n) % 5) + r + 1).astype(np.float32 if dtype == "bfloat16" else dtype)


def reduced(op, dtype, n):
    rows = np.stack([values(r, n, dtype) for r in range(size)])
    if dtype == "bool":
        return {"SUM": np.any, "MAX": np.any, "PRODUCT": np.all, "MIN": np.all}[op](rows, axis=0)
    if op in ("SUM", "PRODUCT"):  # in the tensors' dtype, integers wrapping, as MPI's
        return {"SUM": np.sum, "PRODUCT": np.prod}[op](rows, axis=0, dtype=rows.dtype)
    return {"AVG": np.mean, "MIN": np.min, "MAX": np.max}[op](rows, axis=0)


def tensor(n, dtype):
    array = values(rank, n, dtype)
    return jt.from_numpy(array).to(jt.bfloat16) if dtype == "bfloat16" else jt.from_numpy(array)


def same_on_every_rank(t):
    everyone = [jt.zeros_like(t) for _ in range(size)]
    dist.all_gather(everyone, t)
    assert all(e.numpy().tobytes() == everyone[0].numpy().tobytes() for e in everyone), [e.tolist()[:4]
                                                                                         for e in everyone]


cases = [(op, dtype) for dtype in ("float32", "float64", "int32", "int8", "float16", "bfloat16")
         for op in ("SUM", "PRODUCT", "MIN", "MAX")] + [(op, "bool") for op in ("SUM", "PRODUCT", "MIN", "MAX")]
cases += [("AVG", "float32"), ("AVG", "float64")]
for path, n in ELEMENTS.items():
    for op, dtype in cases:
        if n > INLINE // 4 and dtype in ("float16", "int8"):  # (MPI's reductions of these are the audit's)
            continue
        t = tensor(n, dtype)
        before = counting.all_reduces
        work = dist.all_reduce(t, op=getattr(dist.ReduceOp, op), async_op=(op == "MAX"))
        if work is not None:
            work.wait()
        inline = t.numel() * (4 if dtype == "bfloat16" else t.element_size()) <= INLINE
        assert counting.all_reduces - before == (0 if inline else 1), (path, op, dtype)
        expected = reduced(op, dtype, n)
        if dtype == "bfloat16":  # reduced in float32, then rounded to bfloat16
            expected = jt.from_numpy(expected).to(jt.bfloat16).float().numpy()
        got = t.float().numpy() if dtype == "bfloat16" else t.numpy()
        assert got.dtype == expected.dtype or dtype == "bfloat16", (got.dtype, expected.dtype)
        check(got, expected)
        same_on_every_rank(t)
# NaN in MIN and MAX of floats, inline and through MPI, on every rank count: a NaN of any rank is kept (NumPy's
# minimum and maximum, associative, so any algorithm's order gives the same). Regression: MPI's MAX kept a NaN of
# the higher rank only, so the same call kept or dropped it by the tensor's size (inline or MPI)
def with_nans(r, n):
    a = values(r, n, "float32")
    a[r::size + 1] = np.nan
    return a


for n in (7, ELEMENTS["mpi"], ELEMENTS["large"]):
    for op in ("MIN", "MAX"):
        t = jt.from_numpy(with_nans(rank, n))
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        rows = np.stack([with_nans(r, n) for r in range(size)])
        np.testing.assert_array_equal(t.numpy(), (np.maximum if op == "MAX" else np.minimum).reduce(rows, axis=0))
        check.passed += 1
        same_on_every_rank(t)
# a 0-d tensor and a non-contiguous one, inline
t = jt.tensor(float(rank + 1))
dist.all_reduce(t)
check(t, np.float32(sum(range(1, size + 1))))
base = jt.from_numpy(values(rank, 12, "float32").reshape(3, 4))
column = base[:, 1]
dist.all_reduce(column)
check(base[:, 1], reduced("SUM", "float32", 12).reshape(3, 4)[:, 1])
check(base[:, 0], values(rank, 12, "float32").reshape(3, 4)[:, 0])


def disagreeing(make, message, op=lambda: dist.ReduceOp.SUM, call=None):
    """``make()`` gives this rank's tensor; the call raises ``message`` here, the tensor as it was; then the group
    still all-reduces."""
    t = make()
    before = t.clone()
    try:
        (call or (lambda t: dist.all_reduce(t, op=op())))(t)
    except RuntimeError as error:
        assert message in str(error), (message, str(error))
    else:
        raise AssertionError(f"no error: {message}")
    assert jt.equal(t, before), "a disagreeing all_reduce wrote its output"
    ones = jt.ones(3)
    dist.all_reduce(ones)
    check(ones, np.full(3, size, np.float32))


if size == 2:
    other = "float64" if rank else "float32"
    for n in (3, 2000):  # inline, then MPI-sized
        disagreeing(lambda: jt.ones(n, dtype=getattr(jt, other)),
                    f"the ranks disagree on the collective or on the tensors' dtype and shape: rank 0: "
                    f"all_reduce(float32[{n}]); rank 1: all_reduce(float64[{n}])")
        disagreeing(lambda: jt.ones(n, 2) if rank else jt.ones(2, n),
                    f"rank 0: all_reduce(float32[2, {n}]); rank 1: all_reduce(float32[{n}, 2])")
        disagreeing(lambda: jt.ones(n), f"the ranks disagree on the reduce op: rank 0: all_reduce(float32[{n}], SUM); "
                    f"rank 1: all_reduce(float32[{n}], MAX)",
                    op=lambda: dist.ReduceOp.MAX if rank else dist.ReduceOp.SUM)
        disagreeing(lambda: jt.ones(n),
                    f"rank 0: all_reduce(float32[{n}]); rank 1: broadcast(float32[{n}])",
                    call=lambda t: dist.broadcast(t, src=0) if rank else dist.all_reduce(t))
    for counts in ((3, 4), (3, 5000), (5000, 3), (INLINE // 4, INLINE // 4 + 1), (70_000, 69_999)):
        disagreeing(lambda: jt.ones(counts[rank]),
                    f"rank 0: all_reduce(float32[{counts[0]}]); rank 1: all_reduce(float32[{counts[1]}])")
print(f"rank {rank} of {size}: {check.passed} checks passed", flush=True)
dist.destroy_process_group()
