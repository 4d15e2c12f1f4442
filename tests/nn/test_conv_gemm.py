"""Convolutions as one GEMM per group over the whole batch: the work a traced training step records, and
values, gradients and layouts against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F


def _graph_step(conv, x, w):
    """The traced graph of ``conv(x, w)``'s forward and backward (both inputs' gradients)."""
    def step(x, w):
        y = conv(x, w)
        y.square().sum().backward()
        return y, x.grad, w.grad
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    return jt.compile(step).lower(x, w).graph


def _nodes(graph, name):
    return [n for n in graph.nodes if n.op.name == name]


def _shapes(node):
    return [tuple(a.type.shape) for a in node.args[:2]]


def test_a_convolution_step_is_three_gemms_over_the_batch_and_one_col2im():
    # (N, C, H, W) = (4, 6, 9, 9), weight (8, 3, 3, 3) in 2 groups, stride 2, padding 1: 5x5 outputs
    x, w = jt.randn(4, 6, 9, 9), jt.randn(8, 3, 3, 3)
    graph = _graph_step(lambda x, w: F.conv2d(x, w, stride=2, padding=1, groups=2), x, w)
    forward, *backward = _nodes(graph, "matmul")
    # (G, O/G, K * C/G) @ (G, K * C/G, L * N): every image's windows in one operand
    assert _shapes(forward) == [(2, 4, 27), (2, 27, 100)]
    assert len(backward) == 2  # the weight's gradient and the windows' gradient, one GEMM each
    (col2im,) = _nodes(graph, "_as_strided_add")
    size, stride = col2im.args[2], col2im.args[3]
    # the windows' gradients summed back with the batch innermost: unit-stride runs of whole batch rows
    assert tuple(size) == (2, 3, 3, 3, 5, 5, 4) and stride[-1] == 1


def test_a_transposed_convolution_step_gathers_its_backward_with_no_col2im():
    x, w = jt.randn(3, 4, 5, 5), jt.randn(4, 3, 4, 4)
    graph = _graph_step(lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, groups=2), x, w)
    forward, *backward = _nodes(graph, "matmul")
    # (G, K * C_out/G, C_in/G) @ (G, C_in/G, L * N)
    assert _shapes(forward) == [(2, 48, 2), (2, 2, 75)]
    assert len(backward) == 2
    # the forward's col2im is the only accumulation: the backward reads the windows as a strided view
    assert len(_nodes(graph, "_as_strided_add")) == 1


CASES = [
    # (function, input shape, weight shape, keyword arguments); the odd cases have no bias
    ("conv2d", (4, 6, 9, 8), (8, 3, 4, 3), dict(stride=2, padding=1, groups=2)),
    ("conv2d", (2, 3, 7, 7), (5, 3, 3, 3), dict(padding="same", dilation=2)),
    ("conv1d", (3, 4, 11), (6, 2, 3), dict(stride=3, padding=2, groups=2)),
    ("conv3d", (2, 2, 5, 4, 5), (3, 2, 2, 3, 2), dict(padding=1)),
    ("conv_transpose2d", (4, 8, 4, 4), (8, 3, 4, 4), dict(stride=2, padding=1)),
    ("conv_transpose2d", (3, 4, 5, 4), (4, 3, 4, 3), dict(stride=2, padding=1, output_padding=1, groups=2,
                                                         dilation=(1, 2))),
    ("conv_transpose2d", (3, 8, 1, 1), (8, 5, 4, 4), {}),
    ("conv_transpose1d", (4, 5), (4, 3, 3), dict(stride=3, padding=1)),
    ("conv_transpose3d", (2, 2, 3, 2, 3), (2, 3, 2, 3, 2), dict(stride=2)),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_convolutions_match_torch_in_values_gradients_and_strides(case):
    name, xs, ws, kwargs = CASES[case]
    rng = np.random.default_rng(case)
    arrays = [rng.standard_normal(xs), rng.standard_normal(ws)]
    if case % 2 == 0:
        arrays.append(rng.standard_normal(ws[1] * kwargs.get("groups", 1) if "transpose" in name else ws[0]))
    ours = [jt.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = getattr(F, name)(*ours, **kwargs)
    expected = getattr(torch.nn.functional, name)(*theirs, **kwargs)
    g = rng.standard_normal(tuple(expected.shape))
    (y * jt.tensor(g)).sum().backward()
    (expected * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-10)
    for a, e in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), e.grad.numpy(), rtol=1e-10, atol=1e-10)
    # contiguous, as torch's: a transposed convolution's cropped output once came back as a strided view
    assert y.stride() == expected.stride()


# the compiled cases: strided and grouped, dilated with 'same' padding, a transposed one with output_padding,
# groups and dilation, a 1-d transposed one
COMPILED = [0, 1, 5, 7]


@pytest.mark.parametrize("case", COMPILED)
def test_compiled_convolution_steps_match_torch_and_write_their_scatters_into_the_arena(case):
    name, xs, ws, kwargs = CASES[case]
    rng = np.random.default_rng(case)
    arrays = [rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)]

    def step(lib, x, w, g):
        y = getattr(lib.nn.functional, name)(x, w, **kwargs) * g  # (a result the call returns is not a view
        y.sum().backward()                                          # of the convolution's own memory)
        return y, x.grad, w.grad

    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    expected = step(torch, *theirs, torch.ones(1))
    g = rng.standard_normal(tuple(expected[0].shape)).astype(np.float32)
    for t in theirs:
        t.grad = None
    expected = step(torch, *theirs, torch.tensor(g))
    compiled = jt.compile(lambda x, w, g: step(jt, x, w, g))
    ours = [jt.tensor(a, requires_grad=True) for a in arrays]
    low = compiled.lower(*ours, jt.tensor(g))
    # the padding and a transposed convolution's col2im are eager steps that write their result into the
    # compiled graph's arena (memory a call finds mapped), not into fresh memory per call (an input's
    # gradient, which the call returns, still gets its own)
    scatters = [(s, n) for s in low.steps if "kernel" not in repr(s) for n in s.nodes
                if n.op.name in ("_as_strided_add", "as_strided_scatter")]
    first = "_as_strided_add" if "transpose" in name else "as_strided_scatter"
    assert [n.op.name for _, n in scatters].count("_as_strided_add") == 1
    assert any(n.op.name == first and n.outputs[0] in s.into_arena for s, n in scatters), scatters
    for _ in range(2):  # the second call reuses the arena the first one filled
        got = compiled(*[jt.tensor(a, requires_grad=True) for a in arrays], jt.tensor(g))
        for a, e in zip(got, expected):
            np.testing.assert_allclose(a.detach().numpy(), e.detach().numpy(), rtol=1e-4, atol=1e-4)
