"""Loss modules against NumPy transcriptions of torch's formulas."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
from jitorch import nn
from jitorch.autograd import gradcheck

REDUCTIONS = ["mean", "sum", "none"]


def _reduce(loss, reduction, denominator=None):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / (loss.size if denominator is None else denominator)


def _log_softmax(x):
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def _run(module, *arrays):
    return module(*[jt.tensor(a) for a in arrays]).detach().numpy()


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_and_l1(rng, reduction):
    x, y = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    np.testing.assert_allclose(_run(nn.MSELoss(reduction=reduction), x, y), _reduce((x - y) ** 2, reduction),
                               rtol=1e-12)
    np.testing.assert_allclose(_run(nn.L1Loss(reduction=reduction), x, y), _reduce(np.abs(x - y), reduction),
                               rtol=1e-12)


def _np_cross_entropy(x, y, weight, ignore_index, reduction, smoothing):
    """torch's cross_entropy for class-index targets, (N, C) logits."""
    n, c = x.shape
    w = np.ones(c) if weight is None else weight
    logp = _log_softmax(x)
    keep = y != ignore_index
    safe_y = np.where(keep, y, 0)
    w_y = w[safe_y] * keep
    nll = -w_y * logp[np.arange(n), safe_y]
    smooth = -(logp * w).sum(axis=1) * keep
    loss = (1 - smoothing) * nll + smoothing / c * smooth
    return _reduce(loss, reduction, w_y.sum())


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy(rng, reduction, weighted, smoothing):
    x = rng.normal(size=(6, 4))
    y = np.array([0, 3, 1, -100, 2, 3])
    weight = rng.uniform(0.5, 2.0, size=4) if weighted else None
    loss = nn.CrossEntropyLoss(weight=None if weight is None else jt.tensor(weight), reduction=reduction,
                               label_smoothing=smoothing)
    np.testing.assert_allclose(_run(loss, x, y), _np_cross_entropy(x, y, weight, -100, reduction, smoothing),
                               rtol=1e-10)


def test_cross_entropy_ignore_index_and_probability_targets(rng):
    x = rng.normal(size=(5, 3))
    y = np.array([0, 2, 2, 1, 0])
    np.testing.assert_allclose(_run(nn.CrossEntropyLoss(ignore_index=2), x, y),
                               _np_cross_entropy(x, y, None, 2, "mean", 0.0), rtol=1e-10)
    p = rng.dirichlet(np.ones(3), size=5)
    np.testing.assert_allclose(_run(nn.CrossEntropyLoss(), x, p), -(p * _log_softmax(x)).sum(axis=1).mean(),
                               rtol=1e-10)


def test_cross_entropy_gradient(rng):
    loss = nn.CrossEntropyLoss(label_smoothing=0.1)
    assert gradcheck(lambda x: loss(x, jt.tensor([1, 0])), (jt.tensor(rng.normal(size=(2, 3)), requires_grad=True),))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss(rng, reduction):
    logp = _log_softmax(rng.normal(size=(5, 3)))
    y = np.array([0, 2, 1, 1, 2])
    weight = np.array([0.5, 1.0, 2.0])
    expected = _np_cross_entropy(logp, y, weight, 1, reduction, 0.0)  # log_softmax of log-probs is itself
    loss = nn.NLLLoss(weight=jt.tensor(weight), ignore_index=1, reduction=reduction)
    np.testing.assert_allclose(_run(loss, logp, y), expected, rtol=1e-10)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bce(rng, reduction):
    p = rng.uniform(0.01, 0.99, size=(4, 3))
    p[0, 0] = 0.0  # log clamps at -100, as in torch
    y = (rng.uniform(size=(4, 3)) > 0.5).astype(float)
    w = rng.uniform(size=3)
    with np.errstate(divide="ignore"):
        expected = -w * (y * np.maximum(np.log(p), -100) + (1 - y) * np.maximum(np.log(1 - p), -100))
    np.testing.assert_allclose(_run(nn.BCELoss(weight=jt.tensor(w), reduction=reduction), p, y),
                               _reduce(expected, reduction), rtol=1e-10)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_bce_with_logits(rng, reduction):
    x = rng.normal(size=(4, 3)) * 5
    y = rng.uniform(size=(4, 3))
    w, pw = rng.uniform(size=3), rng.uniform(0.5, 3, size=3)
    log_weight = (pw - 1) * y + 1
    expected = w * ((1 - y) * x + log_weight * (np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0)))
    loss = nn.BCEWithLogitsLoss(weight=jt.tensor(w), pos_weight=jt.tensor(pw), reduction=reduction)
    np.testing.assert_allclose(_run(loss, x, y), _reduce(expected, reduction), rtol=1e-10)
    assert list(loss.state_dict()) == ["weight", "pos_weight"]


def test_weight_is_a_buffer():
    loss = nn.CrossEntropyLoss(weight=jt.ones(3))
    assert [n for n, _ in loss.named_buffers()] == ["weight"] and list(loss.parameters()) == []
    assert loss.double().weight.dtype is jt.float64
    assert list(nn.CrossEntropyLoss().state_dict()) == []


@pytest.mark.parametrize("size_average, reduce, reduction", [(False, None, "sum"), (None, False, "none"),
                                                             (True, True, "mean")])
def test_legacy_reduction_flags(size_average, reduce, reduction):
    with pytest.warns(UserWarning, match=f"please use reduction='{reduction}' instead"):
        assert nn.MSELoss(size_average=size_average, reduce=reduce).reduction == reduction


def test_loss_repr():
    assert repr(nn.CrossEntropyLoss(label_smoothing=0.1)) == "CrossEntropyLoss()"
    assert repr(nn.BCEWithLogitsLoss(pos_weight=jt.ones(2))) == "BCEWithLogitsLoss()"
