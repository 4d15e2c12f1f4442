"""``nn.utils.rnn``: pad_sequence, padding variable-length sequences into one batch tensor."""

from __future__ import annotations

from ...ops.registry import FUNCTIONS as _fn


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stack sequences of shapes ``(L_i, *)`` into ``(L, B, *)`` (``(B, L, *)`` when ``batch_first``),
    ``L`` the longest length, filling with ``padding_value`` after each sequence (before it when
    ``padding_side`` is 'left'). Differentiable in the sequences."""
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    if any(s.ndim == 0 for s in sequences):
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        fill = s.new_full((longest - s.shape[0], *s.shape[1:]), padding_value)
        padded.append(_fn["cat"]([s, fill] if padding_side == "right" else [fill, s]))
    return _fn["stack"](padded, 0 if batch_first else 1)
