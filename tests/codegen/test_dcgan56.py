"""DCGAN's convolutions (4x4 kernels at stride 2) by Winograd's F(2x2, 2x2) (`nn.functional._winograd_conv`): nine
products of 9/16 of the direct GEMM's multiply-adds, forward and both gradients; and the stacks of its transforms,
whose pieces their kernels write straight into the stack's result (`jit.executor.fold_pieces_into_stacks`). Compiled
calls only (`jitorch.compiler.reruns_eagerly`): eager ones keep the direct GEMM (tests/codegen/test_dcgan57.py)."""

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F
from tests.jit.test_stack_fold57 import stack_steps


def products(graph):
    """(op, operand shapes) of the graph's matrix products."""
    return [(n.op.name, [tuple(a.type.shape) for a in n.args[:2]]) for n in graph.nodes
            if n.op.name in ("matmul", "mm", "bmm")]


def conv_step(transposed, padding=1):
    def step(x, w, g):
        y = (F.conv_transpose2d if transposed else F.conv2d)(x, w, stride=2, padding=padding)
        gx, gw = jt.autograd.grad(y, (x, w), g)
        return y, gx, gw
    return step


def operands(transposed, n, c, o, h, w, padding, dtype):
    """Input, weight and result gradient (torch's, float64) of a stride-2 4x4 convolution, C -> O channels."""
    torch.manual_seed(n * 1000 + c + o + h)
    x = torch.randn(n, c, h, w, dtype=dtype)
    weight = torch.randn(*((c, o) if transposed else (o, c)), 4, 4, dtype=dtype) * 0.1
    fn = torch.nn.functional.conv_transpose2d if transposed else torch.nn.functional.conv2d
    g = torch.randn_like(fn(x, weight, stride=2, padding=padding))
    return x, weight, g


def jitorch_operands(x, weight, g):
    return (jt.tensor(x.numpy(), requires_grad=True), jt.tensor(weight.numpy(), requires_grad=True),
            jt.tensor(g.numpy()))


CASES = [(False, 2, 32, 40, 8, 12, 1), (False, 1, 33, 32, 10, 6, 0), (True, 2, 32, 40, 4, 6, 1),
         (True, 1, 33, 32, 2, 4, 2)]


@pytest.mark.parametrize("case", CASES)
def test_winograd_convolutions_and_their_gradients_match_torch(case):
    transposed, n, c, o, h, w, padding = case
    x, weight, g = operands(transposed, n, c, o, h, w, padding, torch.float64)
    xr, wr = x.clone().requires_grad_(), weight.clone().requires_grad_()
    fn = torch.nn.functional.conv_transpose2d if transposed else torch.nn.functional.conv2d
    expected = fn(xr, wr, stride=2, padding=padding)
    expected = (expected, *torch.autograd.grad(expected, (xr, wr), g))
    args = jitorch_operands(x, weight, g)
    compiled = jt.compile(conv_step(transposed, padding))
    got = compiled(*args)
    assert got[0].stride() == expected[0].stride()
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-10)
    graph = compiled.lower(*args).graph
    # nine products for each of the three: a convolution's and its input gradient's (a transposed convolution's the
    # other way round), and the weight gradient's
    o, c = (c, o) if transposed else (o, c)  # (the weight as a convolution's, (O, C, 4, 4))
    tiles = n * (h // 2) * (w // 2) if transposed else n * ((h + 2 * padding - 2) // 4) * ((w + 2 * padding - 2) // 4)
    weight_gradient = [(9, 4 * c, tiles), (9, tiles, o)] if transposed else [(9, o, tiles), (9, tiles, 4 * c)]
    expected = [[(9, o, 4 * c), (9, 4 * c, tiles)], [(9, 4 * c, o), (9, o, tiles)], weight_gradient]
    assert sorted(shapes for _, shapes in products(graph)) == sorted(expected)
    assert {op for op, _ in products(graph)} == {"bmm"}


@pytest.mark.parametrize("transposed", [False, True])
def test_compiled_winograd_step_equals_its_graph_interpreted_bit_for_bit_its_stacks_written_in_place(transposed):
    """The transforms' kernels compute each element as the interpreter's eager ops do, into the stacks' buffers: of
    the 14 (transposed: 13) stacks of the step, those whose every piece a kernel computes run no step; three keep
    one, which copies only the pieces that are not a kernel's (an add's gradient passed through, a view; the weight
    gradient's); the others, some 40 pieces and inner stacks, lie in their stack's buffer."""
    x, weight, g = operands(transposed, 2, 32, 32, 4, 4, 1, torch.float32)
    args = jitorch_operands(x, weight, g)
    step = conv_step(transposed)
    compiled, interpreted = jt.compile(step), jt.compile(step, backend="interpreter")
    for _ in range(2):
        for a, b in zip(compiled(*args), interpreted(*args)):
            np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    executable = compiled.lower(*args).executable
    assert sum(n.op.name == "stack" for n in executable.graph.nodes) >= 13
    assert len(stack_steps(executable)) <= 3
    assert len(executable.plan.offsets) >= 40


def test_small_channel_counts_keep_the_direct_gemm():
    """A convolution of 3 input channels (DCGAN's first and last layers) keeps its one GEMM of im2col's columns."""
    x, w = jt.randn(2, 3, 8, 8, requires_grad=True), jt.randn(32, 3, 4, 4, requires_grad=True)
    graph = jt.compile(conv_step(False)).lower(x, w, jt.randn(2, 32, 4, 4)).graph
    assert ("matmul", [(1, 32, 48), (1, 48, 32)]) in products(graph)
    assert not any(op == "bmm" for op, _ in products(graph))
