"""Dead code elimination: nodes whose outputs nothing uses, constants nothing reads (unless the
call sets their .grad or returns them), and write-backs of a value into itself."""

from __future__ import annotations

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
            live.update(node.input_values())
    graph.nodes = kept[::-1]
    for name in [name for name, v in graph.constants.items() if v not in live]:
        del graph.constants[name]
        graph.constant_tensors.pop(name, None)
    return before - len(graph.nodes) - len(graph.constants) - len(graph.mutations)
