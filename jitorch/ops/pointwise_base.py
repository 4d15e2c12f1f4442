"""`defpointwise`: declare an elementwise op from its NumPy formula.

The meta rule (broadcasting, promotion kind) and the CPU kernel (cast tensor
operands to the compute dtype, apply the formula, cast to the result dtype)
are generic; an op supplies only its schema, promotion kind and formula.
The formula receives operands as NumPy arrays in the compute dtype (Python
numbers stay numbers) followed by the op's other arguments in schema order.
"""

from __future__ import annotations

import numpy as np

from ..runtime import dtypes as _dt
from . import meta as M
from .registry import defop

_INT_RANGE = {d.np: _dt.iinfo_range(d) for d in _dt.INTEGRAL}


def _scalar_in(value, compute_np):
    """A Python number as the compute dtype sees it: integers wrap like torch's casts."""
    rng = _INT_RANGE.get(compute_np)
    if rng is not None and value.__class__ is int and not (rng[0] <= value <= rng[1]):
        return np.array(value).astype(compute_np)[()]
    return value


def defpointwise(schema, formula, promotion=M.DEFAULT, *, variants=("function", "method", "inplace", "out"),
                 errstate=True, check=None, **attrs):
    """Declare a pointwise op. ``check(spec, *args)`` may raise for bad values or dtypes."""
    op = defop(schema, meta=lambda *a: None, kind="pointwise", variants=variants, **attrs)
    positions = tuple(i for i, _ in op.tensor_args)
    name = op.public_name
    others = tuple(i for i in range(len(op.schema.args)) if i not in positions)

    def meta(*args):
        spec = M.pointwise_meta(name, promotion, [args[i] for i in positions])
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
        if errstate:
            with np.errstate(all="ignore"):
                return formula(*vals, *rest)
        return formula(*vals, *rest)

    op.meta = meta
    op.kernels["cpu"] = kernel
    op.attrs.setdefault("promotion", promotion)
    return op
