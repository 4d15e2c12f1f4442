"""A compiled call's forward and backward as two graphs cut from one joint trace, as AOTAutograd does.

The joint function ``joint(*inputs, *cotangents) -> (outputs, gradients)`` runs the compiled function and
its vector-Jacobian product (`compile._vjp_of`) in one trace. Its nodes fall into two graphs:

* the forward graph holds the nodes the outputs need, and returns the outputs and the values the
  backward reads of them ("saved" values, which the autograd node keeps);
* the backward graph holds every other node: those that read a cotangent, and forward work only the
  gradients need (a ReLU's mask, a zeros tensor for an unused input), recomputed from the saved values,
  the inputs and the captured tensors.

Before the cut, repeated nodes of the joint trace are merged (a backward rule that takes its forward's
mean again reads the forward's), and the backward reads a chain of dim permutations that gives its base back
as that base (a Linear weight's gradient leaves compact, as autograd keeps ``.grad``). Chains of cheap
pointwise ops of forward values, inputs and captured tensors are computed again in the backward where that saves
fewer bytes than saving their results, or as many and less memory traffic (`_recomputed`); the backward reads an
input or captured tensor only where eager's backward does, any other through a copy the forward saves; and a value
the call returns only where eager's nodes saved it (an exp's result): a write into any other must change no gradient
and raise nothing, so the backward computes it again or reads a copy (`_returned_again`).

So the forward runs once per step, where recomputing it in the backward (`differentiable.CompiledCall`'s
other mode) ran it twice; random ops draw once, in the forward, and the backward reads what they drew.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ..ir import lowerable
from ..ir.graph import Graph, Node, Value, substitute
from ..ir.lowerable import kind_of
from ..ir.passes import cse, dce, decompose, simplify, sink
from ..ops import registry
from ..runtime.pytree import tree_leaves


class Split(NamedTuple):
    """The two graphs of a joint trace, and what flows between them."""

    forward: Graph    # inputs: the call's tensors; outputs: the call's outputs, then the saved values
    backward: Graph   # inputs: the inputs it reads, the saved values, the cotangents; outputs: the gradients
    inputs_read: tuple  # positions among the call's tensors of the backward graph's first inputs
    saved: int        # how many saved values the forward graph returns after the outputs


def split_joint(joint: Graph, n_inputs: int) -> Split:
    """Cut ``joint`` (inputs: ``n_inputs`` call tensors, then the cotangents; outputs: ``(outputs,
    gradients)``) into its forward and backward graphs (merging ``joint``'s repeated nodes first, in place)."""
    # a backward rule that computes forward work again (a layer norm's mean) reads the forward's instead, which
    # the cut then saves, or runs it once in the backward where the forward did not need it
    cse.run(joint)
    # and what the joint traced but returns not (a view of an output it returns the base of), which the backward
    # would otherwise save values for
    dce.run(joint)
    # a convolution's batch-last layout flows through the pointwise ops after it here, before the cut, where the
    # values the backward reads are the joint's own (as the forward graph's outputs, eager's layout would hold
    # them batch-first: a transposing kernel writes each, and the next convolution's windows transpose back)
    decompose.run(joint)  # (a batch norm's var_mean: its reductions read views where they lie, as sink needs)
    simplify.run(joint)
    if sink.run(joint):
        simplify.run(joint)
    dce.run(joint)
    primal = joint.inputs[:n_inputs]
    cotangents = joint.inputs[n_inputs:]
    leaves = {id(v) for v in primal} | {id(v) for v in joint.constants.values()}
    # the inputs and captured tensors that eager's backward reads (its nodes saved them): the backward graph reads
    # any other only through a copy the forward saves (`_copied_leaves`)
    backward_nodes = _backward_side(joint, cotangents)
    eagerly_read = _leaves_read(backward_nodes, leaves)
    outs, grads = joint.outputs
    outs, grads = list(outs), list(grads)
    forward_nodes = {id(n) for n in joint.nodes} - {id(n) for n in backward_nodes}
    # views cost nothing to make again: the backward makes its own views of the inputs and captured tensors
    # rather than the forward returning them (which would copy them out), and of the values the forward
    # computed, which it saves whole (compact: a saved view, attention's q, k and v split from one product,
    # was copied compact again at the backward's start)
    forward_list = [n for n in joint.nodes if id(n) in forward_nodes]
    read = _crossing(backward_nodes, grads, cotangents, primal)
    views = _views_remade(forward_list, read)
    roots = [v for n in forward_list if id(n) in views for v in n.input_values()
             if v.node is not None and id(v.node) not in views]
    # and cheap arithmetic whose operands the backward has anyway costs less to redo than to save
    kept = [v for v in read if v.node is not None and id(v.node) not in views]
    outputs = {id(v) for v in outs}
    again = views | _recomputed(forward_list, _unique(kept + roots), outputs, leaves, eagerly_read,
                                _Traffic(joint.nodes, forward_nodes, outputs))
    remade = {}
    nodes = _rewired([n for n in joint.nodes if id(n) in again], remade, copy=True) + backward_nodes
    nodes = _rewired(nodes, remade)
    grads = [remade.get(id(g), g) for g in grads]
    # the returned values that eager's nodes did not save: the caller may write into them, which must change no
    # gradient and raise nothing, as eagerly (softsign's quotient, whose node saved its operands)
    saved_leaves, kept_outputs = _eager_saves(joint, primal, outs)
    crossing = _crossing(nodes, grads, cotangents, primal)
    unsaved = [v for v in crossing if id(v) in outputs - kept_outputs]
    if unsaved:
        redone, cloned, leaves_read = _returned_again(forward_list, unsaved, crossing, outputs - kept_outputs, leaves,
                                                     eagerly_read | saved_leaves)
        eagerly_read = eagerly_read | leaves_read
        remade = {}
        nodes = _rewired([n for n in joint.nodes if id(n) in redone], remade, copy=True) + _rewired(nodes, remade)
        clones = _copied_outputs(joint, cloned)
        forward_nodes.update(id(n) for n in clones)
        remade.update((id(n.args[0]), n.outputs[0]) for n in clones)
        nodes = _rewired(nodes, remade)
        grads = [remade.get(id(g), g) if isinstance(g, Value) else g for g in grads]
    copies = _copied_leaves(joint, nodes, leaves - eagerly_read)
    forward_nodes.update(id(n) for n in copies)
    nodes = _rewired(nodes, {id(n.args[0]): n.outputs[0] for n in copies})
    nodes, grads = _without_undone_permutes(nodes, grads)
    position = {id(v): i for i, v in enumerate(primal)}
    crossing = _crossing(nodes, grads, cotangents, primal)
    inputs_read = [v for v in crossing if id(v) in position]
    saved = [v for v in crossing if v.node is not None]

    forward = _subgraph(joint, list(primal), [n for n in joint.nodes if id(n) in forward_nodes],
                        tuple(outs + saved), joint.mutations)
    forward.output_layouts = [(size, members) for size, members in joint.output_layouts
                              if all(k < len(outs) for k, _, _ in members)]
    # the backward reads the crossing values as its own inputs (fresh values: a graph's inputs have no node)
    fresh = {id(v): Value(v.name, v.type) for v in inputs_read + saved}
    backward = _subgraph(joint, [fresh[id(v)] for v in inputs_read + saved] + list(cotangents),
                         _rewired(nodes, fresh),
                         tuple(fresh.get(id(g), g) if isinstance(g, Value) else g for g in grads))
    return Split(forward, backward, tuple(position[id(v)] for v in inputs_read), len(saved))


def _crossing(nodes, grads, cotangents, primal):
    """The values ``nodes`` and the gradients read that neither ``nodes`` nor the cotangents define: the
    ``primal`` inputs and forward values (constants are read at call time, and do not cross)."""
    defined = {id(v) for n in nodes for v in n.outputs} | {id(v) for v in cotangents}
    primal = {id(v) for v in primal}
    read = _unique([v for n in nodes for v in n.input_values()] + [g for g in grads if isinstance(g, Value)])
    return [v for v in read if id(v) not in defined and (v.node is not None or id(v) in primal)]


def _views_remade(forward_nodes, crossing):
    """The ids of the forward's view nodes that make ``crossing`` values: chains of views over inputs,
    constants and values the forward computes (which the backward then reads instead)."""
    found = set()
    by_output = {id(v): n for n in forward_nodes for v in n.outputs}

    def view_chain(v):
        node = by_output.get(id(v))
        if node is None or node.op.kind != "view" or not lowerable.folds(_chain(node, by_output)):
            return  # (a view that copies, a convolution's windows merged: the forward made it and saves it)
        if id(node) not in found:
            found.add(id(node))
            for u in node.input_values():
                view_chain(u)

    for v in crossing:
        view_chain(v)
    return found


def _chain(node, by_output):
    """View ``node`` and the views before it that it reads, from the first."""
    nodes = []
    while node is not None and node.op.kind == "view":
        nodes.append(node)
        node = by_output.get(id(node.args[0]))
    return nodes[::-1]


# IEEE arithmetic, and the functions codegen/mathlib.py emits as one definition in every kernel (its own float
# arithmetic and fmas, no fast-math flags; each vector lane computes what a scalar would): the same bits again
_RECOMPUTED = frozenset({"add", "sub", "mul", "true_divide", "neg", "exp", "erf", "_normal_cdf",
                        "_normal_pdf", "tanh", "sigmoid"})
# Operands of fewer elements than the values a chain frees divided by this are broadcast operands (a bias): the
# saved bytes may grow by them where the chain makes less traffic.
SMALL_LEAF = 8


def _recomputed(forward_nodes, saved, outputs, leaves, free, traffic):
    """The ids of forward nodes the backward computes again rather than the forward saving their results
    (``saved``, less the forward's ``outputs``, which it returns anyway): chains of cheap pointwise ops
    (`_RECOMPUTED`) of forward values, the call's inputs and captured tensors (``leaves``) and literals, traced back
    from a saved value to the values the backward has (saved ones, and the ``free`` leaves, which it reads anyway)
    and those it would save instead. A chain is taken where those are fewer bytes than the results they let go and
    make no more memory traffic (`_Traffic`: a GELU's ``x * 0.5`` and ``1 + erf(x * 0.7071)``, save ``x``; not a
    layer norm's output ``xhat * w + b``, which a product reads in the forward and the backward, so that the backward
    would write it again), and where they are no more bytes, small operands (`SMALL_LEAF`) not counted, and make
    less traffic: a GELU's input ``mm + b`` (save the product, which is in memory anyway, and a copy of the bias: the
    forward writes no pre-activation)."""
    by_output = {id(v): n for n in forward_nodes for v in n.outputs}
    saved = {id(v): v for v in saved}
    chosen = set()

    def redone(node):
        return node is not None and node.op.name in _RECOMPUTED and len(node.outputs) == 1 and \
            id(node.outputs[0]) not in outputs and \
            all(id(u) in by_output or id(u) in leaves for u in node.input_values())

    def chain(v):
        """The nodes that compute ``v`` again from saved values, and the values it would save instead."""
        nodes, instead, seen = [], [], set()
        stack = [v]  # (depth first, operands in order, without recursion: a chain may be thousands of ops long)
        while stack:
            u = stack.pop()
            if id(u) in seen:
                continue
            seen.add(id(u))
            node = by_output.get(id(u))
            if u is not v and (id(u) in saved or id(u) in free):
                continue
            if u is not v and not redone(node):
                instead.append(u)
                continue
            nodes.append(node)
            stack.extend(reversed(node.input_values()))
        return nodes, instead

    def taken(instead, freed):
        freed_bytes, most = sum(_nbytes(v) for v in freed), max(_numel(v) for v in freed)
        redone, kept = traffic.redone(instead, freed), traffic.saved(freed)
        if sum(_nbytes(u) for u in instead) < freed_bytes:
            return redone <= kept
        return sum(_nbytes(u) for u in instead if _numel(u) * SMALL_LEAF >= most) <= freed_bytes and redone < kept

    while True:
        groups = {}  # the ids of the values saved instead -> (them, the saved values they free, the nodes)
        for v in saved.values():
            if not redone(by_output.get(id(v))):
                continue
            nodes, instead = chain(v)
            key = frozenset(id(u) for u in instead)
            group = groups.setdefault(key, (instead, [], []))
            group[1].append(v)
            group[2].extend(nodes)
        best = next((g for g in groups.values() if taken(g[0], g[1])), None)
        if best is None:
            return chosen
        instead, freed, nodes = best
        chosen.update(id(n) for n in nodes)
        for v in freed:
            del saved[id(v)]
        saved.update((id(u), u) for u in instead)


class _Traffic:
    """The bytes a saved value costs in memory traffic: the backward reads it, and the forward writes it unless it
    is in memory anyway (the result of a node no kernel computes pointwise, a returned value, or one that such a
    node reads); a value the backward computes again instead costs a write and a read there where such a node reads
    it (a product's operand), or where a node reads it that waits for a reduction or an external node reading it: a
    layer norm's ``x - mean``, which its backward's row sums read and the gradient after them (fusion wrote it there,
    once for both layer norms of a block); GELU's ``mm + b`` goes into pointwise nodes before any."""

    def __init__(self, nodes, forward_ids, outputs):
        self.readers = {}
        for node in nodes:
            for v in dict.fromkeys(node.input_values()):
                self.readers.setdefault(id(v), []).append(node)
        self.forward_ids, self.outputs = forward_ids, outputs

    def _in_memory(self, v, forward, computed):
        """Whether a node of ``forward``'s side (or the other's) reads ``v``, through views, that is not of a kind in
        ``computed`` (those whose kernels compute their operands)."""
        stack, seen = [v], set()
        while stack:
            u = stack.pop()
            for reader in self.readers.get(id(u), ()):
                if (id(reader) in self.forward_ids) != forward or id(reader) in seen:
                    continue
                seen.add(id(reader))
                kind = kind_of(reader)
                if kind == "view":
                    stack.extend(reader.outputs)
                elif kind not in computed:
                    return True
        return False

    def _written(self, v):
        """Whether the forward writes ``v`` whether or not it is saved."""
        return v.node is not None and (id(v) in self.outputs or kind_of(v.node) not in ("pointwise", "view")
                                       or self._in_memory(v, True, ("pointwise", "reduction")))

    def saved(self, values):
        """The traffic of saving ``values`` (an input or captured tensor: the forward's copy of it)."""
        return sum(_nbytes(v) * (1 if self._written(v) else 2) for v in values)

    def _across(self, v):
        """Whether a backward node reads ``v`` after a reduction or an external node that depends on it."""
        readers = {id(r) for r in self.readers.get(id(v), ()) if id(r) not in self.forward_ids}
        stack, seen = [(r, False) for r in self.readers.get(id(v), ()) if id(r) in readers], set()
        while stack:
            node, crossed = stack.pop()
            if (id(node), crossed) in seen:
                continue
            seen.add((id(node), crossed))
            if crossed and id(node) in readers:
                return True
            crossed = crossed or kind_of(node) not in ("pointwise", "view")
            stack.extend((r, crossed) for u in node.outputs for r in self.readers.get(id(u), ())
                         if id(r) not in self.forward_ids)
        return False

    def redone(self, instead, freed):
        """The traffic of saving ``instead`` and computing ``freed`` again in the backward."""
        return self.saved(instead) + sum(2 * _nbytes(v) for v in freed
                                         if self._in_memory(v, False, ("pointwise", "reduction")) or self._across(v))


def _numel(v):
    return math.prod(v.type.shape)


def _nbytes(v):
    return _numel(v) * v.type.dtype.itemsize


def _backward_side(joint, cotangents):
    """The joint's nodes that the backward graph holds: all but those its outputs, the writes into captured buffers
    (a batch norm's running statistics: the forward makes them once) and the checks of values the forward computes
    (a loss's targets, which must raise where eager's do, before the forward writes those buffers or runs a gather
    that would raise its own error) depend on."""
    written = [v for _, v in joint.mutations]
    forward = _ancestors(joint.nodes, list(joint.outputs[0]) + written + _forward_checks(joint.nodes, cotangents))
    return [n for n in joint.nodes if id(n) not in forward]


def _leaves_read(nodes, leaves):
    """The ids of the ``leaves`` that ``nodes`` read, directly or through chains of views (which the backward makes
    of them itself: `_views_remade`)."""
    found, stack, seen = set(), [v for n in nodes for v in n.input_values()], set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if id(v) in leaves:
            found.add(id(v))
        elif v.node is not None and v.node.op.kind == "view":
            stack.extend(v.node.input_values())
    return found


def _eager_saves(joint, primal, outs):
    """The ids of the inputs and captured tensors among ``primal`` and ``joint``'s constants that eager's nodes save
    (`Graph.saved_eagerly`: the backward may read them as they are, as eager's does, their versions checked either
    way), and of the values among the returned ``outs`` that eager's nodes save (an exp's result): the backward may
    read those as they are returned, where a write into any other returned value must change no gradient and raise
    nothing, as eagerly (a quotient, whose node saved its operands). Where what eager saves is not known, every
    returned value counts as saved, and no leaf."""
    if joint.saved_eagerly is None:
        return set(), {id(v) for v in outs}
    leaves, kept = set(), set()
    for key in joint.saved_eagerly:
        if isinstance(key, tuple):
            kept.add(id(outs[key[1]]))
        elif isinstance(key, int):
            leaves.add(id(primal[key]))
        elif key in joint.constants:
            leaves.add(id(joint.constants[key]))
    return leaves, kept


def _returned_again(forward_nodes, values, crossing, unsaved, leaves, free):
    """How the backward gets the returned ``values`` (of the ids ``unsaved``: returned values eager's nodes did not
    save) without the forward saving them: the ids of the forward nodes it computes each again from (chains of
    `_RECOMPUTED` ops, as `_recomputed`'s, from the ``crossing`` values other than those, and the ``free`` inputs and
    captured tensors: those eager's backward reads or its nodes save, whose versions are checked either way); the
    values without such a chain, which the forward saves a copy of; and the ids of the leaves the chains read."""
    by_output = {id(v): n for n in forward_nodes for v in n.outputs}
    have = {id(v) for v in crossing if id(v) not in unsaved}
    redone, cloned, leaves_read = set(), [], set()
    for v in values:
        nodes, read, stack, seen = set(), set(), [v], set()
        while stack:  # (without recursion: a pointwise chain may be thousands of ops long)
            u = stack.pop()
            if id(u) in seen or id(u) in have:
                continue
            seen.add(id(u))
            if id(u) in leaves:
                if id(u) not in free:
                    break
                read.add(id(u))
                continue
            node = by_output.get(id(u))
            if node is None or node.op.name not in _RECOMPUTED or len(node.outputs) != 1:
                break
            nodes.add(id(node))
            stack.extend(node.input_values())
        else:
            redone |= nodes
            leaves_read |= read
            continue
        cloned.append(v)
    return redone, cloned, leaves_read


def _copied_outputs(joint, values):
    """Clones of the returned ``values`` that the backward reads, each put right after the node that computes it:
    the forward saves the copy (a returned mean that var's backward reads, where eager's node saved var's input), so
    that a write into what the call returned changes no gradient and raises nothing, as eagerly."""
    clones = []
    for v in values:
        node = Node(registry.OPS["clone"], (v, None))
        node.outputs = [Value(joint._fresh(), v.type, node, 0)]
        joint.nodes.insert(joint.nodes.index(v.node) + 1, node)
        clones.append(node)
    return clones


def _copied_leaves(joint, nodes, copied):
    """Clones, put first among ``joint``'s nodes, of the inputs and captured tensors in ``copied`` that ``nodes``
    (the backward's) read: the forward saves the copies (a bias that a recomputed chain adds), so that a write into
    such a tensor between the forward and the backward changes no gradient and raises nothing, as eagerly, where
    no node saved it."""
    read = _unique([v for n in nodes for v in n.input_values() if id(v) in copied])
    clones = []
    for v in read:
        node = Node(registry.OPS["clone"], (v, None))
        node.outputs = [Value(joint._fresh(), v.type, node, 0)]
        clones.append(node)
    joint.nodes[:0] = clones
    return clones


def _without_undone_permutes(nodes, grads):
    """``nodes`` and ``grads`` with each chain of dim permutations that gives its base back
    (`simplify.permutation_chain`) read as that base, and the views left unread dropped. The backward graph's
    own simplification does so too, but keeps a returned chain over the graph's inputs or over another
    returned value a view (a call's outputs alias what eager's do); a gradient may be the cotangent itself,
    or the very product that another gradient reads, as autograd takes it."""
    undone = {}    # id(value) -> the base of its chain, where the chain's permutation is the identity
    for node in nodes:
        chain = simplify.permutation_chain(node)
        if chain is not None and chain[1] == sorted(chain[1]):
            undone[id(node.outputs[0])] = chain[0]
    if not undone:
        return nodes, grads
    nodes = [n for n in nodes if id(n.outputs[0]) not in undone]
    grads = [undone.get(id(g), g) if isinstance(g, Value) else g for g in grads]
    nodes = _rewired(nodes, undone)
    # the chains' inner views, now unread (views have no effects: dropping them changes nothing else)
    read = {id(v) for n in nodes for v in n.input_values()} | {id(g) for g in grads if isinstance(g, Value)}
    kept = []
    for node in reversed(nodes):
        if node.op.kind == "view" and not any(id(v) in read for v in node.outputs):
            continue
        read.update(id(v) for v in node.input_values())
        kept.append(node)
    return kept[::-1], grads


def _rewired(nodes, mapping, copy=False):
    """``nodes`` reading the values of ``mapping`` in place of theirs; with ``copy``, as new nodes with new
    outputs, which ``mapping`` then maps their old outputs to."""
    rewired = []

    def resolve(v):  # (``mapping`` grows as nodes are copied)
        return mapping.get(id(v), v)
    for n in nodes:
        node = Node(n.op, substitute(n.args, resolve))
        if copy:
            node.outputs = [Value(v.name, v.type, node, v.index) for v in n.outputs]
            mapping.update((id(old), new) for old, new in zip(n.outputs, node.outputs))
        else:
            node.outputs = n.outputs
            for v in node.outputs:
                v.node = node
        rewired.append(node)
    return rewired


def _forward_checks(nodes, cotangents):
    """The flags of the value checks (``_check_values``) among ``nodes`` that read no cotangent."""
    backward = {id(v) for v in cotangents}
    flags = []
    for node in nodes:
        if any(id(v) in backward for v in node.input_values()):
            backward.update(id(v) for v in node.outputs)
        elif node.op.kind == "check":
            flags += node.outputs
    return flags


def _ancestors(nodes, values):
    """The ids of the nodes ``values`` depend on."""
    wanted = {id(v) for v in values}
    found = set()
    for node in reversed(nodes):
        if any(id(v) in wanted for v in node.outputs):
            found.add(id(node))
            wanted.update(id(v) for v in node.input_values())
    return found


def _unique(values):
    seen, out = set(), []
    for v in values:
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


def _subgraph(joint, inputs, nodes, outputs, mutations=()):
    """A graph of ``nodes`` over ``inputs`` and the joint's constants and objects they use, writing
    ``mutations`` back."""
    g = Graph()
    g.inputs = inputs
    g.nodes = nodes
    g.outputs = outputs
    g.mutations = list(mutations)
    used = ({id(v) for n in nodes for v in n.input_values()} | {id(v) for v in tree_leaves(outputs)}
            | {id(v) for pair in mutations for v in pair})
    g.constants = {name: v for name, v in joint.constants.items() if id(v) in used}
    g.constant_tensors = {name: joint.constant_tensors[name] for name in g.constants}
    g.objects = dict(joint.objects)
    defined = {id(v) for v in inputs} | {id(v) for n in nodes for v in n.outputs}
    g.layouts = {v: strides for v, strides in joint.layouts.items() if id(v) in defined}
    g._names = set(joint._names)
    g._next_id = joint._next_id
    g._suffixes = dict(joint._suffixes)
    return g


__all__ = ["Split", "split_joint"]
