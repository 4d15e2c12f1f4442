"""F.embedding_bag and nn.EmbeddingBag against torch: values, gradients, a compiled run, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn as jnn
import jitorch.nn.functional as JF
from tests.nn.torch_oracle import check, same_error

_W = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
_I = np.array([1, 2, 4, 5, 4, 3, 2, 0])


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("offsets, last", [([0, 3], False), ([0, 3, 3, 8], False), ([0, 3, 8], True), ([0, 0], False)])
@pytest.mark.parametrize("padding_idx", [None, 2, -2])
def test_embedding_bag_matches_torch(mode, offsets, last, padding_idx):
    check(lambda F, i, w, o: F.embedding_bag(i, w, o, mode=mode, include_last_offset=last, padding_idx=padding_idx),
          _I, _W, np.array(offsets))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_of_2d_input_matches_torch(mode):
    check(lambda F, i, w: F.embedding_bag(i, w, mode=mode), _I.reshape(2, 4), _W, compiled=True)


def test_embedding_bag_per_sample_weights_match_torch():
    weights = np.linspace(0.5, 2, 8).astype(np.float32)
    check(lambda F, i, w, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p), _I, _W,
          np.array([0, 5]), weights, compiled=True)


def test_embedding_bag_scale_grad_by_freq_divides_each_rows_gradient_by_its_frequency():
    """As F.embedding does; torch 2.13's CPU embedding_bag misassigns the counts (rows 3 and 5, picked once,
    get 1/2; row 4, picked twice, gets 2)."""
    w = jt.ones(6, 1, requires_grad=True)
    JF.embedding_bag(jt.tensor(_I), w, jt.tensor([0, 5]), scale_grad_by_freq=True, mode="sum").sum().backward()
    assert w.grad.flatten().tolist() == [1.0] * 6


def test_embedding_bag_max_norm_renormalises_the_picked_rows_as_torch():
    t_w, j_w = torch.tensor(_W * 3), jt.tensor(_W * 3)
    t_out = torch.nn.functional.embedding_bag(torch.tensor(_I), t_w, torch.tensor([0, 4]), max_norm=1.0)
    j_out = JF.embedding_bag(jt.tensor(_I), j_w, jt.tensor([0, 4]), max_norm=1.0)
    np.testing.assert_allclose(j_out.numpy(), t_out.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(j_w.numpy(), t_w.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("call", [
    lambda F, i, w, o: F.embedding_bag(i, w, o[1:]),
    lambda F, i, w, o: F.embedding_bag(i, w, o * 0 + 9),
    lambda F, i, w, o: F.embedding_bag(i.float(), w, o),
    lambda F, i, w, o: F.embedding_bag(i, w, o, padding_idx=7),
    lambda F, i, w, o: F.embedding_bag(i, w),
    lambda F, i, w, o: F.embedding_bag(i.reshape(2, 4), w, o),
    lambda F, i, w, o: F.embedding_bag(i.reshape(2, 2, 2), w),
    lambda F, i, w, o: F.embedding_bag(i, w[0], o),
    lambda F, i, w, o: F.embedding_bag(i, w, o, mode="median"),
    lambda F, i, w, o: F.embedding_bag(i, w, o, mode="max", scale_grad_by_freq=True),
    lambda F, i, w, o: F.embedding_bag(i, w, o, per_sample_weights=w[0]),
    lambda F, i, w, o: F.embedding_bag(i, w, o, per_sample_weights=i.float()),
])
def test_embedding_bag_bad_input_raises_as_torch(call):
    same_error(call, _I, _W, np.array([0, 3]))


def test_embedding_bag_refuses_an_index_out_of_range():
    """torch's error is a RuntimeError (jitorch raised IndexError before its value checks were shared)."""
    with pytest.raises(RuntimeError, match=r"takes value 7 which is not in the valid range \[0, 6\)"):
        JF.embedding_bag(jt.tensor(_I + 6), jt.tensor(_W), jt.tensor([0, 3]))


def test_embedding_bag_refuses_a_last_offset_short_of_the_input():
    """torch sums such a last bag up to the offset but averages it over the rest of the input."""
    with pytest.raises(RuntimeError, match="offsets\\[-1\\] must be the input's length 8, but got 5"):
        JF.embedding_bag(jt.tensor(_I), jt.tensor(_W), jt.tensor([0, 3, 5]), include_last_offset=True)


@pytest.mark.parametrize("kwargs", [dict(), dict(mode="max", padding_idx=-1), dict(mode="sum", max_norm=1.0)])
def test_embedding_bag_module_matches_torch(kwargs):
    t_mod = torch.nn.EmbeddingBag(6, 3, _weight=torch.tensor(_W), **kwargs)
    j_mod = jnn.EmbeddingBag(6, 3, _weight=jt.tensor(_W), **kwargs)
    assert repr(j_mod) == repr(t_mod)
    t_out = t_mod(torch.tensor(_I), torch.tensor([0, 3]))
    j_out = j_mod(jt.tensor(_I), jt.tensor([0, 3]))
    np.testing.assert_allclose(j_out.detach().numpy(), t_out.detach().numpy(), rtol=1e-5, atol=1e-6)
    t_out.sum().backward()
    j_out.sum().backward()
    np.testing.assert_allclose(j_mod.weight.grad.numpy(), t_mod.weight.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_embedding_bag_module_zeroes_its_padding_row():
    assert jnn.EmbeddingBag(5, 2, padding_idx=-2).weight[3].tolist() == [0.0, 0.0]
