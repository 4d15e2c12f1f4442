"""Eager row softmax through the compiled path's kernel (jitorch/ops/reductions.py's ``softmax`` and
``log_softmax`` along the last dim of a contiguous float tensor).

NumPy's softmax is five passes over memory (max, subtract, exp, sum, divide), each a ufunc call with its
own temporaries: 12 x 64 x 128 float32 took ~2.6 times the generated kernel's time on one core. The kernel
here is the one `kernel.build_softmax` makes for a compiled graph's softmax (a max pass, an exp-and-sum
pass, a normalising pass, the row in cache between them), built from a one-op graph of two rows whose
width is the input's last dim: its outer loop runs over the rows, whose bounds each call gives, so one
kernel serves every number of rows. Rows split into chunks on the thread team as a compiled kernel's outer
loop does; each row is computed whole by one thread, so the values do not depend on the number of threads.
The values are the compiled graph's (the softmax's sum in the order `lanes` defines, the same on every CPU
target; layer norm's sums reassociate in vector lanes): within a few ulps of NumPy's and torch's, not bit for
bit (docs/differences-from-torch.md).

Importing this module registers `row_kernel` in ``ops.reductions.ROW_KERNEL``: the ops layer cannot import
the code generator, and runs NumPy's passes where no kernel is registered or one cannot be built.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from ..ir.fake import add_op
from ..ir.graph import Graph, TensorType
from ..ir.passes.fusion import fuse
from ..ops import normalization, reductions
from ..runtime import dtypes as _dt
from ..runtime.device import device as _device
from . import cpu
from .cache import default_cache
from .errors import CompileError
from .kernel import I64, KernelSource, build, counted_loop
from .target import CPU
from .memo import BuiltOnce

_CPU = _device("cpu")
# The rows the kernels are built for (two, not one: the builder drops dims of size one, and the rows' loop
# with them); a call gives its own row bounds.
_ROWS = 2
_ARGS = ctypes.c_void_p * 2
_LAYER_NORM_ARGS = ctypes.c_void_p * 6


class RowKernel:
    """A compiled row softmax of one width: calling it on a C-contiguous 2-or-more-D float array of that
    width and its dtype returns a new array of the result."""

    def __init__(self, compiled, cols):
        self._compiled = compiled  # keeps the machine code alive
        self._cols = cols

    def __call__(self, a):
        out = np.empty(a.shape, a.dtype)
        rows = a.size // self._cols
        compiled = self._compiled
        cpu.run_split(compiled.fn, compiled.address, _ARGS(cpu.address(a), cpu.address(out)), rows, a.size)
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


class LayerNormKernel:
    """A compiled layer norm over rows of any width: `__call__` normalises a C-contiguous (rows, cols) float
    array of the kernel's dtype, with its weight and bias (1-D, contiguous, where the kernel has them)."""

    def __init__(self, compiled, dtype):
        self._compiled = compiled  # keeps the machine code alive
        # eps travels as its bits in an address slot, rounded to the compute dtype as the NumPy form rounds it
        self._bits = np.dtype(np.uint32 if dtype == "float32" else np.uint64)
        self._dtype = np.dtype(dtype)
        self._eps = {}  # eps -> its bits (a model's layers share one or two)

    def __call__(self, rows, weight, bias, eps):
        out = np.empty(rows.shape, rows.dtype)
        count, cols = rows.shape
        eps_bits = self._eps.get(eps)
        if eps_bits is None:
            if len(self._eps) >= 64:  # (a bound: eps values that vary without end)
                self._eps.clear()
            eps_bits = self._eps[eps] = int(self._dtype.type(eps).view(self._bits))
        address = cpu.address
        args = _LAYER_NORM_ARGS(address(rows), address(weight), address(bias), address(out), cols, eps_bits)
        cpu.run_split(self._compiled.fn, self._compiled.address, args, count, rows.size)
        return out


def layer_norm_kernel(dtype, weight, bias):
    """The `LayerNormKernel` of float ``dtype`` (a NumPy dtype name), with a weight and a bias or without
    (``weight``, ``bias``: bools), or None where it cannot be built (the caller runs NumPy). One kernel per
    key serves every shape: the width is an argument."""
    return _layer_norm_kernels(dtype, bool(weight), bool(bias))


def _layer_norm_module(dtype, weight, bias, name):
    """The LLVM IR of the layer norm kernel: per row, the sum, the mean ``sum / n``, the sum of squared
    deviations ``d = x - mean``, ``r = 1 / sqrt(sum / n + eps)``, and ``(d * r) * w + b``: NumPy's form's
    operations in its order (no contraction into FMAs), but for the two sums, which add in vector lanes."""
    t = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    bits = ir.IntType(32 if dtype == "float32" else 64)
    module = ir.Module(name=name)
    module.triple = CPU.triple
    p, raw = t.as_pointer(), ir.IntType(8).as_pointer()
    body = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, p, p, p, p, raw, raw]), name + "_body")
    body.linkage = "internal"
    body.attributes.add("alwaysinline")
    lo, hi, x, w, bb, out, cols_arg, eps_arg = body.args
    for arg in (x, w, bb, out):
        arg.add_attribute("noalias")
    b = ir.IRBuilder(body.append_basic_block("entry"))
    n = b.ptrtoint(cols_arg, I64)
    eps = b.bitcast(b.ptrtoint(eps_arg, bits), t)
    count = b.sitofp(n, t)
    total = b.alloca(t)
    sqrt = module.declare_intrinsic("llvm.sqrt", [t])

    def summed(b, base, term):
        b.store(ir.Constant(t, 0.0), total)

        def add(b, j):
            b.store(b.fadd(b.load(total), term(b, b.gep(x, [b.add(base, j)])), flags=("reassoc",)), total)
        counted_loop(b, I64(0), n, I64(1), add, "sum")
        return b.load(total)

    def row(b, r):
        base = b.mul(r, n)
        mean = b.fdiv(summed(b, base, lambda b, at: b.load(at)), count)
        square = lambda b, at: (lambda d: b.fmul(d, d))(b.fsub(b.load(at), mean))  # noqa: E731
        var = b.fdiv(summed(b, base, square), count)
        rstd = b.fdiv(ir.Constant(t, 1.0), b.call(sqrt, [b.fadd(var, eps)]))

        def write(b, j):
            i = b.add(base, j)
            v = b.fmul(b.fsub(b.load(b.gep(x, [i])), mean), rstd)
            if weight:
                v = b.fmul(v, b.load(b.gep(w, [j])))
            if bias:
                v = b.fadd(v, b.load(b.gep(bb, [j])))
            b.store(v, b.gep(out, [i]))
        counted_loop(b, I64(0), n, I64(1), write, "write")

    counted_loop(b, lo, hi, I64(1), row, "row")
    b.ret_void()
    CPU.add_entry(module, body, list(range(6)), 0, "thread")
    return str(module)


def _build_layer_norm(dtype, weight, bias):
    name = f"jitorch_eager_layer_norm_{dtype}{'_weight' * weight}{'_bias' * bias}"
    source = KernelSource(name, "layer_norm", ["layer_norm"], list(range(3)), [3], 0, 0)
    source.llvm_ir = _layer_norm_module(dtype, weight, bias, name)
    try:
        compiled = cpu.link_kernel(source, default_cache())
    except CompileError:
        return None
    return LayerNormKernel(compiled, dtype)


# (dtype name, weight, bias) -> LayerNormKernel, or None: not buildable
_layer_norm_kernels = BuiltOnce(_build_layer_norm)

reductions.ROW_KERNEL = row_kernel
normalization.LAYER_NORM_KERNEL = layer_norm_kernel
