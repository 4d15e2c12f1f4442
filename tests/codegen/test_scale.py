"""Code generation follows no recursion over the program: every kernel of a 10,000-node chain gets
its LLVM IR (at Python's default recursion limit)."""

import math
import sys

from jitorch.codegen.kernel import build
from jitorch.ir.passes.fusion import MAX_GROUP_NODES, fuse
from tests.deep import DEEP_STEPS, deep_chain_graph


def test_every_kernel_of_a_10000_node_chain_builds_its_llvm_ir():
    assert sys.getrecursionlimit() <= 1000
    graph = deep_chain_graph()
    sources = [build(group, f"k{i}") for i, group in enumerate(fuse(graph))]
    assert len(sources) == math.ceil(2 * DEEP_STEPS / MAX_GROUP_NODES)
    # each kernel reads the value the one before wrote, and computes its part of the chain
    for before, source in zip([graph.inputs[0]] + [s.outputs[0] for s in sources], sources):
        assert source.inputs == [before] and len(source.outputs) == 1
        n = len(source.ops) // 2
        assert source.ops == ["mul", "add"] * n
        assert source.llvm_ir.count(" fmul ") == source.llvm_ir.count(" fadd ") == n
    assert sources[-1].outputs == [graph.outputs]
