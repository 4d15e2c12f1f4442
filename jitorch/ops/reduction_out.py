"""Reductions' ``out=`` calls computed straight into the out tensor (`registry.OpDef.fast_out`).

A call such as ``jitorch.sum(x, 1, True, out=o)`` on a small tensor is a NumPy reduction (0.6 us) and
Python's checks around it. What the checks work out from the input's geometry and the dims alone (NumPy's
axis, the result's shape and strides, how many elements each result element reduces) is remembered per
(dtype, shape, strides, dim, keepdim) in one table, `PLANS`, which every reduction served here shares; a call then
tests its tensors against the remembered plan. The commonest call (one dim as a Python int, or none) is
written into the function variant itself (`fast_out`'s ``inline``: one frame from the caller to NumPy);
`fast_out` serves the rest (a list of dims, an input that requires grad under ``no_grad``) and `registry.call`'s
checked calls. Both compute with the same source (`_compute_lines`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime import fp_errors
from ..runtime.device import CPU
from ..runtime.summation import BLOCK
from . import registry

FAST_DTYPES = (_dt.float32, _dt.float64)

# (input dtype, shape, strides, dim, keepdim) -> `OutPlan`, or False for a call not served (an input not of a
# fast dtype, not C-contiguous, empty, a dim out of range or repeated): only for ``dim`` None or a Python int (a
# list is unhashable, and ``True`` or ``1.0`` would find ``1``'s plan), and ``keepdim`` a bool.
PLANS: dict = {}
_PLANS_MAX = 4096


class OutPlan:
    """What an out= call of a reduction over ``dim`` of a C-contiguous input of a shape needs: NumPy's ``axis``,
    the result's ``shape`` and contiguous ``strides`` (an out tensor is served only with these: NumPy's loop
    follows its output's layout), whether the input has at most `summation.BLOCK` elements (``small``: then
    `summation.add_reduce` is NumPy's own sum), whether the result has one element (``single``), and the count
    of elements each result element reduces, as a NumPy scalar of the dtype (``count``: mean's divisor)."""

    __slots__ = ("axis", "shape", "strides", "small", "single", "count")

    def __init__(self, axis, shape, strides, small, single, count):
        self.axis, self.shape, self.strides, self.small, self.single = axis, shape, strides, small, single
        self.count = count


def fast_axis(dim, ndim):
    """NumPy's ``axis`` for a dim argument of Python ints within range and without repeats
    (None: every dim), or False for anything else (the general path raises the errors)."""
    if dim is None:
        return None
    if dim.__class__ is int:
        if -ndim <= dim < ndim:  # the commonest: one dim in range (what the loop below gives)
            return (dim % ndim,)
        dim = (dim,)
    elif dim.__class__ is not tuple and dim.__class__ is not list:
        return False
    axis = []
    for d in dim:
        if d.__class__ is not int or not -ndim <= d < ndim:
            return False
        axis.append(d % ndim)
    if len(set(axis)) != len(axis):
        return False
    return tuple(axis) or None


def plan_of(dtype, shape, strides, dim, keepdim):
    """The `OutPlan` of a call (``keepdim`` a bool), or False; remembered in `PLANS` where its key allows."""
    key = (dtype, shape, strides, dim, keepdim) if dim is None or dim.__class__ is int else None
    if key is not None:
        plan = PLANS.get(key)
        if plan is not None:
            return plan
    ndim = len(shape)
    axis = fast_axis(dim, ndim)
    plan = False
    if (dtype in FAST_DTYPES and axis is not False and 0 not in shape
            and strides == registry.contiguous_strides_cached(shape)):
        reduced = range(ndim) if axis is None else axis
        kept = tuple(1 if d in reduced else n for d, n in enumerate(shape) if keepdim or d not in reduced)
        numel = math.prod(shape)
        plan = OutPlan(axis, kept, registry.contiguous_strides_cached(kept), numel <= BLOCK, math.prod(kept) == 1,
                       dtype.np.type(math.prod(shape[d] for d in reduced)))
    if key is not None:
        if len(PLANS) >= _PLANS_MAX:
            PLANS.clear()
        PLANS[key] = plan
    return plan


# What an op does after its NumPy reduction of a small input into out (``_r_oa``, plan ``_r_p``), as source lines
# (`_compute_lines`)
FINISH = {
    None: [],
    # mean: the sum divided by the count in the sum's dtype (`reductions._mean`)
    "mean": ["_r_silenced(_r_divide, _r_oa, _r_p.count, _r_oa)"],
    # nansum: a sum with a NaN read is a NaN, so a result without NaNs read none and is nansum's; else the sum
    # again, of the input with its NaNs zeroed (`reductions._nansum`). The result's one element, or its max (a NaN
    # where any element is one; quiet, as amax's), tells which.
    "nansum": ["_r_v = _r_oa.item() if _r_p.single else _r_max(_r_oa, None)",
               "if _r_v != _r_v:",
               "    _r_silenced(_r_zeroed, _r_xa, _r_p.axis, {k}, _r_oa)"],
}


def _compute_lines(finish, keepdim, whole, quiet):
    """Source lines computing the call into array ``_r_oa`` from array ``_r_xa`` by plan ``_r_p``: a small input's
    (any input's, if ``whole``) ``_r_reduce(_r_xa, axis, None, _r_oa, keepdim)`` and the op's `FINISH` lines, a
    larger input's ``_r_into(_r_xa, axis, keepdim, _r_oa)``, with NumPy's floating-point errors silenced
    (`fp_errors`) unless the reduction raises none (``quiet``, with ``whole``)."""
    args = f"_r_xa, _r_p.axis, None, _r_oa, {keepdim}"  # (positional: NumPy parses no keywords)
    if quiet and whole:
        return [f"_r_reduce({args})"]
    small = [f"_r_silenced(_r_reduce, {args})", *(line.format(k=keepdim) for line in FINISH[finish])]
    return ["try:",
            *(["    " + line for line in small] if whole else
              ["    if _r_p.small:", *("        " + line for line in small),
               "    else:", f"        _r_silenced(_r_into, _r_xa, _r_p.axis, {keepdim}, _r_oa)"]),
            "except RuntimeError as _r_e:  # (the silenced context taken: computed again whole)",
            f"    _r_when_busy(_r_e, _r_into, _r_xa, _r_p.axis, {keepdim}, _r_oa)"]


def _ufunc_into(reduce, a, axis, keepdims, out):
    """``reduce(a, axis, keepdims=, out=)``, positional."""
    return reduce(a, axis, None, out, keepdims)


def out_path(reduce, into=None, finish=None, zeroed=None, quiet=False):
    """``fast_out(args, out, checked=False)`` of a reduction (`registry.OpDef.fast_out`): its out= call computed
    straight into ``out``'s array where that is the plain call's result as the general path would write it: no
    ``dtype=``, the input a non-empty C-contiguous float32/float64 CPU tensor of ``out``'s dtype, the dims Python
    ints in range (`fast_axis`), ``out`` a C-contiguous CPU tensor of the result's shape in another storage, not
    an inference tensor, neither requiring grad in grad mode. False otherwise, having written nothing: the general
    path computes a new result (the input cast to out's dtype for sum/nansum/prod/mean), resizes out with torch's
    warning, raises torch's errors and writes the result into out. The same function serves the variant's first
    try, before `registry.call`'s checks, which the calls it serves pass (the op's ``out_check``: amax's out of the
    input's dtype, mean's floating out; the overlap check: another storage; `registry._dtype_from_out`: out's
    dtype the input's), and ``checked`` calls.

    ``reduce``: the ufunc reduction of an input of at most `summation.BLOCK` elements, followed by ``finish``'s
    lines (`FINISH`; ``zeroed``, nansum's sum of the input with its NaNs zeroed); ``into(a, axis, keepdims,
    out)``: the whole computation, for larger inputs (None: ``reduce`` serves every input; ``quiet``: it raises
    no floating-point error, and is called as it is)."""
    whole = into is None
    if whole:
        into = functools.partial(_ufunc_into, reduce)
    env = {"_r_silenced": fp_errors.silenced, "_r_when_busy": fp_errors.when_busy, "_r_reduce": reduce,
           "_r_into": into, "_r_divide": np.true_divide, "_r_max": np.maximum.reduce, "_r_zeroed": zeroed,
           "_r_plans": PLANS, "_r_cpu": CPU}
    lines = _compute_lines(finish, "_r_k", whole, quiet)
    exec(compile("def _r_compute(_r_xa, _r_p, _r_k, _r_oa):\n" + "".join(f"    {line}\n" for line in lines),
                 "<jitorch reduction out>", "exec"), env)
    compute = env["_r_compute"]

    def fast_out(args, out, checked=False):
        x, dim, keepdim = args[0], args[1], args[2]
        Tensor = registry.Tensor
        if (len(args) > 3 and args[3] is not None or not isinstance(out, Tensor) or not isinstance(x, Tensor)
                or keepdim.__class__ is not bool):
            return False
        dtype, storage = x.dtype, out._storage
        if (dtype is not out.dtype or x.device is not CPU or out.device is not CPU
                or x._storage is storage or storage.inference
                or (x._requires_grad or out._requires_grad) and registry.records_grad()):
            return False
        plan = plan_of(dtype, x._shape, x._stride, dim, keepdim)
        if not plan or out._shape != plan.shape or out._stride != plan.strides:
            return False
        xa = x._arr if x._arr is not None else x._array()
        oa = out._arr if out._arr is not None else out._array()
        compute(xa, plan, keepdim, oa)
        storage._version += 1
        return True

    def inline(names, out):
        """`fast_out`'s commonest call written out as source for the function variant (`registry._generate`): one
        dim as a Python int or none, a remembered plan, neither tensor requiring grad, both holding their arrays.
        The lines fall through to the variant's `fast_out` call for anything else (which makes the plan).
        ``(lines, env)``."""
        x, dim, keepdim = names[:3]
        no_dtype = f"{names[3]} is None and " if len(names) > 3 else ""
        lines = [
            f"if ({no_dtype}{keepdim}.__class__ is bool and ({dim} is None or {dim}.__class__ is int)",
            f"        and isinstance({x}, _r_Tensor) and isinstance({out}, _r_Tensor)):",
            f"    _r_dt, _r_s = {x}.dtype, {out}._storage",
            f"    _r_p = _r_plans.get((_r_dt, {x}._shape, {x}._stride, {dim}, {keepdim}))",
            f"    _r_xa, _r_oa = {x}._arr, {out}._arr",
            f"    if (_r_p and {out}._shape == _r_p.shape and {out}._stride == _r_p.strides and _r_dt is {out}.dtype",
            f"            and {x}.device is _r_cpu and {out}.device is _r_cpu and {x}._storage is not _r_s",
            f"            and not _r_s.inference and not {x}._requires_grad and not {out}._requires_grad",
            f"            and _r_xa is not None and _r_oa is not None):",
            *("        " + line for line in _compute_lines(finish, keepdim, whole, quiet)),
            "        _r_s._version += 1",
            f"        return {out}"]
        return lines, {**{k: v for k, v in env.items() if k != "_r_compute"}, "_r_Tensor": registry.Tensor}

    fast_out.inline = inline
    fast_out.own_out_rules = True  # (it applies the out tensor's dtype rules itself: `registry._variant`)
    return fast_out
