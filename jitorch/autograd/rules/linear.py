"""Derivative rule of ``linear`` (jitorch/ops/linear.py): ``dinput = g @ weight``, ``dweight = g^T @ input``
with every leading dim folded into the rows (so the weight's gradient comes out contiguous, in its layout),
``dbias`` the sum of ``g`` over the rows. Written with ops, so that it differentiates again. Each formula reads
only its own operand, as torch's ``addmm`` saves ``mat2`` only where ``mat1`` wants a gradient: a write into the
weight between the forward and the backward raises only where the input's gradient reads it (fuzz seed 28 of
``--models``)."""

from __future__ import annotations

from ..rule import defgrad, reads
from .common import per_input


def _rows(t):
    return t.reshape(-1, t.shape[-1])


def _bias(g, a, out):
    return _rows(g).sum(0) if a.bias.ndim == 1 else g.sum()


defgrad("linear", per_input(input=reads("weight", lambda g, a, out: g.matmul(a.weight)),
                            weight=reads("input", lambda g, a, out: _rows(g).t().matmul(_rows(a.input))),
                            bias=reads("", _bias)))
