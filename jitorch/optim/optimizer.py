"""The ``Optimizer`` base class: parameter groups, per-parameter state, state dicts.

Built-in optimizers define ``_update(group, params)``, the in-place update of
one group's parameters that have a gradient, and inherit ``step``; a user's
subclass may override ``step`` instead, as in torch. Updates are written with jitorch's
in-place tensor ops and never read tensor values into Python, so a training
step that calls ``optimizer.step()`` can be traced by ``jitorch.compile``.

An eager step of SGD, Adam, AdamW, RMSprop, Adagrad, Adamax, NAdam, RAdam or Adadelta on dense
float32/float64 CPU tensors computes instead on their NumPy arrays (``_numpy_update``): the same NumPy calls as the
ops' CPU kernels, so the same values bit for bit, and the same version counts,
without the ops' dispatch, which cost several times the arithmetic on a small
model's parameters. It steps aside (`numpy_step_allowed`) whenever a dispatch hook
is installed (a trace records the ops; a profiler sees them) or autocast is on.
"""

from __future__ import annotations

import copy
import math
import weakref
from collections import defaultdict
from itertools import chain

import numpy as np

from ..autograd import enable_grad, no_grad
from ..autograd.gradients import zero_grad_
from ..ops import powers, registry
from ..ops.pointwise import _add
from ..runtime import fp_errors
from ..runtime import profiling
from ..runtime import ufunc_parts
from ..runtime.autocast_mode import STATE as _AUTOCAST_STATE
from ..runtime.device import CPU
from ..runtime.dtypes import float32, float64
from ..tensor import Tensor

__all__ = ["Optimizer", "required"]


class _RequiredParameter:
    """The default of an option an optimizer has no default for (``lr=required``): each parameter group must
    then give it."""

    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


def _typename(obj):
    if isinstance(obj, Tensor):
        return "jitorch.Tensor"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _check_nonnegative(**values):
    """Raise torch's ValueError for the first hyper-parameter below zero."""
    labels = {"lr": "learning rate", "eps": "epsilon value", "momentum": "momentum value",
              "weight_decay": "weight_decay value", "alpha": "alpha value"}
    for name, value in values.items():
        if not 0.0 <= value:
            raise ValueError(f"Invalid {labels[name]}: {value}")


def _check_unsupported(foreach, fused, differentiable):
    """torch's checks of the flags that select an implementation: jitorch's eager steps take one generated
    kernel per group (`jitorch.optim.foreach`) where they can, whatever ``foreach``/``fused`` say;
    ``differentiable`` has none."""
    if differentiable:
        raise ValueError("differentiable=True is not supported by jitorch optimizers")
    if fused and foreach:
        raise RuntimeError("`fused` and `foreach` cannot be `True` together.")


class Optimizer:
    """Base class of all optimizers, as ``torch.optim.Optimizer``.

    ``params`` is an iterable of tensors, of ``(name, tensor)`` pairs, or of
    dicts each holding ``"params"`` and that group's own options; options a
    group leaves out take the values in ``defaults``.
    """

    def __init__(self, params, defaults):
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            f"but got {_typename(params)}")
        self.defaults = defaults
        self.state = defaultdict(dict)
        self.param_groups = []
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines.extend(f"    {key}: {group[key]}" for key in sorted(group) if key != "params")
        return "\n".join(lines) + "\n)"

    def add_param_group(self, param_group):
        """Add a group of parameters (a dict with ``"params"`` and optional options)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group)}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering "
                            "of tensors in sets will change between runs. Please use a list instead.")
        params = list(params)
        names = [p[0] for p in params if isinstance(p, tuple)]
        param_group["params"] = [p[1] if isinstance(p, tuple) else p for p in params]
        if names:
            if len(names) != len(params):
                raise ValueError("all optimizer params should be with/without names. Some param names are missing")
            param_group["param_names"] = names
        for p in param_group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {_typename(p)}")
            if not (p.is_leaf or p.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {name}")
            param_group.setdefault(name, default)
        seen = set()
        for group in self.param_groups:
            seen.update(id(p) for p in group["params"])
            if ("param_names" in param_group) != ("param_names" in group):
                kind = "with names" if "param_names" in param_group else "without names"
                raise ValueError("all optimizer param groups should be with/without names. "
                                 f"cannot add param group {kind} to the optimizer")
        if any(id(p) in seen for p in param_group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def zero_grad(self, set_to_none=True):
        """Reset the gradients: to None (default) or, with ``set_to_none=False``, to zeros."""
        zero_grad_((p for group in self.param_groups for p in group["params"]), set_to_none)

    def step(self, closure=None):
        """Update every parameter that has a gradient; ``closure`` re-evaluates and returns the loss."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        update = getattr(self, "_update", None)
        if update is None:
            raise NotImplementedError(f"{type(self).__name__} must override step() or define _update(group, params)")
        with no_grad():
            for group in self.param_groups:
                params = [p for p in group["params"] if p.grad is not None]
                if params:
                    update(_as_traced(group), params)
        return loss

    def _lazy_state(self, p, buffers, scalars=()):
        """``self.state[p]``, made at the parameter's first step as torch makes it: a 0-d float32
        ``step``, then the 0-d float32 ``scalars`` (name, initial value), then a zero tensor like ``p``
        per name in ``buffers``; real tensors even when the step is being traced."""
        state = self.state[p]
        if not state:
            from .. import compiler, tensor, zeros_like
            with compiler.eager_state():
                state["step"] = tensor(0.0, dtype=float32)
                for name, value in scalars:
                    state[name] = tensor(value, dtype=float32)
                for name in buffers:
                    state[name] = zeros_like(p)
        return state

    def _own_lr(self, p):
        """The learning rate of ``p``'s group as set there (a traced step's group holds a captured tensor
        instead): what a state made at the first step starts from."""
        return next(g["lr"] for g in self.param_groups if any(q is p for q in g["params"]))

    def _step_counter(self, p):
        """The parameter's ``state["step"]`` (a 0-d float32 tensor, as torch keeps it), incremented."""
        state = self.state[p]
        step = state["step"]
        step.add_(1)
        return step

    def _bias_corrections(self, p, group):
        """Adam's ``(lr / (1 - beta1**t), sqrt(1 - beta2**t))`` for the parameter's step count t, which this
        increments. Eagerly Python floats from the count's value (torch's ``_get_value``: no tensor ops). A
        traced step must not read tensor values: there they are 0-d float64 tensors that the compiled step
        sets before each call by the same Python arithmetic (`_traced_bias_corrections`), or, where that
        does not apply, float64 tensor ops on the count."""
        from .. import compiler
        lr, (beta1, beta2) = group["lr"], group["betas"]
        step = self._step_counter(p)
        if compiler.is_compiling():
            held = _traced_bias_corrections(step, lr, beta1, beta2)
            if held is not None:
                return held
            t = step.to(float64)
        else:
            t = step.item()
        bias_correction2 = 1 - beta2 ** t
        return lr / (1 - beta1 ** t), (bias_correction2.sqrt() if isinstance(bias_correction2, Tensor)
                                       else math.sqrt(bias_correction2))

    # State dicts ---------------------------------------------------------------------

    def state_dict(self):
        """The optimizer's state: ``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}``.

        State tensors are returned by reference, as torch does; save or clone
        them to keep a snapshot.
        """
        index = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            packed["params"] = [index[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {(index[id(k)] if isinstance(k, Tensor) else k): v for k, v in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Load a state dict from ``state_dict()``; groups must match this optimizer's in number and sizes."""
        saved_groups = copy.deepcopy(state_dict["param_groups"])
        if len(self.param_groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(g["params"]) != len(s["params"]) for g, s in zip(self.param_groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        id_map = dict(zip(chain.from_iterable(g["params"] for g in saved_groups),
                          chain.from_iterable(g["params"] for g in self.param_groups)))
        state = defaultdict(dict)
        for key, value in state_dict["state"].items():
            if key in id_map:
                param = id_map[key]
                state[param] = {k: _cast_state(param, k, v) for k, v in value.items()}
            else:
                state[key] = value
        for group, saved in zip(self.param_groups, saved_groups):
            saved["params"] = group["params"]
            if "param_names" in group and "param_names" not in saved:
                saved["param_names"] = group["param_names"]
        self.state = state
        self.param_groups = saved_groups


def _cast_state(param, key, value):
    """A loaded state value as torch casts it: floating state takes the parameter's dtype and device; the
    step counter stays as saved."""
    if not isinstance(value, Tensor) or key == "step":
        return value
    if param.is_floating_point():
        return value.to(dtype=param.dtype, device=param.device)
    return value.to(device=param.device)


def _as_traced(group):
    """The group as a traced step sees it. Its learning rate becomes a captured scalar that the
    compiled step re-reads at every call, so a scheduler changing it needs no new trace; the
    other numbers (betas, momentum...) are baked into the graph, which stays valid only while
    they are unchanged. Outside a trace: the group itself."""
    from .. import compiler
    if not compiler.is_compiling():
        return group
    traced = {k: v for k, v in group.items() if k not in ("params", "lr")}
    compiler.guard(lambda: all(group.get(k) == v for k, v in traced.items()),
                   "the optimizer's hyperparameters (momentum, betas, ...) are unchanged")
    # float64 where a parameter is: a float32 rate moved float64 parameters 1e-8 off eager's steps (lr=0.1)
    wide = any(getattr(p, "dtype", None) is float64 for p in group["params"])
    return dict(group, lr=compiler.dynamic_scalar(lambda: group["lr"], dtype=float64 if wide else float32))


def numpy_step_allowed(*numbers):
    """Whether an eager step may update parameters on their NumPy arrays (`numpy_operands`) instead of
    through jitorch's ops: no dispatch hook (a trace records the ops, a profiler sees them), no profiler,
    no autocast, and the group's options ``numbers`` (lr, betas...) Python numbers (a tensor ``lr``
    takes the ops)."""
    if registry.DISPATCH_HOOKS or profiling.RECORDER is not None or _AUTOCAST_STATE.key is not None:
        return False
    return all(type(n) in (float, int) for n in numbers)


_NUMPY_DTYPES = (float32, float64)


def numpy_operands(tensors, written):
    """The NumPy arrays of ``tensors`` (a parameter first, then its gradient and state buffers) when a step
    may compute on them as the ops' CPU kernels do and write the ``written`` ones (indices) in place: every
    one a dense CPU tensor with memory, of the parameter's shape and of its dtype (float32 or float64),
    none an inference tensor (whose in-place update the ops refuse) or sharing memory with another, and
    the written ones contiguous (no write overlaps itself). None otherwise: the ops then take the step,
    raising their errors."""
    first = tensors[0]
    dtype, shape = first.dtype, first._shape
    if dtype not in _NUMPY_DTYPES:
        return None
    arrays, storages = [], set()
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor) or t.device is not CPU or t.dtype is not dtype or t._shape != shape:
            return None
        storage = t._storage
        if storage.data is None or storage.inference or id(storage) in storages:
            return None
        arr = t._arr if t._arr is not None else t._array()
        if i in written and not arr.flags.c_contiguous:
            return None
        storages.add(id(storage))
        arrays.append(arr)
    return arrays


def numpy_counter(step, dtypes=(float32,)):
    """The NumPy array of a 0-d CPU ``state["step"]`` tensor of one of ``dtypes`` (or of another such state
    scalar), which a NumPy step updates in place; None for any other (a loaded state dict's), which the ops
    update."""
    if (not isinstance(step, Tensor) or step.device is not CPU or step.dtype not in dtypes or step._shape
            or step._storage.data is None or step._storage.inference):
        return None
    return step._arr if step._arr is not None else step._array()


def bump(*tensors):
    """Count an in-place write to each of ``tensors`` (one per op the general path would run), so that
    autograd's checks of saved tensors see it."""
    for t in tensors:
        t._storage._version += 1


def _traced_bias_corrections(counter, lr, beta1, beta2):
    """While tracing: Adam's bias corrections (`Optimizer._bias_corrections`) as two captured 0-d float64
    tensors that the compiled step sets before each call (`compiler.dynamic_scalars`), rather than the 7
    ops per parameter that computing them in the graph took (a sixth of a GPT step's traced nodes, each
    traced, optimised and fused at every compile). Each call they take the values the graph sees there:
    the count ``counter`` held before the call plus the k increments the trace made up to here
    (`compiler.counted_increments`), each rounded to float32 as the graph's ``add`` rounds it, and the
    float32 learning rate ``lr`` (the group's captured scalar); then float64 arithmetic as the graph's ops
    (``pow`` the C library's, as Python's and so torch's: the kernels' SLEEF pow is within 1 ulp of it). None where
    this does not apply: a graph whose captured scalars are not set again before each call (an export's,
    `compiler.scalars_refreshed`), numbers other than Python ones, a count or rate other than a 0-d float32
    CPU tensor, or a count the traced code changed in another way. Counts equal at the trace, of one rate,
    betas and number of increments, share the first one's pair (`_SHARED_CORRECTIONS`)."""
    from .. import compiler
    if not compiler.scalars_refreshed() or type(beta1) not in (float, int) or type(beta2) not in (float, int) \
            or not _cpu_float32_scalar(lr) or not _cpu_float32_scalar(counter):
        return None
    increments = compiler.counted_increments(counter)
    if increments is None:
        return None
    shared = _SHARED_CORRECTIONS.setdefault(compiler.current_tracer(), {})
    array = numpy_counter(counter)
    key = None if array is None else (id(lr), beta1, beta2, increments, array[()])
    if key in shared:
        counters, holders = shared[key]
        counters.append(counter)
        return holders
    one = np.float32(1)

    def read():
        t = _count(counter)
        for _ in range(increments):
            t = t + one  # (NumPy float32 arithmetic: the graph's add)
        t, rate = float(t), float(lr._array())
        try:
            return rate / (1.0 - beta1 ** t), math.sqrt(1.0 - beta2 ** t)
        except (ArithmeticError, ValueError):  # Python raises where the graph's IEEE arithmetic gives inf or NaN
            with np.errstate(all="ignore"):
                t = np.float64(t)
                return (float(np.float64(rate) / (1.0 - np.float64(beta1) ** t)),
                        float(np.sqrt(1.0 - np.float64(beta2) ** t)))
    holders = compiler.dynamic_scalars(read, ("step_size", "bias_correction2_sqrt"), float64)
    if key is not None:
        counters = [counter]
        compiler.guard(lambda: _counts_equal(counters),
                       "the optimizer's step counts that share their bias corrections are still equal")
        shared[key] = counters, holders
    return holders


# tracer -> {(id(lr), beta1, beta2, increments, count at the trace): ([counters], (step_size, bias_correction2_sqrt))}:
# Adam's parameters count their steps apiece, but a group's counts are normally all equal; one pair of captured
# scalars per parameter was one refresh (~2 us of Python) per parameter before every call of a compiled step and
# two more constants for its guards (gpt-4x128: 52 parameters, 0.11 ms of refreshes per step). Parameters whose
# counters equal at the trace share the first one's pair, while a guard holds that they stay equal.
_SHARED_CORRECTIONS = weakref.WeakKeyDictionary()


def _count(counter):
    """A step counter's value as `_traced_bias_corrections` reads it (NumPy float32)."""
    array = numpy_counter(counter)
    return array[()] if array is not None else np.float32(counter.item())


def _counts_equal(counters):
    """Whether every one of ``counters`` holds the first one's value."""
    first = _count(counters[0])
    return all(_count(c) == first for c in counters[1:])


def _cpu_float32_scalar(t):
    return isinstance(t, Tensor) and t.device is CPU and t.dtype is float32 and t._shape == ()


def step_grad(p, group):
    """The gradient a step follows: negated under ``maximize``, plus L2 ``weight_decay`` times the
    parameter; or, with ``decoupled_weight_decay`` (AdamW's), the parameter itself shrunk in place by
    ``lr * weight_decay`` first."""
    grad = -p.grad if group["maximize"] else p.grad
    weight_decay = group["weight_decay"]
    if weight_decay != 0:
        if group.get("decoupled_weight_decay"):
            p.mul_(1 - group["lr"] * weight_decay)
        else:
            grad = grad.add(p, alpha=weight_decay)
    return grad


def step_down(p, update, lr):
    """``p -= lr * update``, in place: ``lr`` a number, or a 0-d tensor in a traced step."""
    if isinstance(lr, Tensor):
        p.sub_(update * lr)
    else:
        p.add_(update, alpha=-lr)


def numpy_begin(p, state, buffers, written, zero_dim=True):
    """The first part of a `_numpy_update`: the arrays of ``p``, its gradient and its state's ``buffers`` (see
    `numpy_operands`), with ``state["step"]`` incremented as ``_step_counter`` increments it; ``(arrays, step)``,
    the step a Python float, or None, having done nothing, where the ops must take the step (and, unless
    ``zero_dim``, for a 0-d ``p``: an update whose general step multiplies by 0-d float64 tensors of the step,
    which promote a 0-d parameter's products)."""
    if not zero_dim and not p._shape:
        return None
    arrays = numpy_operands([p, p.grad] + [state[name] for name in buffers], written)
    counter = numpy_counter(state["step"])
    if arrays is None or counter is None:
        return None
    np.add(counter, 1, out=counter)
    bump(state["step"])
    return arrays, counter.item()


def numpy_grad(p, param, grad, group):
    """`step_grad` on the arrays ``param`` (of ``p``, whose decoupled decay it counts) and ``grad``, as the ops'
    kernels compute it."""
    if group["maximize"]:
        grad = np.negative(grad)
    weight_decay = group["weight_decay"]
    if weight_decay != 0:
        if group.get("decoupled_weight_decay"):
            np.multiply(param, 1 - group["lr"] * weight_decay, out=param)
            bump(p)
        else:
            grad = _add(grad, param, weight_decay)
    return grad


def numpy_lerp(start, end, weight, scratch):
    """``start.lerp_(end, weight)`` (a Python number ``weight``) on arrays (`lerp_passes`)."""
    ufunc_parts.run_passes(start.size, lerp_passes(start, end, weight, scratch))


def lerp_passes(start, end, weight, scratch):
    """The NumPy passes (`runtime.ufunc_parts.run_passes`) of ``start.lerp_(end, weight)``, a Python number
    ``weight``, as `ops.pointwise._lerp` computes it: ``start + w * d`` for ``|w| < 0.5``, else
    ``end - d * (1 - w)``, ``d = end - start`` written in ``scratch``, ``w`` and ``1 - w`` in the dtype (as
    torch converts the weight first)."""
    number = start.dtype.type
    passes = [(np.subtract, (end, start, scratch))]
    if abs(weight) < 0.5:
        return passes + [(np.multiply, (scratch, number(weight), scratch)), (np.add, (start, scratch, start))]
    return passes + [(np.multiply, (scratch, number(1) - number(weight), scratch)),
                     (np.subtract, (end, scratch, start))]


def moment_passes(exp_avg, exp_avg_sq, grad, beta1, beta2, scratch):
    """The NumPy passes of Adam's moments, ``exp_avg.lerp_(grad, 1 - beta1)`` and
    ``exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)``, ``scratch`` written."""
    return (lerp_passes(exp_avg, grad, 1 - beta1, scratch)
            + [(np.multiply, (exp_avg_sq, exp_avg_sq.dtype.type(beta2), exp_avg_sq)),
               (np.multiply, (grad, grad, scratch))]
            + add_passes(exp_avg_sq, scratch, 1 - beta2, exp_avg_sq))


def add_passes(a, b, alpha, out, scratch=None):
    """The NumPy passes of ``out = a + alpha * b`` as `ops.pointwise._add_into` computes it (``b`` times
    ``alpha`` unless it is 1, then the sum), the product written in ``scratch``, or over ``b`` if None."""
    if alpha == 1:
        return [(np.add, (a, b, out))]
    product = b if scratch is None else scratch
    return [(np.multiply, (b, a.dtype.type(alpha), product)), (np.add, (a, product, out))]


def numpy_power(base, exponent):
    """``base ** step`` of a Python float ``base`` and the step as a float64 tensor, as its op computes it
    (jitorch's own pow, `ops.powers`, which may differ from C's ``pow`` on Python floats), as a Python float."""
    return float(powers.power(base, np.array(exponent, np.float64), np.float64))
