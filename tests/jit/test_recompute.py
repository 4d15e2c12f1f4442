"""The recompute pass (`jitorch.ir.passes.recompute`): pointwise values a training step's backward reads are
computed again in the backward's kernels instead of being written by the forward's, and the results keep
their bits."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.ir.passes import recompute
from jitorch.jit.executor import KernelStep


def gelu_step(x, w1, b1, w2):
    """A GELU MLP's forward and backward: its gradients."""
    y = F.gelu(x @ w1 + b1) @ w2
    y.square().sum().backward()
    return w1.grad, b1.grad, w2.grad


def tensors(seed=0):
    g = jt.Generator().manual_seed(seed)
    return [jt.randn(24, 16, generator=g), jt.randn(16, 32, generator=g, requires_grad=True),
            jt.randn(32, generator=g, requires_grad=True), jt.randn(32, 8, generator=g, requires_grad=True)]


def kernels(fn, *args):
    """The kernel sources of ``fn``'s compiled graph for ``args``."""
    ex = jt.compile(fn).lower(*args).executable
    return [st.kernel.source for st in ex.steps if type(st) is KernelStep]


def without_recompute(monkeypatch):
    monkeypatch.setattr(recompute, "MAX_CONE", 0)


def test_gelu_forward_kernel_writes_one_output_and_the_backward_recomputes_phi(monkeypatch):
    made = [k for k in kernels(gelu_step, *tensors()) if "_normal_cdf" in k.ops]
    (forward,) = [k for k in made if "_normal_pdf" not in k.ops]
    assert len(forward.outputs) == 1  # the activation alone; its backward's factors were 3 more outputs
    backward = [k for k in made if k is not forward]
    assert len(backward) == 1 and "_normal_pdf" in backward[0].ops
    without_recompute(monkeypatch)
    (saved,) = [k for k in kernels(gelu_step, *tensors()) if "_normal_cdf" in k.ops]
    assert len(saved.outputs) == 4


def test_recomputed_gelu_gradients_keep_their_bits(monkeypatch):
    new = jt.compile(gelu_step)(*tensors())
    without_recompute(monkeypatch)
    old = jt.compile(gelu_step)(*tensors())
    eager = gelu_step(*tensors())
    for a, b, c in zip(new, old, eager):
        assert jt.equal(a, b)
        # (the kernels' float32 Phi is within 7 ulp of eager's, and the gradients are sums that cancel)
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-5, atol=1e-6 * np.abs(c.numpy()).max())


def layer_norm_step(x, w, b, w2):
    y = F.layer_norm(x, (16,), w, b) @ w2
    y.tanh().sum().backward()
    return w.grad, b.grad, w2.grad


def test_layer_norm_forward_no_longer_writes_the_normalised_input(monkeypatch):
    g = jt.Generator().manual_seed(1)
    args = [jt.randn(24, 16, generator=g), jt.randn(16, generator=g, requires_grad=True),
            jt.randn(16, generator=g, requires_grad=True), jt.randn(16, 8, generator=g, requires_grad=True)]
    new = jt.compile(layer_norm_step)(*[a.detach().requires_grad_(a.requires_grad) for a in args])
    made = kernels(layer_norm_step, *[a.detach().requires_grad_(a.requires_grad) for a in args])
    without_recompute(monkeypatch)
    old = jt.compile(layer_norm_step)(*[a.detach().requires_grad_(a.requires_grad) for a in args])
    saved = kernels(layer_norm_step, *[a.detach().requires_grad_(a.requires_grad) for a in args])
    for a, b in zip(new, old):
        assert jt.equal(a, b)
    # the normalised input, (x - mean) * rstd, is no longer written by the forward's kernel: the weight's
    # gradient computes it again from x and the mean (the layer's output is the one whole-size value the forward
    # writes). Without the pass the variance's kernel writes it and the output (its row epilogue, which computes
    # x - mean again: that is not written either)
    def whole(ks):
        return sum(1 for k in ks for v in k.outputs if tuple(v.type.shape) == (24, 16))
    assert (whole(made), whole(saved)) == (1, 2)


def traced(fn, *args):
    from jitorch.ir.passes import optimize
    from jitorch.jit import trace
    return optimize(trace(fn, *args))


def test_value_an_external_node_reads_is_not_recomputed():
    def f(x, w):
        h = (x @ w).sin()
        return (h @ w.t()) * h, h @ w.t()  # h is read by a product: it is in memory anyway
    g = traced(f, jt.randn(4, 4), jt.randn(4, 4))
    assert recompute.run(g) == 0


def test_value_from_more_bytes_than_its_own_is_not_recomputed():
    def f(x, y, w):
        s = x + y  # two whole-size reads to recompute one
        return (s @ w) * s
    g = traced(f, jt.randn(4, 4), jt.randn(4, 4), jt.randn(4, 4))
    assert recompute.run(g) == 0


def test_value_over_a_gather_is_not_recomputed():
    """A copy reading a gather's result cannot fold it: the copies fused into the gather's kernel, which wrote
    one output per copy (the GPT step's embedding kernel went from 1 output to 5)."""
    def f(table, idx, w):
        e = table.index_select(0, idx) * 2.0
        return (e @ w) * e
    g = traced(f, jt.randn(5, 4), jt.tensor([0, 3, 1, 4]), jt.randn(4, 4))
    assert recompute.run(g) == 0


def test_cone_larger_than_max_cone_is_not_recomputed():
    def f(x, w):
        h = x
        for _ in range(recompute.MAX_CONE + 1):
            h = h.sin()
        return (h.cos() @ w) * h
    g = traced(f, jt.randn(4, 4), jt.randn(4, 4))
    assert recompute.run(g) == 0


def test_value_recomputed_for_its_reader_across_a_product(monkeypatch):
    def f(x, w):
        h = (x @ w).sin()
        return (h.cos() @ w) * h  # h is read after the product: computed again from x @ w
    x, w = jt.randn(4, 4), jt.randn(4, 4)
    g = traced(f, x, w)
    assert recompute.run(g) == 1
    assert [n.op.name for n in g.nodes].count("sin") == 2
    new = jt.compile(f)(x, w)
    without_recompute(monkeypatch)
    assert jt.equal(new, jt.compile(f)(x, w))
    np.testing.assert_allclose(new.numpy(), f(x, w).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_recompute_keeps_a_training_steps_bits(seed, monkeypatch):
    """Random MLP steps (tanh, GELU, sigmoid) with and without the pass, seeds 0 and 1."""
    def step(x, w1, b1, w2):
        h = x @ w1 + b1
        y = (jt.sigmoid(h) * F.gelu(h)).tanh() @ w2
        y.square().mean().backward()
        return w1.grad, b1.grad, w2.grad
    new = jt.compile(step)(*tensors(seed))
    without_recompute(monkeypatch)
    old = jt.compile(step)(*tensors(seed))
    for a, b in zip(new, old):
        assert jt.equal(a, b)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "offset"])
def test_a_recomputed_value_reads_its_input_as_it_was_before_an_in_place_write(layout):
    """``h = x.exp()`` is read after a product that reads ``h.sin()``, and ``x`` is written in place between:
    the copy of ``exp`` at the reader must read ``x`` as it was (the memory plan sees the copy's read), with
    ``x`` strided, transposed or at an offset; values and the write as torch's."""
    import torch

    def f(T):
        def step(x, w):
            h = x.exp()
            p = h.sin() @ w
            x.add_(1)
            return p * h
        return step

    rng = np.random.default_rng(43)
    base, w = rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32)

    def operand(T):
        b = T.tensor(base)
        return {"contiguous": b[:4].clone(), "transposed": b[:4].t(), "offset": b[1:]}[layout]
    x = operand(jt)
    graph = traced(f(jt), operand(jt), jt.tensor(w))
    assert recompute.run(graph) == 1
    got = jt.compile(f(jt))(x, jt.tensor(w))
    tx = operand(torch)
    want = f(torch)(tx, torch.tensor(w))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    assert x.tolist() == tx.tolist()
