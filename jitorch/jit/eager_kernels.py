"""Eager compositions of pointwise ops run as the kernel a compiled function of them would run.

A library function written as a composition of ops (``F.gelu``'s ``x * 0.5 * (1.0 + (x * c).erf())``, and
the gradient its ops' rules give) is traced once per dtype on a small 1-D example, optimised by the compiled
path's passes and handed to the code generator (`jitorch.codegen.flat`), which fuses it into one flat kernel.
The trace runs the function itself, so the kernel has one definition with the composition: an eager call,
a compiled one and a traced one compute the same ops; large eager calls then make one pass over memory
instead of one per op. The library loads this module at its first call large enough to take a kernel:
``import jitorch`` does not load the code generator.
"""

from __future__ import annotations

import numpy as np

from ..codegen.flat import flat_kernel
from ..codegen.memo import BuiltOnce
from ..ir.passes.manager import optimize
from ..runtime import dtypes as _dt
from ..tensor import Tensor
from .tracer import trace

__all__ = ["kernel"]

# The example's elements (two, not one: one-element dims are dropped, and the elements' loop with them); a
# call gives its own size.
_EXAMPLE = 2


def kernel(fn, name, dtype, arity):
    """The `jitorch.codegen.flat.FlatKernel` of ``fn`` (a pointwise composition of ``arity`` tensors, returning
    one tensor or a tuple) over float ``dtype`` (a NumPy dtype name), named ``name``; None where it does not
    compile to one flat kernel (the caller runs the ops). Built once per key."""
    return _kernels(fn, name, dtype, arity)


def _build(fn, name, dtype, arity):
    jt_dtype = _dt.from_numpy_dtype(np.dtype(dtype))
    examples = [Tensor._fresh(np.zeros(_EXAMPLE, jt_dtype.np), jt_dtype) for _ in range(arity)]
    graph = optimize(trace(fn, *examples))
    return flat_kernel(graph, f"jitorch_eager_{name}_{dtype}")


# (fn, name, dtype name, arity) -> FlatKernel, or None: not buildable
_kernels = BuiltOnce(_build)
