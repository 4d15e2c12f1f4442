"""CTC loss (jitorch/ops/ctc.py, jitorch/nn/ctc.py) against torch: losses and torch's gradient, every reduction,
padded and concatenated targets, repeated labels, empty targets and inputs, impossible alignments (inf, and 0
with zero_infinity), torch's errors, and compiled == eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as JF
from jitorch.autograd import gradcheck
from tests.nn.torch_oracle import check, same_error

RNG = np.random.default_rng(1390)  # (module-level constants only)
T, N, C, S = 7, 4, 5, 4
LOGITS = {dt: RNG.standard_normal((T, N, C)).astype(dt) for dt in (np.float32, np.float64)}
PADDED = RNG.integers(1, C, (N, S))
PADDED[0, 1] = PADDED[0, 0]  # a repeated label: its path needs a blank between
INPUT_LENGTHS, TARGET_LENGTHS = [7, 6, 5, 2], [4, 3, 0, 3]  # the last sample cannot align (2 steps, 3 labels)
CONCATENATED = np.concatenate([PADDED[i, :TARGET_LENGTHS[i]] for i in range(N)])


def _loss(targets, reduction, zero_infinity, blank=0, lengths_as_tensors=False):
    def fn(F, logits):
        lib = torch if F.__name__.startswith("torch") else jt
        il, tl = INPUT_LENGTHS, TARGET_LENGTHS
        if lengths_as_tensors:
            il, tl = lib.tensor(il), lib.tensor(tl)
        return F.ctc_loss(logits.log_softmax(2), lib.tensor(targets), il, tl, blank=blank, reduction=reduction,
                          zero_infinity=zero_infinity)
    return fn


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("zero_infinity", [False, True])
@pytest.mark.parametrize("targets", [PADDED, CONCATENATED], ids=["padded", "concatenated"])
def test_ctc_loss_matches_torch_with_gradients(dtype, tol, reduction, zero_infinity, targets):
    """Through log_softmax, as models use it: the impossible sample's inf loss and NaN gradient (or 0 and 0
    with zero_infinity) as torch's."""
    check(_loss(targets, reduction, zero_infinity), LOGITS[dtype], atol=tol, rtol=tol)


def test_ctc_loss_gradient_with_respect_to_log_probs_is_torchs_formula():
    """torch's gradient of the loss with respect to ``log_probs`` itself is ``exp(lp) - exp(log(alpha beta) + nll
    - lp)``: the logits' gradient, not the log-probabilities' (they differ by ``exp(lp)``); jitorch's is the
    same, zero past each input length."""
    lp = np.log(np.random.default_rng([1390, T, N]).dirichlet(np.ones(C), (T, N))).astype(np.float64)
    got = check(lambda F, lp: F.ctc_loss(lp, (torch if F.__name__.startswith("torch") else jt).tensor(PADDED),
                                         [7, 6, 5, 4], [4, 3, 0, 3], reduction="sum"), lp, atol=1e-12, rtol=1e-12)
    assert got[0].numel() == 1


def test_ctc_loss_gradients_are_the_logits_derivatives_by_gradcheck():
    """The rule, written as torch's formula, is the true derivative with respect to the logits behind
    log_softmax (the registry-wide gradcheck skips ``_ctc_loss`` for that reason: tests/autograd)."""
    logits = jt.tensor(LOGITS[np.float64][:, :3], requires_grad=True)
    targets = jt.tensor(PADDED[:3])
    assert gradcheck(lambda x: JF.ctc_loss(x.log_softmax(2), targets, [7, 6, 5], [4, 3, 0], reduction="none"),
                     (logits,))


@pytest.mark.parametrize("blank", [2, C - 1])
def test_ctc_loss_with_another_blank_and_tensor_lengths_matches_torch(blank):
    targets = np.where(PADDED == blank, (blank + 1) % C, PADDED)
    check(_loss(targets, "mean", True, blank=blank, lengths_as_tensors=True), LOGITS[np.float32])


def test_unbatched_ctc_loss_matches_torch():
    logits = LOGITS[np.float32][:, 0]
    check(lambda F, x: F.ctc_loss(x.log_softmax(1), (torch if F.__name__.startswith("torch") else jt).tensor(
        PADDED[0]), [7], [4], reduction="none"), logits)


def test_empty_inputs_and_targets_give_torchs_losses():
    """An empty target over no steps costs 0 (-0.0 as torch), a label over no steps inf."""
    check(lambda F, x: F.ctc_loss(x, (torch if F.__name__.startswith("torch") else jt).tensor(PADDED[:3]),
                                  [6, 0, 0], [4, 0, 1], reduction="none"), LOGITS[np.float64][:, :3], grad=False)


def test_ctc_loss_compiles_to_eager_values_and_gradients():
    targets = PADDED[:3]

    def fn(F, logits):
        lib = torch if F.__name__.startswith("torch") else jt
        return F.ctc_loss(logits.log_softmax(2), lib.tensor(targets), [7, 6, 5], [4, 3, 2])

    check(fn, LOGITS[np.float32][:, :3], compiled=True)
    step = jt.compile(lambda x: fn(JF, x), fullgraph=True)
    lowered = step.lower(jt.tensor(LOGITS[np.float32][:, :3], requires_grad=True))
    assert "_ctc_loss" in [node.op.name for node in lowered.graph.nodes]


def test_a_double_backward_through_ctc_loss_raises():
    logits = jt.tensor(LOGITS[np.float64][:, :2], requires_grad=True)
    loss = JF.ctc_loss(logits.log_softmax(2), jt.tensor(PADDED[:2]), [7, 6], [4, 3])
    (grad,) = jt.autograd.grad(loss, logits, create_graph=True)
    with pytest.raises(NotImplementedError, match="derivative for .* is not implemented"):
        grad.sum().backward()


def test_torch_ctc_loss_and_the_module_match_torch():
    lp = LOGITS[np.float32]
    for reduction in (0, 1, 2):
        want = torch.ctc_loss(torch.tensor(lp).log_softmax(2), torch.tensor(PADDED), INPUT_LENGTHS, TARGET_LENGTHS, 0,
                              reduction, True)
        got = jt.ctc_loss(jt.tensor(lp).log_softmax(2), jt.tensor(PADDED), INPUT_LENGTHS, TARGET_LENGTHS, 0,
                          reduction, True)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    want = torch.nn.CTCLoss(blank=0, zero_infinity=True)(torch.tensor(lp).log_softmax(2), torch.tensor(PADDED),
                                                         INPUT_LENGTHS, TARGET_LENGTHS)
    got = jt.nn.CTCLoss(blank=0, zero_infinity=True)(jt.tensor(lp).log_softmax(2), jt.tensor(PADDED), INPUT_LENGTHS,
                                                     TARGET_LENGTHS)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


LP = LOGITS[np.float32][:6, :3]
GOOD_TARGETS = PADDED[:3]


@pytest.mark.parametrize("args", [
    (LP, GOOD_TARGETS, [6, 7, 5], [4, 4, 2]), (LP, GOOD_TARGETS, [6, 6, 5], [4, 5, 2]),
    (LP, GOOD_TARGETS, [6, 6], [4, 4, 2]), (LP, GOOD_TARGETS, [6, 6, 5], [4, 4]),
    (LP, GOOD_TARGETS.reshape(-1)[:9], [6, 6, 5], [4, 4, 2]), (LP, GOOD_TARGETS, [6, 6, -1], [4, 4, 3]),
    (LP, GOOD_TARGETS, [6, 6, 5], [4, 4, -1]), (LP, GOOD_TARGETS.reshape(1, 3, 4), [6, 6, 5], [4, 4, 2]),
    (LP.astype(np.int64), GOOD_TARGETS, [6, 6, 5], [4, 4, 2]), (LP[None], GOOD_TARGETS, [6, 6, 5], [4, 4, 2])],
    ids=["input-too-long", "target-too-long", "input-lengths-size", "target-lengths-size", "concatenated-size",
         "negative-input", "negative-target", "targets-3d", "integer-input", "log-probs-4d"])
def test_ctc_loss_errors_as_torch(args):
    lp, targets, il, tl = args
    same_error(lambda F, lp, targets: F.ctc_loss(lp, targets, il, tl), lp, targets)


@pytest.mark.parametrize("kwargs,error", [({"blank": 5}, RuntimeError), ({"blank": -1}, RuntimeError),
                                          ({"reduction": "foo"}, ValueError)])
def test_ctc_loss_argument_errors_as_torch(kwargs, error):
    same_error(lambda F, lp, targets: F.ctc_loss(lp, targets, [6, 6, 5], [4, 4, 2], **kwargs), LP, GOOD_TARGETS)


def test_float_lengths_raise_as_torch():
    same_error(lambda F, lp, targets, il, tl: F.ctc_loss(lp, targets, il, tl), LP, GOOD_TARGETS,
               np.array([6.0, 6, 5]), np.array([4, 4, 2]))


def test_a_target_outside_the_classes_raises_where_torch_reads_past_its_buffer():
    """torch's CPU kernel does not check target values (it reads another row's memory); jitorch refuses."""
    with pytest.raises(IndexError, match="out of the class range"):
        JF.ctc_loss(jt.tensor(LP), jt.tensor(GOOD_TARGETS + C), [6, 6, 5], [4, 4, 2])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_long_batch_matches_torch_with_the_gradients_sums_through_the_scatter_kernel(monkeypatch, dtype):
    """T 50, N 16, 20 classes, targets up to 10 (repeats, uneven input lengths, one impossible): the alpha and
    beta recursions (masked once after the steps) and the gradient's sum per class, whose 16k values go through
    the generated scatter-add (`indexing.add_at_positions`), give torch's losses and gradients to rounding."""
    from jitorch.ops import indexing
    calls = []
    registered = indexing.SCATTER_ROWS_KERNEL
    monkeypatch.setattr(indexing, "SCATTER_ROWS_KERNEL", lambda name: calls.append(name) or registered(name))
    rng = np.random.default_rng(50)
    logits = rng.standard_normal((50, 16, 20)).astype(dtype)
    targets = rng.integers(1, 20, (16, 10))
    targets[0, 3] = targets[0, 2]
    il, tl = rng.integers(30, 51, 16), rng.integers(0, 11, 16)
    il[5], tl[5] = 4, 8  # no alignment: inf
    losses, grads = [], []
    for lib in (jt, torch):
        z = lib.tensor(logits, requires_grad=True)
        loss = lib.nn.functional.ctc_loss(z.log_softmax(2), lib.tensor(targets), lib.tensor(il), lib.tensor(tl),
                                          reduction="none")
        loss.backward(lib.ones(16, dtype=z.dtype))
        losses.append(loss.detach().numpy())
        grads.append(z.grad.numpy())
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(losses[0], losses[1], rtol=tol)
    # (float32: torch adds each class's alpha beta by a running log-add, jitorch by one shifted sum; where the
    # gradient's two exps cancel the roundings grow: at [22, 10, 0] torch's is 2.4e-5 off the float64 value,
    # jitorch's 8e-6)
    np.testing.assert_allclose(grads[0], grads[1], rtol=tol, atol=5e-5 if dtype == np.float32 else tol)
    assert calls  # (the gradient's per-class sums took the kernel)
