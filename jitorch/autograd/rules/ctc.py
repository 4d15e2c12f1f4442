"""Derivative rule of ``_ctc_loss`` (jitorch/ops/ctc.py): its backward op, torch's gradient formula.

``_ctc_loss_backward`` has no rule, so a double backward through the loss raises, as torch's
``_ctc_loss_backward`` has no derivative either.
"""

from __future__ import annotations

from jitorch.ops.registry import OPS

from ..rule import defgrad, differentiates, reads


def _ctc(g, a, out):
    return {"log_probs": OPS["_ctc_loss_backward"](g, a.log_probs, a.targets, a.input_lengths, a.target_lengths,
                                                   out, a.blank, a.zero_infinity)}


defgrad("_ctc_loss", differentiates("log_probs", reads("log_probs targets input_lengths target_lengths result",
                                                       _ctc)))
