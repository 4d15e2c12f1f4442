"""Checks of tensor values that raise eager's error, in eager code and in compiled graphs alike.

A check that reads values (a class index out of range, a probability outside [0, 1]) cannot run while a
function is traced: the trace has no values. `check` runs it at once in eager code and records it as the op
``_check_values`` under a trace, so a compiled call runs it each time, with eager's exception type and message.
The graph's passes never remove, merge or fold a check (its kind is "check": `ir.passes.rewrite.has_effects`),
and the executor runs it as soon as what it reads is computed (`jit.executor.checks_early`), before the steps
that write outputs or inputs in place without depending on it.

An op that raises on its values (an index out of range, a matrix that is not positive-definite: `VALUE_CHECKED`)
keeps its check when its result is unused: dead-code elimination replaces it by a ``_check_values`` node of rule
"op", which replays the op on the same tensors and drops its result (`ir.passes.dce`).
"""

from __future__ import annotations

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime.device import to_device
from ..runtime.dtypes import from_numpy_dtype
from ..runtime.grad_mode import no_grad
from . import registry
from .registry import OPS, TensorSpec, defop

# The ops a graph holds whose call can raise on the values of its tensors (not on their shapes or dtypes); the
# composites built on them (take_along_dim, index_reduce, cholesky, inverse) are traced into them
VALUE_CHECKED = frozenset((
    "gather", "index", "index_add", "index_copy", "index_fill", "index_fill.Tensor", "index_put", "index_select",
    "put", "scatter", "scatter.value", "scatter_add", "scatter_reduce", "take", "masked_scatter", "bincount",
    "linalg_cholesky_ex", "linalg_inv_ex", "linalg_solve_ex", "linalg_lu_factor_ex",
))
_CPU = to_device("cpu")


def _host(t):
    """The values of tensor ``t`` as a NumPy array on the host."""
    return (t if not t._storage.on_device else t.cpu())._array()


def _first(array, bad):
    return array[bad].reshape(-1)[0].item()


class EagerRerun(RuntimeError):
    """A compiled call met values its graph's form is not exact for (rule "finite_else_eager": a non-finite value in
    a Winograd convolution, whose transforms make NaN of infinities the direct sum keeps). Its check raises before
    the call writes an output or an input in place, and `jitorch.compile` runs the function eagerly instead."""

    RULE = "finite_else_eager"  # the `_check_values` rule that raises it


def _finite_else_eager(total):
    # (``total``: the sum of the values checked, finite exactly when they all are, or where a sum of finite ones
    # overflows, which costs an eager call and gives the same values)
    if not np.isfinite(total).all():
        raise EagerRerun("a Winograd convolution met an infinity or NaN: the call runs eagerly, by direct sums")


def _probabilities(x):
    # (NaN is outside [0, 1] too, as in torch's check)
    if x.size and not ((x >= 0) & (x <= 1)).all():
        raise RuntimeError("all elements of input should be between 0 and 1")


def _class_targets(target, classes, ignore_index):
    bad = (target != ignore_index) & ((target < 0) | (target >= classes))
    if bad.any():
        raise IndexError(f"Target {_first(target, bad)} is out of bounds.")


def _one_hot_classes(t, classes):
    if t.size and t.min() < 0:
        raise RuntimeError("Class values must be non-negative.")
    if t.size and t.max() >= classes:
        raise RuntimeError("Class values must be smaller than num_classes.")


def _quantiles(q):
    if ((q < 0) | (q > 1) | np.isnan(q)).any():
        raise RuntimeError("quantile() q values must be in the range [0, 1]")


def _nonnegative_variance(var):
    if (var < 0).any():
        raise ValueError("var has negative entry/entries")


def _margin_targets(target, classes):
    if ((target < 0) | (target >= classes)).any():
        raise RuntimeError("target out of range")


def _multilabel_targets(target, classes):
    if ((target < -1) | (target >= classes)).any():
        raise RuntimeError("argument #2 'target' is out of range")


def _unpool_indices(indices, volume, sizes):
    bad = (indices < 0) | (indices >= volume)
    if bad.any():
        raise RuntimeError(f"Found an invalid max index: {_first(indices, bad)} (output volumes are of size "
                           f"{'x'.join(map(str, sizes))})")


def _bag_indices(flat, rows):
    bad = (flat < 0) | (flat >= rows)
    if bad.any():
        i = int(np.argmax(bad))
        raise RuntimeError(f"Index {i} of input takes value {flat[i].item()} which is not in the valid range "
                         f"[0, {rows})")


def _indices_in_range(index, size):
    if index.size and (index.min() < 0 or index.max() >= size):
        raise IndexError("index out of range in self")


# rule name -> check(*host arrays, *params): raises eager's error where the values are bad
RULES = {
    "probabilities": _probabilities,
    "class_targets": _class_targets,
    "one_hot_classes": _one_hot_classes,
    "quantiles": _quantiles,
    "nonnegative_variance": _nonnegative_variance,
    "margin_targets": _margin_targets,
    "multilabel_targets": _multilabel_targets,
    "unpool_indices": _unpool_indices,
    "bag_indices": _bag_indices,
    "indices_in_range": _indices_in_range,
    EagerRerun.RULE: _finite_else_eager,
}


def check(rule, tensors, *params):
    """Raise eager's error where the values of ``tensors`` break ``rule`` (a name in `RULES`, given ``params``,
    Python literals): at once in eager code, at each call of a compiled graph when traced. Tensors without
    values (meta tensors) are not checked."""
    if registry.DISPATCH_HOOKS:  # a trace (or a profile) takes the call: the check becomes a node
        OPS["_check_values"](list(tensors), rule, list(params))
    elif all(t._storage.data is not None or t._storage.on_device for t in tensors):
        RULES[rule](*(_host(t) for t in tensors), *params)


def _replay(arrays, name, template, places):
    """Run op ``name`` as eagerly, for its checks: ``template`` is its arguments with None where the tensors
    of ``arrays`` go, at ``places`` (an argument's position, or its position and a position within it)."""
    args = [list(a) if isinstance(a, (list, tuple)) else a for a in template]
    for arr, place in zip(arrays, places):
        # (asarray: ascontiguousarray would make a 0-d value, index_fill's fill value, 1-d)
        t = registry.Tensor._fresh(np.asarray(arr, order="C"), from_numpy_dtype(arr.dtype))
        if len(place) == 1:
            args[place[0]] = t
        else:
            args[place[0]][place[1]] = t
    with no_grad():
        OPS[name](*args)


def _check_arrays(arrays, rule, params):
    if rule == "op":
        _replay(arrays, *params)
    else:
        RULES[rule](*arrays, *params)


def _check_values_cpu(spec, arrays, rule, params):
    _check_arrays(arrays, rule, params)
    return np.ones((), bool)


def run_check(tensors, rule, params):
    """A ``_check_values`` node's check on its tensors, without the op's call and result: a compiled call's step.
    Tensors in device memory are not checked: a compiled CUDA call neither copies to the host nor waits for the
    device (its gathers check their indices on the device, reported at the next synchronization)."""
    if not any(t._storage.on_device for t in tensors):
        _check_arrays([t._array() for t in tensors], rule, params)


def _check_values_meta(tensors, rule, params):
    return TensorSpec((), _dt.bool, tensors[0].device if tensors else _CPU)


defop("_check_values(Tensor[] tensors, str rule, Any params) -> Tensor", kind="check", variants=("function",),
      meta=_check_values_meta, cpu=_check_values_cpu,
      doc="Raises eager's error where the values of ``tensors`` break ``rule`` (`value_checks.RULES`, or \"op\": "
          "replay an op whose result is unused); else a 0-d True. A graph's passes never remove it.")
