"""Dead code elimination: nodes whose outputs nothing uses, constants nothing reads (unless the
call sets their .grad or returns them), and write-backs of a value into itself. A dead node of an op
that raises on its values (an index out of range: `ops.value_checks.VALUE_CHECKED`) leaves a check
in its place, which raises as eager's call would."""

from __future__ import annotations

from ...ops.registry import OPS
from ...runtime import dtypes as _dt
from ...ops.value_checks import VALUE_CHECKED
from ..graph import Node, Value
from ..values import TensorType
from .rewrite import graph_pass, has_effects


@graph_pass("dce", "removed %d nodes, constants and write-backs")
def run(graph):
    """Remove what does not reach the outputs or the mutations. Random ops stay (each one
    advances its generator, which later draws see); inputs stay (they are the signature)."""
    before = len(graph.nodes) + len(graph.constants) + len(graph.mutations)
    graph.mutations = [(target, v) for target, v in graph.mutations if v is not target]
    live = set(graph.output_values())
    live.update(v for _, v in graph.mutations)
    live.update(target for target, _ in graph.mutations)
    # captured tensors the call hands back, reshapes or sets the .grad of, by name: needed whatever reads them
    owners = [t for t in graph.grad_targets if isinstance(t, str)]
    owners += [o for o, _ in graph.output_aliases.values() if isinstance(o, str)]
    owners += [o for o in graph.geometry_changes if isinstance(o, str)]
    live.update(graph.constants[name] for name in owners if name in graph.constants)
    kept = []
    for node in reversed(graph.nodes):
        if has_effects(node) or any(o in live for o in node.outputs):
            kept.append(node)
            live.update(node.input_tuple())
        elif node.op.name in VALUE_CHECKED:
            check = _check_of(graph, node)
            kept.append(check)
            live.update(check.input_tuple())
    graph.nodes = kept[::-1]
    for name in [name for name, v in graph.constants.items() if v not in live]:
        del graph.constants[name]
        graph.constant_tensors.pop(name, None)
    return before - len(graph.nodes) - len(graph.constants) - len(graph.mutations)


def _check_of(graph, node):
    """A ``_check_values`` node that runs the dead ``node``'s op on the same arguments for its checks alone
    (`ops.value_checks._replay`): its tensor arguments, and the rest with None in their places."""
    tensors, template, places = [], [], []
    for i, a in enumerate(node.args):
        if isinstance(a, (list, tuple)) and any(isinstance(x, Value) for x in a):
            template.append([None if isinstance(x, Value) else x for x in a])
            for j, x in enumerate(a):
                if isinstance(x, Value):
                    tensors.append(x)
                    places.append([i, j])
        elif isinstance(a, Value):
            template.append(None)
            tensors.append(a)
            places.append([i])
        else:
            template.append(a)
    op = OPS["_check_values"]
    check = Node(op, (tensors, "op", [node.op.name, template, places]))
    check.outputs.append(Value(graph._fresh(), TensorType((), _dt.bool, tensors[0].type.device), check, 0))
    return check
