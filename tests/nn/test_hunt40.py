"""Divergences from torch found by hand in session 40's hunt (empty batches, zero-size dims), each fixed and
checked against torch, eagerly and compiled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_of_an_empty_batch_gives_an_empty_result(mode):
    """grid_sample of N=0 raised "cannot reshape tensor of 0 elements into shape [0, 1, -1]" (its gather reshaped
    by -1); torch returns (0, C, H_out, W_out). Its gradient is empty too."""
    x, g = np.zeros((0, 2, 4, 4), np.float32), np.zeros((0, 3, 5, 2), np.float32)
    want = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(g), mode=mode, align_corners=False)

    def f(a, b):
        return jt.nn.functional.grid_sample(a, b, mode=mode, align_corners=False)
    for call in (f, jt.compile(f)):
        a = jt.tensor(x, requires_grad=True)
        got = call(a, jt.tensor(g))
        assert tuple(got.shape) == tuple(want.shape) == (0, 2, 3, 5)
        got.sum().backward()
        assert tuple(a.grad.shape) == (0, 2, 4, 4)


def test_affine_grid_of_an_empty_size_names_it_as_a_list_as_torch():
    theta = np.zeros((0, 2, 3), np.float32)
    with pytest.raises(ValueError) as want:
        torch.nn.functional.affine_grid(torch.tensor(theta), [0, 3, 4, 5], align_corners=False)
    with pytest.raises(ValueError) as got:
        jt.nn.functional.affine_grid(jt.tensor(theta), [0, 3, 4, 5], align_corners=False)
    assert str(got.value) == str(want.value) == "Expected non-zero, positive output size. Got [0, 3, 4, 5]"


@pytest.mark.parametrize("shape", [(2, 0), (0, 0)])
def test_embedding_bag_of_2d_input_with_empty_bags_raises_as_torch(shape):
    """torch's bags of a 2-D input start at arange(0, numel, length), which refuses length 0; jitorch returned
    zero bags. (0, 3) gives no bags in both."""
    for lib in (torch, jt):
        with pytest.raises(RuntimeError, match="^step must be nonzero$"):
            lib.nn.functional.embedding_bag(lib.zeros(shape, dtype=lib.int64), lib.ones(5, 3))
    got = jt.nn.functional.embedding_bag(jt.zeros((0, 3), dtype=jt.int64), jt.ones(5, 3))
    assert tuple(got.shape) == (0, 3)


@pytest.mark.parametrize("name", ["modified_bessel_i0", "modified_bessel_i1"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_special_modified_bessel_i0_i1_refuse_half_types_as_torch(name, dtype):
    """They were special.i0 and special.i1, which take half types; torch's own kernels refuse them."""
    for lib in (torch, jt):
        with pytest.raises(NotImplementedError) as caught:
            getattr(lib.special, name)(lib.ones(2, dtype=getattr(lib, dtype)))
        assert str(caught.value) == f"\"{name}_cpu\" not implemented for '{'Half' if dtype == 'float16' else 'BFloat16'}'"
    with pytest.raises(NotImplementedError):
        jt.compile(lambda x: getattr(jt.special, name)(x) * 2)(jt.ones(2, dtype=getattr(jt, dtype)))
    x = np.linspace(-4, 4, 9)
    np.testing.assert_allclose(getattr(jt.special, name)(jt.tensor(x)).numpy(),
                               getattr(torch.special, name)(torch.tensor(x)).numpy(), rtol=1e-14)


def test_special_round_takes_decimals_always_so_refuses_integers_as_torch():
    """torch.special.round is the overload with ``decimals`` (default 0), which has no integer kernel."""
    for lib in (torch, jt):
        with pytest.raises(NotImplementedError, match="\"round_vml_cpu\" not implemented for 'Long'"):
            lib.special.round(lib.tensor([1, 2]))
        assert lib.special.round(lib.tensor([1.25, 2.5]), decimals=1).tolist() == [1.2000000476837158, 2.5]


@pytest.mark.parametrize("shape", [(0, 2, 5, 5), (0, 5, 5)])
def test_adaptive_max_pool_of_an_empty_batch_gives_an_empty_result(shape):
    """It raised "cannot reshape tensor of 0 elements into shape [0, 2, -1]"; torch's loop also lets dim 0 be
    empty in an unbatched input, and names the empty dim by its place in the whole shape."""
    want = torch.nn.functional.adaptive_max_pool2d(torch.zeros(shape), 3, return_indices=True)
    for call in (jt.nn.functional.adaptive_max_pool2d, jt.compile(jt.nn.functional.adaptive_max_pool2d)):
        got = call(jt.zeros(shape), 3, return_indices=True)
        assert [tuple(g.shape) for g in got] == [tuple(w.shape) for w in want]
    for lib in (torch, jt):
        with pytest.raises(RuntimeError, match=r"sizes \[2, 0, 5, 5\] with dimension 1 being empty"):
            lib.nn.functional.adaptive_max_pool2d(lib.zeros(2, 0, 5, 5), 3)


def test_batch_norm_of_an_empty_batch_in_training_gives_an_empty_result_and_keeps_the_statistics():
    """Only a single value per channel is refused (torch's check is size_prods == 1); jitorch refused none too."""
    for lib in (torch, jt):
        mean, var = lib.zeros(3), lib.ones(3)
        out = lib.nn.functional.batch_norm(lib.zeros(0, 3, 5, 5), mean, var, training=True)
        assert tuple(out.shape) == (0, 3, 5, 5) and mean.tolist() == [0.0] * 3 and var.tolist() == [1.0] * 3
        with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
            lib.nn.functional.batch_norm(lib.zeros(1, 3), mean, var, training=True)


def test_ctc_loss_of_empty_log_probs_raises_as_torch():
    for lib in (torch, jt):
        with pytest.raises(RuntimeError, match="^log_probs tensor must not be empty$"):
            lib.nn.functional.ctc_loss(lib.zeros(3, 0, 4), lib.zeros(0, 2, dtype=lib.int64),
                                       lib.zeros(0, dtype=lib.int64), lib.zeros(0, dtype=lib.int64))
