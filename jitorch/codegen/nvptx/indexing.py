"""Generated CUDA kernels for ops that follow positions held in a tensor: gather and index_select (reads),
scatter_add and index_add (atomic adds).

Each kernel is a grid-stride loop over its *loop space* (the output for reads, the index or source for
adds). At every point it loads one index, checks it against the size of the indexed dim and follows it:

- ``out[p] = x[p with p[dim] = index[p']]`` for reads;
- ``out[p with p[dim] = index[p']] += alpha * src[p]`` for adds, as atomic adds (several points may add
  into one element: like torch's CUDA kernels, float sums then depend on the order the adds land in).

``p'`` is the point itself for gather and scatter_add, and ``p[dim]`` alone for index_select and index_add
(a 1-D index): both are strides of the index over the loop space, with zeros where it does not vary.
Shapes and strides are static, so index maths is division by constants, as in every other kernel.

An index outside ``[0, size)`` is not followed: the thread leaves a read's element zero, skips an add, and
claims the device's error word (`jitorch.runtime.cuda_errors`) with a code that says which op, dim and size
and the index it saw. The host reads the word at the next synchronisation and raises the CPU's
RuntimeError there, as torch reports device-side errors late; unlike torch, the device stays usable.
"""

from __future__ import annotations

from llvmlite import ir

from ...runtime import dtypes as _dt
from ...runtime.cuda_errors import error_code
from ..emitter import llvm_type
from ..errors import CompileError
from .compile import ptx_of
from .loop_kernel import LoopKernel, grid_stride, offset, symbol
from .target import I64, TRIPLE

# Element types atomic adds exist for on every GPU jitorch targets (sm_80 and newer).
ATOMIC_DTYPES = (_dt.float32, _dt.float64, _dt.int32, _dt.int64)
INDEX_DTYPES = (_dt.int64, _dt.int32)


def index_kernel(op, space, dim, size, index, target, source=None, alpha=1, cache=None):
    """The kernel of ``op`` (gather, index_select, scatter_add or index_add) over the loop ``space``.

    ``index``, ``target``, ``source``: (dtype, strides over the loop space, 0 where they do not vary) of the
    index, the indexed tensor (its stride along ``dim`` is the one the index multiplies) and, for adds, the
    added values. Reads take pointers (x, index, out, error word); adds (index, source, out, error word).
    """
    adds = op in ("scatter_add", "index_add")
    dtype = target[0]
    if index[0] not in INDEX_DTYPES:
        raise CompileError(f"{op} kernel: index dtype {index[0]} is not int64 or int32")
    if adds and dtype not in ATOMIC_DTYPES:
        raise CompileError(f"{op} kernel: no atomic add for {dtype}")
    layout = "_".join("x".join(map(str, s)) for s in (space, index[1], target[1]) + ((source[1],) if adds else ()))
    name = symbol(f"jitorch_{op}_d{dim}_{layout}_{dtype.name}_{index[0].name}")
    text = str(_module(name, adds, space, dim, size, index, target, source, alpha, error_code(op, dim, size)))
    spec = (op, tuple(space), dim, size, index, target, source, alpha)
    return LoopKernel(name, op, spec, text, ptx_of(text, name, cache))


def _module(name, adds, space, dim, size, index, target, source, alpha, code):
    module = ir.Module(name=name)
    module.triple = TRIPLE
    t = llvm_type(target[0])
    it = llvm_type(index[0])
    data = [t.as_pointer(), it.as_pointer(), t.as_pointer()] if not adds else \
        [it.as_pointer(), t.as_pointer(), t.as_pointer()]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), data + [I64.as_pointer()]), name)
    fn.calling_convention = "ptx_kernel"
    if adds:
        idx_ptr, src_ptr, out_ptr, err = fn.args
    else:
        x_ptr, idx_ptr, out_ptr, err = fn.args
    floating = target[0].is_floating_point
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def body(b, flat, point):
        at = b.load(b.gep(idx_ptr, [offset(b, point, index[1])]))
        at = at if it == I64 else b.sext(at, I64)
        inside = b.and_(b.icmp_signed(">=", at, I64(0)), b.icmp_signed("<", at, I64(size)))
        followed = b.add(offset(b, point, target[1], skip=dim), b.mul(at, I64(target[1][dim])))
        if adds:
            with b.if_else(inside) as (then, otherwise):
                with then:
                    value = b.load(b.gep(src_ptr, [offset(b, point, source[1])]))
                    if alpha != 1:
                        value = (b.fmul if floating else b.mul)(value, ir.Constant(t, alpha))
                    b.atomic_rmw("fadd" if floating else "add", b.gep(out_ptr, [followed]), value, "monotonic")
                with otherwise:
                    _report(b, err, code, at)
            return
        slot = b.alloca(t)
        b.store(ir.Constant(t, 0), slot)
        with b.if_else(inside) as (then, otherwise):
            with then:
                b.store(b.load(b.gep(x_ptr, [followed])), slot)
            with otherwise:
                _report(b, err, code, at)
        b.store(b.load(slot), b.gep(out_ptr, [flat]))

    grid_stride(b, space, body)
    b.ret_void()
    return module


def _report(b, err, code, at):
    """Claim the error word (the first bad index wins) and leave the index that did it next to the code."""
    claimed = b.extract_value(b.cmpxchg(err, I64(0), I64(code), "monotonic", "monotonic"), 1)
    with b.if_then(claimed):
        b.store(at, b.gep(err, [I64(1)]))
