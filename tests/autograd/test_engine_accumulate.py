"""Gradient accumulation into leaves, as torch's AccumulateGrad: a gradient nothing else holds
becomes ``.grad`` without a copy; one that something else can still see is copied."""

import numpy as np
import pytest

import jitorch as jt


def leaf(values):
    return jt.tensor(values, dtype=jt.float64, requires_grad=True)


def _no_clone(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise AssertionError("the engine copied a gradient nothing else holds")
    monkeypatch.setattr(jt.Tensor, "clone", refuse)


def test_a_fresh_gradient_becomes_grad_without_a_copy(monkeypatch):
    w = leaf([[1.0, 2.0], [3.0, 4.0]])
    b = leaf([1.0, 1.0])
    x = jt.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], dtype=jt.float64)
    _no_clone(monkeypatch)
    (x @ w + b).relu().sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), x.numpy().T @ np.ones((3, 2)))
    assert b.grad.tolist() == [3.0, 3.0]
    assert w.grad.grad_fn is None and not w.grad.requires_grad and w.grad._base is None


def test_one_gradient_for_two_leaves_gives_each_its_own_memory():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    (a + b).sum().backward()
    a.grad.mul_(10)
    assert b.grad.tolist() == [1.0, 1.0] and a.grad.tolist() == [10.0, 10.0]


def test_a_gradient_a_view_shares_with_another_leaf_is_copied():
    x, w = leaf([[1.0, 2.0]]), leaf([5.0, 6.0])
    (x.view(-1) + w).sum().backward()
    w.grad.add_(1)
    assert x.grad.tolist() == [[1.0, 1.0]] and w.grad.tolist() == [2.0, 2.0]


def test_a_retained_gradient_and_a_leaf_gradient_do_not_share_memory():
    x = leaf([1.0, 2.0])
    y = x * 1.0
    y.retain_grad()
    z = y + 0.0
    z.sum().backward()
    x.grad.mul_(7)
    assert y.grad.tolist() == [1.0, 1.0]


def test_the_gradient_a_caller_passes_is_copied():
    x = leaf([1.0, 2.0])
    g = jt.tensor([3.0, 4.0], dtype=jt.float64)
    x.backward(g)
    g.mul_(0)
    assert x.grad.tolist() == [3.0, 4.0]


def test_a_gradient_a_hook_keeps_is_copied():
    x = leaf([1.0, 2.0])
    seen = []
    y = x + 0.0  # passes its gradient on as it is
    y.register_hook(lambda g: seen.append(g))
    (y * jt.tensor([2.0, 3.0], dtype=jt.float64)).sum().backward()
    seen[0].mul_(0)
    assert x.grad.tolist() == [2.0, 3.0]


def test_a_gradient_whose_memory_a_hook_keeps_as_an_array_is_copied():
    x = leaf([1.0, 2.0])
    arrays = []
    y = x + 0.0  # passes its gradient on as it is
    y.register_hook(lambda g: arrays.append(g.numpy()))
    (y * jt.tensor([2.0, 3.0], dtype=jt.float64)).sum().backward()
    arrays[0][:] = 0
    assert x.grad.tolist() == [2.0, 3.0]


def test_a_gradient_a_leaf_hook_keeps_is_copied():
    x = leaf([1.0, 2.0])
    seen = []
    x.register_hook(seen.append)
    (x * 3.0).sum().backward()
    seen[0].mul_(0)
    assert x.grad.tolist() == [3.0, 3.0]


def test_a_leaf_hook_result_is_copied():
    x = leaf([1.0, 2.0])
    kept = jt.tensor([5.0, 5.0], dtype=jt.float64)
    x.register_hook(lambda g: kept)
    (x * 3.0).sum().backward()
    kept.mul_(0)
    assert x.grad.tolist() == [5.0, 5.0]


def test_gradients_add_to_an_existing_grad():
    x = leaf([1.0, 2.0])
    (x * 2.0).sum().backward()
    first = x.grad
    (x * 3.0).sum().backward()
    assert x.grad.tolist() == [5.0, 5.0] and x.grad is first  # in place, as torch


def test_with_create_graph_the_grad_keeps_its_history():
    x = leaf([2.0])
    (x ** 3).sum().backward(create_graph=True)
    assert x.grad.requires_grad and x.grad.tolist() == [12.0]
    (gg,) = jt.autograd.grad(x.grad.sum(), x)
    assert gg.tolist() == [12.0]


@pytest.mark.parametrize("mode", [jt.no_grad, jt.enable_grad])
def test_backward_runs_its_rules_in_the_mode_create_graph_sets(mode):
    x = leaf([1.0, 2.0])
    seen = []
    y = x * 2.0
    y.register_hook(lambda g: seen.append(jt.is_grad_enabled()))
    loss = y.sum()
    with mode():
        loss.backward()
    assert seen == [False] and jt.is_grad_enabled()


def test_a_weight_used_transposed_gets_a_contiguous_gradient_without_a_copy(monkeypatch):
    rng = np.random.default_rng(0)
    x = jt.tensor(rng.standard_normal((5, 4)))
    w = jt.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    v = jt.tensor(rng.standard_normal((4, 2)), requires_grad=True)
    _no_clone(monkeypatch)
    (x @ w.t()).sum().backward()
    (v.t() @ x.t()).sum().backward()
    assert w.grad.is_contiguous() and v.grad.is_contiguous()
    np.testing.assert_allclose(w.grad.numpy(), np.ones((3, 5)) @ x.numpy())
    np.testing.assert_allclose(v.grad.numpy(), (np.ones((2, 5)) @ x.numpy()).T)


@pytest.mark.parametrize("make", [
    lambda lib: lib.randn(4, 6),                 # a Linear weight: its gradient is computed transposed
    lambda lib: lib.randn(6, 4).t(),             # a transposed leaf keeps its own strides
    lambda lib: lib.randn(4, 12)[:, ::2],        # not dense: contiguous
    lambda lib: lib.randn(4, 6, 3).permute(2, 0, 1),
])
def test_a_first_gradient_obeys_torch_layout_contract(make):
    import torch
    strides = []
    for lib in (jt, torch):
        lib.manual_seed(0)
        w = make(lib).requires_grad_()
        x = lib.randn(5, w.shape[-1])
        y = (x @ w.transpose(-2, -1)) if w.dim() == 2 else (w * 2)
        y.square().sum().backward()
        strides.append((w.stride(), w.grad.stride()))
    assert strides[0] == strides[1]


def test_a_linear_weight_gradient_over_batched_inputs_is_computed_contiguous_and_kept(monkeypatch):
    """As torch's mm backward, the product giving ``w.t()``'s gradient is computed in ``w.t()``'s layout, so
    ``w.grad`` is that product itself (no copy into the contract's layout), for batched inputs too."""
    jt.manual_seed(0)
    lin = jt.nn.Linear(6, 4)
    x = jt.randn(3, 5, 6)
    _no_clone(monkeypatch)
    lin(x).square().sum().backward()
    assert lin.weight.grad.stride() == (6, 1) and lin.weight.grad._base is None
    y = (x @ lin.weight.detach().t() + lin.bias.detach()).numpy()
    np.testing.assert_allclose(lin.weight.grad.numpy(), np.einsum("bto,bti->oi", 2 * y, x.numpy()), rtol=1e-5)
