"""The verifier: one hand-broken graph per rule (its message checked), and acceptance of random
valid graphs. The one-node graphs of every op's samples are verified in test_interpreter.py,
which also runs them."""

from __future__ import annotations

import copy
import re

import pytest
from hypothesis import given

import jitorch as jt
from jitorch.ir import VerifyError, verify
from jitorch.ir.graph import Graph, Node, TensorType, Value
from jitorch.ops import registry
from tests.ir.graphs import graphs

OPS = registry.OPS


def ty(*shape, dtype=jt.float32, device="cpu"):
    return TensorType(shape, dtype, jt.device(device))


class Small:
    """A valid graph to break: ``%n = neg(%x); %s = add(%n, %y); %m = sum(%s)``, a constant ``w``,
    returning ``(%s, %m)``."""

    def __init__(self):
        g = self.g = Graph()
        self.x = g.add_input(ty(3, 4), "x")
        self.y = g.add_input(ty(3, 4), "y")
        self.w = g.add_constant("w", jt.ones(4), ty(4))
        self.neg = g.add_node(OPS["neg"], (self.x,), [ty(3, 4)], ["n"])
        self.add = g.add_node(OPS["add"], (self.neg.outputs[0], self.y, 1), [ty(3, 4)], ["s"])
        self.sum = g.add_node(OPS["sum"], (self.add.outputs[0], None, False, None), [ty()], ["m"])
        g.outputs = (self.add.outputs[0], self.sum.outputs[0])

    def node(self, op, args, types, name="b"):
        """Append a node (valid or not) without the graph builder's help."""
        node = Node(OPS[op] if isinstance(op, str) else op, args)
        node.outputs = [Value(f"{name}{i}" if i else name, t, node, i) for i, t in enumerate(types)]
        self.g.nodes.append(node)
        return node


def test_small_graph_is_valid():
    verify(Small().g)


def _swap_nodes(s):
    s.g.nodes[0], s.g.nodes[1] = s.g.nodes[1], s.g.nodes[0]


def _reuse_output(s):
    twin = s.node("neg", (s.x,), [ty(3, 4)])
    twin.outputs = [s.neg.outputs[0]]


def _wrong_definer(s):
    s.sum.outputs[0].index = 1


def _unregistered(s):
    s.neg.op = copy.copy(OPS["neg"])


def _mutate(target, value):
    return lambda s: s.g.mutations.append((target(s), value(s)))


# (what breaks the graph, the message it must give)
BROKEN = {
    "used before definition": (_swap_nodes, r"%s : f32\[3, 4\] = add\(%n, %y\): %n is used before its definition"),
    "not in this graph": (lambda s: s.node("neg", (Value("z", ty(3, 4)),), [ty(3, 4)]),
                          r"%b : f32\[3, 4\] = neg\(%z\): %z is not defined in this graph"),
    "defined twice (same value)": (_reuse_output, r"%n : f32\[3, 4\] = neg\(%x\): %n is defined twice"),
    "defined twice (same name)": (lambda s: s.node("neg", (s.x,), [ty(3, 4)], name="s"),
                                  r"%s : f32\[3, 4\] = neg\(%x\): %s is defined twice"),
    "definer mismatch": (_wrong_definer, r"= sum\(%s\): %m records another definition"),
    "composite op": (lambda s: s.node("square", (s.x,), [ty(3, 4)]),
                     r"= square\(%x\): square is a composite op; graphs hold only primitive ops"),
    "op not in registry": (_unregistered, r"%n : f32\[3, 4\] = neg\(%x\): 'neg' is not an op of the registry"),
    "no op": (lambda s: setattr(s.neg, "op", "neg"),
              r"%n : f32\[3, 4\] = neg\(%x\): 'neg' is not an op of the registry"),
    "too few arguments": (lambda s: s.node("add", (s.x, s.y), [ty(3, 4)]),
                          r"= add\(%x, %y\): 2 arguments, but add takes 3: add\(Tensor self, "),
    "literal for a tensor": (lambda s: s.node("mm", (s.x, 2.0), [ty(3, 4)]),
                             r"= mm\(%x, 2\.0\): argument 'mat2' must be a tensor value, not 2\.0"),
    "no list for Tensor[]": (lambda s: s.node("cat", (s.x, 0), [ty(3, 4)]),
                             r"argument 'tensors' must be a list of values, not %x"),
    "literal in Tensor[]": (lambda s: s.node("cat", ([s.x, 1.0], 0), [ty(3, 4)]),
                            r"argument 'tensors' must hold tensor values, not 1\.0"),
    "value for a literal": (lambda s: s.node("sum", (s.x, [s.y], False, None), [ty(3)]),
                            r"= sum\(%x, dim=\[%y\]\): argument 'dim' takes a literal int\[\]\?, not a tensor value"),
    "wrong shape": (lambda s: s.node("neg", (s.x,), [ty(4, 3)]),
                    r"= neg\(%x\): %b has type f32\[4, 3\], but the meta rule of neg gives f32\[3, 4\]"),
    "wrong dtype": (lambda s: s.node("neg", (s.x,), [ty(3, 4, dtype=jt.float64)]),
                    r"%b has type f64\[3, 4\], but the meta rule of neg gives f32\[3, 4\]"),
    "wrong device": (lambda s: s.node("neg", (s.x,), [ty(3, 4, device="cuda")]),
                     r"%b has type f32\[3, 4\]@cuda, but the meta rule of neg gives f32\[3, 4\]"),
    "data-dependent shape": (
        lambda s: s.node("masked_select", (s.x, s.g.add_input(ty(3, 4, dtype=jt.bool), "k")), [ty(5)]),
        r"= masked_select\(%x, %k\): the meta rule of masked_select gives a data-dependent shape \[None\]"),
    "too few outputs": (lambda s: s.node("max.dim", (s.x, 1, False), [ty(3)]),
                        r"= max\.dim\(%x, dim=1\): max\.dim gives 2 outputs, the node has 1"),
    "too many outputs": (lambda s: s.node("neg", (s.x,), [ty(3, 4), ty(3, 4)]),
                         r"neg gives 1 outputs, the node has 2"),
    "meta rule raises": (lambda s: s.node("mm", (s.x, s.y), [ty(3, 3)]),
                         r"= mm\(%x, %y\): the meta rule of mm rejects the arguments: RuntimeError: .*3x4 and 3x4"),
    "devices differ": (lambda s: s.node("add", (s.x, s.g.add_input(ty(3, 4, device="cuda"), "c"), 1), [ty(3, 4)]),
                       r"rejects the arguments: RuntimeError: Expected all tensors to be on the same device"),
    "bad literal type": (lambda s: s.node("sum", (s.x, "rows", False, None), [ty()]),
                         r"rejects the arguments: TypeError: sum\(\): argument 'dim' \(position 2\) must be"),
    "invalid input type": (lambda s: s.g.add_input(ty(None, 2), "u"),
                           r"input %u : .*: %u has no valid tensor type"),
    "undefined output": (lambda s: setattr(s.g, "outputs", {"a": [s.x, Value("q", ty())]}),
                         r"return \{'a': \[%x, %q\]\}: %q is not defined in this graph"),
    "constant without tensor": (lambda s: s.g.constant_tensors.pop("w"),
                                r"%w : f32\[4\] = constant\['w'\]: constant 'w' has no tensor"),
    "constant under another name": (lambda s: setattr(s.g, "constants", {"v": s.w}),
                                    r"%w : f32\[4\] = constant\['v'\]: constant 'v' is held by a value named %w"),
    "constant of another type": (lambda s: s.g.constant_tensors.update(w=jt.ones(5)),
                                 r"constant\['w'\]: constant 'w' is bound to a tensor of type f32\[5\]"),
    "mutation of a node output": (_mutate(lambda s: s.neg.outputs[0], lambda s: s.add.outputs[0]),
                                  r"%n <- %s: %n is neither an input nor a constant of this graph"),
    "mutation of another type": (_mutate(lambda s: s.x, lambda s: s.sum.outputs[0]),
                                 r"%x <- %m: a value of type f32\[\] is written into %x of type f32\[3, 4\]"),
    "mutation by an undefined value": (_mutate(lambda s: s.w, lambda s: Value("z", ty(4))),
                                       r"%w <- %z: %z is not defined in this graph"),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_graph_is_refused(kind):
    small = Small()
    breaker, message = BROKEN[kind]
    breaker(small)
    with pytest.raises(VerifyError, match=message):
        verify(small.g)


def test_verify_error_is_a_runtime_error_chained_to_the_meta_rule():
    small = Small()
    small.node("mm", (small.x, small.y), [ty(3, 3)])
    with pytest.raises(RuntimeError) as info:
        verify(small.g)
    assert isinstance(info.value, VerifyError)
    assert isinstance(info.value.__cause__, RuntimeError) and not isinstance(info.value.__cause__, VerifyError)


def test_unprintable_literal_is_shown_by_repr():
    small = Small()
    odd = object()  # a literal the text form has no syntax for
    small.node("clone", (small.x, odd), [ty(3, 4)])
    with pytest.raises(VerifyError, match=re.escape(f"= clone(%x, {odd!r}): the meta rule of clone rejects")):
        verify(small.g)


@given(graphs())
def test_random_graphs_verify(graph):
    verify(graph)
