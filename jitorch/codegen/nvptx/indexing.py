"""Generated CUDA kernels for ops that follow positions held in a tensor: reads (gather, index_select,
``x[idx]``, take), stores (scatter, index_copy, index_fill, put, ``x[idx] = v``) and atomic adds
(scatter_add, index_add, put and index_put with accumulate).

Each kernel is a grid-stride loop over its *loop space* (the output for reads, the index or source for
stores and adds). At every point it loads one index, checks it against the size of the indexed dim and
follows it:

- ``out[p] = x[p with p[dim] = index[p']]`` for reads;
- ``out[p with p[dim] = index[p']] = src[p]`` (or a constant) for stores: where two points store into one
  element, which one lands is not defined, as in torch's CUDA kernels;
- ``out[p with p[dim] = index[p']] += alpha * src[p]`` for adds, as atomic adds (float sums then depend on
  the order the adds land in, as torch's do);
- ``out[followed] = combine(out[followed], src[p])`` for scatter_reduce's reductions: sum as an atomic add,
  amax and amin of integers as atomic max and min, and where no atomic exists (products, a float's max
  and min) a compare-and-swap loop on the element's bits. A float max or min keeps a NaN as NumPy's
  ``maximum.at`` does (``old if old >= v or old is NaN else v``, as torch's); products and float sums depend
  on the order the updates land in, and so does which of 0.0 and -0.0 a max or min keeps (NumPy 2's
  ``maximum.at`` itself keeps the old one for float16 and takes the new one for float32 and float64).

``p'`` is the point itself for gather and scatter, and ``p[dim]`` alone for the ops with a 1-D index: both
are strides of the index over the loop space, with zeros where it does not vary. Shapes and strides are
static, so index maths is division by constants, as in every other kernel.

An index outside ``[0, size)`` (after wrapping negative ones, for the ops that allow them) is not followed:
the thread leaves a read's element zero or skips a store, and claims the device's error word
(`jitorch.runtime.cuda_errors`) with a code that says which op, dim and size and the index it saw. The host
reads the word at the next synchronisation and raises the CPU's error message there, as torch reports
device-side errors late; unlike torch, the device stays usable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from llvmlite import ir

from ...runtime import dtypes as _dt
from ...runtime.cuda_errors import error_code
from ..emitter import Emitter, Scalar, llvm_type
from ..errors import CompileError
from .ptx import ptx_of
from .loop_kernel import LoopKernel, entry, grid_stride, offset, symbol
from .target import I64

# Element types atomic adds exist for on every GPU jitorch targets (sm_80 and newer).
ATOMIC_DTYPES = (_dt.float32, _dt.float64, _dt.int32, _dt.int64)
INDEX_DTYPES = (_dt.int64, _dt.int32)
# scatter_reduce's reductions with a kernel of their own (mean is a sum and a count); they update elements of
# the ATOMIC_DTYPES (smaller integers and the halves reduce in a wider copy)
REDUCTIONS = ("sum", "prod", "amax", "amin")


@dataclass(frozen=True)
class Form:
    """How an op follows its indices: ``mode`` "read" (out[p] = x[followed]), "store" (out[followed] = a
    source element or a constant), "add" (an atomic add) or "reduce" (out[followed] combined with a source
    element by ``combine``: sum, prod, amax, amin); ``wraps``: negative indices count from the end
    (x[idx], take, index_fill), as on the CPU; ``reports``: the op whose error a bad index raises (the
    kernel's own op by default)."""

    mode: str
    wraps: bool = False
    combine: str = ""
    reports: str = ""


FORMS = {"gather": Form("read"), "index_select": Form("read"), "index": Form("read", wraps=True),
         "take": Form("read", wraps=True), "scatter": Form("store"), "scatter.value": Form("store"),
         "index_copy": Form("store"), "index_fill": Form("store", wraps=True), "put": Form("store", wraps=True),
         "scatter_add": Form("add"), "index_add": Form("add"), "put_accumulate": Form("add", wraps=True),
         "index_put": Form("store", wraps=True), "index_put_accumulate": Form("add", wraps=True),
         **{f"scatter_reduce_{r}": Form("reduce", combine=r, reports="scatter") for r in REDUCTIONS}}


class IndexSpec(NamedTuple):
    """What an index kernel was generated from (`LoopKernel.spec`): the op, its loop ``space``, the
    indexed ``dim`` and its ``size``, the (dtype, strides) of ``index``, ``target`` and ``source``, and
    the op's number arguments ``alpha`` and ``value``."""

    op: str
    space: tuple
    dim: int
    size: int
    index: tuple
    target: tuple
    source: tuple
    alpha: object
    value: object


class MeanSpec(NamedTuple):
    """What a scatter mean's division kernel was generated from: the dtype it divides in."""

    dtype: object


def index_kernel(op, space, dim, size, index, target, source=None, alpha=1, value=None, cache=None):
    """The kernel of ``op`` (a key of `FORMS`) over the loop ``space``.

    ``index``, ``target``, ``source``: (dtype, strides over the loop space, 0 where they do not vary) of the
    index, the indexed tensor (its stride along ``dim`` is the one the index multiplies) and the stored or
    added values; a fill stores the constant ``value`` instead, adds scale by ``alpha``. Pointers: reads
    (x, index, out, error word); stores and adds (index, source, out, error word), or (index, out, error
    word) for a fill.
    """
    form = FORMS[op]
    dtype = target[0]
    if index[0] not in INDEX_DTYPES:
        raise CompileError(f"{op} kernel: index dtype {index[0]} is not int64 or int32")
    if form.mode in ("add", "reduce") and dtype not in ATOMIC_DTYPES:
        raise CompileError(f"{op} kernel: no atomic update of {dtype}")
    layout = "_".join("x".join(map(str, s)) for s in (space, index[1], target[1]) + ((source[1],) if source else ()))
    name = symbol(f"jitorch_{op}_d{dim}_{layout}_{dtype.name}_{index[0].name}" +
                  ("" if value is None else f"_v{value!r}"))
    text = str(_module(name, form, space, dim, size, index, target, source, alpha, value,
                       error_code(form.reports or op, dim, size)))
    spec = IndexSpec(op, tuple(space), dim, size, index, target, source, alpha, value)
    return LoopKernel(name, op, space, spec, text, ptx_of(text, name, cache))


def _module(name, form, space, dim, size, index, target, source, alpha, value, code):
    t = llvm_type(target[0])
    it = llvm_type(index[0])
    if form.mode == "read":
        data = [t.as_pointer(), it.as_pointer(), t.as_pointer()]
    else:
        data = [it.as_pointer()] + ([t.as_pointer()] if value is None else []) + [t.as_pointer()]
    module, fn = entry(name, data + [I64.as_pointer()])
    if form.mode == "read":
        x_ptr, idx_ptr, out_ptr, err = fn.args
    elif value is None:
        idx_ptr, src_ptr, out_ptr, err = fn.args
    else:
        idx_ptr, out_ptr, err = fn.args
    e = Emitter(ir.IRBuilder(fn.append_basic_block("entry")))
    b = e.b
    floating = target[0].is_floating_point

    def body(b, flat, point):
        given = b.load(b.gep(idx_ptr, [offset(b, point, index[1])]))
        given = given if it == I64 else b.sext(given, I64)
        at = b.select(b.icmp_signed("<", given, I64(0)), b.add(given, I64(size)), given) if form.wraps else given
        inside = b.and_(b.icmp_signed(">=", at, I64(0)), b.icmp_signed("<", at, I64(size)))
        followed = b.gep(out_ptr if form.mode != "read" else x_ptr,
                         [b.add(offset(b, point, target[1], skip=dim), b.mul(at, I64(target[1][dim])))])
        if form.mode == "read":
            slot = b.alloca(t)
            b.store(ir.Constant(t, 0), slot)
        with b.if_else(inside) as (then, otherwise):
            with then:
                if form.mode == "read":
                    b.store(b.load(followed), slot)
                else:
                    stored = e.const(value, target[0]) if value is not None else \
                        e.load(b.gep(src_ptr, [offset(b, point, source[1])]), target[0])
                    if form.mode == "store":
                        e.store(stored, followed)
                    elif form.mode == "reduce":
                        _combine(e, form.combine, followed, stored)
                    else:
                        scaled = stored.value if alpha == 1 else \
                            (b.fmul if floating else b.mul)(stored.value, ir.Constant(t, alpha))
                        b.atomic_rmw("fadd" if floating else "add", followed, scaled, "monotonic")
            with otherwise:
                _report(b, err, code, given)
        if form.mode == "read":
            b.store(b.load(slot), b.gep(out_ptr, [flat]))

    grid_stride(b, space, body)
    b.ret_void()
    return module


def mean_kernel(count, dtype, cache=None):
    """The division that ends scatter_reduce's mean, over ``count`` compact elements: ``out[i] /= n[i]``
    where ``n[i] > 0`` (``n`` int64), floor division for integer ``dtype`` (NumPy's ``//``), true division for
    floats. Pointers: (n, out)."""
    name = symbol(f"jitorch_scatter_mean_{count}_{dtype.name}")
    t = llvm_type(dtype)
    module, fn = entry(name, [I64.as_pointer(), t.as_pointer()])
    counts, out = fn.args
    e = Emitter(ir.IRBuilder(fn.append_basic_block("entry")))
    b = e.b

    def body(b, flat, point):
        n = Scalar(b.load(b.gep(counts, [flat])), _dt.int64)
        with b.if_then(b.icmp_signed(">", n.value, I64(0))):
            place = b.gep(out, [flat])
            total = e.load(place, dtype)
            if dtype.is_floating_point:
                e.store(e.div(total, e.cast(n, dtype)), place)
            else:
                q, r = e.int_divmod(total, e.cast(n, dtype))
                below = b.icmp_signed("<", r.value, ir.Constant(t, 0))  # n > 0: round a negative quotient down
                e.store(Scalar(b.select(below, b.sub(q.value, ir.Constant(t, 1)), q.value), dtype), place)

    grid_stride(b, (count,), body)
    b.ret_void()
    text = str(module)
    return LoopKernel(name, "scatter_mean", (count,), MeanSpec(dtype), text, ptx_of(text, name, cache))


def _combine(e, combine, at, value):
    """``*at = combine(*at, value)`` atomically: a native atomic where one exists, else a compare-and-swap
    loop on the element's bits."""
    b = e.b
    floating = value.dtype.is_floating_point
    if combine == "sum":
        native = "fadd" if floating else "add"
    else:  # integer amax/amin: atomic max/min; nothing for products and float extremes
        native = None if floating or combine == "prod" else combine[1:]
    if native:
        b.atomic_rmw(native, at, value.value, "monotonic")
        return
    bits = ir.IntType(value.dtype.itemsize * 8)
    word = b.bitcast(at, bits.as_pointer())
    start = b.block
    loop, done = b.append_basic_block("cas"), b.append_basic_block("cas.done")
    seen = b.load(word)
    b.branch(loop)
    b.position_at_end(loop)
    current_bits = b.phi(bits)
    current_bits.add_incoming(seen, start)
    current = Scalar(b.bitcast(current_bits, value.value.type) if floating else current_bits, value.dtype)
    if combine == "prod":
        updated = e.mul(current, value)
    else:  # maximum/minimum with the old value first: it stays if it wins a tie (torch's rule) or is NaN
        keeps = e.logical("or_", e.compare(">=" if combine == "amax" else "<=", current, value), e.isnan(current))
        updated = e.select(keeps, current, value)
    new_bits = b.bitcast(updated.value, bits) if floating else updated.value
    swapped = b.cmpxchg(word, current_bits, new_bits, "monotonic", "monotonic")
    current_bits.add_incoming(b.extract_value(swapped, 0), b.block)
    b.cbranch(b.extract_value(swapped, 1), done, loop)
    b.position_at_end(done)


def _report(b, err, code, at):
    """Claim the error word (the first bad index wins) and leave the index that did it next to the code."""
    claimed = b.extract_value(b.cmpxchg(err, I64(0), I64(code), "monotonic", "monotonic"), 1)
    with b.if_then(claimed):
        b.store(at, b.gep(err, [I64(1)]))
