"""What the passes share: the pass decorator, effects, and `Rewriter`, which replaces values
across a graph in one sweep without changing what a call's outputs alias."""

from __future__ import annotations

from ...runtime.pytree import tree_map
from ..graph import Value, substitute


def graph_pass(name, message):
    """Mark ``run(graph) -> int`` as the pass ``name``; the pass manager logs
    ``f"{name}: {message % count}"`` when it rewrites anything."""
    def mark(run):
        run.pass_name = name
        run.message = message
        return run
    return mark


def has_effects(node):
    """Whether running ``node`` matters beyond its outputs: a random op advances its
    generator, so removing, merging or folding it would change later draws; a check
    (``_check_values``) raises eager's error on bad values."""
    return node.op.kind in _EFFECTS


_EFFECTS = ("random", "check")


class Rewriter:
    """Replaces node outputs by other values, for a pass that sweeps the nodes once in order.

    Call `update_args` on each node before inspecting it (its arguments then name
    the replacements made so far), `replace_node` to drop a node for values
    defined before it, and `finish` at the end to rewrite the graph's outputs and
    mutation values and remove the dropped nodes. Mutation targets are never
    touched.

    A call's outputs must alias what eager's would: each output is a fresh tensor,
    apart from inputs and constants returned as themselves. So a returned value is
    never replaced by an input, a constant (a folded one would be handed back by
    every call) or a value the graph already returns elsewhere (``return x * 1,
    x`` must not give the same tensor twice), nor by a view of one of those; nor
    is the source of a returned view (``return x.clone().t()`` must not return a
    view of ``x``), nor by a view of a value written into an input or constant, which the call may compute
    in that tensor's memory (``x.add_(1); return x[0].clone()`` returned a view of ``x``: fuzz seed
    7952461). `can_replace` says so.
    """

    def __init__(self, graph):
        self.graph = graph
        self.replaced: dict = {}   # Value -> the Value that now stands for it
        self.dropped: set = set()  # nodes to remove, by identity
        self.returned: set = set()  # values whose memory an output is in: the outputs, the sources of their views
        # (the mutations list it was made from, its length, the values standing for the values written back):
        # `_written`'s answers, made at its first question and kept up by `replace_node`
        self._written_values = None
        for v in graph.output_values():
            self._returns(v)

    def resolve(self, v):
        while v in self.replaced:
            v = self.replaced[v]
        return v

    def update_args(self, node):
        # most nodes name no replaced value: rebuilding their arguments is most of a pass's time (and walking
        # them to find out was 5,000-9,000 calls a pass on the GPT step: the node's kept values say it)
        if self.replaced and not self.replaced.keys().isdisjoint(node.input_tuple()):
            node.args = substitute(node.args, self.resolve)

    def can_replace(self, old, new):
        if old.type != new.type:
            return False
        # a view shares its source's memory: a returned value may not become a view of one either
        new = self.resolve(new)
        root = self._viewed(new)
        return old not in self.returned or not (root.node is None or root in self.returned
                                                or root is not new and self._written(root))

    def _written(self, v):
        """Whether the graph writes ``v`` into an input or constant (a returned ``v`` itself gets memory of
        its own from the executor; a returned view of it would lie in the written tensor's)."""
        # (a set of the values standing for those written back, rather than a walk over the mutations per
        # question: that walk, resolving each, was quadratic in a model's layers, its questions and its written
        # parameters and optimizer state both growing with them: 26,000 resolves in simplify on an 8-layer GPT
        # step, 102,000 on 16)
        mutations = self.graph.mutations
        held = self._written_values
        if held is None or held[0] is not mutations or held[1] != len(mutations):
            held = self._written_values = (mutations, len(mutations),
                                           {self.resolve(value) for _, value in mutations})
        return v in held[2]

    def _viewed(self, v):
        """The value whose memory ``v`` is in: ``v`` itself, or the source its chain of views starts from."""
        while v.node is not None and v.node.op.view is not None:
            v = self.resolve(v.node.args[0])
        return v

    def _returns(self, v):
        """Note that an output is in the memory of ``v`` and of the values its views start from."""
        self.returned.add(v)
        while v.node is not None and v.node.op.view is not None:
            v = self.resolve(v.node.args[0])
            self.returned.add(v)

    def replace_node(self, node, values):
        """Drop ``node`` for ``values`` (one per output), if every replacement is allowed; returns whether done."""
        pairs = list(zip(node.outputs, values, strict=True))
        if has_effects(node) or not all(self.can_replace(old, new) for old, new in pairs):
            return False
        written = self._written_values[2] if self._written_values is not None else None
        for old, new in pairs:
            new = self.resolve(new)
            self.replaced[old] = new
            if old in self.returned:
                self.returned.discard(old)
                self._returns(new)
            if written is not None and old in written:  # (what resolved to ``old`` resolves to ``new`` now)
                written.discard(old)
                written.add(new)
        self.dropped.add(node)
        return True

    def finish(self):
        g = self.graph
        g.nodes = [n for n in g.nodes if n not in self.dropped]
        g.outputs = tree_map(lambda x: self.resolve(x) if isinstance(x, Value) else x, g.outputs)
        g.mutations = [(target, self.resolve(v)) for target, v in g.mutations]
        for old, strides in list(g.layouts.items()):  # a returned result's layout goes with its stand-in
            new = self.resolve(old)
            if new is not old and new.node is not None:
                g.layouts.setdefault(new, strides)
