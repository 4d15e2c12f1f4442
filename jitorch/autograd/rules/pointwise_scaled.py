"""Derivative rules of ``addcmul`` and ``addcdiv`` (jitorch/ops/pointwise_scaled.py), as derivatives.yaml's.

The engine sums each gradient down to its argument's shape (broadcasting)."""

from __future__ import annotations

from ..rule import defgrad, reads
from .common import per_input


def _scaled(t, value):
    return t if value == 1 else t * value


defgrad("addcmul", per_input(
    self=reads("", lambda g, a, out: g),
    tensor1=reads("tensor2", lambda g, a, out: _scaled(g * a.tensor2, a.value)),
    tensor2=reads("tensor1", lambda g, a, out: _scaled(g * a.tensor1, a.value))))
defgrad("addcdiv", per_input(
    self=reads("", lambda g, a, out: g),
    tensor1=reads("tensor2", lambda g, a, out: _scaled(g / a.tensor2, a.value)),
    tensor2=reads("tensor1 tensor2",
                  lambda g, a, out: _scaled(-g * a.tensor1 / (a.tensor2 * a.tensor2), a.value))))
