"""Tensor arguments of nn.functional's losses and norms that torch refuses to differentiate, against torch.

torch's derivatives.yaml gives some arguments no derivative (``non_differentiable``): nll_loss's and
binary_cross_entropy's ``weight``, soft_margin_loss's ``target``, batch norm's running statistics. Where one
of them requires grad with grad mode on, torch raises before computing ("The function 'soft_margin_loss' is
not differentiable with respect to argument 'target'..."). jitorch composes these functions of ops that do
differentiate those arguments, so before `engine.not_differentiable` it silently gave a gradient torch refuses
(or, for batch norm's running mean in training, silently none). Each case runs with the tensors ``x``
(input), ``t`` and ``c`` requiring grad in torch and in jitorch; the two must raise the same error, or both
compute the same value and give a gradient to the same tensors.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt

# name -> f(lib, x, t, c): x (2, 3, 4) and t (2, 3, 4) in [0, 1) and c (3,) in [0, 1), all requiring grad
CASES = {
    "soft_margin_loss target": lambda L, x, t, c: L.nn.functional.soft_margin_loss(x, t),
    "binary_cross_entropy target": lambda L, x, t, c: L.nn.functional.binary_cross_entropy(L.sigmoid(x), t),
    "binary_cross_entropy weight": lambda L, x, t, c: L.nn.functional.binary_cross_entropy(
        L.sigmoid(x), t.detach(), weight=t),
    "bce_with_logits weight": lambda L, x, t, c: L.nn.functional.binary_cross_entropy_with_logits(
        x, t.detach(), weight=t),
    "bce_with_logits pos_weight": lambda L, x, t, c: L.nn.functional.binary_cross_entropy_with_logits(
        x, t.detach(), pos_weight=c.reshape(3, 1)),
    "bce_with_logits target": lambda L, x, t, c: L.nn.functional.binary_cross_entropy_with_logits(x, t),
    "nll_loss weight": lambda L, x, t, c: L.nn.functional.nll_loss(
        x[0], L.tensor([0, 1, 3]), weight=t[0, 0]),
    "cross_entropy weight": lambda L, x, t, c: L.nn.functional.cross_entropy(
        x[0], L.tensor([0, 1, 3]), weight=t[0, 0]),
    "multi_margin_loss weight": lambda L, x, t, c: L.nn.functional.multi_margin_loss(
        x[0], L.tensor([0, 1, 3]), weight=t[0, 0]),
    "multilabel_soft_margin_loss weight": lambda L, x, t, c: L.nn.functional.multilabel_soft_margin_loss(
        x[0], t[0].detach(), weight=t[0, 0]),
    "batch_norm running stats, training": lambda L, x, t, c: L.nn.functional.batch_norm(
        x, c, c.abs() + 1, training=True),
    "batch_norm running stats, eval": lambda L, x, t, c: L.nn.functional.batch_norm(
        x, c, c.abs() + 1, training=False),
    "batch_norm running var only": lambda L, x, t, c: L.nn.functional.batch_norm(
        x, c.detach(), c + 1, training=True),
    "batch_norm weight, eval": lambda L, x, t, c: L.nn.functional.batch_norm(
        x, c.detach(), c.detach() + 1, weight=c, training=False),
    "instance_norm running stats": lambda L, x, t, c: L.nn.functional.instance_norm(
        x, c, c.abs() + 1, use_input_stats=True),
    "mse_loss target": lambda L, x, t, c: L.nn.functional.mse_loss(x, t),
    "huber_loss target": lambda L, x, t, c: L.nn.functional.huber_loss(x, t),
    "kl_div target": lambda L, x, t, c: L.nn.functional.kl_div(x, t, reduction="batchmean"),
    "poisson_nll_loss target": lambda L, x, t, c: L.nn.functional.poisson_nll_loss(x, t),
    "gaussian_nll_loss var": lambda L, x, t, c: L.nn.functional.gaussian_nll_loss(x, t, t + 1),
    "margin_ranking_loss target": lambda L, x, t, c: L.nn.functional.margin_ranking_loss(x, t, t * 2 - 1),
    "hinge_embedding_loss target": lambda L, x, t, c: L.nn.functional.hinge_embedding_loss(x, t * 2 - 1),
    "cosine_embedding_loss target": lambda L, x, t, c: L.nn.functional.cosine_embedding_loss(
        x[0], t[0], c * 2 - 1),
}


def _run(lib, case, grad=True):
    gen = np.random.default_rng(49)
    arrays = [gen.standard_normal((2, 3, 4)), gen.random((2, 3, 4)), gen.random(3)]
    tensors = [lib.tensor(a.astype(np.float32), requires_grad=True) for a in arrays]
    with (lib.enable_grad() if grad else lib.no_grad()):
        try:
            out = CASES[case](lib, *tensors)
        except (RuntimeError, NotImplementedError) as e:
            return ("raises", RuntimeError if isinstance(e, RuntimeError) else NotImplementedError, str(e))
    if not grad:
        return ("value", out.detach().numpy(), None)
    out.sum().backward()
    return ("value", out.detach().numpy(), [t.grad is not None for t in tensors])


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_refused_argument_raises_as_torchs_and_the_others_differentiate_as_torchs(case):
    want, got = _run(torch, case), _run(jt, case)
    assert got[0] == want[0], (case, want, got)
    if want[0] == "raises":
        assert (got[1], got[2]) == (want[1], want[2])
    else:
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
        assert got[2] == want[2], "which of x, t, c received a gradient"


@pytest.mark.parametrize("case", ["soft_margin_loss target", "binary_cross_entropy weight", "nll_loss weight",
                                  "batch_norm running stats, training"])
def test_a_refused_argument_is_accepted_under_no_grad_as_torch_accepts_it(case):
    want, got = _run(torch, case, grad=False), _run(jt, case, grad=False)
    assert got[0] == want[0] == "value"
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


def test_a_compiled_function_refuses_the_argument_as_eager_does():
    f = jt.compile(lambda x, t: jt.nn.functional.soft_margin_loss(x, t))
    x, t = jt.randn(5, requires_grad=True), jt.rand(5, requires_grad=True)
    with pytest.raises(RuntimeError, match="'soft_margin_loss' is not differentiable with respect to argument "
                                           "'target'"):
        f(x, t)
    np.testing.assert_allclose(f(x, t.detach()).detach().numpy(),
                               jt.nn.functional.soft_margin_loss(x, t.detach()).detach().numpy())


def test_batch_norm_module_buffers_never_require_grad_so_training_runs():
    bn = jt.nn.BatchNorm1d(3)
    x = jt.randn(4, 3, requires_grad=True)
    bn(x).sum().backward()
    assert x.grad is not None and not bn.running_mean.requires_grad
