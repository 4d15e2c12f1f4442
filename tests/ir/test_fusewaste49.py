"""Kernels the compiled training step wasted (issue 19), seen in fusion's groups: a pointwise cluster that made one
reduction depend on another it could share a loop with (a hand-written RMSNorm step's two row means, three groups
for two), a kernel that made one product depend on another it could run beside (GPT's MLP backward: the GELU the
c_proj weight gradient reads, computed in the GELU backward's kernel, which reads the c_proj input gradient), and a
group computing a value twice (the recompute pass's copy of a pointwise value with its original). Values are
checked against eager through the IR interpreter; tests/jit/test_fusewaste49.py compiles them."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

import jitorch as jt
from jitorch.ir.interpreter import interpret
from jitorch.ir.passes import fusion, optimize, recompute
from jitorch.ir.passes.fusion import fuse, merge_repeats, tie_points
from jitorch.jit import trace
from tests.ir.test_fusion import check


@contextlib.contextmanager
def switched(name, value):
    saved = getattr(fusion, name)
    setattr(fusion, name, value)
    try:
        yield
    finally:
        setattr(fusion, name, saved)


def ops(group):
    return [n.op.name for n in group.nodes]


def rms_norm_step(g0, x, w):
    """A hand-written RMSNorm's forward mean and its backward, as autograd writes them, the gradient of its
    output computed (``g``, read by both ``g * w``, before the backward's row sum, and ``g * (x * r)``, after the
    forward's mean)."""
    g = g0 * 0.5
    r = (x * x).mean(-1, keepdim=True).add(1e-6).rsqrt()
    xr = x * r
    gw = g * w
    s = (gw * x).sum(-1, keepdim=True)
    dx = gw * r + x * (s * -0.5 * r * r * r / x.shape[-1])
    return dx, (g * xr).sum(0)


def test_an_rms_norm_steps_two_row_means_share_a_group():
    """Before: ``x * r`` (after the forward's mean) and ``g * w * x`` (before the backward's sum) formed one
    pointwise cluster through ``g``, so a merge of the two means would close a cycle: three groups."""
    args = jt.randn(64, 32), jt.randn(64, 32), jt.randn(32)
    graph = trace(rms_norm_step, *args)
    groups = check(graph, fuse(graph))
    assert [len(g.reductions) for g in groups] == [2, 1]
    assert [r.op.name for r in groups[0].reductions] == ["mean", "sum"]
    with switched("UNTIED_REDUCTIONS", False):
        before = check(graph, fuse(graph))
    assert [len(g.reductions) for g in before] == [1, 1, 1]
    for got, want in zip(interpret(graph, args)[0], rms_norm_step(*args)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_reductions_that_depend_on_each_other_are_no_tie_points_pair(monkeypatch):
    """A layer norm's variance reads its mean: the two are tie points of one kind, but never `tied` apart by a
    kernel (one depends on the other already), and fusion groups them as before: in one group (session 50's
    `fusion.DEPENDENT_ROW_REDUCTIONS`), or without it in two."""
    def fn(x):
        d = x - x.mean(-1, keepdim=True)
        return (d * d).mean(-1, keepdim=True)
    graph = trace(fn, jt.randn(64, 32))
    assert len(tie_points(graph.nodes, fusion.kind_of)) == 2
    assert [len(g.reductions) for g in check(graph, fuse(graph))] == [2]
    monkeypatch.setattr(fusion, "DEPENDENT_ROW_REDUCTIONS", False)
    assert [len(g.reductions) for g in check(graph, fuse(graph))] == [1, 1]


def mlp_backward(g, a, b, w):
    """GPT's MLP backward from c_proj down (``a``: c_fc's product, saved): the c_proj input gradient ``g @ w`` and
    weight gradient ``g.t() @ gelu``, independent products, and the GELU's backward reading the first."""
    h = a + b
    cdf = 0.5 * (1 + jt.erf(h * (1 / math.sqrt(2))))
    gelu = h * cdf
    dgelu = g @ w
    dw = g.t() @ gelu
    pdf = jt.exp(h * h * -0.5) * (1 / math.sqrt(2 * math.pi))
    dh = dgelu * (cdf + h * pdf)
    return dw, dh, dh.sum(0)


def mlp_args(rows=768, dims=128):
    return jt.randn(rows, dims), jt.randn(rows, 4 * dims), jt.randn(4 * dims), jt.randn(dims, 4 * dims)


def groups_tying(graph, groups):
    """The groups that read one product's result and write what another reads (directly or through views)."""
    products = [n for n in graph.nodes if n.op.name == "matmul"]
    results = {p.outputs[0] for p in products}
    operands = set()
    for p in products:
        for v in p.args[:2]:
            while v.node is not None and fusion.kind_of(v.node) == "view":
                v = v.node.args[0]
            operands.add(v)
    return [g for g in groups if results & set(g.inputs) and operands & set(g.outputs)]


def recomputed(fn, *args):
    graph = optimize(trace(fn, *args))
    recompute.run(graph)
    return graph


def test_the_gelu_a_weight_gradient_reads_is_not_in_the_gelu_backwards_kernel():
    """Before: one kernel computed the GELU (which the c_proj weight gradient's product reads) and the GELU's
    backward (which reads the c_proj input gradient's product), so the two products ran one after the other. Now
    the GELU's kernel reads no product's result, and the backward computes ``h``, ``cdf`` and ``pdf`` again
    (recompute) rather than reading them from memory."""
    args = mlp_args()
    graph = recomputed(mlp_backward, *args)
    groups = check(graph, fuse(graph))
    assert groups_tying(graph, groups) == []
    (gelu,) = [g for g in groups if g.kind == "pointwise" and "erf" in ops(g)]
    assert sorted(ops(gelu)) == ["add", "add", "erf", "mul", "mul", "mul"]
    assert len(gelu.outputs) == 1  # (the GELU alone: no cdf, pdf or h written for the backward)
    for got, want in zip(interpret(graph, args)[0], mlp_backward(*args)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
    with switched("UNTIED_PRODUCTS", False):
        graph = recomputed(mlp_backward, *args)
        assert len(groups_tying(graph, check(graph, fuse(graph)))) == 1


def test_small_products_are_tied_as_before():
    """Products under `fusion.PRODUCT_MIN_WORK` multiply-adds are never paired: fusion groups them as before."""
    args = mlp_args(rows=8, dims=16)
    graph = recomputed(mlp_backward, *args)
    assert not any(n.op.name == "matmul" for n in tie_points(graph.nodes, fusion.kind_of))
    assert len(groups_tying(graph, check(graph, fuse(graph)))) == 1


def dispatch_graph(x, w):
    h = (x @ w).relu()
    return h.sum(0), (h * 3 + 1).exp().softmax(-1)


def test_a_group_computes_a_recompute_copy_and_its_original_once():
    """The column sum's copy of ``relu(x @ w)`` (recompute: a reduction is a barrier) and the original, read by the
    pointwise siblings that join the sum's group, were both computed in its kernel."""
    args = jt.randn(8, 6), jt.randn(6, 4)
    graph = recomputed(dispatch_graph, *args)
    groups = check(graph, fuse(graph))
    (group,) = [g for g in groups if g.kind == "reduction"]
    assert ops(group) == ["relu", "relu", "sum", "mul", "add", "exp"]
    with switched("MERGE_REPEATS", False):
        assert merge_repeats(graph, groups) == 0
    assert merge_repeats(graph, groups) == 1
    assert ops(group) == ["relu", "sum", "mul", "add", "exp"]
    check(graph, groups)
    assert [n.op.name for n in graph.nodes].count("relu") == 1
    for got, want in zip(interpret(graph, args)[0], dispatch_graph(*args)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_merge_repeats_keeps_each_groups_inputs_and_outputs(seed):
    """A repeat whose value another group reads: that group reads the kept node's value, which its group writes."""
    def fn(x, w):
        h = (x @ w).relu()
        return h.sum(0), (h * 3 + 1).exp().softmax(-1), h.sum(0) * (h * 3 + 1)
    rng = np.random.default_rng(seed)
    args = [jt.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((8, 6), (6, 4))]
    graph = recomputed(fn, *args)
    groups = fuse(graph)
    merge_repeats(graph, groups)
    check(graph, groups)
    for group in groups:
        keys = [(n.op, repr(n.args)) for n in group.nodes if fusion.kind_of(n) == "pointwise"]
        assert len(keys) == len(set(keys))
    for got, want in zip(interpret(graph, args)[0], fn(*args)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
