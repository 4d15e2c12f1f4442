"""The margin, embedding, Poisson and Gaussian losses and nn.utils' parameter vectors and pad_sequence,
against NumPy transcriptions of torch's formulas."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
import jitorch.nn as nn
import jitorch.nn.functional as F
from jitorch.autograd import gradcheck
from jitorch.nn.utils import parameters_to_vector, vector_to_parameters
from jitorch.nn.utils.rnn import pad_sequence
from tests.support import assert_close

REDUCTIONS = ["none", "mean", "sum"]


def t64(a, grad=False):
    return jt.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def reduce(loss, reduction):
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


def np_logsigmoid(x):
    return np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x)))


def np_pairwise(a, b, p, eps):
    return (np.abs(a - b + eps) ** p).sum(-1) ** (1 / p)


def np_multi_margin(x, y, p, margin, weight):
    """torch's CPU kernel: per sample, sum over i != y of w[y] max(0, margin - x[y] + x[i])^p, over C."""
    x2 = x.reshape(-1, x.shape[-1] if x.ndim else 1)
    y1 = y.reshape(-1)
    out = []
    for row, target in zip(x2, y1):
        total = 0.0
        for i, value in enumerate(row):
            z = margin - row[target] + value
            if i != target and z > 0:
                total += (z if p == 1 else z * z) * (1.0 if weight is None else weight[target])
        out.append(total / row.size)
    out = np.array(out)
    return out if x.ndim == 2 else out.reshape(y.shape)


seeds = st.integers(0, 999)
reductions = st.sampled_from(REDUCTIONS)
batches = st.integers(1, 4)
features = st.integers(1, 4)


@given(seed=seeds, reduction=reductions, n=batches, margin=st.sampled_from([0.0, 0.5]))
def test_margin_ranking_loss(seed, reduction, n, margin):
    rng = np.random.default_rng(seed)
    x1, x2, y = rng.standard_normal(n), rng.standard_normal(n), rng.choice([-1.0, 1.0], n)
    want = reduce(np.maximum(0, -y * (x1 - x2) + margin), reduction)
    assert_close(F.margin_ranking_loss(t64(x1), t64(x2), t64(y), margin, reduction=reduction), want)
    assert_close(nn.MarginRankingLoss(margin, reduction=reduction)(t64(x1), t64(x2), t64(y)), want)


@given(seed=seeds, reduction=reductions, n=batches, d=features, margin=st.sampled_from([1.0, 0.3]))
def test_hinge_embedding_and_soft_margin(seed, reduction, n, d, margin):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((n, d)), rng.choice([-1.0, 1.0], (n, d))
    hinge = np.where(y == 1, x, np.maximum(0, margin - x))
    assert_close(F.hinge_embedding_loss(t64(x), t64(y), margin, reduction=reduction), reduce(hinge, reduction))
    assert_close(nn.HingeEmbeddingLoss(margin, reduction=reduction)(t64(x), t64(y)), reduce(hinge, reduction))
    soft = reduce(np.log1p(np.exp(-y * x)), reduction)
    assert_close(F.soft_margin_loss(t64(x), t64(y), reduction=reduction), soft)
    assert_close(nn.SoftMarginLoss(reduction=reduction)(t64(x), t64(y)), soft)


def test_hinge_embedding_other_targets_take_both_terms():
    # torch: a target neither 1 nor -1 adds x and max(0, margin - x)
    loss = F.hinge_embedding_loss(t64([0.25]), t64([0.0]), reduction="none")
    assert_close(loss, np.array([0.25 + 0.75]))


@given(seed=seeds, reduction=reductions, n=batches, c=features, weighted=st.booleans())
def test_multilabel_soft_margin_loss(seed, reduction, n, c, weighted):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((n, c)), rng.integers(0, 2, (n, c)).astype(np.float64)
    w = rng.random(c) if weighted else None
    loss = -(y * np_logsigmoid(x) + (1 - y) * np_logsigmoid(-x)) * (1.0 if w is None else w)
    want = reduce(loss.sum(-1) / c, reduction)
    weight = None if w is None else t64(w)
    assert_close(F.multilabel_soft_margin_loss(t64(x), t64(y), weight, reduction=reduction), want)
    assert_close(nn.MultiLabelSoftMarginLoss(weight, reduction=reduction)(t64(x), t64(y)), want)


@given(seed=seeds, reduction=reductions, n=batches, d=features, margin=st.sampled_from([0.0, -0.5, 0.5]))
def test_cosine_embedding_loss(seed, reduction, n, d, margin):
    rng = np.random.default_rng(seed)
    a, b, y = rng.standard_normal((n, d)), rng.standard_normal((n, d)), rng.choice([-1.0, 1.0], n)
    cos = (a * b).sum(1) / np.sqrt(((a * a).sum(1) + 1e-12) * ((b * b).sum(1) + 1e-12))
    want = reduce(np.where(y == 1, 1 - cos, np.maximum(0, cos - margin)), reduction)
    assert_close(F.cosine_embedding_loss(t64(a), t64(b), t64(y), margin, reduction=reduction), want)
    assert_close(nn.CosineEmbeddingLoss(margin, reduction=reduction)(t64(a), t64(b), t64(y)), want)
    # unbatched: (D,) inputs with a 0-d target give a 0-d loss
    one = F.cosine_embedding_loss(t64(a[0]), t64(b[0]), t64(y[0]), margin, reduction="none")
    assert one.shape == () and np.isclose(one.item(), np.where(y == 1, 1 - cos, np.maximum(0, cos - margin))[0])


@given(seed=seeds, reduction=reductions, n=batches, d=features, p=st.sampled_from([1.0, 2.0, 3.0]),
       swap=st.booleans(), margin=st.sampled_from([1.0, 2.5]))
def test_triplet_margin_loss(seed, reduction, n, d, p, swap, margin):
    rng = np.random.default_rng(seed)
    a, pos, neg = (rng.standard_normal((n, d)) for _ in range(3))
    eps = 1e-6
    d_neg = np_pairwise(a, neg, p, eps)
    if swap:
        d_neg = np.minimum(d_neg, np_pairwise(pos, neg, p, eps))
    want = reduce(np.maximum(0, margin + np_pairwise(a, pos, p, eps) - d_neg), reduction)
    got = F.triplet_margin_loss(t64(a), t64(pos), t64(neg), margin, p, eps, swap, reduction=reduction)
    assert_close(got, want)
    module = nn.TripletMarginLoss(margin, p, eps, swap, reduction=reduction)
    assert_close(module(t64(a), t64(pos), t64(neg)), want)


@given(seed=seeds, reduction=reductions, n=batches, d=features, log_input=st.booleans(), full=st.booleans())
def test_poisson_nll_loss(seed, reduction, n, d, log_input, full):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((n, d)), rng.poisson(2.0, (n, d)).astype(np.float64)
    if not log_input:
        x = np.abs(x)
    loss = np.exp(x) - y * x if log_input else x - y * np.log(x + 1e-8)
    if full:
        with np.errstate(divide="ignore", invalid="ignore"):
            stirling = y * np.log(y) - y + 0.5 * np.log(2 * np.pi * y)
        loss = loss + np.where(y > 1, stirling, 0.0)
    want = reduce(loss, reduction)
    assert_close(F.poisson_nll_loss(t64(x), t64(y), log_input, full, reduction=reduction), want)
    assert_close(nn.PoissonNLLLoss(log_input, full, reduction=reduction)(t64(x), t64(y)), want)


VAR_SHAPES = [(3, 4), (3,), (3, 1), (1, 4)]


@given(seed=seeds, reduction=reductions, var_shape=st.sampled_from(VAR_SHAPES), full=st.booleans())
def test_gaussian_nll_loss(seed, reduction, var_shape, full):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    var = rng.random(var_shape)
    var.reshape(-1)[0] = 1e-9  # below eps: clamped
    v = np.maximum(var if var.shape != (3,) else var[:, None], 1e-6)
    loss = 0.5 * (np.log(v) + (x - y) ** 2 / v) + (0.5 * np.log(2 * np.pi) if full else 0.0)
    want = reduce(loss, reduction)
    assert_close(F.gaussian_nll_loss(t64(x), t64(y), t64(var), full, reduction=reduction), want)
    assert_close(nn.GaussianNLLLoss(full=full, reduction=reduction)(t64(x), t64(y), t64(var)), want)


def test_gaussian_nll_loss_float_var_and_clamp_gradient():
    x, y = np.array([0.5, -1.0]), np.array([0.0, 1.0])
    assert_close(F.gaussian_nll_loss(t64(x), t64(y), 2.0), (0.5 * (np.log(2.0) + (x - y) ** 2 / 2.0)).mean())
    # As torch, the clamp at eps changes the value only: the gradient reaches var as if at the clamped value
    var = t64([1e-9, 1.0], grad=True)
    F.gaussian_nll_loss(t64(x), t64(y), var, reduction="sum").backward()
    v = np.array([1e-6, 1.0])
    assert_close(var.grad, 0.5 * (1 / v - (x - y) ** 2 / v ** 2))


@given(seed=seeds, reduction=reductions, n=batches, c=st.integers(1, 5), p=st.sampled_from([1, 2]),
       margin=st.sampled_from([1.0, 0.4]), weighted=st.booleans())
def test_multi_margin_loss(seed, reduction, n, c, p, margin, weighted):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((n, c)), rng.integers(0, c, n)
    w = rng.random(c) if weighted else None
    weight = None if w is None else t64(w)
    want = reduce(np_multi_margin(x, y, p, margin, w), reduction)
    assert_close(F.multi_margin_loss(t64(x), jt.tensor(y), p, margin, weight, reduction=reduction), want)
    assert_close(nn.MultiMarginLoss(p, margin, weight, reduction=reduction)(t64(x), jt.tensor(y)), want)
    # unbatched (C,) input: one loss shaped as the target
    got = F.multi_margin_loss(t64(x[0]), jt.tensor(y[:1]), p, margin, weight, reduction="none")
    assert got.shape == (1,)
    assert_close(got, np_multi_margin(x[0], y[:1], p, margin, w))


def test_gradcheck():
    rng = np.random.default_rng(0)
    a, b, c = (t64(rng.standard_normal((3, 4)), grad=True) for _ in range(3))
    sign = t64(rng.choice([-1.0, 1.0], 3))
    assert gradcheck(lambda u, v: F.cosine_embedding_loss(u, v, sign, 0.1), (a, b))
    assert gradcheck(lambda u, v, w: F.triplet_margin_loss(u, v, w, 3.0, swap=True), (a, b, c))
    labels, counts = t64(rng.integers(0, 2, (3, 4))), t64(rng.poisson(2.0, (3, 4)))
    assert gradcheck(lambda u: F.multilabel_soft_margin_loss(u, labels), (a,))
    assert gradcheck(lambda u: F.multi_margin_loss(u, jt.tensor([0, 3, 1]), p=2, margin=2.0), (a,))
    var = t64(rng.random((3, 4)) + 0.1, grad=True)
    assert gradcheck(lambda u, s: F.gaussian_nll_loss(u, b.detach(), s, full=True), (a, var))
    assert gradcheck(lambda u: F.poisson_nll_loss(u, counts, full=True), (a,))


def test_errors():
    x, v = t64(np.ones((3, 4))), t64(np.ones(3))
    with pytest.raises(RuntimeError, match=r"margin_ranking_loss : All input tensors should have same dimension"):
        F.margin_ranking_loss(v, v, t64(np.ones((3, 1))))
    with pytest.raises(ValueError, match="bad is not a valid value for reduction"):
        F.soft_margin_loss(x, x, reduction="bad")
    with pytest.raises(ValueError, match="bad is not valid"):
        F.multilabel_soft_margin_loss(x, x, reduction="bad")
    with pytest.raises(RuntimeError, match="0D or 1D target tensor expected, multi-target not supported"):
        F.cosine_embedding_loss(x, x, x)
    with pytest.raises(RuntimeError, match=r"1D target tensor expects 2D input tensors, but found inputs with "
                                           r"sizes \[3\] and \[3, 4\]\."):
        F.cosine_embedding_loss(v, x, v)
    with pytest.raises(ValueError, match="margin must be greater than 0, got 0"):
        F.triplet_margin_loss(x, x, x, margin=0)
    with pytest.raises(ValueError, match="TripletMarginLoss: expected margin to be greater than 0"):
        nn.TripletMarginLoss(margin=-1.0)
    with pytest.raises(RuntimeError, match="anchor 2D, positive 2D, and negative 1D inputs"):
        F.triplet_margin_loss(x, x, v)
    with pytest.raises(ValueError, match="var has negative entry/entries"):
        F.gaussian_nll_loss(x, x, -x)
    with pytest.raises(ValueError, match="var has negative entry/entries"):
        F.gaussian_nll_loss(x, x, -1.0)
    with pytest.raises(ValueError, match="var is of incorrect size"):
        F.gaussian_nll_loss(x, x, t64(np.ones(4)))
    with pytest.raises(ValueError, match="var is of incorrect size"):
        F.gaussian_nll_loss(x, x, t64(np.ones((1, 1))))
    with pytest.raises(ValueError, match="bad is not valid"):
        F.gaussian_nll_loss(x, x, x, reduction="bad")
    target = jt.tensor([0, 1, 2])
    with pytest.raises(ValueError, match=r"only p == 1 and p == 2 supported"):
        F.multi_margin_loss(x, target, p=3)
    with pytest.raises(ValueError, match="weight must be one-dimensional"):
        F.multi_margin_loss(x, target, weight=x)
    with pytest.raises(RuntimeError, match="target out of range"):
        F.multi_margin_loss(x, jt.tensor([0, 1, 4]))
    with pytest.raises(RuntimeError, match=r"Expected target size \[3\], but got \[2\]\. Input has shape \[3, 4\]\."):
        F.multi_margin_loss(x, jt.tensor([0, 1]))
    with pytest.raises(RuntimeError, match=r"Expected non-empty vector or matrix with optional 0-dim batch size, "
                                           r"but got: \[3, 4, 1\]"):
        F.multi_margin_loss(x.unsqueeze(-1), target)
    with pytest.raises(RuntimeError, match="expected scalar type Long but found Double"):
        F.multi_margin_loss(x, v)
    with pytest.raises(RuntimeError, match=r"inconsistent weight size, expected 4 but got \[3\]"):
        F.multi_margin_loss(x, target, weight=v)


def test_legacy_reduction_flags_warn_and_apply():
    x, y = t64([0.5, -2.0]), t64([1.0, -1.0])
    with pytest.warns(UserWarning, match="reduction='sum'"):
        got = F.soft_margin_loss(x, y, size_average=False)
    assert_close(got, np.log1p(np.exp(-np.array([0.5, 2.0]))).sum())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert nn.HingeEmbeddingLoss(reduce=False).reduction == "none"


def test_parameters_to_vector_round_trip():
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    vec = parameters_to_vector(model.parameters())
    want = np.concatenate([p.detach().numpy().reshape(-1) for p in model.parameters()])
    assert vec.shape == (11,)
    assert_close(vec, want)
    new = jt.arange(11, dtype=jt.float32)
    vector_to_parameters(new, model.parameters())
    assert_close(model[0].weight, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert_close(model[1].bias, np.array([10.0], dtype=np.float32))
    assert_close(parameters_to_vector(model.parameters()), np.arange(11, dtype=np.float32))
    # the vector is differentiable: gradients land on each parameter in its slot
    parameters_to_vector(model.parameters()).mul(jt.arange(11, dtype=jt.float32)).sum().backward()
    assert_close(model[0].bias.grad, np.array([6.0, 7.0], dtype=np.float32))
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
        vector_to_parameters([1.0], model.parameters())


@given(lengths=st.lists(st.integers(0, 4), min_size=1, max_size=4), batch_first=st.booleans(),
       side=st.sampled_from(["left", "right"]), value=st.sampled_from([0.0, -1.5]))
def test_pad_sequence(lengths, batch_first, side, value):
    rng = np.random.default_rng(len(lengths))
    seqs = [rng.standard_normal((n, 2)) for n in lengths]
    longest = max(lengths)
    want = np.full((len(seqs), longest, 2), value)
    for i, s in enumerate(seqs):
        if side == "right":
            want[i, :len(s)] = s
        else:
            want[i, longest - len(s):] = s
    got = pad_sequence([t64(s) for s in seqs], batch_first=batch_first, padding_value=value, padding_side=side)
    assert_close(got, want if batch_first else want.transpose(1, 0, 2))


def test_pad_sequence_gradient_and_errors():
    a, b = t64([1.0, 2.0, 3.0], grad=True), t64([4.0], grad=True)
    out = nn.utils.rnn.pad_sequence([a, b], padding_value=9.0)
    assert_close(out, np.array([[1.0, 4.0], [2.0, 9.0], [3.0, 9.0]]))
    (out * t64([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])).sum().backward()
    assert_close(a.grad, np.array([1.0, 3.0, 5.0]))
    assert_close(b.grad, np.array([2.0]))
    with pytest.raises(RuntimeError, match="received an empty list of sequences"):
        pad_sequence([])
    with pytest.raises(RuntimeError, match="Expected padding_side to be one of left or right, but got mid."):
        pad_sequence([a], padding_side="mid")


def test_full_poisson_stirling_value():
    # y = 3: 3 log 3 - 3 + log(6 pi) / 2 is added; y = 1 adds nothing
    got = F.poisson_nll_loss(t64([0.0, 0.0]), t64([3.0, 1.0]), full=True, reduction="none")
    assert_close(got, np.array([1 + 3 * math.log(3) - 3 + 0.5 * math.log(6 * math.pi), 1.0]))


def _margin_step(a, p, n, var, target):
    loss = (F.triplet_margin_loss(a, p, n, swap=True) + F.multi_margin_loss(a, target, p=2)
            + F.gaussian_nll_loss(a, p, var) + F.cosine_embedding_loss(a, n, target.float() - 1.0))
    loss.backward()
    return loss


def test_compiled_losses_equal_eager():
    # the checks that need values are skipped while tracing; the compiled graph must still match eager
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(3)]
    arrays.append(rng.random((3, 4)).astype(np.float32))
    target = jt.tensor([0, 2, 1])
    eager = [jt.tensor(a, requires_grad=True) for a in arrays]
    compiled = [jt.tensor(a, requires_grad=True) for a in arrays]
    want = _margin_step(*eager, target)
    got = jt.compile(_margin_step)(*compiled, target)
    assert_close(got, want.detach().numpy(), atol=1e-5, rtol=1e-5)
    for c, e in zip(compiled, eager):
        assert_close(c.grad, e.grad.numpy(), atol=1e-5, rtol=1e-5)
