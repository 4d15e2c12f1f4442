"""Regression (found by tests/codegen/test_no_abort.py once the executor planned views as tensor headers): a
``view(dtype)`` node in a graph (the tracer refuses them, IR graphs may hold them) gives a tensor of the other
dtype, with that dtype's geometry, as the interpreter does; it was a header of the source's dtype with the new
geometry, whose elements could not even be read."""

import numpy as np
import pytest

import jitorch as jt
from jitorch.ir import interpret
from jitorch.ir.graph import Graph, TensorType
from jitorch.jit.executor import CompiledGraph
from jitorch.ops import registry


@pytest.mark.parametrize("dtype", [jt.int16, jt.int32, jt.uint8])
def test_a_view_as_another_dtype_runs_as_the_interpreter_runs_it(dtype):
    g = Graph()
    c = jt.linspace(-1.0, 1.0, 16).view(2, 8)
    source = g.add_constant("c", c, TensorType((2, 8), jt.float32, c.device))
    expected = c.view(dtype)
    node = g.add_node(registry.OPS["view.dtype"], (source, dtype),
                      (TensorType(tuple(expected.shape), dtype, c.device),))
    g.outputs = node.outputs[0]
    got, _ = CompiledGraph(g)([])
    reference, _ = interpret(g, [])
    for result in (got, reference):
        assert result.dtype == dtype and result.shape == expected.shape and result.stride() == expected.stride()
        np.testing.assert_array_equal(result.numpy(), expected.numpy())
