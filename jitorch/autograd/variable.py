"""``torch.autograd.Variable``: the pre-0.4 wrapper, now a way of making a tensor that shares ``data``."""

from __future__ import annotations

from ..ops import registry


class _VariableMeta(type):
    def __instancecheck__(cls, other):
        return isinstance(other, registry.Tensor)


class Variable(metaclass=_VariableMeta):
    """``Variable(data, requires_grad=False)``: a tensor sharing ``data``'s memory, cut from its history
    (requiring grad as asked); every tensor is an instance, as in torch."""

    def __new__(cls, data=None, requires_grad=False, volatile=False):
        if data is None:
            return registry.FUNCTIONS["empty"](0)
        if not isinstance(data, registry.Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        return data.detach().requires_grad_(requires_grad)


class set_multithreading_enabled:
    """Context manager (or call) torch uses to switch its engine's worker threads; jitorch's backward runs on
    the calling thread always, so the setting is recorded and changes nothing."""

    _enabled = True

    def __init__(self, mode):
        self._previous, set_multithreading_enabled._enabled = set_multithreading_enabled._enabled, bool(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        set_multithreading_enabled._enabled = self._previous
        return False
