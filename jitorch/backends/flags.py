"""Switches of the backends, as torch.backends has them: typed flags, and deterministic algorithms.

`Flag` is a boolean attribute that refuses anything but a bool (torch's setters raise for ``1`` too);
`FlagModule` gives a module such attributes (``jitorch.backends.cudnn.benchmark = True``) and `flags` sets
some for a block. The float32 matmul precision is recorded for torch's API and changes nothing: jitorch
computes float32 matmuls in IEEE float32 always (no TensorFloat-32 path).

`use_deterministic_algorithms` is read by the CUDA backend: with it on, the ops whose kernels add floats with
atomics (index_add, index_put with accumulate, scatter_add, put with accumulate, scatter_reduce's sums, means
and products), whose last bits then depend on the order the atomics land in, run their CPU kernel on the host
instead, which adds in one fixed order.
"""

from __future__ import annotations

import contextlib
import types
import warnings


class Flag:
    """A boolean attribute of a `FlagModule` or of a flags object; ``setter`` names it in the error for a
    value that is not a bool."""

    def __init__(self, default, setter, doc):
        self.default = default
        self.setter = setter
        self.__doc__ = doc

    def __set_name__(self, owner, name):
        self.name = "_flag_" + name

    def __get__(self, obj, owner=None):
        return self if obj is None else getattr(obj, self.name, self.default)

    def __set__(self, obj, value):
        if not isinstance(value, bool):
            raise RuntimeError(f"{self.setter} expects a bool, but got {type(value).__name__}")
        object.__setattr__(obj, self.name, value)


class FlagModule(types.ModuleType):
    """A module class whose `Flag` attributes check what is assigned to them (a module of flags sets
    ``sys.modules[__name__].__class__`` to a subclass)."""


@contextlib.contextmanager
def flags(owner, **values):
    """Set ``owner``'s flags to ``values`` inside the block, then back to what they were."""
    before = {name: getattr(owner, name) for name in values}
    for name, value in values.items():
        setattr(owner, name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(owner, name, value)


# Deterministic algorithms: (enabled, warn_only), as torch.use_deterministic_algorithms sets them.
_deterministic = [False, False]
_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def use_deterministic_algorithms(mode, *, warn_only=False):
    """Make the ops whose results can vary from run to run (CUDA's atomic float additions) compute in a fixed
    order instead (see the module docstring). Every op has such a form, so ``warn_only`` never warns."""
    if not isinstance(mode, bool):
        raise TypeError(f"_set_deterministic_algorithms(): argument 'mode' (position 1) must be bool, not "
                        f"{type(mode).__name__}")
    if not isinstance(warn_only, bool):
        raise TypeError(f"_set_deterministic_algorithms(): argument 'warn_only' must be bool, not "
                        f"{type(warn_only).__name__}")
    _deterministic[:] = [mode, mode and warn_only]


def are_deterministic_algorithms_enabled():
    """Whether `use_deterministic_algorithms` is on."""
    return _deterministic[0]


def is_deterministic_algorithms_warn_only_enabled():
    """Whether `use_deterministic_algorithms` is on with ``warn_only``."""
    return _deterministic[1]


def set_deterministic_debug_mode(debug_mode):
    """`use_deterministic_algorithms` by torch's debug mode: 0 or "default" (off), 1 or "warn" (on,
    warn_only), 2 or "error" (on)."""
    if isinstance(debug_mode, str):
        if debug_mode not in _DEBUG_MODES:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`, but got "
                               f"{debug_mode}")
        debug_mode = _DEBUG_MODES[debug_mode]
    if debug_mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode, expected 0, 1, or 2, but got {debug_mode}")
    use_deterministic_algorithms(debug_mode > 0, warn_only=debug_mode == 1)


def get_deterministic_debug_mode():
    """The debug mode (0, 1 or 2) `use_deterministic_algorithms`'s setting corresponds to."""
    enabled, warn_only = _deterministic
    return 0 if not enabled else 1 if warn_only else 2


# torch.set_float32_matmul_precision's setting, which ``backends.cuda.matmul.allow_tf32`` reads and writes.
_MATMUL_PRECISIONS = ("highest", "high", "medium")
_matmul_precision = ["highest"]


def set_float32_matmul_precision(precision):
    """Record the precision float32 matmuls may use ("highest", "high": TensorFloat-32 allowed, "medium":
    bfloat16 allowed). It changes no result: jitorch's float32 matmuls, on the CPU and on CUDA, always
    compute in IEEE float32, which is "highest"."""
    if precision not in _MATMUL_PRECISIONS:
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
                      "setFloat32MatmulPrecision call has no effect.", UserWarning, stacklevel=2)
        return
    _matmul_precision[0] = precision


def get_float32_matmul_precision():
    """The precision `set_float32_matmul_precision` recorded ("highest" until then)."""
    return _matmul_precision[0]
