"""The recompute pass across reductions (`recompute.BARRIERS`): a pointwise value a reduction's prologue reads and a
node after the reduction reads again is computed again there rather than written out and read back. In a
``jitorch.compile(model)`` step's backward graph (the partition's, which runs as its own compiled graph) a layer
norm's backward wrote ``g * w``, ``g * w * rstd`` and its negation for the three kernels after the one computing
them. The copies compute the same ops on the same operands: the gradients keep their bits."""

from __future__ import annotations

import collections

import numpy as np
import torch

import jitorch as jt
from jitorch.ir.passes import fusion, recompute
from jitorch.jit.executor import KernelStep
from jitorch.profiler import profile


def without_reduction_barriers(monkeypatch):
    """The pass as it was: copies across external nodes only."""
    monkeypatch.setattr(recompute, "BARRIERS", ("external",))


def stack(T):
    """Two Linear + LayerNorm layers and a head, as a ``T`` module (seed 0)."""
    T.manual_seed(0)
    nn = T.nn
    return nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 16), nn.LayerNorm(16), nn.Linear(16, 5))


def whole_size_outputs(graph, shape):
    """How many values of ``shape`` the kernels of a compiled graph write."""
    return sum(tuple(v.type.shape) == shape for st in graph.steps if type(st) is KernelStep for v in st.outputs)


def compiled_model_step(x):
    """(the compiled stack's split (its forward and backward graphs), its parameters' gradients, the names of the
    compiled graphs one step ran) for one backward of ``square().sum()`` of its output."""
    model = jt.compile(stack(jt))
    model(x).square().sum().backward()  # (compiles)
    model.zero_grad(set_to_none=True)
    with profile() as prof:
        model(x).square().sum().backward()
    ran = collections.Counter(e.name for e in prof.events() if e.kind == "compiled_call")
    (function,) = model._by_mode.values()
    (entry,) = function.cache.values()
    return entry.split, [p.grad.numpy().copy() for p in model.parameters()], ran


def test_a_compiled_models_layer_norm_backward_graph_writes_only_the_input_gradient(monkeypatch):
    x = jt.randn(6, 10, 8, generator=jt.Generator().manual_seed(2))
    split, grads, ran = compiled_model_step(x)
    # the backward ran as the partition's saved graph (no compiled vector-Jacobian product recomputing the forward)
    assert ran == {"compiled: Sequential (forward)": 1, "compiled: Sequential (backward)": 1}
    # each layer norm's backward writes its input's gradient alone; the forward the saved x - mean and the output
    # (the bias add before it is computed again in the normalisation, after the mean's sum, not written)
    assert whole_size_outputs(split.backward, (6, 10, 16)) == 2
    assert whole_size_outputs(split.forward, (6, 10, 16)) == 4
    without_reduction_barriers(monkeypatch)
    # (fusion's tie rule, session 49, keeps the old pass's backward at 2 too: the row sums' prologue out of the
    # kernel after the forward's statistics; without it, the graph as the old pass and fusion made it)
    monkeypatch.setattr(fusion, "UNTIED_REDUCTIONS", False)
    monkeypatch.setattr(fusion, "DEPENDENT_ROW_REDUCTIONS", False)  # (session 50: the mean and variance in one)
    old_split, old_grads, _ = compiled_model_step(x)
    # (6 before reductions shared a kernel and read an expand's source, 8 before they took siblings)
    assert whole_size_outputs(old_split.backward, (6, 10, 16)) == 4
    assert whole_size_outputs(old_split.forward, (6, 10, 16)) == 6
    # (not the same bits since the layer norm's mean and variance share a kernel, session 50: the old pass's
    # separate mean kernel wrote the bias add for the variance's kernel, so its loop was not a streamed run;
    # in one kernel nothing is written, and the mean sums in streams, in another order)
    for new, old in zip(grads, old_grads):
        np.testing.assert_allclose(new, old, rtol=1e-5, atol=1e-5)
    eager = stack(jt)
    eager(x).square().sum().backward()
    twin = stack(torch)
    with torch.no_grad():
        for p, q in zip(eager.parameters(), twin.parameters()):
            q.copy_(torch.from_numpy(p.detach().numpy().copy()))
    twin(torch.from_numpy(x.numpy())).square().sum().backward()
    for g, p, q in zip(grads, eager.parameters(), twin.parameters()):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(g, q.grad.numpy(), rtol=1e-4, atol=1e-5)


def traced(fn, *args):
    from jitorch.ir.passes import optimize
    from jitorch.jit import trace
    return optimize(trace(fn, *args))


def test_a_value_read_on_both_sides_of_a_reduction_is_computed_again_after_it(monkeypatch):
    def f(x):
        e = (x * 2.0).exp()
        return e / e.sum(-1, keepdim=True)
    x = jt.randn(5, 7, generator=jt.Generator().manual_seed(1))
    g = traced(f, x)
    assert recompute.run(g) == 1
    assert [n.op.name for n in g.nodes].count("exp") == 2
    new = jt.compile(f)(x)
    without_reduction_barriers(monkeypatch)
    assert recompute.run(traced(f, x)) == 0
    assert jt.equal(new, jt.compile(f)(x))
    np.testing.assert_allclose(new.numpy(), f(x).numpy(), rtol=1e-6)


def test_a_value_from_more_bytes_than_its_own_is_not_computed_again_after_a_reduction():
    def f(x, y):
        s = x + y  # two whole-size reads to recompute one
        return s - s.mean(-1, keepdim=True)
    g = traced(f, jt.randn(4, 6), jt.randn(4, 6))
    assert recompute.run(g) == 0
