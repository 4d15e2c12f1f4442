"""Run by two launchers (``--nnodes 2``): each rank reports its place in the joined world, the launcher's
environment, and the results of an all-reduce and an all-gather over every node's ranks."""

import os

import jitorch as jt
import jitorch.distributed as dist

dist.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
assert (rank, size) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
t = jt.tensor([float(rank)])
dist.all_reduce(t)
everyone = [None] * size
dist.all_gather_object(everyone, rank)
print(f"rank {rank} of {size}, local {os.environ['LOCAL_RANK']}, node {os.environ['GROUP_RANK']}: "
      f"sum {t.item()}, everyone {everyone}", flush=True)
dist.destroy_process_group()
