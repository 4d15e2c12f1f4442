"""Compiled convolution steps keep the batch-last layout between layers (`ir.passes.sink`): what the compiler
did (the kernels between two convolutions write batch-last, no kernel transposes a batch-first tensor back),
and values and gradients against torch at one and two threads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ir.passes import dce, simplify, sink
from jitorch.jit import trace
from tests.ir.test_passes import assert_runs_the_same

N, C, H, W = 5, 4, 8, 6  # (distinct sizes: a batch-first shape is told from a batch-last one)


def _net(lib):
    """conv -> batchnorm -> leaky relu -> transposed conv -> batchnorm -> tanh -> grouped, dilated conv."""
    nn = lib.nn
    lib.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, C, 3, 1, 1, bias=False), nn.BatchNorm2d(C), nn.LeakyReLU(0.2),
                         nn.ConvTranspose2d(C, 6, 4, 2, 1), nn.BatchNorm2d(6), nn.Tanh(),
                         nn.Conv2d(6, 4, 3, 2, 1, dilation=2, groups=2))


def _step(lib, net):
    def step(x):
        y = net(x)
        (y * y).sum().backward()
        return y
    return step


def _weights(ours, theirs):
    """Copy ``theirs``' parameters into ``ours`` (their initialisations draw differently)."""
    for p, q in zip(ours.parameters(), theirs.parameters()):
        p.data = jt.tensor(q.detach().numpy().copy())


def test_kernels_between_convolutions_run_batch_last():
    net = _net(jt)
    low = jt.compile(_step(jt, net)).lower(jt.randn(N, 3, H, W))
    kernels = [s for s in low.steps if "kernel" in repr(s)]
    # (a reduction's prologue computes in its batch-first space what it sums, written nowhere: the recompute
    # pass's copies into reductions)
    computed = [n for s in kernels for n in s.nodes if n.op.view is None and n.op.name != "sum"
                and (s.kernel.source.kind != "reduction" or n.outputs[0] in s.kernel.source.outputs)]
    # every result between the layers (batchnorm, activations, their backward) lies batch innermost: none
    # has a batch-first shape (the returned output, (N, 4, 7, 5), and its gradient do)
    between = [(C, H, W, N), (6, 2 * H, 2 * W, N)]
    first = [(s[-1], *s[:-1]) for s in between]
    assert not [n.op.name for n in computed if n.outputs[0].type.shape in first]
    assert len([n for n in computed if n.outputs[0].type.shape in between]) > 20
    # and no copy kernel transposes an activation or its gradient between layers (the copies left: the windows
    # (im2col), the weights' reorderings, the returned output's gradient laid out batch-last)
    copies = [s for s in kernels if "_view" in repr(s)]
    copied = [n.args[0].type.shape for s in copies for n in s.nodes if n.op.name == "permute"]
    assert copied and not set(copied) & set(first + between), copied
    # the products read the weights as they lie (channel-major windows): no kernel copies one, forward or backward
    weights = {v for v in low.optimized_graph.constants.values() if v.name.endswith("weight") and v.type.ndim == 4}
    assert len(weights) == 3 and not [s for s in copies for n in s.nodes if set(n.input_values()) & weights]
    assert not [s for s in kernels if "pointwise" in repr(s) and any(
        n.op.name in ("permute", "transpose", "as_strided") and set(n.input_values()) & weights for n in s.nodes)]


@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_step_matches_torch_and_does_not_depend_on_threads(threads):
    x = np.random.default_rng(0).standard_normal((N, 3, H, W)).astype(np.float32)
    tnet = _net(torch)
    ty = _step(torch, tnet)(torch.tensor(x))
    results = []
    for n_threads in sorted({1, threads}):
        jt.set_num_threads(n_threads)
        try:
            net = _net(jt)
            _weights(net, tnet)
            y = jt.compile(_step(jt, net))(jt.tensor(x))
        finally:
            jt.set_num_threads(1)
        results.append([y.detach().numpy()] + [p.grad.numpy() for p in net.parameters()]
                       + [b.numpy() for b in net.buffers()])
        assert y.is_contiguous() and y.stride() == ty.stride()
    expected = [ty.detach().numpy()] + [p.grad.numpy() for p in tnet.parameters()] \
        + [b.numpy() for b in tnet.buffers()]
    for got, want in zip(results[-1], expected):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)
    for a, b in zip(*results) if len(results) == 2 else ():
        assert np.array_equal(a, b)


# Pass-level cases ------------------------------------------------------------------------------------------

def _chain(x, w):
    """A batch-first view of a batch-last ``x``, scaled per channel and activated, read batch-last again."""
    z = (x.permute(3, 0, 1, 2) * w).relu()
    return z.permute(1, 2, 3, 0) * 1.5


def _ops(graph):
    return [n.op.name for n in graph.nodes]


def test_sink_runs_pointwise_ops_batch_last_and_the_permutes_cancel():
    rng = np.random.default_rng(1)
    x, w = jt.tensor(rng.standard_normal((C, H, W, N)).astype(np.float32)), jt.randn(C, 1, 1)
    g = trace(_chain, x, w)
    assert_runs_the_same(g, [x, w], passes=[sink.run, simplify.run, dce.run])
    # the per-channel weight is read through a view of (C, 1, 1, 1); nothing else is permuted
    assert _ops(g) == ["view", "permute", "mul", "relu", "mul"]
    assert all(n.outputs[0].type.shape == (C, H, W, N) for n in g.nodes[2:])


def test_sink_keeps_returned_values_and_other_permutes():
    x, w = jt.randn(C, H, W, N), jt.randn(C, 1, 1)
    g = trace(lambda x, w: (_chain(x, w), (x.permute(3, 0, 1, 2) * w).relu()), x, w)
    assert_runs_the_same(g, [x, w], passes=[sink.run, simplify.run, dce.run])
    relus = [n.outputs[0].type.shape for n in g.nodes if n.op.name == "relu"]
    assert (N, C, H, W) in relus  # the returned value's memory is eager's, batch-first
    # a permute other than the batch-first rotation stays where it is
    g = trace(lambda x: x.permute(0, 3, 1, 2).relu().permute(0, 2, 3, 1) * 2.0, x)
    assert sink.run(g) == 0


def test_sink_leaves_a_chain_that_ends_in_a_flatten():
    """conv -> scale -> relu -> flatten (before a Linear layer): the flatten needs the activation compact, which
    the relu's kernel makes it writing batch-first; run batch-last, the chain would need a transposing copy."""
    x, w = jt.randn(C, H, W, N), jt.randn(C, 1, 1)
    g = trace(lambda x, w: (x.permute(3, 0, 1, 2) * w).relu().flatten(1) @ jt.ones(C * H * W, 2), x, w)
    assert sink.run(g) == 0
