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

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime import fp_errors
from . import meta as M
from . import registry
from .registry import defop

_INT_RANGE = {d.np: _dt.iinfo_range(d) for d in _dt.INTEGRAL}
_HALF_NP = (_dt.float16.np, _dt.bfloat16.np)


def _scalar_in(value, compute_np):
    """A Python number as the compute dtype sees it: integers wrap like torch's casts; a half type
    rounds it (NumPy would compare a bfloat16 array with a Python float in float32)."""
    rng = _INT_RANGE.get(compute_np)
    if rng is not None and value.__class__ is int and not (rng[0] <= value <= rng[1]):
        return np.array(value).astype(compute_np)[()]
    if compute_np in _HALF_NP:
        return compute_np.type(value)
    return value


def defpointwise(schema, formula, promotion=M.DEFAULT, *, variants=("function", "method", "inplace", "out"),
                 check=None, plain=None, **attrs):
    """Declare a pointwise op. ``check(spec, *args)`` may raise for bad values or dtypes. ``plain``
    is a NumPy function equal to ``formula`` when the op's other arguments have their defaults
    (``np.add`` for ``add`` at alpha=1): the fast path calls it without the formula's frame."""
    op = defop(schema, meta=lambda *a: None, kind="pointwise", variants=variants, **attrs)
    positions = tuple(i for i, _ in op.tensor_args)
    name = op.public_name
    others = tuple(i for i in range(len(op.schema.args)) if i not in positions)

    def meta(*args):
        # an optional operand (``Tensor? min``) left as None takes no part
        spec = M.pointwise_meta(name, promotion, [args[i] for i in positions if args[i] is not None])
        if check is not None:
            check(spec, *args)
        return spec

    def kernel(spec, *args):
        c = spec.compute.np
        vals = []
        for i in positions:
            a = args[i]
            if a.__class__ is np.ndarray:
                vals.append(a if a.dtype == c else a.astype(c))
            else:
                vals.append(_scalar_in(a, c))
        rest = [args[i] for i in others]
        return formula(*vals, *rest)

    op.meta = meta
    op.kernels["cpu"] = kernel
    defaults = tuple(op.schema.args[i].default for i in others)
    op.fast = _fast_path(formula, promotion, positions, others, check, plain, defaults)
    op.attrs.setdefault("promotion", promotion)
    return op


# dtype kinds whose results NumPy computes exactly as torch does, per promotion kind
_FAST_KINDS = {M.DEFAULT: "biuf", M.INT_TO_FLOAT: "f", M.ALWAYS_BOOL: "biuf", M.KEEP_INT: "biu"}
_HALVES = (_dt.float16, _dt.bfloat16)


def _fast_path(formula, promotion, positions, others, check, plain, defaults):
    """``fast(args) -> Tensor | None``: the result, or None to take the general path.

    The op's ``check`` runs first, given the spec of the result (shape None: a check reads dtypes) and the
    arguments as the caller passed them; NumPy scalars and the like then fail the dtype test of `finish`.

    Specialised by arity and written flat: it runs on every small eager op,
    where each extra Python call is a measurable share of the op's latency.
    """
    kinds = _FAST_KINDS[promotion]
    always_bool = promotion == M.ALWAYS_BOOL
    Storage = registry.Storage
    contiguous = registry.CONTIGUOUS_STRIDES
    cpu = registry.to_device("cpu")
    n = len(positions)
    if positions != tuple(range(n)) or n not in (1, 2):
        return None
    rest = n < len(others) + n  # the op has arguments besides its operands

    fast_dtypes = frozenset(d for d in _dt.ALL if d.kind in kinds and d not in _HALVES)
    # Python ints a tensor's dtype holds; others take the general path: torch wraps them to the dtype
    # (NumPy would compare them exactly), and with a bool tensor they promote to int64
    int_limits = {d: _dt.iinfo_range(d) for d in _dt.INTEGRAL}
    int_limits[_dt.bool] = (1, 0)
    specs = {d: registry.TensorSpec(None, _dt.bool if always_bool else d, cpu, d) for d in fast_dtypes}

    def finish(r, dtype):
        out = _dt.bool if always_bool else dtype
        if r.__class__ is not np.ndarray:
            r = np.asarray(r)
        if r.dtype is not out.np:  # builtin NumPy dtypes are singletons; a miss only costs the slow path
            return None
        shape = r.shape
        strides = contiguous.get(shape)
        if strides is None or not r.flags.c_contiguous:
            return registry.Tensor._from_array(r, out)
        return registry.Tensor._make(Storage(r, out), shape, strides, 0, r)

    def fast1(args):
        x = args[0]
        if (x.__class__ is not registry.Tensor or x._requires_grad or x.device is not cpu
                or x.dtype not in fast_dtypes):
            return None
        if check is not None:
            check(specs[x.dtype], *args)
        xa = x._arr
        if xa is None:
            xa = x._array()
        token = fp_errors.enter()
        try:
            r = formula(xa, *args[1:]) if rest else formula(xa)
        finally:
            fp_errors.leave(token)
        return finish(r, x.dtype)

    def fast2(args):
        Tensor = registry.Tensor
        x = args[0]
        y = args[1]
        if x.__class__ is Tensor:
            if x._requires_grad or x.device is not cpu:
                return None
            dtype = x.dtype
            xa = x._arr
            if xa is None:
                xa = x._array()
            if y.__class__ is Tensor:
                if y._requires_grad or y.dtype is not dtype or y.device is not cpu:
                    return None
                ya = y._arr
                if ya is None:
                    ya = y._array()
            elif (y.__class__ is float and dtype.kind == "f") or y.__class__ is int:
                ya = y
            else:
                return None
        elif y.__class__ is Tensor and ((x.__class__ is float and y.dtype.kind == "f") or x.__class__ is int):
            if y._requires_grad or y.device is not cpu:
                return None
            dtype = y.dtype
            xa = x
            ya = y._arr
            if ya is None:
                ya = y._array()
        else:
            return None
        if dtype not in fast_dtypes:  # before computing: a formula need not handle dtypes its op rejects
            return None
        limits = int_limits.get(dtype)
        if limits is not None:
            n = y if x.__class__ is Tensor else x
            if n.__class__ is int and not limits[0] <= n <= limits[1]:
                return None
        if check is not None:
            check(specs[dtype], *args)
        token = fp_errors.enter()
        try:
            if not rest:
                r = formula(xa, ya)
            elif plain is not None and args[2:] == defaults:
                r = plain(xa, ya)
            else:
                r = formula(xa, ya, *args[2:])
        except (ValueError, OverflowError, TypeError):
            return None
        finally:
            fp_errors.leave(token)
        return finish(r, dtype)

    return fast1 if n == 1 else fast2
