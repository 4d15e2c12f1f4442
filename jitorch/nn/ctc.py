"""``F.ctc_loss``: torch's argument handling and reductions around the ``_ctc_loss`` op (jitorch/ops/ctc.py)."""

from __future__ import annotations

import jitorch as jt
from jitorch.ops.registry import OPS

_REDUCTIONS = ("none", "mean", "sum")


def _lengths(lengths, device):
    """Lengths as an int64 tensor: a tensor as it is (integers only, as torch), a sequence or int converted."""
    if isinstance(lengths, jt.Tensor):
        if lengths.dtype.is_floating_point or lengths.dtype.is_complex:
            raise RuntimeError("lengths must be integral")
        return lengths.to(device=device)
    return jt.tensor(list(lengths) if not isinstance(lengths, int) else [lengths], dtype=jt.int64, device=device)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    """The connectionist temporal classification loss of ``log_probs`` ``(T, N, C)`` (or ``(T, C)``) against
    ``targets`` (padded ``(N, S)`` or concatenated 1-D), each sample read for its ``input_lengths`` steps
    and ``target_lengths`` labels; ``reduction`` 'mean' divides each loss by its target length first.
    ``zero_infinity`` turns the inf loss of an impossible target (and its gradient) to 0. The gradient is
    torch's: the one with respect to the logits ``log_probs`` came from by log_softmax."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    tensors = [isinstance(x, jt.Tensor) for x in (input_lengths, target_lengths)]
    if tensors[0] != tensors[1]:
        raise TypeError("ctc_loss(): expected input_lengths and target_lengths both tensors or both tuples of ints")
    for name, lengths in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if isinstance(lengths, jt.Tensor) and (lengths.dtype.is_floating_point or lengths.dtype.is_complex):
            raise RuntimeError(f"{name} must be integral")
    batched = log_probs.ndim == 3
    if not batched:
        log_probs, targets = log_probs.unsqueeze(1), targets.unsqueeze(0)
    input_lengths, target_lengths = (_lengths(x, log_probs.device) for x in (input_lengths, target_lengths))
    if not batched:
        input_lengths, target_lengths = input_lengths.reshape(-1), target_lengths.reshape(-1)
    if targets.dtype.is_floating_point or targets.dtype is jt.bool:
        targets = targets.long()
    loss = OPS["_ctc_loss"](log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)
    if zero_infinity:
        loss = jt.where(loss == float("inf"), 0.0, loss)
    if reduction == "mean":
        return (loss / target_lengths.clamp_min(1).to(loss.dtype)).mean()
    if reduction == "sum":
        return loss.sum()
    return loss if batched else loss.squeeze(0)
