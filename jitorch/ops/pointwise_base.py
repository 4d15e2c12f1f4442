"""`defpointwise`: declare an elementwise op from its NumPy formula.

The meta rule (broadcasting, promotion kind) and the CPU kernel (cast tensor
operands to the compute dtype, apply the formula, cast to the result dtype)
are generic; an op supplies only its schema, promotion kind and formula.
The formula receives operands as NumPy arrays in the compute dtype (Python
numbers stay numbers) followed by the op's other arguments in schema order.

Each op also gets a fast path for the commonest eager call: operands of one
dtype (or a tensor and a Python number of its kind) where NumPy's own dtype
and broadcasting rules give torch's answer; anything else takes the general
path through the meta rule.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime import fp_errors
from ..runtime import copy_parts, ufunc_parts
from ..runtime.casts import convert
from ..runtime.strided import (contiguous_strides_cached, is_non_overlapping_and_dense, iterator_strides, like_strides,
                               memory_order_strides)
from . import meta as M
from . import registry
from .registry import defop

_FLOAT_NP = frozenset((np.dtype(np.float32), np.dtype(np.float64)))
_EXACT = 2 ** 53  # (every int up to it in magnitude is a float64)
_FLOAT_MAX = {}  # dtype -> its largest finite value (`check_fits`; a `dtypes.finfo` costs a NumPy finfo)


def scalar_in(value, compute_np, via=None):
    """A Python number as the compute dtype holds it, a NumPy scalar of that dtype: converted as torch converts
    a Scalar to the dtype it computes in (`casts.convert`: integers wrap, an int reaches a float dtype rounded
    once, a float beyond the dtype's range is infinite), so that the NumPy call sees an operand of the compute
    dtype whatever its own rules for Python numbers (NumPy 1.x casts by value: a float32 0-d array and a Python
    float compute in float64). A half type (``via``: the common dtype of a float32 computation) rounds it
    as torch does, through float32. Called inside a kernel, with floating-point errors silenced."""
    if via is None and compute_np in _FLOAT_NP:
        if value.__class__ is float:
            return compute_np.type(value)  # (float64 rounded once to float32: NumPy's own conversion is torch's)
        if value.__class__ is int and -_EXACT <= value <= _EXACT:  # (exact in float64, then rounded once)
            return compute_np.type(float(value))
    number = convert(np.array(value), via or compute_np)
    return (number.astype(compute_np) if via is not None else number)[()]


def check_fits(value, dtype):
    """torch's checked conversion of a Python number to the dtype an op computes in (c10's ``overflows``:
    an unsigned type takes negative integers down to ``-max``, which wrap as two's complement; a float
    converts to an integer type when finite and within its range, from 0 for an unsigned one)."""
    if dtype.kind in "iu" and value.__class__ in (int, float):
        lo, hi = _dt.iinfo_range(dtype)
        if value.__class__ is float:
            fits = math.isfinite(value) and (0 if dtype.kind == "u" else lo) <= value <= hi
        else:
            fits = (-hi if dtype.kind == "u" else lo) <= value <= hi
    elif dtype.kind == "f" and dtype is not _dt.float64 and value.__class__ is not bool:
        top = _FLOAT_MAX.get(dtype)
        if top is None:
            top = _FLOAT_MAX[dtype] = _dt.finfo(dtype).max
        fits = not math.isfinite(value) or abs(value) <= top
    else:
        return
    if not fits:
        raise RuntimeError(f"value cannot be converted to type {_dt.C_NAMES[dtype.name]} without overflow")


def _operand_in(a, compute_np, via):
    """An operand (an array, else a Python number) in the compute dtype, converted first to ``via`` (the
    common dtype, a half type) unless None or its own dtype: torch's TensorIterator casts every operand to
    the common dtype, then its kernels widen half types to float32 (``half + int32(70000)`` is inf)."""
    if a.__class__ is not np.ndarray:
        return a if a is None else scalar_in(a, compute_np, via)
    if via is not None and a.dtype != via:  # (a 0-d float32 tensor beside a half one too: ``half + f32(0-d)``)
        a = convert(a, via)
    elif a.dtype == compute_np:
        return a
    return convert(a, compute_np)


def rounding_dtype(spec):
    """The half type a pointwise op casts its operands to (torch's common dtype) before it computes in float32,
    or None: the half result of an arithmetic op, or the half type a comparison computes in."""
    return next((d for d in (spec.compute, spec.dtype) if d is _dt.float16 or d is _dt.bfloat16), None)


def reads_unrounded(op, position, number, ndim):
    """Whether pointwise ``op`` reads its operand at ``position`` (among its operands; a Python ``number``, else
    a tensor of ``ndim`` dims) at its own value, not rounded to the `rounding_dtype` (see `defpointwise`)."""
    unrounded = op.attrs.get("unrounded")
    if position == 0 or unrounded is None:
        return False
    return number or (unrounded == "scalars" and ndim == 0)


def defpointwise(schema, formula, promotion=M.DEFAULT, *, variants=("function", "method", "inplace", "out"),
                 check=None, plain=None, into=None, uncast=(), unpromoted=(), unrounded=None, typed=False,
                 check_others_only=False, **attrs):
    """Declare a pointwise op. ``check(spec, *args)`` may raise for bad values or dtypes. ``plain``
    is a NumPy function equal to ``formula`` when the op's other arguments have their defaults
    (``np.add`` for ``add`` at alpha=1): the fast path calls it without the formula's frame.
    ``into(*operands, *others, out=array)`` computes the formula into ``out`` (a NumPy ufunc
    formula does so itself): the in-place variant then writes straight into the tensor.
    ``uncast`` names operands the formula receives in their own dtype (``where``'s condition).
    ``unpromoted`` names operands whose dtype takes no part in the result's (``where``'s condition: a bool
    would otherwise meet torch's refusal to promote uint16, uint32 and uint64 with bool).
    ``unrounded``: which operands after the first a half-type op reads at their own value in float32, not
    rounded to the half type: "numbers" (Python numbers: ``lerp``'s weight) or "scalars" (numbers and 0-d
    tensors: torch's ``original_scalar_value`` in mul and div).
    ``typed``: the general path passes the formula the result dtype as the keyword ``dtype`` (a half
    type's operands reach it in float32); the fast path, which serves no half type, passes none.
    ``check_others_only``: ``check`` reads only the op's other arguments (``add``'s alpha), so the fast path
    skips it when they have their defaults."""
    op = defop(schema, meta=lambda *a: None, kind="pointwise", variants=variants, unrounded=unrounded, **attrs)
    positions = tuple(i for i, _ in op.tensor_args)
    keep = frozenset(i for i, a in enumerate(op.schema.args) if a.name in uncast)
    promoted = tuple(i for i in positions if op.schema.args[i].name not in unpromoted)
    name = op.public_name
    others = tuple(i for i in range(len(op.schema.args)) if i not in positions)

    def promoted_meta(*args, common=promotion):
        # an optional operand (``Tensor? min``) left as None takes no part
        return M.pointwise_meta(name, common, [args[i] for i in positions if args[i] is not None],
                                [args[i] for i in promoted if args[i] is not None])

    def meta(*args):
        spec = promoted_meta(*args)
        if check is not None:
            check(spec, *args)
        return spec

    def kernel(spec, *args):
        c = spec.compute.np
        common = rounding_dtype(spec)
        common = None if common is None or common.np == c else common.np
        vals = []
        for k, i in enumerate(positions):
            a = args[i]
            if i in keep:
                vals.append(a)
                continue
            number = a.__class__ is not np.ndarray
            unrounded = reads_unrounded(op, k, number, None if number else a.ndim)
            vals.append(_operand_in(a, c, None if unrounded else common))
        rest = [args[i] for i in others]
        if typed:
            return formula(*vals, *rest, dtype=spec.dtype)
        # a large call of a NumPy ufunc (the formula, or ``plain`` at the other arguments' defaults: an autograd
        # rule's ``grad * other``) on the thread team (`split_ufunc`)
        split = formula if not rest else plain if rest == list(defaults) else None
        if isinstance(split, np.ufunc):
            big = next((v for v in vals if v.__class__ is np.ndarray), None)
            if big is not None and big.size >= ufunc_parts.SPLIT_MIN:
                r = split_ufunc(split, vals, None)
                if r is not None:
                    return r
        return formula(*vals, *rest)

    op.meta = meta
    # the operands' common dtype and shape, before ``check`` and a bitwise op's refusal of floats: what torch's
    # TensorIterator checks an in-place result's cast by before it looks for a kernel (`registry._inplace_meta`)
    op.attrs["promoted_meta"] = lambda *args: promoted_meta(*args, common=M.DEFAULT if promotion == M.KEEP_INT
                                                            else promotion)
    op.kernels["cpu"] = kernel
    op.layout = memory_order(positions, keep)
    defaults = tuple(op.schema.args[i].default for i in others)
    if into is None and isinstance(formula, np.ufunc):
        into = formula
    op.fast, op.fast_into, op.flat_into, op.fast_pair, op.fast_one, op.fast_out = _fast_path(
        op, formula, promotion, positions, others, check, plain, defaults, into, masked=keep == {0},
        check_others_only=check_others_only)
    op.attrs.setdefault("promotion", promotion)
    return op


def memory_order(positions, keep, fresh=frozenset()):
    """The layout rule of a pointwise op whose operands are at ``positions`` (``keep``: those it reads in their
    own dtype; ``fresh``: those torch's kernel reads as a new contiguous tensor computed from them, as ldexp's
    ``pow(2.0, other)``): torch's TensorIterator's (`iterator_strides`, where NumPy's order "K" may differ), on
    every device."""
    def layout(spec, *args):
        common = spec.compute if spec.dtype is _dt.bool else spec.dtype
        operands, same_shape = [], True
        for i in positions:
            a = args[i]
            if not isinstance(a, registry.Tensor):
                same_shape = same_shape and a is None  # (a number is a 0-d operand; None is no operand)
                continue
            strides = contiguous_strides_cached(a._shape) if i in fresh else a._stride
            if a.dtype is not common and i not in keep:
                # torch's TensorIterator reads a copy in the common dtype (``a.to(common)``: preserve_format)
                strides = like_strides(a._shape, strides) or contiguous_strides_cached(a._shape)
            same_shape = same_shape and a._shape == spec.shape
            operands.append((a._shape, strides))
        return iterator_strides(spec.shape, operands, same_shape) if operands else None
    return layout


def _broadcast_is(shape, shapes):
    """Whether ``shapes`` that broadcast to ``shape`` (NumPy's call into an out tensor of ``shape`` raises where they
    do not) broadcast to nothing smaller: each dim of ``shape`` is one operand's, or 1. (np.broadcast_shapes cost
    3 us, more than the call it spares.)"""
    n = len(shape)
    longest = 0
    for s in shapes:
        if len(s) > longest:
            longest = len(s)
    if longest != n:
        return False
    for i in range(1, n + 1):
        size = shape[-i]
        if size != 1:
            for s in shapes:
                if len(s) >= i and s[-i] == size:
                    break
            else:
                return False
    return True


def _in_torch_order(r, operands):
    """The fast path's result ``r`` of ``operands`` (tensors of its dtype, and numbers), laid out as torch's
    (`iterator_strides`): NumPy keeps the one dense layout all operands share, as torch does, but not the
    strides of size-1 dims."""
    shape = r._shape
    tensors = tuple([(a._shape, a._stride) for a in operands if isinstance(a, registry.Tensor)])
    key = (shape, tensors, len(tensors) == len(operands))
    try:
        strides = _TORCH_ORDER.get(key)
    except TypeError:  # (strides held in a list)
        strides = key = None
    if strides is None:
        same_shape = len(tensors) == len(operands) and all(s == shape for s, _ in tensors)
        strides = iterator_strides(shape, tensors, same_shape) or contiguous_strides_cached(shape)
        if key is not None:
            if len(_TORCH_ORDER) >= 1024:
                _TORCH_ORDER.clear()
            _TORCH_ORDER[key] = strides
    return r if r._stride == strides else registry.laid_out(r, strides)


# (result shape, operands' (shape, strides), whether all operands are tensors) -> `_in_torch_order`'s strides: a
# broadcast gradient (a sum's backward, ``expand(...) * y``) asked the general order each call, 5 us of 9
_TORCH_ORDER: dict = {}


def split_ufunc(ufunc, vals, out_np):
    """``ufunc(*vals)`` of a large result computed on the thread team (`runtime.ufunc_parts`: NumPy's own loop
    on each thread's range, the same bits), of dtype ``out_np`` (None: the one NumPy resolves), or None to call
    it here: a small result, an operand that is not an array of the result's shape, or a Python number NumPy would
    not take as the arrays' kind. Operands not all C-contiguous split as `_split_in_order` runs them."""
    first = next(v for v in vals if v.__class__ is np.ndarray)
    if first.size < ufunc_parts.SPLIT_MIN:
        return None
    operands = _team_operands(vals, first, None)
    if operands is None:
        return None
    if out_np is None:  # (what NumPy's call would give)
        out_np = ufunc.resolve_dtypes(tuple(v.dtype for v in operands) + (None,))[-1]
    if not all(v.flags.c_contiguous for v in operands if v.__class__ is np.ndarray):
        return _split_in_order(ufunc, operands, out_np)
    out = np.empty(first.shape, out_np)
    return out if ufunc_parts.split_call(ufunc, operands, out) else None


# ufuncs whose every NumPy loop (SIMD or scalar, contiguous or strided) rounds each element's result exactly once, as
# IEEE arithmetic does: their results do not depend on which loop NumPy runs, and so not on the operands' layout
_EXACT_UFUNCS = frozenset((np.add, np.subtract, np.multiply, np.true_divide, np.maximum, np.minimum, np.fmax, np.fmin,
                           np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal,
                           np.logical_and, np.logical_or, np.logical_xor, np.bitwise_and, np.bitwise_or,
                           np.bitwise_xor, np.negative))


def _split_in_order(ufunc, operands, out_np):
    """`split_ufunc` of operands of one shape, some not C-contiguous (a convolution's input gradient, batch-last,
    times a contiguous tensor): the result laid out as torch lays it out (`memory_order_strides`), every operand
    array in that layout (copied into it on the team, `copy_parts.copy`, where it is not), then the ufunc over the
    elements in memory order on the team, as on C-contiguous arrays. NumPy's own call on operands laid out apart
    iterates element by element across strides (a (64, 64, 16, 16) float32 product of a permuted and a contiguous
    tensor: 3.7 ms of one thread against 0.6 for two contiguous ones). None (NumPy's call here) at one thread, for
    an operand that does not fill its memory densely, and where an operand needs a copy and the ufunc is not exact
    (`_EXACT_UFUNCS`: NumPy's strided and contiguous loops may round a transcendental function apart)."""
    arrays = [v for v in operands if v.__class__ is np.ndarray]
    n, shape = arrays[0].size, arrays[0].shape
    if ufunc_parts.parts_of(n) < 2:
        return None
    layouts = []
    for a in arrays:
        strides = tuple(s // a.itemsize for s in a.strides)
        if not is_non_overlapping_and_dense(shape, strides):
            return None
        layouts.append(strides)
    order = memory_order_strides(shape, [(shape, st) for st in layouts])
    if any(st != order for st in layouts) and ufunc not in _EXACT_UFUNCS:
        return None
    perm = sorted(range(len(shape)), key=lambda d: -order[d])  # (outermost first: a C-contiguous transpose)

    def in_order(a, strides):
        if strides != order:
            buffer = np.empty(n, a.dtype)
            copy_parts.copy(np.lib.stride_tricks.as_strided(buffer, shape, tuple(s * a.itemsize for s in order)), a)
            return buffer
        return a.transpose(perm).reshape(-1)

    flat = iter([in_order(a, st) for a, st in zip(arrays, layouts)])
    flat_operands = [next(flat) if v.__class__ is np.ndarray else v for v in operands]
    buffer = np.empty(n, out_np)
    if not ufunc_parts.split_call(ufunc, flat_operands, buffer):
        ufunc(*flat_operands, out=buffer)
    return np.lib.stride_tricks.as_strided(buffer, shape, tuple(s * buffer.itemsize for s in order))


def _split_into(ufunc, vals, out):
    """``ufunc(*vals, out=out)`` (an in-place op's call: ``out`` is ``vals[0]``) on the thread team, as
    `split_ufunc`; False to call it here."""
    operands = _team_operands(vals, out, out)
    return operands is not None and ufunc_parts.split_call(ufunc, operands, out)


def _team_operands(vals, like, out):
    """The operands `ufunc_parts.split_call` takes for ``vals``: arrays of ``like``'s shape, Python numbers as
    NumPy scalars of its dtype (where NumPy's own promotion keeps that dtype: NumPy 1.x casts by value); None
    for a broadcast operand, or one overlapping ``out`` other than element for element (NumPy's call buffers
    it)."""
    operands = []
    for v in vals:
        if v.__class__ is np.ndarray:
            if v.shape != like.shape:
                return None
            if out is not None and v is not out and np.may_share_memory(v, out) and (
                    v.__array_interface__["data"][0] != out.__array_interface__["data"][0] or v.strides != out.strides):
                return None
            operands.append(v)
        else:
            if np.result_type(like, v) != like.dtype:
                return None
            operands.append(like.dtype.type(v))
    return operands


# dtype kinds whose results NumPy computes exactly as torch does, per promotion kind
_FAST_KINDS = {M.DEFAULT: "biuf", M.INT_TO_FLOAT: "f", M.ALWAYS_BOOL: "biuf", M.KEEP_INT: "biu"}
_HALVES = (_dt.float16, _dt.bfloat16)


# Python ints a tensor's dtype holds (a float dtype: those float64 holds, which NumPy's conversion rounds
# once); others take the general path: torch wraps them to the dtype (NumPy would compare them exactly),
# and with a bool tensor they promote to int64
_INT_LIMITS = {**{d: _dt.iinfo_range(d) for d in _dt.INTEGRAL}, _dt.bool: (1, 0),
               **{d: (-2 ** 53, 2 ** 53) for d in (_dt.float32, _dt.float64)}}
# Python floats a float tensor's dtype converts to a finite value without overflow (NumPy would warn)
_FLOAT_LIMITS = {d: (-float(_dt.finfo(d).max), float(_dt.finfo(d).max)) for d in (_dt.float32, _dt.float64)}


@functools.cache
def _fast_specs(kinds, always_bool):
    """(the dtypes a fast path serves, the result spec its check reads per dtype), shared by the ops of one
    promotion: made once, not per op at ``import jitorch``."""
    fast_dtypes = frozenset(d for d in _dt.ALL if d.kind in kinds and d not in _HALVES)
    cpu = registry.to_device("cpu")
    return fast_dtypes, {d: registry.TensorSpec(None, _dt.bool if always_bool else d, cpu, d) for d in fast_dtypes}


def _passes(check, spec, nargs):
    """Whether ``check`` lets a result of ``spec`` through (given no argument values: it reads none)."""
    try:
        check(spec, *([None] * nargs))
    except Exception:  # noqa: BLE001 (any refusal: the shortcut then runs the check, which raises it again)
        return False
    return True


# Comparisons are IEEE quiet predicates: NumPy's loops raise no floating-point error on NaN or infinite operands
# (checked under ``np.errstate(all="raise")`` on NumPy 1.26 and 2.4, float16/32/64, tensors and numbers);
# negation flips a sign bit, on any dtype (checked the same way, signalling NaNs and integer minimums too). A
# formula may say it is quiet itself (``quiet``: relu's maximum with 0, whose NaN NumPy's loops clear).
_QUIET_UFUNCS = frozenset((np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal,
                           np.negative))


def _fast_path(op, formula, promotion, positions, others, check, plain, defaults, into, masked=False,
               check_others_only=False):
    """``(fast, fast_into, flat_into, fast_pair, fast_one, fast_out)`` for the commonest eager calls, or six Nones.
    ``masked``: the first operand is a mask the formula takes as it is (``where``'s condition), served when it is
    a bool tensor.

    ``fast(args, record=True) -> Tensor | None``: the result, or None to take the general path. ``args``
    may hold the operands alone (an operator's call): the other arguments are then at their defaults.
    On tensors that require grad in grad mode the result gets its backward node
    (`registry.record_fast`), or, with ``record=False`` (an in-place call, which records
    otherwise), the general path is taken.

    ``fast_into(args) -> bool`` and ``flat_into(args) -> bool``: ``x.op_(...)`` computed straight into ``x``
    (`write_into`), after `registry.call_inplace`'s checks and before them (the in-place variant's first try,
    for the calls that need none); False to take the general path, which raises the errors. None for ops
    without ``into`` (``flat_into``: also for ops whose plain call is not a ufunc).

    ``fast_pair(method, general) -> operator``: the method of the op's Python operator (``x + y``), written
    flat for its commonest case, two CPU tensors of one shape, dtype and contiguous layout, whose result is the
    operands' layout (and, on tensors that require grad in grad mode, its backward node): one frame; other
    tensors of the same class go on to ``fast``, then to ``general(x, y)`` (the op's function), and any
    other call to ``method(x, y)`` (the operator's own). None for ops that take other than two operands.

    ``fast_one(x) -> Tensor | None``: ``fast((x,))`` of an op whose one argument is its operand (``relu``,
    ``exp``), written flat in the same way for a contiguous CPU tensor. None for other ops.

    The op's ``check`` runs first, given the spec of the result (shape None: a check reads dtypes) and the
    arguments as the caller passed them; NumPy scalars and the like then fail the dtype test of `finish`.

    Written flat: it runs on every small eager op, where each extra Python call is a measurable
    share of the op's latency.
    """
    kinds = _FAST_KINDS[promotion]
    always_bool = promotion == M.ALWAYS_BOOL
    records_grad = registry.records_grad
    record_fast = registry.record_fast
    cpu = registry.to_device("cpu")
    n = len(positions)
    first = 1 if masked else 0  # the first operand whose dtype the result follows
    if positions != tuple(range(n)) or n - first not in (1, 2):
        return None, None, None, None, None, None
    rest = n < len(others) + n  # the op has arguments besides its operands

    fast_dtypes, specs = _fast_specs(kinds, always_bool)
    int_limits, float_limits = _INT_LIMITS, _FLOAT_LIMITS

    def held(number, dtype, array):
        """A Python ``number`` of a kind NumPy's rules give torch's result for beside ``array`` of ``dtype``
        (see `operands`) as NumPy is to take it, or None where the general path decides."""
        limits = (float_limits if number.__class__ is float else int_limits).get(dtype)
        if limits is None or not limits[0] <= number <= limits[1]:
            return None
        return number if array.ndim else dtype.np.type(number)

    def operands(args):
        """(dtype, operand arrays or numbers, whether a tensor requires grad in grad mode) when NumPy's
        rules give torch's result, else None. Operands: one tensor, two of one dtype, or a tensor and
        a Python number of its kind (an int its dtype holds), after a bool tensor if ``masked``."""
        Tensor = registry.Tensor
        x = args[first]
        if n == first + 1:
            if not isinstance(x, Tensor) or x.device is not cpu:
                return None
            dtype = x.dtype
            xa = x._arr
            vals = (xa if xa is not None else x._array(),)
            grad = x._requires_grad
        else:
            y = args[first + 1]
            if isinstance(x, Tensor):
                if x.device is not cpu:
                    return None
                dtype = x.dtype
                grad = x._requires_grad
                xa = x._arr
                if xa is None:
                    xa = x._array()
                if isinstance(y, Tensor):
                    if y.dtype is not dtype or y.device is not cpu:
                        return None
                    grad = grad or y._requires_grad
                    ya = y._arr
                    if ya is None:
                        ya = y._array()
                elif (y.__class__ is float and dtype.kind == "f") or y.__class__ is int:
                    ya = y
                else:
                    return None
            elif isinstance(y, Tensor) and ((x.__class__ is float and y.dtype.kind == "f") or x.__class__ is int):
                if y.device is not cpu:
                    return None
                dtype = y.dtype
                grad = y._requires_grad
                xa = x
                ya = y._arr
                if ya is None:
                    ya = y._array()
            else:
                return None
            if xa.__class__ is not np.ndarray or ya.__class__ is not np.ndarray:
                # A number the dtype holds (an int float64 holds exactly, a float that does not overflow it;
                # others take the general path, `scalar_in`) is converted by NumPy as torch converts it, rounded
                # once to the dtype, beside an array of at least one dim. Beside a 0-d array NumPy 1.x casts
                # by value (float32 and a Python float compute in float64): it gets a NumPy scalar of the dtype.
                array, number = (xa, ya) if xa.__class__ is np.ndarray else (ya, xa)
                number = held(number, dtype, array)
                if number is None:
                    return None
                if xa is array:
                    ya = number
                else:
                    xa = number
            vals = (xa, ya)
        if dtype not in fast_dtypes:  # before computing: a formula need not handle dtypes its op rejects
            return None
        if masked:
            mask = args[0]
            if not isinstance(mask, Tensor) or mask.dtype is not _dt.bool or mask.device is not cpu:
                return None
            vals = (mask._arr if mask._arr is not None else mask._array(),) + vals
        return dtype, vals, grad and records_grad()

    # What a call with the op's other arguments at their defaults (or without them: an operator's call)
    # computes with: the plain NumPy function, else the formula given the defaults.
    plain_call = formula if not rest else plain if plain is not None else lambda *v: formula(*v, *defaults)
    # A call's other arguments are at their defaults when absent, or when the first is its default object itself
    # and the rest equal theirs: ``alpha=True`` or ``alpha=1.0`` equals add's 1, but torch refuses the first for a
    # result that is not bool and the second for an integer one (the check runs on them).
    first_default = defaults[0] if defaults else None
    unchecked = check is None or check_others_only  # whether such a call skips the check
    # whether a call on two tensors skips it: a check that refuses only numbers where the op takes tensors
    pair_unchecked = unchecked or getattr(check, "tensors_only", False)
    # the dtypes a check that reads only the result's dtype (``reads_dtype_only``) lets through: `flat` skips
    # it for them, and runs it (which raises) for the others
    passing = frozenset(d for d in fast_dtypes if _passes(check, specs[d], len(op.schema.args))) \
        if getattr(check, "reads_dtype_only", False) else frozenset()
    split = isinstance(plain_call, np.ufunc)  # whether a large call may split (`split_ufunc`)
    # whether the result on C-contiguous operands of one shape is C-contiguous of that shape: a ufunc's, or a
    # formula's that says so (``ufunc_result``: one ufunc on the operand and 0-d constants, relu's)
    ufunc_result = split or getattr(plain_call, "ufunc_result", False)
    split_min = ufunc_parts.SPLIT_MIN

    def fast(args, record=True):
        got = operands(args)
        if got is None:
            return None
        dtype, vals, grad = got
        if grad and not record:
            return None
        if len(args) == n or args[n] is first_default and (len(args) == n + 1 or args[n:] == defaults):
            if not unchecked:
                check(specs[dtype], *args, *defaults[len(args) - n:])
            compute = plain_call
        else:
            if check is not None:
                check(specs[dtype], *args)
            compute = None
        try:
            r = None
            if split and compute is not None:
                big = vals[0] if vals[0].__class__ is np.ndarray else vals[-1]
                if big.size >= split_min:  # (NumPy's loop on the team's threads)
                    r = silenced_call(split_ufunc, compute, vals, _dt.bool.np if always_bool else dtype.np)
            if r is None:
                fn, inputs = (compute, vals) if compute is not None else (formula, vals + args[n:])
                try:
                    r = silenced(fn, *inputs)
                except RuntimeError as e:
                    r = when_busy(e, fn, *inputs)
        except (ValueError, OverflowError, TypeError):
            return None
        out = _dt.bool if always_bool else dtype
        if r.__class__ is not np.ndarray:
            r = np.asarray(r)
        if r.dtype is not out.np:  # builtin NumPy dtypes are singletons; a miss only costs the slow path
            return None
        r = registry.Tensor._fresh(r, out) if r.flags.c_contiguous else registry.Tensor._from_array(r, out)
        if len(r._shape) > 1:  # (NumPy lays out a result of at most one dim as torch does)
            if 0 in r._shape:
                r = _in_torch_order(r, args[:n])
            else:
                Tensor = registry.Tensor
                for a in args[:n]:
                    # NumPy's order may not be torch's: an operand not contiguous, or contiguous but for the strides
                    # of size-1 dims (NumPy's test skips them, as torch's, whose result may keep them)
                    if isinstance(a, Tensor) and a._stride != contiguous.get(a._shape):
                        r = _in_torch_order(r, args[:n])
                        break
        return record_fast(op, args + defaults[len(args) - n:], r) if grad else r

    contiguous = registry.CONTIGUOUS_STRIDES
    result_dtype = _dt.bool if always_bool else None  # (None: the operands')
    ndarray = np.ndarray
    # whether an ``out=`` tensor may be one of the operands itself: the op's overlap rule allows a full overlap
    aliasable = "overlap" not in op.attrs and "overlap_written" not in op.attrs and op.kind == "pointwise"
    enter, leave = fp_errors.enter, fp_errors.leave
    silenced, silenced_call, when_busy = fp_errors.silenced, fp_errors.call_silenced, fp_errors.when_busy
    multiply = np.multiply
    # whether the op's NumPy call can raise no floating-point error, so that `flat` calls it without silencing
    # them (0.25-0.3 us of a 1.8 us ``x < y``)
    quiet = plain_call in _QUIET_UFUNCS or getattr(plain_call, "quiet", False)
    # An ``into`` that computes ``scaled(a, factor * b)`` (add's and sub's ``alpha``) says so: ``scaled`` is the
    # ufunc, ``into.factor_in(number, dtype)`` the factor as ``into`` converts it
    scaled = getattr(into, "scaled", None)
    factors = {}  # (dtype, the factor's class, the factor) -> the factor as a 0-d array of dtype, checked

    def factor_of(dtype, args):
        """The factor ``args[n]`` of a call on two tensors of ``dtype`` as a 0-d array of it, the op's check run
        on the call (once per dtype and value: the check reads the dtype and the factor alone), or None for a
        factor not remembered: zero (-0.0 equals 0.0) or of a class other than int and float. An optimizer
        step passes one factor (``-lr``) for every parameter, where the check and conversion cost more than
        the computation (NumPy's call with a 0-d operand costs 0.15 us less than with a NumPy scalar)."""
        factor = args[n]
        cls = factor.__class__
        if cls is not float and cls is not int or not factor:
            return None
        key = (dtype, cls, factor)
        held = factors.get(key)
        if held is None:
            if check is not None:
                check(specs[dtype], *args)
            if len(factors) >= 64:  # (a schedule's changing factors, NaNs: none equals another)
                factors.clear()
            held = factors[key] = np.array(into.factor_in(factor, dtype.np))
            held.flags.writeable = False
        return held

    def compute_into(oa, vals, factor, plain, args):
        """`write_into`'s and `write_out`'s NumPy calls: the op on ``vals`` (its operands' arrays or numbers, one or
        two) into the array ``oa`` (an in-place call's ``x``, ``vals[0]``, or an ``out=`` tensor's), ``factor`` a
        remembered factor (`factor_of`) or None, ``plain``: the call is the op's ufunc with its other arguments at
        their defaults."""
        # (calls with their operands written out: a call with ``*vals`` and ``out=`` takes NumPy's keyword-dict
        # path, 0.3 us more; a ufunc's output given by position, as its last operand, spares a keyword dict
        # ``out=`` makes: 0.04 us)
        size = oa.size
        if size == 1:
            # NumPy runs a ufunc on one element whose output is one of its inputs through its general iterator
            # (0.6 us more: its test that the two are iterated alike takes a single element's stride for 0);
            # given a copy of that input, the same loop on the same values, directly
            vals = tuple(v.copy() if v is oa else v for v in vals)
        elif plain and size >= split_min and _split_into(plain_call, vals, oa):
            return  # (done on the team)
        xin = vals[0]
        ya = vals[1] if len(vals) == 2 else None
        if factor is not None:  # (``into``'s two calls, its conversion of the factor done)
            scaled(xin, np.multiply(ya, factor), oa)
        elif plain:
            if ya is None:
                plain_call(xin, oa)
            else:
                plain_call(xin, ya, oa)
        elif ya is None:
            into(xin, *args[n:], out=oa)
        else:
            into(xin, ya, *args[n:], out=oa)

    def compute_with(oa, vals, factor, plain, args):
        """`compute_into` with NumPy's floating-point errors silenced (unless the call raises none: ``quiet``)."""
        if quiet and plain:
            compute_into(oa, vals, factor, plain, args)
            return
        try:
            silenced(compute_into, oa, vals, factor, plain, args)
        except RuntimeError as e:
            when_busy(e, compute_into, oa, vals, factor, plain, args)

    def write_into(args, checked=False):
        """``x.op_(...)`` (``x``: ``args[0]``) computed straight into ``x``'s array, the result having ``x``'s dtype
        and shape (no temporary and copy); False: the general path decides, and raises the errors.

        ``checked``: called by `registry.call_inplace` after its checks (overlap, `check_write_overlap`), for
        any operands `operands` takes. Otherwise the in-place variant's first try, before those checks, for the
        calls that need none: ``x`` a C-contiguous CPU tensor of a fast dtype that needs no backward node, the
        other operand (if any) a Python number `operands` takes or such a tensor of ``x``'s dtype and shape
        and of another storage. Both run the op's check, then the same NumPy call on the same operands."""
        # (the op's other arguments at their defaults: see ``first_default``)
        default = len(args) == n or args[n] is first_default and (len(args) == n + 1 or args[n:] == defaults)
        x = args[0]
        if checked:
            got = operands(args)
            if got is None or got[2] or always_bool:
                return False
            dtype, vals, _ = got
            xa = vals[0]
            if xa.__class__ is not np.ndarray or 0 in x._stride:  # a number, or maybe an expanded tensor
                return False
            if into is np.negative and not xa.flags.c_contiguous:
                # NumPy 2.4's float32/int32 negative in place into a strided array reads its elements as if
                # contiguous (``a[1::4]`` of 8: reads a[1], a[2]; fuzz seed 5200931) and into an (n, 1) one steps by
                # the size-1 dim's stride, writing outside the array (fuzz seed 7501690); 1.26's is right: the general
                # path writes a new result
                return False
            ya = vals[1] if n == 2 else None
            factor = factor_of(dtype, args) if scaled is not None and not default and len(args) == n + 1 and \
                x.dtype is dtype and isinstance(args[1], registry.Tensor) and args[1].dtype is dtype else None
            if check is not None and factor is None:
                check(specs[dtype], *args)
        else:
            dtype, shape, xa = x.dtype, x._shape, x._arr
            factor = None
            if (dtype not in fast_dtypes or xa is None or x._requires_grad and records_grad() or x.device is not cpu
                    or x._stride != contiguous.get(shape)):
                return False
            if n == 1:
                if check is not None and not (default and (unchecked or dtype in passing)):
                    check(specs[dtype], *args)
                ya = None
            else:
                y = args[1]
                if (y.__class__ is float and dtype.kind == "f") or y.__class__ is int:  # (`operands`' rule)
                    ya = held(y, dtype, xa)
                    if ya is None:
                        return False
                    if check is not None and not (default and unchecked):
                        check(specs[dtype], *args, *defaults[len(args) - n:])
                elif (isinstance(y, registry.Tensor) and y.dtype is dtype and y._shape == shape
                        and y._stride == x._stride and y._storage is not x._storage and y.device is cpu
                        and y._arr is not None and not (y._requires_grad and records_grad())):
                    if scaled is not None and not default and len(args) == n + 1:
                        # (a remembered factor read here: `factor_of`'s frame is a share of an optimizer's step)
                        alpha = args[n]
                        factor = factors.get((dtype, alpha.__class__, alpha))
                        if factor is None:
                            factor = factor_of(dtype, args)
                    if check is not None and factor is None and not (default and (pair_unchecked or dtype in passing)):
                        check(specs[dtype], *args, *defaults[len(args) - n:])
                    ya = y._arr
                else:
                    return False
        plain = default and split  # (the op's ufunc, else ``into`` given the other arguments)
        try:
            size = xa.size
            if ya is not None and (factor is not None or plain and not quiet) and size < split_min:
                # `compute_into`'s commonest calls (``x.add_(y)``, an optimizer's ``p.add_(g, alpha=-lr)``) written
                # out: its frame is a share of a small op
                xin = xa.copy() if size == 1 else xa
                try:
                    if factor is None:
                        silenced(plain_call, xin, ya, xa)
                    else:
                        silenced(scaled, xin, silenced(multiply, ya, factor), xa)
                except RuntimeError as e:  # (nothing written yet)
                    when_busy(e, compute_into, xa, (xa, ya), factor, plain, args)
            else:
                compute_with(xa, (xa,) if ya is None else (xa, ya), factor, plain, args)
        except (ValueError, TypeError):  # (NumPy refuses before it writes: the general path decides)
            return False
        x._storage._version += 1
        return True
    write_into.factors = factors  # (what a test reads)

    def write_out(args, out, checked=False):
        """``op(*args, out=out)`` computed straight into ``out``'s array where the result has ``out``'s dtype and
        shape (no new result and copy into out); False: the general path decides, and resizes, casts or raises.

        ``checked``: called by `registry.call` after its checks (overlap, device), for any operands `operands`
        takes (broadcasting ones too) and an ``out`` of any layout without a stride-0 dim. Otherwise the function
        variant's first try, before those checks, for the calls that need none: ``out`` a C-contiguous CPU tensor,
        each tensor operand of ``out``'s shape and strides, on the CPU, either ``out`` itself (torch's exact
        aliasing, which the op's overlap rule allows: ``aliasable``) or in another storage, the other operand (if
        any) a Python number `operands` takes. Neither serves an input or out tensor that requires grad in grad
        mode (`registry.out_grad` refuses or records those), nor a result of another dtype than ``out``'s
        (cast by the general path's copy)."""
        Tensor = registry.Tensor
        if not isinstance(out, Tensor) or out._requires_grad and records_grad():
            return False
        default = len(args) == n or args[n] is first_default and (len(args) == n + 1 or args[n:] == defaults)
        shape = out._shape
        if checked:
            got = operands(args)
            if got is None or got[2] or 0 in out._stride or out.device is not cpu:
                return False
            dtype, vals, _ = got
            oa = out._arr
            if oa is None:
                oa = out._array()
            for v in vals:
                if v.__class__ is ndarray and v.shape != shape:  # (broadcast operands: their shape must be out's)
                    if not _broadcast_is(shape, [a.shape for a in vals if a.__class__ is ndarray]):
                        return False
                    break
            if into is np.negative and not oa.flags.c_contiguous:  # (NumPy 2.4's strided negative: `write_into`)
                return False
        else:
            oa, strides, x = out._arr, out._stride, args[0]
            if (oa is None or strides != contiguous.get(shape) or not isinstance(x, Tensor) or x._requires_grad
                    or x._shape != shape or x._stride != strides or x.device is not cpu or x._arr is None
                    or x._storage is out._storage and (x is not out or not aliasable)):
                return False
            dtype = x.dtype
            if dtype not in fast_dtypes:
                return False
            if n == 1:
                vals = (x._arr,)
            else:
                y = args[1]
                if (y.__class__ is float and dtype.kind == "f") or y.__class__ is int:  # (`operands`' rule)
                    ya = held(y, dtype, oa)
                    if ya is None:
                        return False
                elif (isinstance(y, Tensor) and y.dtype is dtype and not y._requires_grad and y._shape == shape
                        and y._stride == strides and y.device is cpu and y._arr is not None
                        and (y._storage is not out._storage or y is out and aliasable)):
                    ya = y._arr
                else:
                    return False
                vals = (x._arr, ya)
        if (result_dtype or dtype) is not out.dtype:
            return False
        factor = None
        if scaled is not None and not default and len(args) == n + 1 and isinstance(args[1], Tensor) \
                and args[1].dtype is dtype:
            factor = factor_of(dtype, args)
        elif not default and not checked:  # (other arguments the converter has not seen: the general path)
            return False
        if check is not None and factor is None and not (default and (unchecked or dtype in passing)):
            check(specs[dtype], *args, *defaults[len(args) - n:])
        plain = default and split
        size = oa.size
        try:
            if (factor is not None or plain and not quiet) and size < split_min:
                # (`compute_into`'s commonest calls written out, as `write_into`'s: its frames are a share of a
                # small op)
                xin = vals[0]
                ya = vals[1] if n == 2 else None
                if size == 1:  # (see `compute_into`)
                    if xin is oa:
                        xin = xin.copy()
                    elif ya is oa:
                        ya = ya.copy()
                try:
                    if factor is not None:
                        silenced(scaled, xin, silenced(multiply, ya, factor), oa)
                    elif ya is None:
                        silenced(plain_call, xin, oa)
                    else:
                        silenced(plain_call, xin, ya, oa)
                except RuntimeError as e:  # (nothing written yet)
                    when_busy(e, compute_into, oa, vals, factor, plain, args)
            else:
                compute_with(oa, vals, factor, plain, args)
        except (ValueError, TypeError):  # (NumPy refuses before it writes: the general path decides)
            return False
        out._storage._version += 1
        return True

    def inline(names, out=None):
        """`write_into`'s commonest call written out as source for the in-place variant (`registry._generate`) of a
        two-operand op with at most one other argument: ``x.op_(y)`` (or with a remembered factor, ``x.add_(y,
        alpha=a)``) on two C-contiguous CPU tensors of one fast dtype and shape, in different storages, neither
        requiring grad, after the op's check where `write_into` runs it: one frame from the caller to NumPy (the
        variant's call of `write_into` cost a frame and a tuple, a third of ``x.add_(y)`` on one element). The
        lines fall through to the variant's `write_into` call for anything else. ``(lines, env)``, or None.

        With ``out`` (the name of the function variant's ``out=`` parameter, given a tensor), `write_out`'s
        commonest call the same way: ``op(x, y, out=o)``, ``o`` too of that shape and layout, not requiring grad,
        of the result's dtype, and each operand either ``o`` itself (where the op allows it: ``aliasable``) or in
        another storage. The lines fall through to the variant's `write_out` call."""
        extra = names[n:]
        if n != 2 or masked or len(extra) > 1 or quiet and out is None or always_bool and out is None:
            return None
        x, y = names[0], names[1]
        default = f"{extra[0]} is _i_first_default" if extra else "True"
        factor = f"_i_factors.get((_i_dt, {extra[0]}.__class__, {extra[0]}))" if extra and scaled is not None \
            else "None"
        o = x if out is None else out
        if out is None:
            head = [f"if isinstance({y}, _i_Tensor) and not {x}._requires_grad and not {y}._requires_grad:",
                    f"    _i_dt, _i_shape, _i_xa, _i_ya = {x}.dtype, {x}._shape, {x}._arr, {y}._arr",
                    f"    _i_oa = _i_xa"]
            apart = f"{y}._storage is not {x}._storage"
        else:
            head = [f"if (isinstance({out}, _i_Tensor) and isinstance({x}, _i_Tensor) and isinstance({y}, _i_Tensor)",
                    f"        and not {x}._requires_grad and not {y}._requires_grad and not {out}._requires_grad):",
                    f"    _i_dt, _i_shape, _i_xa, _i_ya, _i_oa = {x}.dtype, {x}._shape, {x}._arr, {y}._arr, {out}._arr",
                    f"    if (_i_oa is None or {out}.dtype is not {'_i_bool' if always_bool else '_i_dt'}"
                    f" or {out}._shape != _i_shape",
                    f"            or {out}._stride != {x}._stride or {out}.device is not _i_cpu):",
                    "        _i_dt = None"]
            shared = " or {t} is {out} and _i_aliasable" if aliasable else ""
            apart = " and ".join(f"({t}._storage is not {out}._storage{shared.format(t=t, out=out)})" for t in (x, y))
        call = "_i_plain(_i_xin, _i_yin, _i_oa)" if quiet else "_i_silenced(_i_plain, _i_xin, _i_yin, _i_oa)"
        lines = [
            *head,
            f"    if (_i_dt in _i_fast_dtypes and {y}.dtype is _i_dt and _i_xa is not None and _i_ya is not None",
            f"            and {x}.device is _i_cpu and {y}.device is _i_cpu and {y}._shape == _i_shape",
            f"            and {x}._stride == _i_contiguous.get(_i_shape) and {y}._stride == {x}._stride",
            f"            and {apart} and _i_xa.size < _i_split_min):",
            f"        _i_factor = None if {default} else {factor}",
            f"        if _i_factor is not None or {default}:",
            *([f"            if _i_factor is None and _i_dt not in _i_unchecked_dtypes:",
               f"                _i_check(_i_specs[_i_dt], {', '.join(names)})"] if check is not None else []),
            "            # (NumPy's ufunc into one of its inputs of one element takes its general iterator: a copy)",
            "            _i_xin = _i_xa.copy() if _i_xa is _i_oa and _i_xa.size == 1 else _i_xa",
            "            _i_yin = _i_ya.copy() if _i_ya is _i_oa and _i_ya.size == 1 else _i_ya",
            "            try:",
            "                if _i_factor is None:",
            f"                    {call}",
            "                else:",
            "                    _i_silenced(_i_scaled, _i_xin, _i_silenced(_i_multiply, _i_yin, _i_factor), _i_oa)",
            "            except RuntimeError as _i_e:  # (nothing written yet)",
            f"                _i_when_busy(_i_e, _i_compute_into, _i_oa, (_i_xa, _i_ya), _i_factor, _i_factor is None, "
            f"({', '.join(names)},))",
            f"            {o}._storage._version += 1",
            f"            return {o}",
        ]
        env = {"_i_Tensor": registry.Tensor, "_i_first_default": first_default, "_i_factors": factors,
               "_i_fast_dtypes": fast_dtypes, "_i_unchecked_dtypes": fast_dtypes if pair_unchecked else passing,
               "_i_check": check, "_i_specs": specs, "_i_cpu": cpu, "_i_bool": _dt.bool, "_i_aliasable": aliasable,
               "_i_contiguous": contiguous, "_i_split_min": split_min, "_i_silenced": silenced,
               "_i_plain": plain_call, "_i_scaled": scaled, "_i_multiply": multiply, "_i_when_busy": when_busy,
               "_i_compute_into": compute_into}
        return lines, env
    write_out.inline = inline
    write_into.inline = inline

    hooks, autocast = registry.DISPATCH_HOOKS, registry._AUTOCAST_STATE

    def flat_for(method, general):
        """`fast_one` (``method`` None), or `fast_pair`'s operator method (``x < y``) given the operator's
        ``method`` for what `flat` does not serve (an operand of another class, a dispatch hook or autocast
        on) and the op's ``general`` function for what neither shortcut serves: the operator's checks and
        `flat` in one frame, the commonest binary call's."""
        recorder = [None]  # (`AUTOGRAD.recorder(op)`, at the first call that records)

        def flat(x, y=None):
            if method is not None and (y.__class__ is not x.__class__ or hooks or autocast.key is not None):
                return method(x, y)
            Tensor = registry.Tensor
            if isinstance(x, Tensor):
                dtype, shape, xa = x.dtype, x._shape, x._arr
                if (dtype in fast_dtypes and x.device is cpu and xa is not None
                        and x._stride == contiguous.get(shape)):
                    grad = x._requires_grad
                    if y is None:
                        if not unchecked and dtype not in passing:
                            check(specs[dtype], x)
                        ya = None
                    elif (y.dtype is dtype and y._shape == shape and y.device is cpu and y._arr is not None
                            and y._stride == x._stride):  # (y: a tensor, as x)
                        grad = grad or y._requires_grad
                        if not pair_unchecked and dtype not in passing:
                            check(specs[dtype], x, y, *defaults)
                        ya = y._arr
                    else:
                        r = fast((x, y))
                        return r if r is not None or general is None else general(x, y)
                    try:
                        r = None
                        if split and xa.size >= split_min:  # (NumPy's loop on the team's threads)
                            r = silenced_call(split_ufunc, plain_call, (xa,) if ya is None else (xa, ya),
                                              _dt.bool.np if always_bool else dtype.np)
                        if r is None and quiet:
                            r = plain_call(xa) if ya is None else plain_call(xa, ya)
                        elif r is None:  # (the calls written out: a call with ``*args`` costs more)
                            try:
                                r = silenced(plain_call, xa) if ya is None else silenced(plain_call, xa, ya)
                            except RuntimeError as e:
                                r = when_busy(e, plain_call, xa) if ya is None else when_busy(e, plain_call, xa, ya)
                    except (ValueError, OverflowError, TypeError):  # (NumPy refuses: the general path decides)
                        r = None
                    if r is None:
                        return None if general is None else general(x, y)
                    out = result_dtype or dtype
                    if r.__class__ is not ndarray:  # (a 0-d result is a NumPy scalar)
                        r = np.asarray(r)
                    # C-contiguous of the operands' shape: a ufunc's result on such operands is (which spares
                    # the tests, each a NumPy attribute made); another formula's is tested
                    if r.dtype is out.np and (ufunc_result or r.shape == shape and
                                              (ya is not None or r.flags.c_contiguous)):
                        r = Tensor._fresh(r, out, shape, x._stride)
                        # (recorded here, not through `fast`: its general operands and call cost a recorded
                        # ``x * y`` 2 us, as much as the node; tensors and the defaults are converted already)
                        if grad and records_grad():
                            record = recorder[0]
                            if record is None:
                                record = recorder[0] = registry.AUTOGRAD.recorder(op)
                            return record([x, *defaults] if ya is None else [x, y, *defaults], r)
                        return r
            r = fast((x,) if y is None else (x, y))
            return r if r is not None or general is None else general(x, y)
        return flat

    into_ok = into is not None and not masked
    return (fast, (functools.partial(write_into, checked=True) if into_ok else None),
            (write_into if into_ok and split and not always_bool else None),
            flat_for if n == 2 and not masked else None, flat_for(None, None) if n == 1 and not rest else None,
            write_out if into_ok else None)
