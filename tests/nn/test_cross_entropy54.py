"""nll_loss's eager pick as one backward node (`functional._PickedLoss`, session 54): the node it records, the
composition's bits forward and backward (the composition, `functional._picked_loss`, is the oracle: what nll_loss
computed before, and still computes while traced), torch's values, its saved-tensor checks and double backward."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.nn import functional as F


def _nodes(t):
    """The backward nodes reachable from ``t``'s grad_fn, by name."""
    seen, stack, names = set(), [t.grad_fn], []
    while stack:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        names.append(n.name())
        stack.extend(nxt for nxt, _ in n.next_functions)
    return names


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32 if a.dtype == np.float32 else np.uint64)


def test_a_cross_entropy_records_two_nodes_as_torch():
    """log_softmax's node and the pick's: the composition recorded five for the pick (gather, squeeze, neg, sum,
    div), each dispatching its rule's ops in the backward."""
    x = jt.randn(8, 5, requires_grad=True)
    loss = F.cross_entropy(x, jt.randint(0, 5, (8,)))
    names = _nodes(loss)
    assert names == ["NllLossBackward0", "LogSoftmaxBackward0", "torch::autograd::AccumulateGrad"], names
    reference = torch.tensor(x.detach().numpy(), requires_grad=True)
    torch_nodes = _torch_nodes(torch.nn.functional.cross_entropy(reference, torch.zeros(8, dtype=torch.long)))
    assert sorted(n.name() for n in torch_nodes) == sorted(names)  # (session 55: the pick's node has torch's name)


def _torch_nodes(t):
    seen, stack = set(), [t.grad_fn]
    while stack:
        n = stack.pop()
        if n is not None and n not in seen:
            seen.add(n)
            stack.extend(nxt for nxt, _ in n.next_functions)
    return seen


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(7, 5), (3, 1), (64, 10), (5,)])
def test_the_pick_gives_the_compositions_bits_and_torchs_values(shape, reduction, dtype):
    rng = np.random.default_rng(len(shape) * 100 + shape[0])
    data = rng.standard_normal(shape).astype(dtype.np)
    classes = shape[-1]
    target = jt.tensor(rng.integers(0, classes, shape[:-1]), dtype=jt.int64)
    x, y = jt.tensor(data, requires_grad=True), jt.tensor(data, requires_grad=True)
    fused = F.nll_loss(x, target, reduction=reduction)
    assert fused.grad_fn.name() == "NllLossBackward0"
    composed = F._picked_loss(y, target, reduction)
    assert composed.grad_fn.name() != "NllLossBackward0"
    seed = jt.tensor(rng.standard_normal(fused.shape).astype(dtype.np))
    fused.backward(seed)
    composed.backward(seed)
    assert (_bits(fused.detach().numpy()) == _bits(composed.detach().numpy())).all()
    assert (_bits(x.grad.numpy()) == _bits(y.grad.numpy())).all()
    t = torch.tensor(data, requires_grad=True)
    expected = torch.nn.functional.nll_loss(t, torch.tensor(target.numpy()), reduction=reduction)
    expected.backward(torch.tensor(seed.numpy()))
    np.testing.assert_allclose(fused.detach().numpy(), expected.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6)


def test_a_negative_zero_gradient_adds_into_zeros_as_the_scatter():
    """gather's rule adds into zeros (``0 + -g``): a -0.0 seed gives +0.0, not the -0.0 a plain write would."""
    x = jt.randn(4, 3, requires_grad=True)
    F.nll_loss(x, jt.tensor([0, 1, 2, 0]), reduction="none").backward(jt.tensor([0.0, -0.0, 0.0, -0.0]))
    assert not np.signbit(x.grad.numpy()).any()


def test_a_write_into_the_input_after_the_loss_fails_its_backward():
    """As torch's NllLossBackward0, which saves self."""
    x = jt.randn(4, 3, requires_grad=True)
    logp = x.log_softmax(1) * 1
    loss = F.nll_loss(logp, jt.tensor([0, 1, 2, 0]))
    with jt.no_grad():
        logp.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_double_backward_runs_the_compositions_rules():
    """create_graph: the backward records (`_backward_records`), through the composition's rules."""
    data = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    target = jt.tensor([3, 0, 1, 1, 2])
    x = jt.tensor(data, requires_grad=True)
    g, = jt.autograd.grad(F.cross_entropy(x, target), x, create_graph=True)
    (g * g).sum().backward()
    t = torch.tensor(data, requires_grad=True)
    tg, = torch.autograd.grad(torch.nn.functional.cross_entropy(t, torch.tensor(target.numpy())), t,
                              create_graph=True)
    (tg * tg).sum().backward()
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-7)


def test_a_compiled_step_traces_the_composition():
    """The trace sees the composition's ops (its kernels fuse them), the eager step the one node: same loss."""
    w = jt.randn(6, 4, requires_grad=True)
    x, target = jt.randn(8, 6), jt.randint(0, 4, (8,))

    def step(w, x, target):
        return F.cross_entropy(x @ w, target)

    eager = step(w, x, target)
    compiled = jt.compile(step)
    names = [n.op.name for n in compiled.lower(w, x, target).graph.nodes]
    assert "gather" in names or "eq" in names, names
    np.testing.assert_allclose(compiled(w, x, target).detach().numpy(), eager.detach().numpy(), rtol=1e-6)


def test_an_eager_linear_layer_in_grad_mode_takes_the_fast_path(monkeypatch):
    """nn.Linear in a training step: the op's fast path computes and records (the general path's dispatch
    doubled the layer's time, session 54), with torch's gradients."""
    from jitorch.ops import registry
    data = np.random.default_rng(5).standard_normal((6, 3)).astype(np.float32)
    layer = jt.nn.Linear(3, 4)
    x = jt.tensor(data, requires_grad=True)
    calls = []
    monkeypatch.setattr(registry, "call", lambda *a, **k: calls.append(a[0].name))
    y = layer(x)
    assert calls == [] and y.grad_fn.name() == "LinearBackward0"
    monkeypatch.undo()
    y.sum().backward()
    reference = torch.nn.Linear(3, 4)
    with torch.no_grad():
        reference.weight.copy_(torch.tensor(layer.weight.detach().numpy()))
        reference.bias.copy_(torch.tensor(layer.bias.detach().numpy()))
    t = torch.tensor(data, requires_grad=True)
    reference(t).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), reference(t).detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(layer.weight.grad.numpy(), reference.weight.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6)
