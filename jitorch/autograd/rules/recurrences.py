"""Derivative rule of the fused recurrence ``_rnn_layer`` (jitorch/ops/recurrences.py): its backward op.

``_rnn_layer_backward`` has no rule, so a double backward through a fused layer raises (as through
torch's cuDNN RNN); ``nn``'s recurrent modules take their composed path where they cannot use it.
"""

from __future__ import annotations

from jitorch.ops.registry import OPS

from ..rule import defgrad, differentiates, reads
from .common import wanted

_ARGS = ("input", "hx", "cx", "w_hh", "b_hh", "w_hr")


def _rnn_layer(g, a, out):
    """Backpropagation through time, one op: gradients of the input projection, states and weights."""
    grads = OPS["_rnn_layer_backward"](a.mode, g[0], g[1], g[2], a.hx, a.cx, a.w_hh, a.w_hr, out[0], out[3],
                                       a.reverse)
    return {name: grad for name, grad in zip(_ARGS, grads) if wanted(getattr(a, name))}


defgrad("_rnn_layer", differentiates(" ".join(_ARGS), reads("hx cx w_hh w_hr result", _rnn_layer)))
