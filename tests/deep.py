"""Programs as deep as they are long, for the tests that no recursion follows a program's size."""

from __future__ import annotations

from jitorch.ir import Graph, parse

# A program as deep as it is long: each op reads the one before. 5,000 steps make 10,000 nodes, ten times
# Python's default recursion limit, which no recursion over the program (printing, parsing, passes, code
# generation, autograd) may follow.
DEEP_STEPS = 5_000


def deep_chain(x, steps=DEEP_STEPS):
    """``x * 1.0001 + 0.5``, ``steps`` times over (any tensor type: jitorch, traced or torch)."""
    for _ in range(steps):
        x = x * 1.0001 + 0.5
    return x


def deep_chain_text(steps=DEEP_STEPS, shape=(8,)):
    """The IR text of `deep_chain` as the tracer records it, on a float32 input of ``shape``."""
    t = f"f32[{', '.join(map(str, shape))}]"
    lines = [f"graph(%x: {t}):"]
    last = "%x"
    for i in range(steps):
        lines.append(f"  %{2 * i} : {t} = mul({last}, 1.0001)")
        lines.append(f"  %{2 * i + 1} : {t} = add(%{2 * i}, 0.5)")
        last = f"%{2 * i + 1}"
    lines.append(f"  return {last}")
    return "\n".join(lines)


def deep_chain_graph(steps=DEEP_STEPS):
    """The graph of `deep_chain` on a float32 vector of 8, built node by node (parsing or tracing
    50,000 nodes takes seconds)."""
    step = parse(deep_chain_text(1))
    graph = Graph()
    last = graph.add_input(step.inputs[0].type, "x")
    for _ in range(steps):
        for node in step.nodes:
            (last,) = graph.add_node(node.op, (last, *node.args[1:]), [node.outputs[0].type]).outputs
    graph.outputs = last
    return graph
