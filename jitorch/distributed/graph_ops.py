"""Collectives as ops of the registry, so a compiled function records them as nodes of its graph.

A traced function cannot call the collectives of `collectives` (they read tensors' values into Python, which a
trace does not have), so `DistributedDataParallel` and the like call these ops while ``jitorch.compile``
traces: the graph then holds each collective as an external step that runs MPI on its input's values and
returns the result, between the kernels, in the same order on every rank. They are functional (a new tensor,
the input untouched); the caller copies the result where it belongs.
"""

from __future__ import annotations

import numpy as np

from ..ops.registry import OPS, TensorSpec, defop
from .collectives import agree, all_reduce_started
from .mpi_backend import reducible, wait
from .process_group import ReduceOp, group_by_id


def _same_spec(x, *args):
    return TensorSpec(tuple(x.shape), x.dtype, x.device)


def _all_reduce_cpu(spec, x, op, group):
    pg = group_by_id(group)
    out = np.ascontiguousarray(reducible(x)).copy()
    request = all_reduce_started(pg, out, ReduceOp(op), x.dtype.name, x.shape, "all_reduce (in a compiled graph)")
    if request is not None:
        wait(request, pg.timeout, "all_reduce")
    if op == "AVG":
        out /= pg.size()
    return out.astype(x.dtype, copy=False)


def _broadcast_cpu(spec, x, src, group):
    pg = group_by_id(group)
    agree(pg, "broadcast", x.dtype.name, x.shape, "broadcast (in a compiled graph)")
    out = np.ascontiguousarray(x).copy()
    bits = out.view(np.uint16) if out.dtype.name == "bfloat16" else out
    wait(pg.comm.Ibcast(bits, root=src), pg.timeout, "broadcast")
    return out


defop("_c10d_all_reduce(Tensor self, str op, int group) -> Tensor", meta=_same_spec, cpu=_all_reduce_cpu,
      kind="other", variants=("function",),
      doc="``self`` reduced over the ranks of process group ``group`` (an id) with ``op`` (a ReduceOp name).")
defop("_c10d_broadcast(Tensor self, int src, int group) -> Tensor", meta=_same_spec, cpu=_broadcast_cpu,
      kind="other", variants=("function",),
      doc="Group rank ``src``'s ``self`` on every rank of process group ``group`` (an id).")

all_reduce = OPS["_c10d_all_reduce"]
broadcast = OPS["_c10d_broadcast"]
