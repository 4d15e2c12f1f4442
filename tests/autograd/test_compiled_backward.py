"""Tracing follows backward: one joint forward-and-backward graph, fused and compiled, equal to eager."""

import numpy as np
import pytest
import torch

import jitorch as jt


def mlp_loss(w1, w2, x, y):
    h = (x @ w1).tanh()
    return ((h @ w2 - y) ** 2).mean()


def params(seed=0):
    jt.manual_seed(seed)
    return jt.randn(6, 8, requires_grad=True), jt.randn(8, 3, requires_grad=True), jt.randn(5, 6), jt.randn(5, 3)


def test_compiled_step_with_backward_and_update_equals_eager():
    def step(w1, w2, x, y):
        loss = mlp_loss(w1, w2, x, y)
        loss.backward()
        with jt.no_grad():
            w1.sub_(0.1 * w1.grad)
            w2.sub_(0.1 * w2.grad)
            w1.grad = None
            w2.grad = None
        return loss

    compiled = jt.compile(step)
    a, b = params(), params()
    for _ in range(3):
        lc, le = compiled(*a[:2], *a[2:]), step(*b[:2], *b[2:])
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-6)
    np.testing.assert_allclose(a[0].detach().numpy(), b[0].detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a[1].detach().numpy(), b[1].detach().numpy(), rtol=1e-5, atol=1e-6)
    assert len(compiled.cache) == 1


def test_backward_inside_a_compiled_function_sets_grads_and_accumulates():
    compiled = jt.compile(lambda w1, w2, x, y: mlp_loss(w1, w2, x, y).backward())
    w1, w2, x, y = params()
    compiled(w1, w2, x, y)
    first = w1.grad.clone()
    mlp_loss(w1.detach().requires_grad_(), w2, x, y)  # eager reference below
    e1, e2 = w1.detach().clone().requires_grad_(), w2.detach().clone().requires_grad_()
    mlp_loss(e1, e2, x, y).backward()
    np.testing.assert_allclose(first.numpy(), e1.grad.numpy(), rtol=1e-5, atol=1e-7)
    compiled(w1, w2, x, y)  # .grad is no longer None: a new specialisation accumulates into it
    np.testing.assert_allclose(w1.grad.numpy(), 2 * e1.grad.numpy(), rtol=1e-5, atol=1e-7)
    assert len(compiled.cache) == 2


def test_func_grad_compiles_and_fuses_across_the_backward():
    dloss = jt.func.grad(mlp_loss, argnums=(0, 1))
    w1, w2, x, y = params()
    eager = dloss(w1, w2, x, y)
    compiled = jt.compile(dloss)
    got = compiled(w1, w2, x, y)
    for g, e in zip(got, eager):  # (w1, w2 require grad: the gradients keep their history, as torch.func's)
        np.testing.assert_allclose(g.detach().numpy(), e.detach().numpy(), rtol=1e-5, atol=1e-7)
    kernels = compiled.lower(w1, w2, x, y).kernels
    # tanh's forward and the backward ops reading its result fuse into one kernel
    assert any("tanh" in k.ops and "mul" in k.ops for k in kernels)
    assert len(kernels) < len(compiled.lower(w1, w2, x, y).graph.nodes)


def test_value_and_grad_with_aux():
    def f(w, x):
        out = x @ w
        return out.sum(), out.shape[0]

    (value, aux), g = jt.func.value_and_grad(f, has_aux=True)(jt.ones(2, 2), jt.ones(3, 2))
    assert value.item() == 12.0 and aux == 3 and g.tolist() == [[3.0, 3.0], [3.0, 3.0]]


def test_grad_mode_is_a_guard():
    f = jt.compile(lambda x: x * 2)
    x = jt.ones(2, requires_grad=True)
    f(x)
    with jt.no_grad():
        f(x)
    assert len(f.cache) == 2


def _ops(compiled_graph):
    return [node.op.name for node in compiled_graph.graph.nodes]


def test_backward_through_a_compiled_call_runs_the_backward_graph_cut_from_the_joint_trace():
    f = jt.compile(lambda x, w: ((x @ w).tanh() * 2).sum(1))
    w = jt.randn(8, 4, requires_grad=True)
    h = jt.randn(5, 8)
    out = f(h, w)
    assert out.grad_fn.name() == "CompiledCallBackward"
    out.sum().backward()
    reference = w.detach().clone().requires_grad_()
    ((h @ reference).tanh() * 2).sum(1).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), reference.grad.numpy(), rtol=1e-5, atol=1e-5)
    entry = next(iter(f.cache.values()))
    assert entry.backward is None and entry.split is not None  # no vector-Jacobian product recomputing
    # the forward saves the product, not tanh's result: the same bytes, and the forward's kernel writes no tanh,
    # which the backward's kernel computes again from the product (partition's traffic rule)
    assert "tanh" in _ops(entry.split.forward) and "tanh" in _ops(entry.split.backward)
    assert entry.split.saved == 1
    assert _ops(entry.split.backward).count("matmul") == 1  # the gradient of w only: x needs none


def test_explain_shows_the_split_forward_and_backward():
    f = jt.compile(lambda x, w: (x @ w).tanh().sum())
    x, w = jt.randn(3, 4), jt.randn(4, 5, requires_grad=True)
    f(x, w).backward()
    f(x, w).backward()  # (w.grad is no longer None: a specialisation of its own)
    text = str(jt.explain(f, x, w))
    assert "with grad: a forward graph of 3 nodes saving 1 values, and a backward graph of" in text


def test_a_compiled_call_that_writes_into_an_input_recomputes_the_forward_in_its_backward():
    def f(x, w, counter):
        counter.add_(1)
        return (x * w).sin()
    step = jt.compile(f)
    w = jt.randn(4, requires_grad=True)
    x, counter = jt.randn(4), jt.zeros(1)
    step(x, w, counter).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), (x * w.detach()).cos().numpy() * x.numpy(), rtol=1e-6)
    entry = next(iter(step.cache.values()))
    assert entry.split is None and entry.backward is not None and counter.item() == 1


def test_dropout_in_a_split_call_draws_once_and_its_backward_reads_the_mask():
    step = jt.compile(lambda x: jt.nn.functional.dropout(x, 0.5, training=True) * 3)
    x = jt.ones(64, requires_grad=True)
    out = step(x)
    out.sum().backward()
    kept = out.detach().numpy() != 0
    np.testing.assert_array_equal(x.grad.numpy(), np.where(kept, 6.0, 0.0))
    entry = next(iter(step.cache.values()))
    assert entry.split is not None and not any("bernoulli" in op or "rand" in op
                                               for op in _ops(entry.split.backward))


def test_a_split_call_refuses_a_backward_after_its_input_was_written():
    step = jt.compile(lambda x, w: (x * w).sum())
    x, w = jt.randn(3), jt.randn(3, requires_grad=True)
    loss = step(x, w)
    x.add_(1)  # the backward reads x (the gradient of w is x)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_a_split_call_with_an_output_the_backward_saved_refuses_a_write_into_it():
    step = jt.compile(lambda w: w.exp())
    w = jt.randn(3, requires_grad=True)
    out = step(w)
    out.mul_(2)  # exp's gradient is its result, which the backward saved
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.randn(3, requires_grad=True).exp().mul_(2).sum().backward()
