"""Generated CUDA kernels that walk lines: cumulative sums and products, and arg-reductions (argmax,
argmin, max and min over a dim with their indices).

Each thread takes one line along ``dim`` (a point of the other dims, in a grid-stride loop) and walks it
in order, as NumPy does on the CPU, so the results are the CPU's bit for bit. For scans, each element is
cast to the result dtype and then to the compute dtype, the running value is kept in the compute dtype,
and every prefix is stored in the result dtype. A line is sequential work; lines run in parallel (a
parallel scan would serve long lines better).
"""

from __future__ import annotations

from llvmlite import ir

from ...runtime import dtypes as _dt
from ...runtime.strided import contiguous_strides
from ..emitter import Emitter, llvm_type
from ..kernel import counted_loop
from .compile import ptx_of
from .loop_kernel import LoopKernel, entry, grid_stride, lines_of, offset, symbol
from .target import I64

_COMBINE = {"cumsum": (0, "add"), "cumprod": (1, "mul")}


def scan_kernel(op, shape, dim, src, out_dtype, compute, cache=None):
    """The kernel of ``op`` (cumsum or cumprod) along ``dim`` of ``shape``; ``src`` is (dtype, element
    strides). Pointers: (src, out), the output compact."""
    identity, combine = _COMBINE[op]
    out_strides = contiguous_strides(tuple(shape))
    lines, line_src, line_out = lines_of(shape, dim, src[1], out_strides)
    name = symbol(f"jitorch_{op}_d{dim}_{'x'.join(map(str, shape))}_{'x'.join(map(str, src[1]))}_"
                  f"{src[0].name}_{out_dtype.name}")
    module, fn = entry(name, [llvm_type(src[0]).as_pointer(), llvm_type(out_dtype).as_pointer()])
    src_ptr, out_ptr = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    e = Emitter(b)
    acc = b.alloca(llvm_type(compute))

    def line(b, flat, point):
        src_base, out_base = offset(b, point, line_src), offset(b, point, line_out)
        e.store(e.const(identity, compute), acc)

        def step(b, i):
            value = e.load(b.gep(src_ptr, [b.add(src_base, b.mul(i, I64(src[1][dim])))]), src[0])
            total = getattr(e, combine)(e.load(acc, compute), e.cast(e.cast(value, out_dtype), compute))
            e.store(total, acc)
            e.store(e.cast(total, out_dtype), b.gep(out_ptr, [b.add(out_base, b.mul(i, I64(out_strides[dim])))]))
        counted_loop(b, I64(0), I64(shape[dim]), I64(1), step, "scan")

    grid_stride(b, lines, line)
    b.ret_void()
    text = str(module)
    return LoopKernel(name, op, (op, lines, dim, tuple(shape), src, out_dtype, compute), text, ptx_of(text, name, cache))


def arg_kernel(op, shape, dim, src, cache=None):
    """The kernel of ``op`` (argmax, argmin, max.dim, min.dim) along ``dim`` of ``shape``: each thread walks
    a line in order keeping the first extreme element, a NaN counting as beyond every number (NumPy's and
    torch's rule). Pointers: (src, indices) or, for max.dim/min.dim, (src, values, indices), compact."""
    largest = op in ("argmax", "max.dim")
    with_values = op.endswith(".dim")
    lines, line_src = lines_of(shape, dim, src[1])
    name = symbol(f"jitorch_{op}_d{dim}_{'x'.join(map(str, shape))}_{'x'.join(map(str, src[1]))}_{src[0].name}")
    t = llvm_type(src[0])
    module, fn = entry(name, [t.as_pointer()] + ([t.as_pointer()] if with_values else []) + [I64.as_pointer()])
    src_ptr, *out_ptrs = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    e = Emitter(b)
    best, where = b.alloca(t), b.alloca(I64)

    def line(b, flat, point):
        base = offset(b, point, line_src)

        def at(i):
            return e.load(b.gep(src_ptr, [b.add(base, b.mul(i, I64(src[1][dim])))]), src[0])
        e.store(at(I64(0)), best)
        b.store(I64(0), where)

        def step(b, i):
            value, current = at(i), e.load(best, src[0])
            beyond = e.compare(">" if largest else "<", value, current)
            if src[0].is_floating_point:
                beyond = e.logical("or_", beyond, e.logical("and_", e.isnan(value), e.logical(
                    "xor", e.isnan(current), e.const(True, _dt.bool))))
            with b.if_then(beyond.value):
                e.store(value, best)
                b.store(i, where)
        counted_loop(b, I64(1), I64(shape[dim]), I64(1), step, "walk")
        if with_values:
            e.store(e.load(best, src[0]), b.gep(out_ptrs[0], [flat]))
        b.store(b.load(where), b.gep(out_ptrs[-1], [flat]))

    grid_stride(b, lines, line)
    b.ret_void()
    text = str(module)
    return LoopKernel(name, op, (op, lines, dim, tuple(shape), src), text, ptx_of(text, name, cache))
