"""`lowering.kind_of` keeps its answer on the node (`Node.kind_memo`), with the op, the arguments tuple, the
outputs and the set of `lowering.DTYPES` it read: a node given new arguments, a new op or other outputs, or asked
under other dtypes, is asked anew; a node whose arguments hold a list is never kept."""

import jitorch as jt
from jitorch.codegen import lowering
from jitorch.ir.graph import Node, Value
from jitorch.ir.values import TensorType
from jitorch.jit.tracer import trace_with_inputs
from jitorch.ops import registry


def _uncached(node):
    """`kind_of`'s answer computed without the memo."""
    if node.op.view is not None:
        return "view"
    return node.op.pieces["lowering"].kind if lowering.can_lower(node) else "external"


def _graph():
    graph, _ = trace_with_inputs(lambda a, b: ((a * 2).sum(0), a.double() + b, jt.cat([a, a]), a.t()),
                                 (jt.ones(2, 3), jt.ones(2, 3, dtype=jt.float64)), {})
    return graph


def test_kind_of_kept_on_a_node_is_the_answer_computed_anew_for_every_node():
    graph = _graph()
    first = [lowering.kind_of(n) for n in graph.nodes]
    again = [lowering.kind_of(n) for n in graph.nodes]
    assert first == again == [_uncached(n) for n in graph.nodes]
    assert {"pointwise", "reduction", "view", "external"} <= set(first)


def test_kind_of_is_asked_anew_when_a_pass_gives_the_node_new_arguments_or_a_new_op():
    a = Value("a", TensorType((4,), jt.float32, jt.device("cpu")))
    i = Value("i", TensorType((4,), jt.int64, jt.device("cpu")))
    node = Node(registry.OPS["neg"], (a,))
    node.outputs.append(Value("o", TensorType((4,), jt.float32, jt.device("cpu")), node, 0))
    assert lowering.kind_of(node) == "pointwise"
    assert node.kind_memo is not None
    # a pass rewrites the node: an op no kernel lowers (a product), then arguments of a dtype left out
    node.op, node.args = registry.OPS["mm"], (a, a)
    assert lowering.kind_of(node) == _uncached(node) == "external"
    node.op, node.args = registry.OPS["neg"], (i,)
    node.outputs = [Value("o2", TensorType((4,), jt.int64, jt.device("cpu")), node, 0)]
    assert lowering.kind_of(node) == _uncached(node) == "pointwise"


def test_kind_of_is_asked_anew_under_other_dtypes(monkeypatch):
    graph = _graph()
    casts = [n for n in graph.nodes if n.op.name == "_to_copy"]
    assert [lowering.kind_of(n) for n in casts] == ["pointwise"]
    monkeypatch.setattr(lowering, "DTYPES", lowering.DTYPES - {jt.float64})
    assert [lowering.kind_of(n) for n in casts] == ["external"]


def test_kind_of_of_a_node_whose_arguments_hold_a_list_is_not_kept():
    graph = _graph()
    cat = next(n for n in graph.nodes if n.op.name == "cat")
    assert lowering.kind_of(cat) == _uncached(cat)
    assert cat.kind_memo is None and not cat.args_frozen()
