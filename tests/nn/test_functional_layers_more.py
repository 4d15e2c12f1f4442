"""fold/unfold, channel_shuffle, rms_norm, local_response_norm, pdist, the multilabel margin and triplet-with-
distance losses, the deprecated upsample functions, dropout3d, alpha dropout and gumbel_softmax (functions and
modules) against torch."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn as jnn
import jitorch.nn.functional as JF
from tests.nn.torch_oracle import check, check_compiled, same_error

_RNG = np.random.default_rng(0)
_X4 = _RNG.standard_normal((2, 6, 5, 4)).astype(np.float32)


# fold / unfold / channel_shuffle ---------------------------------------------------------------------------

_BLOCKS = [dict(kernel_size=2), dict(kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
           dict(kernel_size=3, padding=(0, 1), stride=2)]


@pytest.mark.parametrize("kwargs", _BLOCKS)
def test_unfold_matches_torch(kwargs):
    check(lambda F, x: F.unfold(x, **kwargs), _X4)
    check(lambda F, x: F.unfold(x[0], **kwargs), _X4)


@pytest.mark.parametrize("kwargs", _BLOCKS)
def test_fold_matches_torch(kwargs):
    cols = torch.nn.functional.unfold(torch.tensor(_X4), **kwargs).numpy()
    check(lambda F, c: F.fold(c, (5, 4), **kwargs), cols)
    check(lambda F, c: F.fold(c[0], (5, 4), **kwargs), cols)


def test_fold_of_unfold_compiles():
    check_compiled(lambda F, x: F.fold(F.unfold(x, 2, padding=1), (5, 4), 2, padding=1) * 2, _X4)


@pytest.mark.parametrize("call, x", [
    (lambda F, x: F.unfold(x[None], 2), _X4), (lambda F, x: F.unfold(x, 0), _X4),
    (lambda F, x: F.unfold(x, 2, stride=0), _X4), (lambda F, x: F.unfold(x, 2, dilation=0), _X4),
    (lambda F, x: F.unfold(x, 2, stride=(1, 1, 1)), _X4), (lambda F, x: F.unfold(x, 2, padding=(1, 1, 1)), _X4),
    (lambda F, x: F.unfold(x, (2, 2, 2)), _X4), (lambda F, x: F.unfold(x, 3, padding=-1), _X4),
    (lambda F, x: F.unfold(x, 6), _X4), (lambda F, x: F.unfold(x, 2), _X4.astype(np.int64)),
    (lambda F, x: F.fold(x, (3, 3), 2), _X4), (lambda F, x: F.fold(x.reshape(2, 5, 24), (5, 5), 2), _X4),
    (lambda F, x: F.fold(x.reshape(2, 24, 10), (3, 3), 2, stride=2), _X4),
    (lambda F, x: F.fold(x.reshape(2, 24, 10), (1, 1), 2), _X4),
    (lambda F, x: F.fold(x.reshape(2, 24, 10), (3, 3, 3), 2), _X4),
    (lambda F, x: F.fold(x.reshape(2, 24, 10), (3, 3), 2, padding=-1), _X4),
])
def test_fold_and_unfold_bad_input_raise_as_torch(call, x):
    same_error(call, x)


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_channel_shuffle_matches_torch(groups):
    check(lambda F, x: F.channel_shuffle(x, groups), _X4, compiled=groups == 2)
    # torch has no derivative for its native_channel_shuffle
    check(lambda F, x: F.native_channel_shuffle(x, groups), _X4, grad=False)


@pytest.mark.parametrize("call, x", [(lambda F, x: F.channel_shuffle(x, 4), _X4),
                                     (lambda F, x: F.channel_shuffle(x, 0), _X4),
                                     (lambda F, x: F.channel_shuffle(x[0, 0, 0], 1), _X4)])
def test_channel_shuffle_bad_input_raises_as_torch(call, x):
    same_error(call, x)


# normalisation -----------------------------------------------------------------------------------------------

def test_rms_norm_matches_torch():
    check(lambda F, x: F.rms_norm(x, (5, 4)), _X4)
    check(lambda F, x, w: F.rms_norm(x, (4,), w, 1e-3), _X4, np.linspace(0.5, 2, 4).astype(np.float32),
          compiled=True)
    check(lambda F, x: F.rms_norm(x, (4,)), _X4.astype(np.float64), atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("call", [lambda F, x: F.rms_norm(x, (3,)),
                                  lambda F, x: F.rms_norm(x, (4,), x[0, 0, 0, :3])])
def test_rms_norm_bad_shape_raises_as_torch(call):
    same_error(call, _X4)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_local_response_norm_matches_torch(size):
    check(lambda F, x: F.local_response_norm(x, size), _X4)
    check(lambda F, x: F.local_response_norm(x[0], size, 0.1, 0.5, 2.0), _X4)
    check(lambda F, x: F.local_response_norm(x[..., None], size), _X4)


def test_local_response_norm_compiles_and_refuses_2d_input():
    check_compiled(lambda F, x: F.local_response_norm(x, 3, 0.1), _X4)
    same_error(lambda F, x: F.local_response_norm(x[0, 0], 2), _X4)


# distances and losses -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, float("inf")])
def test_pdist_matches_torch(p):
    # a repeated row: a zero distance, whose gradient torch defines as 0
    x = np.concatenate([_X4[0, 0], _X4[0, 0, :1]])
    check(lambda F, x: F.pdist(x, p), x, atol=1e-4, rtol=1e-4, compiled=p == 2.0)


@pytest.mark.parametrize("x", [_X4[0], _X4[0, 0, 0]])
def test_pdist_refuses_other_ranks_as_torch(x):
    same_error(lambda F, x: F.pdist(x), x)


_TARGETS = np.array([[3, 0, -1, 1], [0, 1, 2, 3], [1, -1, 2, 2], [-1, 0, 0, 0], [2, 2, -1, 0]])


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_multilabel_margin_loss_matches_torch(reduction):
    x = _RNG.standard_normal((5, 4)).astype(np.float32)
    check(lambda F, x, y: F.multilabel_margin_loss(x, y, reduction=reduction), x, _TARGETS,
          compiled=reduction == "mean")
    check(lambda F, x, y: F.multilabel_margin_loss(x, y, reduction=reduction), x[1], _TARGETS[1])


@pytest.mark.parametrize("target", [_TARGETS + 1, _TARGETS[:3], _TARGETS - 1, _TARGETS.astype(np.float32)])
def test_multilabel_margin_loss_bad_target_raises_as_torch(target):
    same_error(lambda F, x, y: F.multilabel_margin_loss(x, y), np.zeros((5, 4), np.float32), target)


def test_triplet_margin_with_distance_loss_matches_torch():
    a, p, n = (_RNG.standard_normal((4, 3)).astype(np.float32) for _ in range(3))
    check(lambda F, a, p, n: F.triplet_margin_with_distance_loss(a, p, n, swap=True), a, p, n, compiled=True)
    check(lambda F, a, p, n: F.triplet_margin_with_distance_loss(
        a, p, n, distance_function=lambda u, v: 1 - F.cosine_similarity(u, v), margin=0.5, reduction="none"),
        a, p, n)


@pytest.mark.parametrize("call", [
    lambda F, a: F.triplet_margin_with_distance_loss(a, a, a, margin=0),
    lambda F, a: F.triplet_margin_with_distance_loss(a, a, a, reduction="x"),
    lambda F, a: F.triplet_margin_with_distance_loss(a, a[0], a),
])
def test_triplet_margin_with_distance_loss_bad_input_raises_as_torch(call):
    same_error(call, np.zeros((4, 3), np.float32))


# deprecated upsampling -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, kwargs", [("upsample", dict(scale_factor=2)),
                                          ("upsample", dict(size=(7, 9), mode="bilinear")),
                                          ("upsample_nearest", dict(size=(7, 9))),
                                          ("upsample_bilinear", dict(scale_factor=2))])
def test_deprecated_upsample_warns_and_matches_torch(name, kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(lambda F, x: getattr(F, name)(x, **kwargs), _X4)
    messages = {str(w.message) for w in caught}
    assert messages == {f"`nn.functional.{name}` is deprecated. Use `nn.functional.interpolate` instead."}


# random layers --------------------------------------------------------------------------------------------

def test_dropout3d_zeroes_whole_channels():
    x = jt.ones(4, 8, 2, 3, 2)
    y = JF.dropout3d(x, 0.5).numpy().reshape(4, 8, -1)
    assert set(np.unique(y)) <= {0.0, 2.0} and (y.min(-1) == y.max(-1)).all() and 0 < (y == 0).mean() < 1
    unbatched = JF.dropout3d(jt.ones(8, 2, 3, 2), 0.5).numpy().reshape(8, -1)
    assert (unbatched.min(-1) == unbatched.max(-1)).all()


def test_dropout3d_warns_on_other_ranks_as_torch():
    with pytest.warns(UserWarning, match="Received a 3-D input to dropout3d"):
        JF.dropout3d(jt.ones(2, 3, 4), 0.5)
    same_error(lambda F, x: F.dropout3d(x, 1.5), np.zeros((2, 2, 2, 2), np.float32))


@pytest.mark.parametrize("name, channel", [("alpha_dropout", False), ("feature_alpha_dropout", True)])
def test_alpha_dropout_keeps_mean_and_variance(name, channel):
    x = jt.tensor(np.random.default_rng(1).standard_normal((200, 100, 4)).astype(np.float32))
    fn = getattr(JF, name)
    assert fn(x, 0.3) is x  # torch's default training=False
    y = fn(x, 0.3, training=True).numpy()
    assert abs(y.mean()) < 0.05 and abs(y.std() - 1) < 0.05
    alpha = 1.7580993408473766
    # a dropped element becomes selu's saturation value -alpha, moved and scaled as the kept ones
    dropped = np.isclose(y, -alpha * 0.7 / np.sqrt((alpha ** 2 * 0.3 + 1) * 0.7))
    assert abs(dropped.mean() - 0.3) < 0.02
    if channel:
        assert (dropped.min(-1) == dropped.max(-1)).all()
    np.testing.assert_array_equal(fn(x, 1.0, training=True).numpy(), np.zeros(x.shape, np.float32))
    same_error(lambda F, x: getattr(F, name)(x, -0.1, True), np.zeros(3, np.float32))


def test_gumbel_softmax_samples_the_softmax_and_hard_is_one_hot_with_soft_gradients():
    logits = jt.tensor(np.log(np.array([0.1, 0.2, 0.7], np.float32)), requires_grad=True)
    # the argmax of a Gumbel-softmax sample is distributed as softmax(logits), whatever tau
    draws = JF.gumbel_softmax(logits.detach().expand(4000, 3), tau=0.5).numpy()
    np.testing.assert_allclose(np.bincount(draws.argmax(1), minlength=3) / 4000, [0.1, 0.2, 0.7], atol=0.03)
    hard = JF.gumbel_softmax(logits.expand(5, 3), hard=True)
    assert set(hard.detach().numpy().sum(1)) == {1.0} and set(np.unique(hard.detach().numpy())) <= {0.0, 1.0}
    (hard * jt.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert np.abs(logits.grad.numpy()).sum() > 0


def test_gumbel_softmax_warns_that_eps_is_ignored():
    with pytest.warns(UserWarning, match=re.escape("`eps` parameter is deprecated and has no effect.")):
        JF.gumbel_softmax(jt.zeros(2, 3), eps=1e-3)


# modules -------------------------------------------------------------------------------------------------

_MODULES = [("Unfold", ((2, 3),), {"padding": 1}, _X4), ("ChannelShuffle", (3,), {}, _X4),
            ("RMSNorm", ((5, 4),), {}, _X4), ("RMSNorm", (4, 1e-3, False), {}, _X4),
            ("LocalResponseNorm", (3,), {"k": 2.0}, _X4),
            ("BatchNorm3d", (6,), {}, _X4[..., None].repeat(2, -1)), ("Dropout3d", (), {}, _X4[..., None]),
            ("AlphaDropout", (0.2,), {}, _X4), ("FeatureAlphaDropout", (0.2,), {}, _X4)]


@pytest.mark.parametrize("name, args, kwargs, x", _MODULES)
def test_module_matches_torch_in_eval(name, args, kwargs, x):
    t_mod, j_mod = getattr(torch.nn, name)(*args, **kwargs).eval(), getattr(jnn, name)(*args, **kwargs).eval()
    assert repr(j_mod) == repr(t_mod)
    t_x, j_x = torch.tensor(x, requires_grad=True), jt.tensor(x, requires_grad=True)
    t_y, j_y = t_mod(t_x), j_mod(j_x)
    np.testing.assert_allclose(j_y.detach().numpy(), t_y.detach().numpy(), rtol=1e-5, atol=1e-5)
    t_y.sum().backward()
    j_y.sum().backward()
    np.testing.assert_allclose(j_x.grad.numpy(), t_x.grad.numpy(), rtol=1e-5, atol=1e-5)
    for (t_name, t_p), (j_name, j_p) in zip(t_mod.named_parameters(), j_mod.named_parameters()):
        assert t_name == j_name
        np.testing.assert_allclose(j_p.grad.numpy(), t_p.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_fold_module_matches_torch():
    cols = torch.nn.functional.unfold(torch.tensor(_X4), 2).numpy()
    t_mod, j_mod = torch.nn.Fold((5, 4), 2), jnn.Fold((5, 4), 2)
    assert repr(j_mod) == repr(t_mod)
    np.testing.assert_allclose(j_mod(jt.tensor(cols)).numpy(), t_mod(torch.tensor(cols)).numpy(), rtol=1e-6)


def test_batch_norm3d_trains_like_torch_and_refuses_4d_input():
    x = _RNG.standard_normal((3, 2, 2, 3, 2)).astype(np.float32)
    t_mod, j_mod = torch.nn.BatchNorm3d(2), jnn.BatchNorm3d(2)
    np.testing.assert_allclose(j_mod(jt.tensor(x)).detach().numpy(), t_mod(torch.tensor(x)).detach().numpy(), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(j_mod.running_var.numpy(), t_mod.running_var.numpy(), rtol=1e-5)
    with pytest.raises(ValueError, match=re.escape("expected 5D input (got 4D input)")):
        j_mod(jt.zeros(2, 2, 3, 3))


def test_loss_modules_match_torch():
    x = _RNG.standard_normal((5, 4)).astype(np.float32)
    t_loss = torch.nn.MultiLabelMarginLoss(reduction="sum")(torch.tensor(x), torch.tensor(_TARGETS))
    j_loss = jnn.MultiLabelMarginLoss(reduction="sum")(jt.tensor(x), jt.tensor(_TARGETS))
    np.testing.assert_allclose(j_loss.numpy(), t_loss.numpy(), rtol=1e-6)
    a, p, n = x[:2], x[2:4], x[3:]
    t_mod, j_mod = torch.nn.TripletMarginWithDistanceLoss(swap=True), jnn.TripletMarginWithDistanceLoss(swap=True)
    assert repr(j_mod) == repr(t_mod)
    np.testing.assert_allclose(j_mod(*(jt.tensor(v) for v in (a, p, n))).numpy(),
                               t_mod(*(torch.tensor(v) for v in (a, p, n))).numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="expected margin to be greater than 0, got 0 instead"):
        jnn.TripletMarginWithDistanceLoss(margin=0)
