"""Views of a gather's result: fusion puts one in the gather's group only where the kernel builder folds its index
maths (`ir.lowerable.folds`, the builder's `codegen.kernel.index_maths_folds`), so no group is refused and split
one kernel per node. A pad (reflect, replicate, circular: an index_select per padded dim) then a pool's windows
(an ``as_strided`` of the padded value) is a kernel per gather and one for the windows and their reduction."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ir import lowerable
from jitorch.ir.passes.fusion import fuse, fuse_with_plan
from jitorch.jit.executor import EagerStep, KernelStep

# a kernel step of a refused group's part is named after the group and the part: jitorch_k<group>_<part>_<kind>
SPLIT = re.compile(r"_k\d+_\d+_")


def _plan(compiled, *args):
    """(the kernels' (name, op list), the eager steps' op lists) of ``compiled``'s plan for ``args``."""
    steps = compiled.lower(*args).executable.steps
    kernels = [(s.name, [n.op.name for n in s.nodes]) for s in steps if isinstance(s, KernelStep)]
    eager = [[n.op.name for n in s.nodes] for s in steps if isinstance(s, EagerStep)]
    return kernels, eager


def _windows(lib, nd, mode, pool, h, w):
    """A pad of the last ``nd`` dims then windows over it; the backward of their weighted sum."""
    F = lib.nn.functional
    padded = F.pad(h, (1, 2) * nd, mode=mode)
    y = F.unfold(padded, 2) if pool == "unfold" else getattr(F, f"{pool}_pool{nd}d")(padded, 2, stride=1)
    (y * w).sum().backward()
    return y


CHAINS = [(1, "reflect", "avg"), (1, "circular", "max"), (1, "replicate", "max"), (2, "replicate", "avg"),
          (2, "reflect", "max"), (2, "circular", "unfold"), (2, "constant", "avg"), (3, "replicate", "max"),
          (3, "circular", "avg"), (3, "constant", "max")]


@pytest.mark.parametrize("nd, mode, pool", CHAINS)
def test_pad_then_pool_is_a_kernel_per_gather_and_one_for_the_windows(nd, mode, pool):
    """Compiled forward and backward: no group split; each gather of the pad alone in its kernel (its result is
    in memory, where the windows read it), the windows in their reduction's kernel (or, unfold's, a view of
    the padded value); the result and the gradient are eager's and torch's."""
    rng = np.random.default_rng(nd)
    xa = rng.standard_normal((2, 3) + (4,) * nd).astype(np.float32)
    out_shape = _windows(torch, nd, mode, pool, torch.tensor(xa, requires_grad=True), 1.0).shape
    wa = rng.standard_normal(tuple(out_shape)).astype(np.float32)
    step = jt.compile(lambda h, w: _windows(jt, nd, mode, pool, h, w))
    x, w = jt.tensor(xa, requires_grad=True), jt.tensor(wa)
    kernels, eager = _plan(step, x, w)
    assert not [name for name, _ in kernels if SPLIT.search(name)], kernels
    gathers = [ops for _, ops in kernels if "index_select" in ops]
    assert gathers == ([] if mode == "constant" else [["index_select"]] * nd), kernels
    if pool == "unfold":
        assert ["as_strided"] in eager, eager
    else:
        reduction = "max.dim" if pool == "max" else "sum"
        assert any({"as_strided", reduction} <= set(ops) for _, ops in kernels), kernels
    y = step(x, w)
    xe = jt.tensor(xa, requires_grad=True)
    ye = _windows(jt, nd, mode, pool, xe, w)
    xt = torch.tensor(xa, requires_grad=True)
    yt = _windows(torch, nd, mode, pool, xt, torch.from_numpy(wa))
    # (a sum of 8 floats, as eager's NumPy and the kernel order them, may differ in the last bit)
    np.testing.assert_allclose(y.detach().numpy(), ye.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(x.grad.numpy(), xe.grad.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5)


INDEX = [0, 2, 4, 1]
VIEWS = {
    # a reshape across the gathered dim (its result's geometry over the source has stride 0 there)
    "flatten": (lambda lib, g: g.flatten() * 2, [["index_select"], ["view", "mul"]]),
    # as_strided addresses the gathered value's elements in order, which no geometry over the source gives
    "as_strided": (lambda lib, g: g.as_strided((2, 2), (1, 1)) * 2, [["index_select"], ["as_strided", "mul"]]),
    "transposed as_strided": (lambda lib, g: g.t().as_strided((2, 2), (1, 1)) * 2,
                              [["index_select"], ["as_strided", "mul"]]),
    # a gather of a view of a gather's result: the builder gathers from a source in memory only
    "gather of its transpose": (lambda lib, g: g.t().index_select(1, lib.tensor([0, 2])) * 2,
                                [["index_select", "t"], ["index_select", "mul"]]),
    # windows along a dim, which compose with the gather's geometry: one kernel
    "unfold": (lambda lib, g: g.unfold(1, 2, 1) * 2, [["index_select", "unfold", "mul"]]),
}


@pytest.mark.parametrize("name", list(VIEWS))
def test_a_view_of_a_gather_joins_its_group_only_where_it_folds(name):
    """A view of an index_select's result that the builder cannot fold onto the gather starts a later group (no
    eager step, no refused group split per node); one that folds joins it. Eager's bits, torch's values."""
    view, expected = VIEWS[name]
    xa = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)

    def f(lib, x):
        return view(lib, x.index_select(1, lib.tensor(INDEX)))

    compiled = jt.compile(lambda x: f(jt, x))
    x = jt.from_numpy(xa)
    kernels, eager = _plan(compiled, x)
    assert eager == [] and [ops for _, ops in kernels] == expected, (kernels, eager)
    got = compiled(x).numpy()
    np.testing.assert_array_equal(got, f(jt, x).numpy())
    np.testing.assert_array_equal(got, f(torch, torch.from_numpy(xa)).numpy())


def test_a_fusion_plan_with_an_as_strided_of_a_gather_in_its_group_is_refused():
    """A stored plan is checked by fusion's rules, this one too: a plan that puts a pool's windows (as_strided of
    a replicate pad's index_select) in the gather's group is dropped and the graph fused anew."""
    F = jt.nn.functional
    step = jt.compile(lambda h: F.avg_pool1d(F.pad(h, (0, 1), mode="replicate"), 2, stride=1))
    graph = step.lower(jt.ones(2, 3, 4)).executable.graph
    groups, plan, adopted = fuse_with_plan(graph)
    assert not adopted and [[n.op.name for n in g.nodes] for g in groups] == \
        [["index_select"], ["as_strided", "sum", "true_divide"]]
    merged = [0 if k == 1 else k for k in plan]
    assert fuse_with_plan(graph, plan=merged)[2] is False
    assert fuse_with_plan(graph, plan=plan)[2] is True
    assert [str(g) for g in fuse(graph)] == [str(g) for g in groups]


def test_the_kernel_builder_says_which_index_maths_folds():
    """`lowerable.folds` is the kernel builder's rule: an index_select's result and a transpose of it fold; an
    as_strided of it does not, but folds onto a value in memory."""
    def f(h):
        padded = jt.nn.functional.pad(h, (0, 1), mode="replicate")
        return padded.as_strided((2, 2), (1, 1)) * 2, padded.t() * 3

    graph = jt.compile(f).lower(jt.ones(2, 3)).executable.graph
    nodes = {n.op.name: n for n in graph.nodes}
    assert lowerable.folds((nodes["index_select"],))
    assert lowerable.folds((nodes["index_select"], nodes["t"]))
    assert not lowerable.folds((nodes["index_select"], nodes["as_strided"]))
    assert lowerable.folds((nodes["as_strided"],))
