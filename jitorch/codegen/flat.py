"""Eager pointwise compositions (GELU and its gradient, ...) as one generated kernel over flat buffers.

An eager composition of pointwise ops makes one NumPy pass per op over memory, each with its own temporary:
exact GELU of float32 is 13 passes forward (erf alone is eight, `ops.erf_float32`) and 12 backward. The
compiled path fuses the same ops into one loop. Here a graph of such a composition (traced by the caller on
a small 1-D example, `jitorch.jit.eager_kernels`) is fused and built by the compiled path's own builder
(`fusion.fuse`, `kernel.build`): the same lowering of every op, so the same machine code and the same bits as
a compiled function of that composition. All its buffers are compact and of one shape, so the kernel's loop
nest collapses into one flat loop over elements whose bounds each call gives: one kernel serves every size.

Elements are independent, so a large call splits into chunks of elements on the thread team as a compiled
kernel's outer loop does, and each element's value does not depend on the number of threads (no fast-math
flag lets LLVM compute a vector lane otherwise than the scalar loop would).
"""

from __future__ import annotations

import ctypes

import numpy as np

from ..ir.passes.fusion import fuse
from . import cpu
from .cache import default_cache
from .errors import CompileError
from .kernel import build

__all__ = ["FlatKernel", "flat_kernel"]


class FlatKernel:
    """A compiled pointwise composition: calling it on C-contiguous arrays of its inputs' dtypes, all of one
    size, returns new arrays of its outputs (each of the first input's shape)."""

    def __init__(self, compiled, order, dtypes):
        self._compiled = compiled  # keeps the machine code alive
        self.name = compiled.name
        self._order = order  # buffer position -> the graph input it reads
        self._dtypes = dtypes  # the outputs' NumPy dtypes
        self._args = ctypes.c_void_p * (len(order) + len(dtypes))

    def __call__(self, *arrays):
        n = arrays[0].size
        outs = [np.empty(arrays[0].shape, d) for d in self._dtypes]
        args = self._args(*(cpu.address(arrays[i]) for i in self._order), *(cpu.address(o) for o in outs))
        cpu.run_split(self._compiled.fn, self._compiled.address, args, n, n)
        return outs


def flat_kernel(graph, name):
    """The `FlatKernel` of ``graph`` (pointwise ops on 1-D inputs of one size greater than 1, its outputs of
    that size), named ``name``; None where the compiled path does not make it one flat pointwise kernel (the
    caller runs its ops)."""
    (size,) = graph.inputs[0].type.shape
    outputs = graph.output_values()
    if size < 2 or any(tuple(v.type.shape) != (size,) for v in (*graph.inputs, *outputs)):
        return None
    groups = fuse(graph)
    if len(groups) != 1 or groups[0].kind != "pointwise":
        return None
    try:
        compiled = cpu.link_kernel(build(groups[0], name), default_cache())
    except CompileError:
        return None
    source = compiled.source
    inputs = list(graph.inputs)
    # (an output that is an input, or a tensor the trace captured as a constant, is not a flat kernel's)
    if compiled.outer != size or list(source.outputs) != outputs or not set(source.inputs) <= set(inputs):
        return None
    return FlatKernel(compiled, [inputs.index(v) for v in source.inputs], [v.type.dtype.np for v in outputs])
