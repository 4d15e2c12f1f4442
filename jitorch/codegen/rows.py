"""Eager row softmax through the compiled path's kernel (jitorch/ops/reductions.py's ``softmax`` and
``log_softmax`` along the last dim of a contiguous float tensor).

NumPy's softmax is five passes over memory (max, subtract, exp, sum, divide), each a ufunc call with its
own temporaries: 12 x 64 x 128 float32 took ~2.6 times the generated kernel's time on one core. The kernel
here is the one `kernel.build_softmax` makes for a compiled graph's softmax (a max pass, an exp-and-sum
pass, a normalising pass, the row in cache between them), built from a one-op graph of two rows whose
width is the input's last dim: its outer loop runs over the rows, whose bounds each call gives, so one
kernel serves every number of rows. Rows split into chunks on the thread team as a compiled kernel's outer
loop does; each row is computed whole by one thread, so the values do not depend on the number of threads.
The values are the compiled graph's (the sums reassociate in vector lanes): within a few ulps of NumPy's and
torch's, not bit for bit (docs/differences-from-torch.md).

Importing this module registers `row_kernel` in ``ops.reductions.ROW_KERNEL``: the ops layer cannot import
the code generator, and runs NumPy's passes where no kernel is registered or one cannot be built.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ..ir.fake import add_op
from ..ir.graph import Graph, TensorType
from ..ir.passes.fusion import fuse
from ..ops import reductions
from ..runtime import dtypes as _dt
from ..runtime.device import device as _device
from ..runtime.threads import run_chunks
from . import cpu
from .cache import default_cache
from .errors import CompileError
from .kernel import build
from .memo import BuiltOnce

_CPU = _device("cpu")
# The rows the kernels are built for (two, not one: the builder drops dims of size one, and the rows' loop
# with them); a call gives its own row bounds.
_ROWS = 2
_ARGS = ctypes.c_void_p * 2


class RowKernel:
    """A compiled row softmax of one width: calling it on a C-contiguous 2-or-more-D float array of that
    width and its dtype returns a new array of the result."""

    def __init__(self, compiled, cols):
        self._compiled = compiled  # keeps the machine code alive
        self._fn = compiled.fn
        self._cols = cols

    def __call__(self, a):
        out = np.empty(a.shape, a.dtype)
        rows = a.size // self._cols
        args = _ARGS(a.__array_interface__["data"][0], out.__array_interface__["data"][0])
        n = min(cpu.num_threads(), rows, a.size // cpu.CHUNK_MIN_WORK) if a.size >= cpu.PARALLEL_MIN_WORK else 1
        if n <= 1:
            self._fn(args, 0, rows)
        else:
            step = -(-rows // n)
            run_chunks(self._compiled.address, args, [(i, min(i + step, rows)) for i in range(0, rows, step)])
        return out


def row_kernel(name, dtype, cols):
    """The `RowKernel` of ``name`` ("softmax" or "log_softmax") over rows of ``cols`` elements of float
    ``dtype`` (a NumPy dtype name), or None where it cannot be built (the caller runs NumPy). Built once
    per key."""
    return _kernels(name, dtype, cols)


def _build(name, dtype, cols):
    g = Graph()
    x = g.add_input(TensorType((_ROWS, cols), _dt.from_numpy_dtype(np.dtype(dtype)), _CPU))
    g.outputs = (add_op(g, name, x, -1),)
    groups = fuse(g)
    if len(groups) != 1:
        return None
    try:
        compiled = cpu.link_kernel(build(groups[0], f"jitorch_eager_{name}_{dtype}_{cols}"), default_cache())
    except CompileError:
        return None
    source = compiled.source
    # (the loop nest's outer loop must be the rows, the input the first buffer, the result the second)
    if compiled.outer != _ROWS or len(source.inputs) != 1 or len(source.outputs) != 1:
        return None
    return RowKernel(compiled, cols)


# (op name, dtype name, cols) -> RowKernel, or None: not buildable
_kernels = BuiltOnce(_build)

reductions.ROW_KERNEL = row_kernel
