"""The nn ops in the torch namespace (``torch.batch_norm``, ``torch.kl_div``, ...) take ATen's arguments and
give torch's results."""

import numpy as np
import pytest
import torch

import jitorch as jt

RNG = np.random.default_rng(7)


def _pair(*shape, low=-1.0, high=1.0):
    a = RNG.uniform(low, high, shape).astype(np.float32)
    return jt.tensor(a), torch.tensor(a)


def _same(got, want, atol=1e-5):
    if isinstance(want, tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w, atol)
        return
    assert tuple(got.shape) == tuple(want.shape)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=atol)


x_j, x_t = _pair(2, 3, 5)
y_j, y_t = _pair(2, 3, 5, low=0.05, high=1.0)
sign_j, sign_t = jt.tensor(np.sign(RNG.standard_normal((2, 3, 5))).astype(np.float32)), None
sign_t = torch.tensor(sign_j.numpy())
w_j, w_t = _pair(3)
b_j, b_t = _pair(3)
mean_j, mean_t = _pair(3)
var_j, var_t = _pair(3, low=0.5, high=2.0)

CALLS = {
    "batch_norm eval": lambda m, x, y, s, w, b, mu, v: m.batch_norm(x, w, b, mu, v, False, 0.1, 1e-5, False),
    "batch_norm train, no stats": lambda m, x, y, s, w, b, mu, v: m.batch_norm(x, w, b, None, None, True, 0.1,
                                                                               1e-5, True),
    "instance_norm": lambda m, x, y, s, w, b, mu, v: m.instance_norm(x, w, b, None, None, True, 0.1, 1e-5, False),
    "layer_norm": lambda m, x, y, s, w, b, mu, v: m.layer_norm(x, [5], None, None, 1e-5, True),
    "group_norm": lambda m, x, y, s, w, b, mu, v: m.group_norm(x.reshape(2, 3, 5, 1), 3, w, b),
    "native_layer_norm": lambda m, x, y, s, w, b, mu, v: m.native_layer_norm(x, [3, 5], None, None, 1e-5),
    "dropout eval": lambda m, x, y, s, w, b, mu, v: m.dropout(x, 0.5, False),
    "feature_dropout p=0": lambda m, x, y, s, w, b, mu, v: m.feature_dropout(x, 0.0, True),
    "embedding": lambda m, x, y, s, w, b, mu, v: m.embedding(x[0], m.tensor([2, 0, 2])),
    "kl_div default": lambda m, x, y, s, w, b, mu, v: m.kl_div(x, y),
    "kl_div mean": lambda m, x, y, s, w, b, mu, v: m.kl_div(x, y, 1),
    "kl_div sum log_target": lambda m, x, y, s, w, b, mu, v: m.kl_div(x, y.log(), 2, log_target=True),
    "bce_with_logits": lambda m, x, y, s, w, b, mu, v: m.binary_cross_entropy_with_logits(x, y),
    "bce_with_logits pos_weight mean": lambda m, x, y, s, w, b, mu, v: m.binary_cross_entropy_with_logits(
        x, y, None, m.full((5,), 2.0), 1),
    "margin_ranking_loss": lambda m, x, y, s, w, b, mu, v: m.margin_ranking_loss(x, y, s, 0.1, 2),
    "cosine_embedding_loss": lambda m, x, y, s, w, b, mu, v: m.cosine_embedding_loss(x[0], y[0], s[0, :, 0]),
    "hinge_embedding_loss": lambda m, x, y, s, w, b, mu, v: m.hinge_embedding_loss(x, s, 0.5, 1),
    "poisson_nll_loss": lambda m, x, y, s, w, b, mu, v: m.poisson_nll_loss(x, y, True, True, 1e-8, 1),
    "triplet_margin_loss": lambda m, x, y, s, w, b, mu, v: m.triplet_margin_loss(x[0], y[0], x[1]),
    "max_pool1d_with_indices": lambda m, x, y, s, w, b, mu, v: m.max_pool1d_with_indices(x, 2),
    "adaptive_max_pool1d": lambda m, x, y, s, w, b, mu, v: m.adaptive_max_pool1d(x, 2),
    "conv1d": lambda m, x, y, s, w, b, mu, v: m.conv1d(x, y[:, :, :2].contiguous(), None, 1, 1),
    "selu": lambda m, x, y, s, w, b, mu, v: m.selu(x),
    "pdist": lambda m, x, y, s, w, b, mu, v: m.pdist(x[0]),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_aten_form_matches_torch(name):
    call = CALLS[name]
    got = call(jt, x_j, y_j, sign_j, w_j, b_j, mean_j, var_j)
    want = call(torch, x_t, y_t, sign_t, w_t, b_t, mean_t, var_t)
    _same(got, want)


def test_a_loss_reduction_must_be_an_int_as_in_torch():
    with pytest.raises(TypeError, match="argument 'reduction' must be int, not str"):
        jt.kl_div(x_j, y_j, "mean")
    with pytest.raises(TypeError):
        torch.kl_div(x_t, y_t, "mean")


def test_same_signature_forms_are_the_functional_functions():
    assert jt.conv2d is jt.nn.functional.conv2d and jt.bilinear is jt.nn.functional.bilinear


def test_aten_batch_norm_gradients_match_torch():
    xj = x_j.clone().requires_grad_()
    xt = x_t.clone().requires_grad_()
    (jt.batch_norm(xj, w_j, b_j, None, None, True, 0.1, 1e-5, False) ** 2).sum().backward()
    (torch.batch_norm(xt, w_t, b_t, None, None, True, 0.1, 1e-5, False) ** 2).sum().backward()
    np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_prelu_and_hardshrink_are_tensor_methods_and_prelu_takes_a_0d_input_with_one_slope():
    assert x_j.prelu(jt.tensor([0.25])).tolist() == torch.prelu(x_t, torch.tensor([0.25])).tolist()
    assert x_j.hardshrink(0.3).tolist() == x_t.hardshrink(0.3).tolist()
    assert jt.prelu(jt.tensor(-1.0), jt.tensor([0.25])).item() == torch.prelu(torch.tensor(-1.0),
                                                                               torch.tensor([0.25])).item()
    with pytest.raises(RuntimeError, match="Not allow zero-dim input tensor."):
        jt.prelu(jt.tensor(-1.0), jt.tensor([0.25, 0.5]))
