"""Tracing and compiling follow no recursion over the program (at Python's default recursion limit):
a 10,000-op chain traces, a traced backward through 5,000 ops is built and fused, and a 5,000-op chain
compiles to machine code and runs as eagerly."""

import math
import sys
import warnings
from collections import Counter

import numpy as np
import torch

import jitorch as jt
from jitorch.jit.executor import KernelStep
from jitorch.ir import interpret
from jitorch.ir.passes.fusion import MAX_GROUP_NODES, fuse
from jitorch.ir.passes.manager import optimize
from jitorch.jit import trace
from tests.deep import deep_chain, deep_chain_text


def test_a_10000_op_chain_traces():
    assert sys.getrecursionlimit() <= 1000
    assert str(trace(deep_chain, jt.randn(8))) == deep_chain_text()


def sin_chain(x, steps=2_500):
    for _ in range(steps):
        x = (x * 0.9999).sin()
    return x


def sin_chain_grad(x):
    x = x.requires_grad_()
    with jt.enable_grad():
        return jt.autograd.grad([sin_chain(x).sum()], [x])


def test_the_traced_backward_of_a_5000_op_chain_is_built_fused_and_equals_torch():
    x = jt.tensor([0.5, -1.0, 2.0])
    graph = optimize(trace(sin_chain_grad, x))
    # the forward's values (its last sin is dead), and per step the gradient times cos and 0.9999
    assert Counter(n.op.name for n in graph.nodes) == {"mul": 7_500, "cos": 2_500, "sin": 2_499}
    groups = fuse(graph)
    assert {g.kind for g in groups} == {"pointwise"} and max(len(g.nodes) for g in groups) == MAX_GROUP_NODES
    (grad,), _ = interpret(graph, [x])
    np.testing.assert_array_equal(grad.numpy(), sin_chain_grad(x.clone())[0].numpy())
    expected = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    sin_chain(expected).sum().backward()
    # torch's float32 sin and cos differ from NumPy's by an ulp here and there, over 5,000 factors
    np.testing.assert_allclose(grad.numpy(), expected.grad.numpy(), rtol=1e-4)


def test_a_5000_op_chain_compiles_to_machine_code_and_runs_as_eagerly():
    def chain(x):
        return deep_chain(x, 2_500)

    compiled = jt.compile(chain)
    x = jt.randn(1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no kernel falls back to eager
        out = compiled(x)
    steps = compiled.lower(x).steps
    assert all(type(step) is KernelStep for step in steps)
    assert len(steps) == math.ceil(5_000 / MAX_GROUP_NODES)
    np.testing.assert_array_equal(out.numpy(), chain(x).numpy())
