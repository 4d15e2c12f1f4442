"""Run under the launcher: what session 46's audit of issue 20 found unchecked, on this rank's data against NumPy.

Boolean reductions (torch's logic), the work handles of the rooted collectives, collectives in a group whose
ranks are not the world's first, a rank outside a group, ranks that disagree (on the collective, the shapes, the
dtypes, all_to_all_single's splits, a received message's size) raising on every rank and leaving the group usable,
a rank's own tensors of two dtypes, DDP's error for a parameter the forward left unused, DDP's buffers (rank 0's
before each forward), object collectives with pickle unusable, and last a DDP backward that a silent rank leaves
waiting, which must end in the group's timeout error. Prints "rank R of N: K audit checks passed", then the
timeout's error.
"""

import datetime
import pickle
import time
import warnings

import numpy as np
from mpi4py import MPI

import jitorch as jt
import jitorch.distributed as dist
from checking import check, data
from jitorch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()


def raises(fn, message, kind=RuntimeError):
    """``fn()`` raises ``kind`` with ``message`` in its text; then the world still all-reduces."""
    try:
        fn()
    except kind as error:
        assert message in str(error), (message, str(error))
    else:
        raise AssertionError(f"no error: {message}")
    t = jt.ones(2)
    dist.all_reduce(t)
    check(t, np.full(2, size, np.float32))


# booleans reduce as torch's gloo reduces them: SUM and MAX as or, PRODUCT and MIN as and (MPI's arithmetic
# reductions reject booleans: regression, a raw mpi4py exception)
flags = [np.array([True, False, r == 0, r == size - 1, r % 2 == 0]) for r in range(size)]
for op, fold in ((dist.ReduceOp.SUM, np.any), (dist.ReduceOp.MAX, np.any), (dist.ReduceOp.PRODUCT, np.all),
                 (dist.ReduceOp.MIN, np.all)):
    t = jt.from_numpy(flags[rank].copy())
    dist.all_reduce(t, op=op)
    check(t, fold(np.stack(flags), axis=0))
t = jt.from_numpy(flags[rank].copy())
dist.reduce(t, dst=size - 1, op=dist.ReduceOp.SUM)
check(t, np.any(flags, axis=0) if rank == size - 1 else flags[rank])
wide = [np.array([r == 0, True] * size) for r in range(size)]
chunk = jt.zeros(2, dtype=jt.bool)
dist.reduce_scatter_tensor(chunk, jt.from_numpy(wide[rank]), op=dist.ReduceOp.PRODUCT)
check(chunk, np.all(wide, axis=0)[2 * rank:2 * rank + 2])
raises(lambda: dist.all_reduce(jt.ones(2, dtype=jt.int64), op=dist.ReduceOp.AVG),
       "all_reduce: ReduceOp.AVG needs floating point tensors, got jitorch.int64")  # torch's type: RuntimeError

# work handles of the rooted collectives and of all_to_all_single: results written by wait()
everyone = [data(r) for r in range(size)]
t = jt.from_numpy(data(rank))
work = dist.reduce(t, dst=size - 1, op=dist.ReduceOp.AVG, async_op=True)
assert work.wait() and work.is_completed()
check(t, np.mean(everyone, axis=0) if rank == size - 1 else everyone[rank])
gathered = [jt.zeros(2, 3) for _ in range(size)] if rank == 0 else None
work = dist.gather(jt.from_numpy(data(rank)), gathered, dst=0, async_op=True)
work.wait()
if rank == 0:
    for got, expected in zip(gathered, everyone):
        check(got, expected)
mine = jt.zeros(2, 3)
work = dist.scatter(mine, [jt.from_numpy(data(50 + r)) for r in range(size)] if rank == size - 1 else None,
                    src=size - 1, async_op=True)
work.wait()
check(mine, data(50 + rank))
whole = jt.zeros(size * 2, 3)
work = dist.all_gather_into_tensor(whole, jt.from_numpy(data(rank)), async_op=True)
assert work.wait() and work.result() == [whole]
check(whole, np.concatenate(everyone))
rows = [data(r, shape=(size, 2)) for r in range(size)]
out = jt.zeros(size, 2)
work = dist.all_to_all_single(out, jt.from_numpy(rows[rank]), async_op=True)
work.wait()
check(out, np.stack([rows[r][rank] for r in range(size)]))

# a group of every rank but 0: roots named by global rank, or by group rank (group_src, group_dst)
others = dist.new_group(list(range(1, size)))
if rank == 0:
    assert others is dist.GroupMember.NON_GROUP_MEMBER and dist.get_rank(others) == -1
    # outside the group: torch warns and does nothing (regression: AttributeError)
    t = jt.ones(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert dist.all_reduce(t, group=others) is None and dist.barrier(group=others) is None
        assert dist.broadcast(t, 1, others) is None and dist.all_gather_object([None], 0, group=others) is None
    assert [str(w.message) for w in caught] == [f"Running {name} on global rank 0 which does not belong to the given "
                                                "group." for name in ("all_reduce", "barrier", "broadcast",
                                                                      "all_gather_object")], caught
    check(t, np.ones(2, np.float32))
else:
    assert dist.get_rank(others) == rank - 1 and dist.get_world_size(others) == size - 1
    t = jt.from_numpy(data(rank))
    dist.broadcast(t, src=size - 1, group=others)
    check(t, everyone[-1])
    t = jt.from_numpy(data(rank))
    dist.reduce(t, dst=1, group=others, op=dist.ReduceOp.MIN)
    check(t, np.min(everyone[1:], axis=0) if rank == 1 else everyone[rank])
    gathered = [jt.zeros(2, 3) for _ in range(size - 1)] if rank == size - 1 else None
    dist.gather(jt.from_numpy(data(rank)), gathered, group=others, group_dst=size - 2)
    if rank == size - 1:
        for got, expected in zip(gathered, everyone[1:]):
            check(got, expected)
    objects = [None] * (size - 1)
    dist.all_gather_object(objects, ("rank", rank), group=others)
    assert objects == [("rank", r) for r in range(1, size)]

# ranks that disagree raise on every rank, naming what each gave, before any data moves
raises(lambda: dist.all_reduce(jt.ones(2)) if rank == 0 else dist.broadcast(jt.ones(2), src=0),
       "the ranks disagree on the collective or on the tensors' dtype and shape: rank 0: all_reduce(float32[2]); "
       "rank 1: broadcast(float32[2])")
raises(lambda: dist.broadcast(jt.ones(2 + rank), src=0), "rank 0: broadcast(float32[2]); rank 1: broadcast(float32[3])")
raises(lambda: dist.all_gather([jt.zeros(2, 2 + rank)] * size, jt.ones(2, 2 + rank)),
       "rank 0: all_gather(float32[2, 2]); rank 1: all_gather(float32[2, 3])")
raises(lambda: dist.reduce_scatter_tensor(jt.zeros(1, dtype=jt.float64 if rank else jt.float32),
                                          jt.ones(size, dtype=jt.float64 if rank else jt.float32)),
       f"rank 0: reduce_scatter_tensor(float32[{size}]); rank 1: reduce_scatter_tensor(float64[{size}])")
raises(lambda: dist.all_to_all_single(jt.zeros(size, dtype=jt.int32 if rank else jt.float32),
                                      jt.ones(size, dtype=jt.int32 if rank else jt.float32)),
       "rank 0: all_to_all_single(float32[]); rank 1: all_to_all_single(int32[])")
# all_to_all_single's chunks of different sizes across ranks (regression: MPI left rank 1's output partly
# unwritten, silently): equal splits of 1-row chunks on rank 0, 2-row chunks elsewhere
chunk_rows = 1 if rank == 0 else 2
raises(lambda: dist.all_to_all_single(jt.zeros(size * chunk_rows, 2), jt.ones(size * chunk_rows, 2)),
       "all_to_all_single: the ranks' split sizes do not pair up: rank 0 sends 8 bytes to rank 1, which receives 16")
# uneven splits: rank 0 expects 2 rows from rank 1, which sends it 1
received = [1] * size
if rank == 0:
    received[1] = 2
raises(lambda: dist.all_to_all_single(jt.zeros(sum(received), 2), jt.ones(size, 2), output_split_sizes=received,
                                      input_split_sizes=[1] * size),
       "rank 1 sends 8 bytes to rank 0, which receives 16")
# a rank's own tensors of different dtypes (regression: all_gather_into_tensor and scatter reinterpreted the bytes,
# silently; reduce_scatter_tensor raised mpi4py's ValueError): torch's errors, before anything moves
for call, error in ((lambda: dist.all_gather_into_tensor(jt.zeros(2 * size, dtype=jt.float64), jt.ones(2)),
                     RuntimeError),
                    (lambda: dist.reduce_scatter_tensor(jt.zeros(2, dtype=jt.float64), jt.ones(2 * size)),
                     RuntimeError),
                    (lambda: dist.all_gather([jt.zeros(2, dtype=jt.float64)] * size, jt.ones(2)), ValueError),
                    (lambda: dist.all_to_all_single(jt.zeros(size), jt.ones(size, dtype=jt.float64)), ValueError)):
    raises(call, "Invalid usage of tensors with different dtypes: found jitorch.float", error)
alone = dist.new_group([0])  # only the root's list is wrong: the other ranks would wait for it
if rank == 0:
    for call in (lambda: dist.scatter(jt.zeros(2), [jt.ones(2, dtype=jt.float64)], src=0, group=alone),
                 lambda: dist.gather(jt.ones(2), [jt.zeros(2, dtype=jt.int64)], dst=0, group=alone)):
        try:
            call()
        except ValueError as error:
            assert "Invalid usage of tensors with different dtypes: found jitorch.float32 and jitorch." in str(error)
            check.passed += 1
        else:
            raise AssertionError("no error for a list of another dtype")

# a message larger or smaller than the receiving tensor
if rank in (0, 1):
    for sent, receiving, message in ((4, 2, "recv failed in MPI: Message truncated"),
                                     (2, 4, "recv: a message of 8 bytes arrived for a tensor of 16 bytes")):
        if rank == 0:
            dist.send(jt.ones(sent), dst=1)
        else:
            try:
                dist.recv(jt.zeros(receiving), src=0)
            except RuntimeError as error:
                assert message in str(error), str(error)
                check.passed += 1
            else:
                raise AssertionError(message)
dist.barrier()



class Half(jt.nn.Module):
    """Two layers, one of which the forward leaves unused."""

    def __init__(self):
        super().__init__()
        self.used, self.unused = jt.nn.Linear(3, 2), jt.nn.Linear(3, 2)

    def forward(self, x):
        return self.used(x)


# a parameter the forward left unused, without find_unused_parameters: torch's error at the next forward, and
# in a compiled step when its trace's backward ends (regression: its bucket never started, nor any after it, and
# every rank kept its own gradients, silently)
unfinished = ("Expected to have finished reduction in the prior iteration before starting a new one. This error "
              "indicates that your module has parameters that were not used in producing loss.")
half = DDP(Half())
half(jt.ones(2, 3)).sum().backward()
for attempt in range(2):  # every later forward too, as torch's
    try:
        half(jt.ones(2, 3))
    except RuntimeError as error:
        assert str(error).startswith(unfinished) and str(error).endswith(
            "Parameters that received no gradient: unused.weight, unused.bias"), str(error)
        check.passed += 1
    else:
        raise AssertionError("no error after a backward that left a bucket unreduced")
half = DDP(Half())


@jt.compile
def half_step(x):
    half(x).sum().backward()


try:
    half_step(jt.ones(2, 3))
except RuntimeError as error:
    assert str(error).startswith(unfinished), str(error)
    check.passed += 1
else:
    raise AssertionError("a compiled step left a bucket unreduced")

# buffers: rank 0's at construction, and again before every forward (broadcast_buffers), as torch's DDP
norm = jt.nn.BatchNorm1d(3)
norm.running_mean.fill_(float(rank))
ddp = DDP(norm)
check(ddp.module.running_mean, np.zeros(3, np.float32))
ddp(jt.from_numpy(data(rank, shape=(4, 3))))  # training: each rank's running statistics move its own way
assert not jt.equal(norm.running_mean, jt.zeros(3)) and ddp.module is norm
ddp.eval()
with jt.no_grad():
    out = ddp(jt.ones(2, 3))  # normalised with rank 0's statistics on every rank
outputs = [jt.zeros(2, 3) for _ in range(size)]
dist.all_gather(outputs, out)
for other in outputs:
    check(other, outputs[0].numpy())

# the object collectives never pickle: with pickle and mpi4py's pickler unusable, every one still works
def unpicklable(*args, **kwargs):
    raise AssertionError("pickle was used")


saved = pickle.dumps, pickle.loads, pickle.Pickler, pickle.Unpickler
pickle.dumps = pickle.loads = pickle.Pickler = pickle.Unpickler = unpicklable
MPI.pickle.__init__(unpicklable, unpicklable)
value = {"rank": rank, "pair": (rank, b"\x00"), 3: [None, 1.5]}
objects = [None] * size
dist.all_gather_object(objects, value)
assert objects == [{"rank": r, "pair": (r, b"\x00"), 3: [None, 1.5]} for r in range(size)]
listing = [value, "x"] if rank == size - 1 else [None, None]
dist.broadcast_object_list(listing, src=size - 1)
assert listing == [objects[-1], "x"]
mine = [None]
dist.scatter_object_list(mine, [(r,) for r in range(size)] if rank == 0 else None, src=0)
assert mine == [(rank,)]
gathered = [None] * size if rank == 0 else None
dist.gather_object(rank, gathered, dst=0)
assert gathered == (list(range(size)) if rank == 0 else None)
if rank == 0:
    dist.send_object_list([value], dst=1)
elif rank == 1:
    got = [None]
    assert dist.recv_object_list(got, src=0) == 0 and got == [objects[0]]
pickle.dumps, pickle.loads, pickle.Pickler, pickle.Unpickler = saved
MPI.pickle.__init__(pickle.dumps, pickle.loads)
check.passed += 5
print(f"rank {rank} of {size}: {check.passed} audit checks passed", flush=True)

# last (a timeout leaves MPI unusable): rank 1 never runs its backward, so the others' DDP all-reduces wait, and
# end in the group's timeout error instead of a hang
quick = dist.new_group(timeout=datetime.timedelta(seconds=2))
jt.manual_seed(0)
model = DDP(jt.nn.Linear(4, 2), process_group=quick)
loss = model(jt.ones(3, 4)).sum()
if rank == 1:
    time.sleep(4)
else:
    started = time.monotonic()
    try:
        loss.backward()
    except RuntimeError as error:
        print(f"rank {rank}: DDP backward raised after {time.monotonic() - started:.0f} s: {error}", flush=True)
    else:
        raise AssertionError("DDP's backward did not time out")
