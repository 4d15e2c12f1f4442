"""The IR's text form: `print_graph` then `parse` gives back the same graph, and bad text a located error."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
import jitorch.ir
from jitorch.ir import Graph, ParseError, TensorType, Value, parse, print_graph
from jitorch.ir.fake import fake_of_type
from jitorch.ops import registry
from tests.ir.graphs import CASES, CASES_BY_OP, LITERALS, graphs, one_op_graph
from tests.ops.samples import bind, samples

CPU = jt.device("cpu")


def same_literal(a, b, objects=None):
    """Equal Python values of the same types (NaN equals NaN); Values compare by name and type, objects
    (generators) by their names in ``objects``: ``{id(object): name}`` of both graphs."""
    if isinstance(a, Value):
        return isinstance(b, Value) and a.name == b.name and a.type == b.type
    if type(a) is not type(b):
        return False
    if isinstance(a, jt.Generator):
        return objects[id(a)] == objects[id(b)]
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_literal(x, y, objects) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_literal(a[k], b[k], objects) for k in a)
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def assert_same_graph(a, b):
    """``b`` is ``a`` value for value: names, types, ops, argument values and their Python types."""
    assert [(v.name, v.type, v.requires_grad) for v in a.inputs] == [(v.name, v.type, v.requires_grad)
                                                                     for v in b.inputs]
    assert [(k, v.name, v.type) for k, v in a.constants.items()] == [(k, v.name, v.type)
                                                                     for k, v in b.constants.items()]
    assert list(a.objects) == list(b.objects)
    objects = {id(obj): name for g in (a, b) for name, obj in g.objects.items()}
    assert len(a.nodes) == len(b.nodes)
    for x, y in zip(a.nodes, b.nodes):
        assert x.op is y.op
        assert [(o.name, o.type, o.index) for o in x.outputs] == [(o.name, o.type, o.index) for o in y.outputs]
        assert all(o.node is y for o in y.outputs)
        assert same_literal(x.args, y.args, objects), (x.args, y.args)
    assert same_literal(a.outputs, b.outputs)
    assert same_literal(a.mutations, b.mutations)


def assert_round_trip(g):
    text = print_graph(g)
    parsed = parse(text)
    assert parsed == g
    assert print_graph(parsed) == text
    assert_same_graph(g, parsed)
    assert parse(print_graph(g, canonical=True)) == g
    assert all(t is None for t in parsed.constant_tensors.values())
    assert list(parsed.constant_tensors) == list(g.constants)


# Round trips ----------------------------------------------------------------------------------

GRAPH_OPS = sorted(name for name, op in registry.OPS.items() if op.composite is None)


@pytest.mark.parametrize("name", [n for n in GRAPH_OPS if n in CASES_BY_OP])
def test_one_node_graph_of_every_op_round_trips(name):
    for case in CASES_BY_OP[name]:
        assert_round_trip(one_op_graph(case)[0])


@pytest.mark.parametrize("name", [n for n in GRAPH_OPS if n not in CASES_BY_OP])
def test_ops_left_out_of_graphs_have_data_dependent_shapes(name):
    """Only ops whose result shape the data decides (the tracer refuses them) have no one-node graph."""
    op = registry.OPS[name]
    for sample in samples(op):
        args = [fake_of_type(TensorType(tuple(a.shape), a.dtype, a.device)) if isinstance(a, jt.Tensor) else a
                for a in op.convert(bind(op, sample))]
        spec = op.meta(*args)
        specs = [spec] if isinstance(spec, registry.TensorSpec) else spec
        assert any(n is None for s in specs for n in s.shape)


def test_cases_cover_multi_output_and_list_results():
    counts = {len(c.types) for c in CASES}
    assert {1, 2, 3} <= counts
    assert any(r.list for c in CASES for r in c.op.schema.returns)


@given(graphs())
def test_random_graphs_round_trip(g):
    assert_round_trip(g)


@given(st.recursive(LITERALS | st.sampled_from([jt.float16, jt.bfloat16, jt.int64, jt.bool, CPU,
                                                jt.device("cuda:1"), jt.contiguous_format]),
                    lambda kids: st.lists(kids, max_size=3) | st.lists(kids, max_size=3).map(tuple)
                    | st.dictionaries(st.text(max_size=3) | st.integers(), kids, max_size=3),
                    max_leaves=8))
def test_output_literals_round_trip(tree):
    g = Graph()
    x = g.add_input(TensorType((2,), jt.float32, CPU))
    g.outputs = (x, tree)
    assert_round_trip(g)


def test_parsed_arguments_take_the_schemas_python_types():
    g = parse("""graph(%x: f32[2, 3], %i: i64[2]):
  %0 : f32[2] = sum(%x, dim=[1], dtype=f32)
  %1 : f64[2, 3] = _to_copy(%x, dtype=f64, device=device('cpu'))
  %2 : f32[4, 3] = cat([%x, %x])
  %3 : f32[2, 3] = normal.Tensor_float(%x)
  %4 : f32[2, 3] = clone(%x, memory_format=contiguous_format)
  return (%0,)""")
    n0, n1, n2, n3, n4 = g.nodes
    x = g.inputs[0]
    assert n0.args == (x, (1,), False, jt.float32)
    assert n1.args[1] is jt.float64 and n1.args[2] == CPU and isinstance(n1.args[2], jt.device)
    assert n2.args == ([x, x], 0)
    assert type(n3.args[1]) is float and n3.args[1] == 1.0 and n3.args[2] is None  # float std=1 -> 1.0
    assert n4.args[1] is jt.contiguous_format
    assert isinstance(g.outputs, tuple) and len(g.outputs) == 1


def test_hand_written_text_with_free_spacing_reads_back_canonically():
    text = """
graph( %a : f32[2,3]@cpu , %b:f32[3] requires_grad ):

  %w:f32[3]=constant['weight']
  %s : f32[2, 3] = add(%a, %b, alpha = 2)
  %t : f32[2, 3] = add(self=%s, other=0.5)
  %a <- %t
  return (%s)
"""
    g = parse(text)
    assert g.outputs is g.nodes[0].outputs[0]  # (v) is v, as in Python; (v,) is a 1-tuple
    assert g.nodes[1].args[1] == 0.5
    assert print_graph(g) == """graph(%a: f32[2, 3], %b: f32[3] requires_grad):
  %w : f32[3] = constant['weight']
  %s : f32[2, 3] = add(%a, %b, alpha=2)
  %t : f32[2, 3] = add(%s, 0.5)
  %a <- %t
  return %s"""


def test_special_values_devices_and_empty_results():
    text = """graph(%x: f32[0, 3], %y: f32[2]@cuda:0):
   = unbind(%x)
  %0 : f32[] = norm(%x, p=-inf)
  %1 : f32[2]@cuda:0 = _to_copy(%y, device=device('cuda:0'))
  %2 : f32[2, 2] = full(size=[2, 2], fill_value=nan)
  return [%0, {'k': (%1, -0.0, 1e-300, inf), 3: [None, True, "it's", i64]}, ()]"""
    g = parse(text)
    assert print_graph(g) == text
    assert g.nodes[0].outputs == []
    assert g.nodes[1].args[1] == -math.inf
    assert g.inputs[1].type.device == jt.device("cuda:0")
    assert math.isnan(g.nodes[3].args[1])
    assert g.outputs[1][3][2] == "it's"


def test_an_argument_is_left_out_only_when_it_is_exactly_its_default():
    # -0.0 equals nan_to_num's default nan=0.0 but is not it: left out, it read back as 0.0
    text = """graph(%x: f32[2]):
  %0 : f32[2] = nan_to_num(%x, nan=-0.0)
  %1 : f32[2] = nan_to_num(%x)
  return (%0, %1)"""
    g = parse(text)
    assert print_graph(g) == text
    assert math.copysign(1.0, g.nodes[0].args[1]) == -1.0 and math.copysign(1.0, g.nodes[1].args[1]) == 1.0
    # so the two programs print apart, and the caches keyed by the canonical text (fusion plans, the passes'
    # fixed point) tell them apart too
    other = parse(text.replace("nan=-0.0", "nan=0.0"))
    assert print_graph(other, canonical=True) != print_graph(g, canonical=True)
    assert "nan=" not in print_graph(other).splitlines()[1]


def test_objects_are_named_generators_one_per_name():
    text = """graph(%x: f32[2]):
  %0 : f32[2] = rand(size=[2], generator=@g)
  %1 : f32[2] = rand(size=[2], generator=@g)
  %2 : f32[2] = bernoulli.p(%x, p=0.5, generator=@g1)
  return (%0, %1, %2)"""
    g = parse(text)
    assert list(g.objects) == ["g", "g1"] and all(isinstance(o, jt.Generator) for o in g.objects.values())
    assert g.nodes[0].args[1] is g.nodes[1].args[1] is g.objects["g"]
    assert g.nodes[2].args[2] is g.objects["g1"]
    assert print_graph(g) == text


def test_constants_keep_their_names_and_wait_for_a_tensor():
    text = """graph():
  %v0 : f32[3] = constant['fc.weight']
  %v1 : f32[3] = neg(%v0)
  %v0 <- %v1
  return %v1"""
    g = parse(text)
    assert list(g.constants) == ["fc.weight"] and g.constants["fc.weight"].name == "v0"
    assert g.constant_tensors == {"fc.weight": None}
    assert print_graph(g) == text
    # new names given later avoid both the value names and the constant names of the text
    assert g.add_constant("fc.weight", None, g.nodes[0].outputs[0].type).name == "fc.weight_1"
    v1 = g.nodes[0].outputs[0]
    assert g.add_node(registry.OPS["neg"], [v1], [v1.type]).outputs[0].name == "0"


def test_graph_names_are_made_readable_back():
    g = Graph()
    x = g.add_input(TensorType((2,), jt.float32, CPU), "x y")
    c = g.add_constant("self.w[0]", None, x.type)
    g.outputs = [x, c]
    assert (x.name, c.name) == ("x_y", "self.w_0_")
    assert_round_trip(g)


def test_parse_error_is_a_value_error_exported_by_the_ir():
    assert jitorch.ir.parse is parse and issubclass(ParseError, ValueError)
    with pytest.raises(ParseError) as info:
        parse("graph():\n  return %q")
    assert (info.value.line, info.value.column) == (2, 10)


# Errors ------------------------------------------------------------------------------------------

HEAD = "graph(%x: f32[2, 3], %i: i64[2]):\n"

ERRORS = [
    # (text, line, column, message)
    ("grph():\n  return None", 1, 1, "expected 'graph('"),
    ("graph(%x f32[2]):\n  return %x", 1, 10, "expected ':'"),
    ("graph(%x: f31[2]):\n  return %x", 1, 11, "unknown dtype 'f31'"),
    ("graph(%x: f32[2, n]):\n  return %x", 1, 18, "expected a dimension size, found 'n'"),
    ("graph(%x: f32[2, -1]):\n  return %x", 1, 18, "a dimension size must be a non-negative integer"),
    ("graph(%x: f32[2 3]):\n  return %x", 1, 17, "expected ',' or ']' in a shape"),
    ("graph(%x: f32[2]@gpu):\n  return %x", 1, 18, "bad device 'gpu'"),
    ("graph(%x: f32[2], %x: f32[3]):\n  return %x", 1, 19, r"value %x is defined twice (first on line 1)"),
    (HEAD + "  %0 : f32[2, 3] = frobnicate(%x)\n  return %0", 2, 20, "unknown op 'frobnicate'"),
    (HEAD + "  %0 : f32[2, 3] = neg(%q)\n  return %0", 2, 24, "unknown value %q"),
    (HEAD + "  %x : f32[2, 3] = neg(%x)\n  return %x", 2, 3, r"value %x is defined twice (first on line 1)"),
    (HEAD + "  %0 : f32[2, 3] = neg(%0)\n  return %0", 2, 24, "unknown value %0"),
    (HEAD + "  %0 : f32[2] = max.dim(%x, dim=1)\n  return %0", 2, 17,
     "max.dim returns 2 tensors, but the line defines 1 value"),
    (HEAD + "  %0 : f32[2], %1 : f32[2] = neg(%x)\n  return %0", 2, 30,
     "neg returns 1 tensor, but the line defines 2 values"),
    (HEAD + "  %0 : f32[2] = sum(%x, dims=[1])\n  return %0", 2, 25,
     r"sum has no argument 'dims' (its arguments: self, dim, keepdim, dtype)"),
    (HEAD + "  %0 : f32[2] = sum(%x, dim=[1], dim=[0])\n  return %0", 2, 34, "argument 'dim' of sum is given twice"),
    (HEAD + "  %0 : f32[2] = sum(dim=[1], %x)\n  return %0", 2, 30,
     "a positional argument cannot follow a keyword argument"),
    (HEAD + "  %0 : f32[3] = select(%x, dim=1)\n  return %0", 2, 17, "select needs argument 'index'"),
    (HEAD + "  %0 : f32[2] = sum(%x, dim='a')\n  return %0", 2, 29, r"argument 'dim' of sum must be int[]?, not str"),
    (HEAD + "  %0 : f32[2] = sum(%x, dim=%i)\n  return %0", 2, 29,
     r"argument 'dim' of sum must be int[]?, not value %i"),
    (HEAD + "  %0 : f32[2, 2] = mm(%x, 2)\n  return %0", 2, 27, "argument 'mat2' of mm must be Tensor, not int"),
    (HEAD + "  %0 : f32[4, 3] = cat(%x)\n  return %0", 2, 24, r"argument 'tensors' of cat must be Tensor[]"),
    (HEAD + "  %0 : f32[2, 3] = neg(%x, %x)\n  return %0", 2, 28, "neg takes 1 argument, this is argument 2"),
    (HEAD + "  %0 : f32[2, 3] = neg(%x %x)\n  return %0", 2, 27, "expected ',' or ')' after an argument"),
    (HEAD + "  %0 : f32[2, 3] = neg(foo)\n  return %0", 2, 24, "unknown name 'foo'"),
    (HEAD + "  %0 : f32[2, 3] = neg(%x)", 2, 27, "expected a 'return' line"),
    (HEAD + "  return %x\n  %0 : f32[2, 3] = neg(%x)", 3, 3, "expected the end of the graph after 'return'"),
    (HEAD + "  return %x %i", 2, 13, "expected the end of the line, found '%i'"),
    (HEAD + "  return [%x %i]", 2, 14, r"expected ',' or ']', found '%i'"),
    (HEAD + "  return {'a': %x, 'a': %i}", 2, 20, "key 'a' appears twice"),
    (HEAD + "  return {[1]: %x}", 2, 11, "a dict key must be"),
    (HEAD + "  return 'open", 2, 10, "a string with no closing quote"),
    (HEAD + "  return $x", 2, 10, "unexpected character '$'"),
    (HEAD + "  neg(%x)\n  return %x", 2, 3, "expected a line such as"),
    (HEAD + "  %0 : f32[2, 3] = neg(%x)\n  %0 <- %x\n  return %x", 3, 3,
     "only inputs and constants can be written back, and %0 is neither"),
    (HEAD + "  %x <- %x\n  %x <- %x\n  return %x", 3, 3, "%x is written back twice"),
    (HEAD + "  %x <- %q\n  return %x", 2, 9, "unknown value %q"),
    (HEAD + "  %w : f32[2] = constant['w']\n  %v : f32[2] = constant['w']\n  return %x", 3, 26,
     "constant 'w' is defined twice"),
    (HEAD + "  %w : f32[2], %v : f32[2] = constant['w']\n  return %x", 2, 30, "a constant defines one value, not 2"),
    (HEAD + "  %0 : f32[2, 3] = _to_copy(%x, device=device('tpu'))\n  return %0", 2, 40, "bad device 'tpu'"),
    (HEAD + "  %0 : f32[2] = rand(size=[2], generator=@)\n  return %0", 2, 43,
     "expected an object's name after '@', found ')'"),
]


@given(graphs(max_nodes=3), st.data())
def test_damaged_text_reads_back_or_raises_parse_error(g, data):
    """Any edit of a graph's text parses or raises ParseError, never another exception."""
    text = print_graph(g)
    i = data.draw(st.integers(0, len(text)))
    j = data.draw(st.integers(i, min(len(text), i + 4)))
    piece = data.draw(st.sampled_from(["", "%", "(", ")", "[", "]", ",", "=", ":", "\n", "'", "\\", "-", "1", "x",
                                       "<-", "{", "}", " "]))
    try:
        parse(text[:i] + piece + text[j:])
    except ParseError:
        pass


@pytest.mark.parametrize("text, line, column, message", ERRORS)
def test_parse_errors_name_line_column_and_what_was_expected(text, line, column, message):
    with pytest.raises(ParseError, match=f"^line {line}, column {column}: ") as info:
        parse(text)
    assert message in str(info.value)


def test_fresh_names_count_on_per_hint_and_stay_unique_and_parseable():
    """Hundreds of constants named alike ("c") take c, c_1, c_2, ... in order, as the search from 1 gave them,
    counting on from the last suffix (a trace of a model names hundreds so); a hint the parser would not read
    back is cleaned; names taken otherwise (the parser's) are skipped."""
    g = Graph()
    t = TensorType((2,), jt.float32, jt.device("cpu"))
    g._names.add("c_3")
    names = [g.add_constant("c", jt.zeros(2), t).name for _ in range(6)]
    assert names == ["c", "c_1", "c_2", "c_4", "c_5", "c_6"]
    assert [g.add_constant(h, jt.zeros(2), t).name for h in ("w-1", "w_1", "w-1", "")] == ["w_1", "w_1_1", "w_1_2", "_"]
    assert len(g._names) == 11 and all(v.name in g._names for v in g.constants.values())
    g.outputs = list(g.constants.values())
    assert print_graph(parse(print_graph(g))) == print_graph(g)
