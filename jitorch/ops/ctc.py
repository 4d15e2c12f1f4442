"""The connectionist temporal classification loss (``F.ctc_loss``): ``_ctc_loss`` and its backward op.

``_ctc_loss`` gives each sample's negative log likelihood of its target by torch's log-space alpha
recursion (Graves et al. 2006, eq. 6-7), ``_ctc_loss_backward`` the gradient as torch's CPU kernel forms it
from alpha and beta (eq. 16): ``exp(lp) - exp(log(sum alpha beta) + nll - lp)`` per time step and class, times
the loss's gradient, zero past a sample's input length and, with ``zero_infinity``, for an impossible target.
That is the gradient with respect to the logits that ``log_probs = log_softmax(logits)`` came from rather
than to ``log_probs`` themselves (the extra ``exp(lp)`` sums to 1 over the classes, which log_softmax's
backward removes): torch's, kept so that a model trains the same. The backward recomputes alpha rather than
keep it (a batch x time x (2 x max target + 1) reserve whose width only the lengths' values decide).

The kernels are NumPy loops over time, vectorized over the batch and the extended target (the target's
labels with blanks between and around them), in the input's precision as torch's. The lengths' and
targets' values are checked here, when the kernel runs, so eager and compiled calls raise alike.
"""

from __future__ import annotations

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime import fp_errors
from .indexing import add_at_positions
from .registry import TensorSpec, defop, scalar_name

_WHERE = " (while checking arguments for ctc_loss_allocate_outputs)"


def _check_shapes(log_probs, targets, input_lengths, target_lengths, blank):
    if log_probs.dtype not in (_dt.float32, _dt.float64):
        raise NotImplementedError(f"\"ctc_loss_cpu\" not implemented for '{scalar_name(log_probs.dtype)}'")
    if log_probs.ndim != 3:
        raise RuntimeError(f"Expected 3-dimensional tensor, but got {log_probs.ndim}-dimensional tensor for argument "
                           f"#1 'log_probs'{_WHERE}")
    if targets.ndim not in (1, 2):
        raise RuntimeError(f"Expected 1 to 2 dimensions, but got {targets.ndim}-dimensional tensor for argument #2 "
                           f"'targets'{_WHERE}")
    batch, labels = log_probs.shape[1:]
    if not 0 <= blank < labels:
        raise RuntimeError("blank must be in label range")
    for name, lengths in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
        if lengths.ndim != 1 or lengths.shape[0] != batch:
            raise RuntimeError(f"{name} must be of size batch_size")
    for t in (targets, input_lengths, target_lengths):
        if t.dtype.is_floating_point or t.dtype is _dt.bool or t.dtype.is_complex:
            raise RuntimeError(f"ctc_loss: expected integer targets and lengths, got {t.dtype}")
    if targets.ndim == 2 and targets.shape[0] != batch:
        raise RuntimeError(f"Expected tensor to have size {batch} at dimension 0, but got size {targets.shape[0]} "
                           f"for argument #2 'targets'{_WHERE}")
    if 0 in log_probs.shape:
        raise RuntimeError("log_probs tensor must not be empty")


def _meta(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
    _check_shapes(log_probs, targets, input_lengths, target_lengths, blank)
    return TensorSpec((log_probs.shape[1],), log_probs.dtype, log_probs.device)


def _extended(log_probs, targets, input_lengths, target_lengths, blank):
    """The value checks, then each sample's extended target ``(N, 2 max + 1)`` (blank-padded) and lengths."""
    steps, batch, labels = log_probs.shape
    il, tl = input_lengths.astype(np.int64), target_lengths.astype(np.int64)
    for i in range(batch):
        if tl[i] < 0:
            raise RuntimeError(f"Expected target_lengths to have value at least 0, but got value {tl[i]}{_WHERE}")
    if targets.ndim == 1:
        starts = np.concatenate([[0], np.cumsum(tl)[:-1]]).astype(np.int64)
        if targets.shape[0] != tl.sum():
            raise RuntimeError(f"Expected tensor to have size {tl.sum()} at dimension 0, but got size "
                               f"{targets.shape[0]} for argument #2 'targets'{_WHERE}")
    elif batch and targets.shape[1] < tl.max():
        raise RuntimeError(f"Expected tensor to have size at least {tl.max()} at dimension 1, but got size "
                           f"{targets.shape[1]} for argument #2 'targets'{_WHERE}")
    for i in range(batch):
        if il[i] < 0:
            raise RuntimeError(f"Expected input_lengths to have value at least 0, but got value {il[i]}{_WHERE}")
        if il[i] > steps:
            raise RuntimeError(f"Expected input_lengths to have value at most {steps}, but got value {il[i]}{_WHERE}")
    width = 2 * int(tl.max(initial=0)) + 1
    ext = np.full((batch, width), blank, np.int64)
    for i in range(batch):
        row = targets[starts[i]:starts[i] + tl[i]] if targets.ndim == 1 else targets[i, :tl[i]]
        if row.size and (row.min() < 0 or row.max() >= labels):
            # torch reads past the class dim here (garbage, no error): jitorch refuses
            raise IndexError(f"ctc_loss: target value {int(row[(row < 0) | (row >= labels)][0])} of sample {i} "
                             f"is out of the class range [0, {labels})")
        ext[i, 1:2 * tl[i]:2] = row
    return ext, il, tl


def _log_add3(three, noskip, extra):
    """torch's ``log(exp(a - m) + exp(b - m) + exp(c - m)) + m + extra`` of ``three`` = (a, b, c) ``(3, N, W)``
    (written over), ``c`` read as -inf where ``noskip``, with ``m`` the largest: the three exps summed over
    the first dim, in order."""
    np.copyto(three[2], -np.inf, where=noskip)
    # m no lower than the lowest finite value: where all three are -inf, exp(-inf - m) is 0 and log(0) + m -inf,
    # as with torch's 0 in that place; elsewhere it is their maximum
    m = np.maximum(three.max(0), np.finfo(three.dtype).min)
    three -= m
    np.exp(three, out=three)
    out = np.log(np.add.reduce(three, 0))
    out += m
    out += extra
    return out


def _tables(lp, ext, tl):
    """(the log probabilities of each sample's extended target ``(T, N, W)``, inside its extended target
    ``(N, W)``, a label like the one two before ``(N, W)``)."""
    width = ext.shape[1]
    inside = np.arange(width)[None, :] <= 2 * tl[:, None]
    same = np.ones(ext.shape, bool)
    same[:, 2:] = ext[:, 2:] == ext[:, :-2]
    return lp[:, np.arange(ext.shape[0])[:, None], ext], inside, same


def _alphas(lp, ext, il, tl):
    """log alpha ``(T, N, W)`` of every step (-inf outside each sample's extended target and steps). Each
    step reads the last from a table padded with two -inf columns before position 0."""
    steps, batch, _ = lp.shape
    width = ext.shape[1]
    at, inside, noskip = _tables(lp, ext, tl)  # (may come from s - 2: a label unlike the one two before)
    padded = np.full((max(steps, 1), batch, width + 2), -np.inf, lp.dtype)
    alpha = padded[:, :, 2:]
    if steps:
        alpha[0, :, 0] = lp[0, np.arange(batch), ext[:, 0]]
        if width > 1:
            first = tl > 0
            alpha[0, first, 1] = lp[0, np.arange(batch), ext[:, 1]][first]
        alpha[0][(il == 0)[:, None] | ~inside] = -np.inf
    three = np.empty((3, batch, width), lp.dtype)
    for t in range(1, steps):
        prev = padded[t - 1]
        three[0], three[1], three[2] = prev[:, 2:], prev[:, 1:-1], prev[:, :-2]
        alpha[t] = _log_add3(three, noskip, at[t])
    # (once, after the steps: a position past a target reads only positions past it, a step past an input's
    # length only later steps, so neither reaches the values kept)
    alpha[(np.arange(len(alpha))[:, None] >= il[None, :])[:, :, None] | ~inside[None]] = -np.inf
    return alpha


def _nll(alpha, il, tl):
    batch = il.shape[0]
    out = np.empty(batch, alpha.dtype)
    for i in range(batch):
        if il[i] == 0:
            out[i] = -0.0 if tl[i] == 0 else np.inf
            continue
        last = alpha[il[i] - 1, i]
        if tl[i] == 0:
            out[i] = -last[0]
            continue
        l1, l2 = last[2 * tl[i]], last[2 * tl[i] - 1]
        m = max(l1, l2)
        m = 0 if m == -np.inf else m
        out[i] = -(np.log(np.exp(l1 - m) + np.exp(l2 - m)) + m)
    return out


def _ctc_cpu(spec, log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
    ext, il, tl = _extended(log_probs, targets, input_lengths, target_lengths, blank)
    return fp_errors.call_silenced(lambda: _nll(_alphas(log_probs, ext, il, tl), il, tl))


defop("_ctc_loss(Tensor log_probs, Tensor targets, Tensor input_lengths, Tensor target_lengths, int blank=0, "
      "bool zero_infinity=False) -> Tensor",
      meta=_meta, cpu=_ctc_cpu, kind="loss", variants=(),
      doc="Each sample's CTC negative log likelihood ``(N,)`` of its target (rows of a padded ``(N, S)`` "
          "``targets`` or runs of a concatenated 1-D one) under ``log_probs`` ``(T, N, C)``, by torch's log-space "
          "alpha recursion: inf for a target no alignment reaches (``zero_infinity`` acts in the backward).")


# Backward ------------------------------------------------------------------------------------------

def _backward_meta(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, blank,
                   zero_infinity):
    _check_shapes(log_probs, targets, input_lengths, target_lengths, blank)
    return TensorSpec(log_probs.shape, log_probs.dtype, log_probs.device)


def _betas(lp, ext, il, tl):
    """log beta ``(T, N, W)``: from each sample's last step back (-inf outside, as `_alphas`; the table padded
    after the last position)."""
    steps, batch, _ = lp.shape
    width = ext.shape[1]
    at, inside, _ = _tables(lp, ext, tl)
    noskip = np.ones((batch, width), bool)  # may come from s + 2: a label unlike the one two after
    noskip[:, :-2] = ext[:, :-2] == ext[:, 2:]
    padded = np.full((max(steps, 1), batch, width + 2), -np.inf, lp.dtype)
    beta = padded[:, :, :width]
    for i in np.nonzero(il > 0)[0]:
        last = il[i] - 1
        beta[last, i, 2 * tl[i]] = lp[last, i, ext[i, 0]]
        if tl[i] > 0:
            beta[last, i, 2 * tl[i] - 1] = lp[last, i, ext[i, 2 * tl[i] - 1]]
    three = np.empty((3, batch, width), lp.dtype)
    for t in range(steps - 2, -1, -1):
        after = padded[t + 1]
        three[0], three[1], three[2] = after[:, :-2], after[:, 1:-1], after[:, 2:]
        np.copyto(beta[t], _log_add3(three, noskip, at[t]), where=(t < il - 1)[:, None] & inside)
    return beta


def _ctc_backward_cpu(spec, grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, blank,
                      zero_infinity):
    ext, il, tl = _extended(log_probs, targets, input_lengths, target_lengths, blank)
    return fp_errors.call_silenced(_gradient, grad, log_probs, ext, il, tl, neg_log_likelihood, zero_infinity)


def _gradient(grad, log_probs, ext, il, tl, neg_log_likelihood, zero_infinity):
    """torch's gradient formula (see ``_ctc_loss_backward``), floating-point errors silenced by the caller."""
    steps, batch, labels = log_probs.shape
    both = _alphas(log_probs, ext, il, tl)[:steps] + _betas(log_probs, ext, il, tl)[:steps]
    # log of the sum of alpha beta over the extended target's positions holding each class
    at = (np.arange(steps)[:, None, None], np.arange(batch)[None, :, None], ext[None, :, :])
    at = tuple(np.broadcast_to(a, both.shape) for a in at)
    peak = np.full((steps, batch, labels), -np.inf, log_probs.dtype)
    np.maximum.at(peak, at, both)
    shift = np.where(peak == -np.inf, 0, peak).astype(log_probs.dtype)
    total = np.zeros_like(peak)
    positions = (at[0] * batch + at[1]) * labels + at[2]
    add_at_positions(total, positions, np.exp(both - shift[at]))
    collected = np.log(total) + shift
    nll = neg_log_likelihood.astype(log_probs.dtype)[None, :, None]
    out = (np.exp(log_probs) - np.exp(collected + nll - log_probs)) * grad.astype(log_probs.dtype)[None, :, None]
    out[np.arange(steps)[:, None] >= il[None, :]] = 0
    if zero_infinity:
        out[:, neg_log_likelihood == np.inf] = 0
    return out.astype(log_probs.dtype, copy=False)


defop("_ctc_loss_backward(Tensor grad, Tensor log_probs, Tensor targets, Tensor input_lengths, "
      "Tensor target_lengths, Tensor neg_log_likelihood, int blank, bool zero_infinity) -> Tensor",
      meta=_backward_meta, cpu=_ctc_backward_cpu, kind="loss", variants=(),
      doc="torch's gradient of ``_ctc_loss`` from the per-sample loss gradient ``grad``: "
          "``exp(lp) - exp(log(sum alpha beta) + nll - lp)`` times ``grad`` (the logits' gradient through "
          "log_softmax, as torch's CPU and CUDA kernels give it), zero past each input length and, with "
          "``zero_infinity``, for samples whose loss is inf.")
