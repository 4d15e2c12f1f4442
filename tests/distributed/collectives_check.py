"""Run under the launcher: every collective on this rank's data, checked against NumPy's result.

Rank r's tensors are made from r, so each rank can compute every other rank's inputs, and so the expected
result, with NumPy. Prints one line per rank: "rank R of N: K checks passed".
"""

import os

import numpy as np

import jitorch as jt
import jitorch.distributed as dist
from checking import check, data
from jitorch.distributed.process_group import group_by_id

dist.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
# the launcher's RANK/WORLD_SIZE are the group's, also when several nodes' jobs joined through the rendezvous
assert (rank, size) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])), (rank, size, os.environ["RANK"])

everyone = [data(r) for r in range(size)]
for op, fold in ((dist.ReduceOp.SUM, np.sum), (dist.ReduceOp.PRODUCT, np.prod), (dist.ReduceOp.MIN, np.min),
                 (dist.ReduceOp.MAX, np.max), (dist.ReduceOp.AVG, np.mean)):
    t = jt.from_numpy(data(rank))
    dist.all_reduce(t, op=op)
    check(t, fold(np.stack(everyone), axis=0))

# integers, a non-contiguous view (written back through a copy), bfloat16 (reduced in float32), async
t = jt.from_numpy(data(rank, dtype=np.int64))
dist.all_reduce(t)
check(t, np.sum([data(r, dtype=np.int64) for r in range(size)], axis=0))
base = jt.zeros(3, 2)
view = base.t()
view.copy_(jt.from_numpy(data(rank)))
dist.all_reduce(view)
check(view, np.sum(everyone, axis=0))
b = jt.from_numpy(data(rank)).to(jt.bfloat16)
dist.all_reduce(b)
check(b.float(), np.sum([jt.from_numpy(e).to(jt.bfloat16).float().numpy() for e in everyone], axis=0))
t = jt.from_numpy(data(rank))
work = dist.all_reduce(t, async_op=True)
work.wait()
check(t, np.sum(everyone, axis=0))
# work handles of the other collectives: results written by wait(), and result() gives the output tensors
t = jt.from_numpy(data(rank))
work = dist.broadcast(t, src=0, async_op=True)
assert work.wait() and work.is_completed() and work.result() == [t]
check(t, everyone[0])
out = [jt.zeros(2, 3) for _ in range(size)]
work = dist.all_gather(out, jt.from_numpy(data(rank)), async_op=True)
assert work.wait() and work.result() is not None
for got, expected in zip(out, everyone):
    check(got, expected)
chunk = jt.zeros(2, 3)
big = [data(r, shape=(size * 2, 3)) for r in range(size)]
work = dist.reduce_scatter_tensor(chunk, jt.from_numpy(big[rank]), op=dist.ReduceOp.AVG, async_op=True)
work.wait()
check(chunk, np.mean(big, axis=0)[2 * rank:2 * rank + 2])
work = dist.barrier(async_op=True)
assert work.wait()

t = jt.from_numpy(data(rank))
dist.broadcast(t, src=size - 1)
check(t, everyone[-1])

t = jt.from_numpy(data(rank))
dist.reduce(t, dst=0, op=dist.ReduceOp.MAX)
check(t, np.max(everyone, axis=0) if rank == 0 else everyone[rank])

out = [jt.zeros(2, 3) for _ in range(size)]
dist.all_gather(out, jt.from_numpy(data(rank)))
for got, expected in zip(out, everyone):
    check(got, expected)

whole = jt.zeros(size * 2, 3)
dist.all_gather_into_tensor(whole, jt.from_numpy(data(rank)))
check(whole, np.concatenate(everyone))

chunk = jt.zeros(2, 3)
big = [data(r, shape=(size * 2, 3)) for r in range(size)]
dist.reduce_scatter_tensor(chunk, jt.from_numpy(big[rank]))
check(chunk, np.sum(big, axis=0)[2 * rank:2 * rank + 2])

gathered = [jt.zeros(2, 3) for _ in range(size)] if rank == 1 else None
dist.gather(jt.from_numpy(data(rank)), gathered, dst=1)
if rank == 1:
    for got, expected in zip(gathered, everyone):
        check(got, expected)

mine = jt.zeros(2, 3)
dist.scatter(mine, [jt.from_numpy(data(100 + r)) for r in range(size)] if rank == 0 else None, src=0)
check(mine, data(100 + rank))

rows = [data(r, shape=(size, 2)) for r in range(size)]
out = jt.zeros(size, 2)
dist.all_to_all_single(out, jt.from_numpy(rows[rank]))
check(out, np.stack([rows[r][rank] for r in range(size)]))
# uneven splits: rank r sends j + 1 rows to rank j, so rank j receives j + 1 rows from every rank
sends = [np.full((j + 1, 2), 100 * rank + j, np.float32) for j in range(size)]
out = jt.zeros(size * (rank + 1), 2)
dist.all_to_all_single(out, jt.from_numpy(np.concatenate(sends)), output_split_sizes=[rank + 1] * size,
                       input_split_sizes=[j + 1 for j in range(size)])
check(out, np.concatenate([np.full((rank + 1, 2), 100 * r + rank, np.float32) for r in range(size)]))

# point to point: a ring
nxt, prev = (rank + 1) % size, (rank - 1) % size
incoming = jt.zeros(2, 3)
request = dist.irecv(incoming, src=prev)
dist.send(jt.from_numpy(data(rank)), dst=nxt)
request.wait()
check(incoming, data(prev))
sending = dist.isend(jt.from_numpy(data(rank) * 2), dst=nxt)
dist.recv(incoming, src=prev)
assert sending.wait()
check(incoming, data(prev) * 2)
if rank == 0:
    source = dist.recv(incoming, tag=5)
    check(np.array(source), np.array(size - 1))
elif rank == size - 1:
    dist.send(jt.from_numpy(data(rank)), dst=0, tag=5)

objects = [None] * size
dist.all_gather_object(objects, {"rank": rank, "name": f"r{rank}"})
assert objects == [{"rank": r, "name": f"r{r}"} for r in range(size)]
listing = [rank, "x"] if rank == 0 else [None, None]
dist.broadcast_object_list(listing, src=0)
assert listing == [0, "x"]
# without pickle, and each value arrives as the type it left as (plain JSON would give lists and "1" keys)
gathered = [None] * size if rank == size - 1 else None
dist.gather_object((rank, {rank: b"r"}), gathered, dst=size - 1)
assert gathered == ([(r, {r: b"r"}) for r in range(size)] if rank == size - 1 else None)
mine = [None]
dist.scatter_object_list(mine, [{"to": (r,)} for r in range(size)] if rank == 0 else None, src=0)
assert mine == [{"to": (rank,)}]
if rank == 0:
    dist.send_object_list([(1, 2), {3: None}], dst=size - 1)
elif rank == size - 1:
    received = [None, None]
    assert dist.recv_object_list(received) == 0 and received == [(1, 2), {3: None}]
check.passed += 5

# a group of the even ranks
evens = dist.new_group([r for r in range(size) if r % 2 == 0])
t = jt.from_numpy(data(rank))
if rank % 2 == 0:
    dist.all_reduce(t, group=evens)
    check(t, np.sum([everyone[r] for r in range(0, size, 2)], axis=0))
    assert dist.get_world_size(evens) == (size + 1) // 2
else:
    assert evens is dist.GroupMember.NON_GROUP_MEMBER

dist.barrier()
dist.destroy_process_group()
assert not dist.is_initialized()
if rank % 2 == 0:  # the default group took the others with it, as torch's does
    try:
        group_by_id(evens.id)
    except RuntimeError:
        check.passed += 1
    else:
        raise AssertionError("the even ranks' group outlived the default group")
print(f"rank {rank} of {size}: {check.passed} checks passed", flush=True)
