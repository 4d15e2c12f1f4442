"""Derivative rule of the fused attention ``_attention`` (jitorch/ops/attention.py): its backward op.

``_attention_backward`` has no rule, so a double backward through the fused attention raises, as through
torch's fused CPU and CUDA attention kernels; its ``reserve`` output (the softmax weights as bytes) carries no
gradient.
"""

from __future__ import annotations

from jitorch.ops.registry import OPS

from ..rule import defgrad, differentiates, reads
from .common import wanted

_ARGS = ("query", "key", "value")


def _attention(g, a, out):
    """The gradients in one op, from the output's gradient and the saved reserve (softmax weights); an additive
    mask's, where it requires grad, is the scaled scores' (the op's fourth result, asked for then alone)."""
    mask = wanted(a.attn_mask)
    grads = OPS["_attention_backward"](g[0], a.query, a.key, a.value, out[1], a.is_causal, a.scale, mask)
    got = {name: grad for name, grad in zip(_ARGS, grads) if wanted(getattr(a, name))}
    if mask:
        got["attn_mask"] = grads[3]
    return got


# (the output is not read; where torch's node saves it, its flash attention's, nn.functional checks its version
# too: `ops.attention.saves_output`)
defgrad("_attention", differentiates(" ".join(_ARGS) + " attn_mask", reads("query key value result1", _attention)))
