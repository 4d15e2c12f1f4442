"""Run under the launcher with one argument, what to check: the all-reduce of a tensor given again whose data
travels in the agreement's block (`collectives._Blocks.hot`, session 49). Prints "rank R of N: K checks passed".

- ``values``: every dtype and every op of it, 1 element to the block's whole data (`collectives.INLINE`),
  against NumPy's reduction of every rank's values in rank order, at every call: the first (which plans), the
  second (which finds the plan and makes it the group's hot one) and those after (the hot path), sync and async,
  new values written into the same tensor each call; integers wrapping; NaN kept by MIN and MAX.
- ``disagree``: ranks whose tensor is the group's hot one while the last rank calls another signature (shape,
  dtype, op, collective; its hot tensor resized or given other data) raise on every rank, naming each rank's
  call, every rank's tensor as it was, and the hot tensor all-reduces right afterwards; a tensor resized or
  given new data on every rank takes its new signature; two groups, each with its hot tensor; the hot array
  held weakly (a freed view's base memory goes).
"""

import gc
import sys
import weakref

import numpy as np

import jitorch as jt
import jitorch.distributed as dist
from checking import check, raises
from jitorch.distributed import collectives
from jitorch.distributed.process_group import resolve

mode = sys.argv[1]
dist.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
R = dist.ReduceOp
FLOATS = ("float16", "float32", "float64")
INTEGERS = ("uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64")
ARITHMETIC = ("SUM", "PRODUCT", "MIN", "MAX")
BITWISE = ("BAND", "BOR", "BXOR")
NUMPY = {"SUM": np.add, "AVG": np.add, "PRODUCT": np.multiply, "MIN": np.minimum, "MAX": np.maximum,
         "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}
LOGICAL = {"SUM": np.logical_or, "MAX": np.logical_or, "BOR": np.logical_or, "PRODUCT": np.logical_and,
           "MIN": np.logical_and, "BAND": np.logical_and, "BXOR": np.logical_xor}


def values(r, n, call, dtype):
    """Rank ``r``'s values at its ``call``-th call: 1 to 3 (exact in every op's result), booleans as their
    parity."""
    small = (np.arange(n) * 7 + r * 3 + call) % 3 + 1
    return (small % 2 == 0) if dtype == "bool" else small.astype(dtype)


def expected(op, rows, dtype):
    """NumPy's reduction of the ranks' ``rows`` in rank order, as torch defines ``op`` on ``dtype``."""
    ufunc = (LOGICAL if dtype == "bool" else NUMPY)[op]
    out = rows[0].copy()
    for row in rows[1:]:
        out = ufunc(out, row).astype(out.dtype)
    return out / np.array(size, out.dtype) if op == "AVG" else out


def same(got, want):
    np.testing.assert_array_equal(got.numpy(), want)
    check.passed += 1


def hot_is(t, group=None):
    """The group's hot all-reduce is ``t``'s array."""
    assert resolve(group).signatures.hot[0]() is t._arr, "the tensor given again did not take the hot path"


def check_values():
    for dtype in ("bool", *INTEGERS, *FLOATS):
        ops = (ARITHMETIC + ("AVG",) if dtype in FLOATS else ARITHMETIC + BITWISE)
        item = np.dtype(dtype).itemsize
        for op in ops:
            for n in (1, 7, collectives.INLINE // item):
                t = jt.from_numpy(values(rank, n, 0, dtype))
                for call in range(5):
                    if call:
                        t.copy_(jt.from_numpy(values(rank, n, call, dtype)))
                    work = dist.all_reduce(t, op=getattr(R, op), async_op=call == 3)
                    if work is not None:
                        assert work.is_completed()
                        work.wait()
                    same(t, expected(op, [values(r, n, call, dtype) for r in range(size)], dtype))
                hot_is(t)
    # integers wrap as NumPy's (and MPI's) do
    t = jt.full((3,), 100, dtype=jt.int8)
    for call in range(3):
        t.fill_(100)
        dist.all_reduce(t)
        same(t, np.full(3, np.int8(100 * size % 256 - (256 if 100 * size % 256 > 127 else 0)), np.int8))
    # a NaN of any rank is MIN's and MAX's result, whichever rank holds it
    for op in ("MIN", "MAX"):
        t = jt.zeros(4)
        for call in range(3):
            rows = [np.array([r, np.nan if r == call % size else r, 1, 2], np.float32) for r in range(size)]
            t.copy_(jt.from_numpy(rows[rank]))
            dist.all_reduce(t, op=getattr(R, op))
            np.testing.assert_array_equal(t.numpy(), expected(op, rows, "float32"))
            check.passed += 1
        hot_is(t)
    # two tensors over one array (from_numpy of it twice): the same memory and signature, either one reduces
    shared = values(rank, 5, 0, "float32")
    a, b = jt.from_numpy(shared), jt.from_numpy(shared)
    for call, t in enumerate((a, a, b, a, b)):
        t.copy_(jt.from_numpy(values(rank, 5, call, "float32")))
        dist.all_reduce(t)
        same(t, expected("SUM", [values(r, 5, call, "float32") for r in range(size)], "float32"))


def heated(n=3):
    """A float32 tensor of ``n`` elements all-reduced three times: the group's hot one."""
    t = jt.zeros(n)
    for _ in range(3):
        dist.all_reduce(t)
    hot_is(t)
    return t


def still_hot(t):
    """``t`` all-reduces right through the hot path after a disagreement."""
    n = t.numel()
    t.copy_(jt.from_numpy(values(rank, n, 1, "float32")))
    dist.all_reduce(t)
    same(t, expected("SUM", [values(r, n, 1, "float32") for r in range(size)], "float32"))
    hot_is(t)


def disagreeing(t, mine, message, call=None):
    """Every rank but the last all-reduces ``t`` (hot); the last calls ``call`` on ``mine()`` (else all_reduce):
    RuntimeError with ``message`` on every rank, each rank's tensor as it was."""
    last = rank == size - 1
    given = mine() if last else t
    given.copy_(jt.full(given.shape, 7.0, dtype=given.dtype))
    before = given.clone()
    raises(message, lambda: (call or dist.all_reduce)(given) if last else dist.all_reduce(t))
    assert jt.equal(given, before), "a disagreeing all_reduce wrote its output"


def check_disagreements():
    last = size - 1
    others = "; ".join(f"rank {r}: all_reduce(float32[3])" for r in range(last))
    t = heated()
    disagreeing(t, lambda: jt.zeros(4), f"{others}; rank {last}: all_reduce(float32[4])")
    still_hot(t)
    disagreeing(t, lambda: jt.zeros(3, dtype=jt.float64), f"{others}; rank {last}: all_reduce(float64[3])")
    still_hot(t)
    disagreeing(t, lambda: jt.zeros(1, 3), f"{others}; rank {last}: all_reduce(float32[1, 3])")
    still_hot(t)
    described = "; ".join(f"rank {r}: all_reduce(float32[3], {'MAX' if r == last else 'SUM'})" for r in range(size))
    disagreeing(t, lambda: t, "the ranks disagree on the reduce op: " + described,
                call=lambda u: dist.all_reduce(u, op=R.MAX))
    still_hot(t)
    disagreeing(t, lambda: t, f"{others}; rank {last}: broadcast(float32[3])", call=lambda u: dist.broadcast(u, 0))
    still_hot(t)
    # the last rank's hot tensor resized in place, or given another tensor's data: a new array, so a new
    # signature, though the tensor object and the op are the hot one's
    t.resize_(5)
    if rank != last:
        t.resize_(3)
    disagreeing(t, lambda: t, f"{others}; rank {last}: all_reduce(float32[5])")
    t.resize_(3)
    still_hot(t)
    if rank == last:
        t.data = jt.zeros(3, dtype=jt.float64)
    disagreeing(t, lambda: t, f"{others}; rank {last}: all_reduce(float64[3])")
    t.data = jt.zeros(3)
    still_hot(t)
    # on every rank: the tensor's new signature, right values
    t.resize_(6)
    for call in range(3):
        t.copy_(jt.from_numpy(values(rank, 6, call, "float32")))
        dist.all_reduce(t)
        same(t, expected("SUM", [values(r, 6, call, "float32") for r in range(size)], "float32"))
    hot_is(t)
    t.data = jt.from_numpy(values(rank, 6, 0, "float64"))
    for call in range(3):
        t.copy_(jt.from_numpy(values(rank, 6, call, "float64")))
        dist.all_reduce(t, op=R.PRODUCT)
        same(t, expected("PRODUCT", [values(r, 6, call, "float64") for r in range(size)], "float64"))
    hot_is(t)
    # another tensor of the hot one's signature on the last rank: it agrees, and reduces
    t = heated()
    other = jt.zeros(3)
    for call in range(3):
        given = other if rank == last else t
        given.copy_(jt.from_numpy(values(rank, 3, call, "float32")))
        dist.all_reduce(given)
        same(given, expected("SUM", [values(r, 3, call, "float32") for r in range(size)], "float32"))
    # a group's hot tensor is its own: the world's and a new group's, interleaved
    group = dist.new_group()
    mine = jt.zeros(2)
    for call in range(4):
        t.copy_(jt.from_numpy(values(rank, 3, call, "float32")))
        mine.copy_(jt.from_numpy(values(rank, 2, call, "float32")))
        dist.all_reduce(t)
        dist.all_reduce(mine, op=R.MAX, group=group)
        same(t, expected("SUM", [values(r, 3, call, "float32") for r in range(size)], "float32"))
        same(mine, expected("MAX", [values(r, 2, call, "float32") for r in range(size)], "float32"))
    hot_is(t)
    hot_is(mine, group)
    # the hot array is held weakly: a small view's array holds all of its base's memory, which goes with them
    big = jt.zeros(1 << 20)
    view = big[:3]
    for _ in range(3):
        dist.all_reduce(view)
    hot_is(view)
    gone = weakref.ref(view._arr)
    del big, view
    gc.collect()
    assert gone() is None, "the group's hot all-reduce kept a freed tensor's memory"
    still_hot(heated())
    # a world destroyed and made again has no hot tensor of the old one's
    dist.destroy_process_group()
    dist.init_process_group()
    still_hot(heated())


{"values": check_values, "disagree": check_disagreements}[mode]()
print(f"rank {rank} of {size}: {check.passed} checks passed", flush=True)
dist.destroy_process_group()
