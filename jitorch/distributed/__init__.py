"""jitorch.distributed: torch.distributed's API on MPI (mpi4py) for CPU tensors, and NCCL for CUDA tensors.

    python -m jitorch.distributed.run --nproc-per-node 2 train.py      # or: mpiexec -n 2 python train.py

    import jitorch.distributed as dist
    dist.init_process_group()                  # ranks from MPI (or WORLD_SIZE=1 alone)
    t = jitorch.ones(3) * dist.get_rank()
    dist.all_reduce(t)                         # in place, on every rank

Collectives check that all ranks passed tensors of one dtype and shape, and never wait past the group's
timeout. In groups of backend "nccl" (`nccl`, `nccl_ops`), CUDA tensors go through NCCL on the current CUDA
stream; in other groups, through MPI by copies in host memory.
"""

from __future__ import annotations

from .collectives import (Work, all_gather, all_gather_into_tensor, all_reduce, all_to_all_single, barrier,
                          broadcast, gather, irecv, isend, recv, reduce, reduce_scatter_tensor, scatter, send)
from .device_mesh import DeviceMesh, init_device_mesh
from .monitored import monitored_barrier
from .objects import (all_gather_object, broadcast_object_list, gather_object, recv_object_list,
                      scatter_object_list, send_object_list)
from .process_group import (GroupMember, ProcessGroup, ReduceOp, destroy_process_group, get_backend,
                            get_node_local_rank, get_rank, get_world_size, init_process_group, is_available,
                            is_gloo_available, is_initialized, is_mpi_available, is_nccl_available,
                            is_torchelastic_launched, new_group)
from .process_group import World as group

__all__ = ["DeviceMesh", "GroupMember", "ProcessGroup", "ReduceOp", "Work", "all_gather", "all_gather_into_tensor",
           "all_gather_object", "all_reduce", "all_to_all_single", "barrier", "broadcast", "broadcast_object_list",
           "destroy_process_group", "gather", "gather_object", "get_backend", "get_node_local_rank", "get_rank",
           "get_world_size", "group", "init_device_mesh", "init_process_group", "irecv", "is_available", "is_gloo_available",
           "is_initialized", "is_mpi_available", "is_nccl_available", "is_torchelastic_launched", "isend",
           "monitored_barrier", "new_group", "recv", "recv_object_list", "reduce", "reduce_scatter_tensor", "scatter",
           "scatter_object_list", "send", "send_object_list"]
