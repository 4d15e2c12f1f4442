"""Generated CUDA kernels that walk lines: cumulative sums and products, and arg-reductions (argmax,
argmin, max and min over a dim with their indices).

Each thread takes one line along ``dim`` (a point of the other dims, in a grid-stride loop) and walks it
in order, as NumPy does on the CPU, so the results are the CPU's bit for bit. For scans, each element is
cast to the result dtype and then to the compute dtype, the running value is kept in the compute dtype,
and every prefix is stored in the result dtype. A line is sequential work; lines run in parallel.

Few long lines leave most of the device idle, so lines of more than `LONG_LINE` elements, when there are
fewer than `FEW_LINES` of them, are cut into chunks of about the square root of their length
(`chunk_of`), and a thread walks each chunk (`chunked_kernel`):

- scans in three launches: each chunk's total; a thread per line turns its chunks' totals into the
  running value before each chunk; each chunk walked again from that value, storing its prefixes. Integer
  results are exact (wrapping sums and products do not depend on grouping); float sums and products are
  reassociated (a chunk's total joins the running value at once), as torch's CUDA cumsum is, so they may
  differ from the CPU's in the last bits;
- arg-reductions in two: each chunk's first extreme and its position; a thread per line walks those in
  order, keeping the first extreme of the line, which is the CPU's answer exactly.
"""

from __future__ import annotations

from llvmlite import ir

from ...runtime import dtypes as _dt
from ...runtime.strided import contiguous_strides
from ..emitter import Emitter, llvm_type
from ..kernel import counted_loop
from .ptx import ptx_of
from .loop_kernel import LineSpec, LoopKernel, entry, grid_stride, lines_of, offset, symbol
from .sort import compared_dtype
from .target import I64

_COMBINE = {"cumsum": (0, "add"), "cumprod": (1, "mul")}
LONG_LINE = 4096
FEW_LINES = 1024


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
    return LoopKernel(name, op, lines, LineSpec(dim, tuple(shape), src, out_dtype=out_dtype, compute=compute), text,
                      ptx_of(text, name, cache))


def arg_kernel(op, shape, dim, src, cache=None):
    """The kernel of ``op`` (argmax, argmin, max.dim, min.dim) along ``dim`` of ``shape``: each thread walks
    a line in order keeping the first extreme element, a NaN counting as beyond every number (NumPy's and
    torch's rule). Pointers: (src, indices) or, for max.dim/min.dim, (src, values, indices), compact."""
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
            with b.if_then(_beyond(e, op, value, current).value):
                e.store(value, best)
                b.store(i, where)
        counted_loop(b, I64(1), I64(shape[dim]), I64(1), step, "walk")
        if with_values:
            e.store(e.load(best, src[0]), b.gep(out_ptrs[0], [flat]))
        b.store(b.load(where), b.gep(out_ptrs[-1], [flat]))

    grid_stride(b, lines, line)
    b.ret_void()
    text = str(module)
    return LoopKernel(name, op, lines, LineSpec(dim, tuple(shape), src), text, ptx_of(text, name, cache))


def chunk_of(n):
    """The chunk length for a line of ``n``: a power of two near its square root (at least 32), which
    balances the walk of one chunk against the walk over all of a line's chunks."""
    return max(32, 1 << ((n - 1).bit_length() + 1) // 2)


def chunked_kernel(op, phase, shape, dim, src, out_dtype, chunk, cache=None):
    """One launch of the chunked walk of ``op`` (cumsum, cumprod, argmax, argmin, max.dim, min.dim) along
    ``dim`` of ``shape`` in chunks of ``chunk``; ``src`` is (dtype, element strides), ``out_dtype`` the
    scan's result dtype and compute dtype as a pair (None for arg-reductions). Phases and pointers:

    - "totals" (src, totals): each chunk's total, in the compute dtype;
    - "carries" (totals): per line, each chunk's total replaced by the running value before it, in place;
    - "prefixes" (src, carries, out): each chunk's prefixes from its carry, into the compact output;
    - "extremes" (src, values, positions): each chunk's first extreme (NaN beyond every number) and where;
    - "pick" (values, positions, [out values,] out indices): per line, the first extreme of its chunks'.

    The buffers between launches are compact over (lines..., chunks)."""
    n = shape[dim]
    chunks = -(-n // chunk)
    out_strides = contiguous_strides(tuple(shape))
    lines, line_src, line_out = lines_of(shape, dim, src[1], out_strides)
    name = symbol(f"jitorch_{op}_{phase}_c{chunk}_d{dim}_{'x'.join(map(str, shape))}_{'x'.join(map(str, src[1]))}_"
                  f"{src[0].name}" + (f"_{out_dtype[0].name}_{out_dtype[1].name}" if out_dtype else ""))
    t = llvm_type(src[0])
    scan = op in _COMBINE
    if scan:
        result, compute = out_dtype
        ct = llvm_type(compute)
        params = {"totals": [t.as_pointer(), ct.as_pointer()], "carries": [ct.as_pointer()],
                  "prefixes": [t.as_pointer(), ct.as_pointer(), llvm_type(result).as_pointer()]}[phase]
    else:
        with_values = op.endswith(".dim")
        params = {"extremes": [t.as_pointer(), t.as_pointer(), I64.as_pointer()],
                  "pick": [t.as_pointer(), I64.as_pointer()] + ([t.as_pointer()] if with_values else []) +
                  [I64.as_pointer()]}[phase]
    module, fn = entry(name, params)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    e = Emitter(b)
    per_line = phase in ("carries", "pick")

    def walk(b, flat, point):
        line_point = point if per_line else point[:-1]
        if per_line:
            lo, hi, table = I64(0), I64(chunks), b.mul(flat, I64(chunks))
        else:
            lo = b.mul(point[-1], I64(chunk))
            hi = b.select(b.icmp_signed("<", b.add(lo, I64(chunk)), I64(n)), b.add(lo, I64(chunk)), I64(n))
        src_base = offset(b, line_point, line_src) if not per_line else None

        def element(ptr, i):
            return e.load(b.gep(ptr, [b.add(src_base, b.mul(i, I64(src[1][dim])))]), src[0])
        if scan:
            identity, combine = _COMBINE[op]
            acc = b.alloca(ct)
            if phase == "carries":
                e.store(e.const(identity, compute), acc)

                def step(b, j):
                    slot = b.gep(fn.args[0], [b.add(table, j)])
                    total = e.load(slot, compute)
                    running = e.load(acc, compute)
                    e.store(running, slot)
                    e.store(getattr(e, combine)(running, total), acc)
                counted_loop(b, lo, hi, I64(1), step, "carry")
                return
            start = e.const(identity, compute) if phase == "totals" else e.load(b.gep(fn.args[1], [flat]), compute)
            e.store(start, acc)
            out_base = offset(b, line_point, line_out)

            def step(b, i):
                value = e.cast(e.cast(element(fn.args[0], i), result), compute)
                total = getattr(e, combine)(e.load(acc, compute), value)
                e.store(total, acc)
                if phase == "prefixes":
                    e.store(e.cast(total, result),
                            b.gep(fn.args[2], [b.add(out_base, b.mul(i, I64(out_strides[dim])))]))
            counted_loop(b, lo, hi, I64(1), step, "chunk")
            if phase == "totals":
                e.store(e.load(acc, compute), b.gep(fn.args[1], [flat]))
            return
        if phase == "extremes":
            def read(i):
                return element(fn.args[0], i), i
        else:
            def read(j):
                at = b.add(table, j)
                return e.load(b.gep(fn.args[0], [at]), src[0]), b.load(b.gep(fn.args[1], [at]))
        best, where = b.alloca(t), b.alloca(I64)
        first, first_at = read(lo)
        e.store(first, best)
        b.store(first_at, where)

        def step(b, i):
            value, at = read(i)
            current = e.load(best, src[0])
            with b.if_then(_beyond(e, op, value, current).value):
                e.store(value, best)
                b.store(at, where)
        counted_loop(b, b.add(lo, I64(1)), hi, I64(1), step, "walk")
        outs = fn.args[1:] if phase == "extremes" else fn.args[2:]
        if len(outs) == 2:
            e.store(e.load(best, src[0]), b.gep(outs[0], [flat]))
        b.store(b.load(where), b.gep(outs[-1], [flat]))

    grid_stride(b, tuple(lines) if per_line else tuple(lines) + (chunks,), walk)
    b.ret_void()
    text = str(module)
    space = tuple(lines) if per_line else tuple(lines) + (chunks,)
    return LoopKernel(name, op, space, LineSpec(dim, tuple(shape), src, out_dtype=out_dtype, phase=phase,
                                                chunk=chunk), text, ptx_of(text, name, cache))


def _beyond(e, op, value, current):
    """Whether ``value`` replaces ``current`` as the extreme of ``op`` walking in order: strictly beyond it,
    or a NaN where ``current`` is none (the first NaN wins, as on the CPU)."""
    # bfloat16 values are the bits of an i16, which float comparisons reject: compare the float32s they widen
    # to exactly (the halves as well, harmlessly)
    value, current = (e.cast(v, compared_dtype(v.dtype)) for v in (value, current))
    beyond = e.compare(">" if op in ("argmax", "max.dim") else "<", value, current)
    if value.dtype.is_floating_point:
        beyond = e.logical("or_", beyond, e.logical("and_", e.isnan(value), e.logical(
            "xor", e.isnan(current), e.const(True, _dt.bool))))
    return beyond
