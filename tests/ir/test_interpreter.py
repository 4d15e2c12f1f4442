"""The interpreter: every op's samples as one-node graphs (verified, then run and compared with
eager exactly), constants read at call time, pytree outputs, multi-output nodes, mutations,
compact views, input checks, and random valid graphs."""

from __future__ import annotations

import zlib
from collections import namedtuple

import numpy as np
import pytest
from hypothesis import given

import jitorch as jt
from jitorch.ir import interpret, verify
from jitorch.jit import trace
from jitorch.ir.graph import Graph, TensorType, Value
from jitorch.ir.interpreter import RESHAPING_VIEWS, STORAGE_ADDRESSING
from jitorch.ops import registry
from jitorch.runtime.pytree import tree_flatten
from tests.ir.graphs import graphs
from tests.ops.samples import SAMPLES, VALUES_UNDEFINED, bind, copy_generator, samples
from tests.support import to_numpy

OPS = registry.OPS


def ty(*shape, dtype=jt.float32):
    return TensorType(shape, dtype, jt.device("cpu"))


def type_of(t):
    return TensorType(tuple(t.shape), t.dtype, t.device)


def flat(result):
    """An op's result as a list of tensors."""
    return [result] if isinstance(result, jt.Tensor) else list(result)


def assert_same(got, expected, what, values=True):
    assert type_of(got) == type_of(expected), f"{what}: {type_of(got)}, expected {type_of(expected)}"
    if values:
        np.testing.assert_array_equal(to_numpy(got), to_numpy(expected), err_msg=what)


# Every op's samples --------------------------------------------------------------------------

def compact_copy(sample):
    """The sample with its tensors copied compact (as the IR reads them) and its generators copied."""
    return sample.map(lambda v: v.clone(memory_format=jt.contiguous_format) if isinstance(v, jt.Tensor)
                      else copy_generator(v))


def fixed_shape_samples(op):
    """The op's samples whose meta rule gives tensors of fixed shapes (graphs cannot hold the rest)."""
    out = []
    for s in samples(op, seed=zlib.crc32(op.name.encode())):
        spec = op.meta(*op.convert(bind(op, s)))
        specs = spec if isinstance(spec, (tuple, list)) else [spec]
        if all(isinstance(x, registry.TensorSpec) and None not in x.shape for x in specs):
            out.append(s)
    return out


SAMPLE_OPS = sorted(name for name, op in OPS.items()
                    if op.composite is None and name in SAMPLES and fixed_shape_samples(op))


def one_node_graph(op, args, types):
    """``(graph, inputs)``: ``op(*args)`` as one node of output ``types`` whose tensors are new inputs
    of their types, returning its outputs as a tuple."""
    g = Graph()
    inputs = []

    def value(a):
        if isinstance(a, jt.Tensor):
            inputs.append(a)
            return g.add_input(type_of(a))
        if isinstance(a, (list, tuple)):
            return type(a)(value(x) for x in a)
        return a

    g.outputs = tuple(g.add_node(op, [value(a) for a in args], types).outputs)
    return g, inputs


@pytest.mark.parametrize("name", SAMPLE_OPS)
def test_sample_graphs_verify_and_run_like_eager(name):
    """The interpreter gets the sample's own tensors, in every layout, and gives what eager gives on
    them, strides and offsets too; ops that read the compact layout (as_strided, view) it runs on
    compact copies itself, as eager is run here. Random ops draw from generators in the same state."""
    op = OPS[name]
    reads_compact = name in STORAGE_ADDRESSING | RESHAPING_VIEWS
    for sample in fixed_shape_samples(op):
        what = f"{name} {sample}"
        expected = flat(registry.call(op, bind(op, compact_copy(sample) if reads_compact else sample.clone())))
        args = op.convert(bind(op, sample.clone()))
        graph, inputs = one_node_graph(op, args, [type_of(e) for e in expected])
        verify(graph)
        before = [to_numpy(t).copy() for t in inputs]
        got, mutations = interpret(graph, inputs)
        assert not mutations
        assert isinstance(got, tuple) and len(got) == len(expected), what
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_same(g, e, f"{what}: output {i}", values=name not in VALUES_UNDEFINED)
            if not reads_compact:
                assert (g.stride(), g.storage_offset()) == (e.stride(), e.storage_offset()), f"{what}: output {i}"
        for t, b in zip(inputs, before):
            np.testing.assert_array_equal(to_numpy(t), b, err_msg=f"{what}: an input was written")


# Hand-built graphs ---------------------------------------------------------------------------

def affine_graph():
    """``x * w + b`` with ``w`` and ``b`` constants: graph(%x: f32[2, 3])."""
    g = Graph()
    x = g.add_input(ty(2, 3), "x")
    w = g.add_constant("w", jt.full((3,), 2.0), ty(3))
    b = g.add_constant("b", jt.zeros(()), ty())
    (m,) = g.add_node(OPS["mul"], (x, w), [ty(2, 3)]).outputs
    (y,) = g.add_node(OPS["add"], (m, b, 1), [ty(2, 3)]).outputs
    g.outputs = y
    return g


def test_constants_are_read_at_call_time():
    g = affine_graph()
    x = jt.ones(2, 3)
    out, _ = interpret(g, [x])
    assert to_numpy(out).tolist() == [[2.0] * 3] * 2
    g.constant_tensors["w"].mul_(3)
    g.constant_tensors["b"].fill_(1)
    out, _ = interpret(g, [x])
    assert to_numpy(out).tolist() == [[7.0] * 3] * 2


def test_constants_given_explicitly():
    g = affine_graph()
    out, _ = interpret(g, [jt.ones(2, 3)], constants={"w": jt.tensor([1.0, 2.0, 3.0]), "b": jt.tensor(0.5)})
    assert to_numpy(out).tolist() == [[1.5, 2.5, 3.5]] * 2


Pair = namedtuple("Pair", "first second")


def test_pytree_outputs_keep_their_structure_and_literals():
    g = Graph()
    x = g.add_input(ty(3), "x")
    (n,) = g.add_node(OPS["neg"], (x,), [ty(3)]).outputs
    g.outputs = {"a": (n, [x, 3, None]), "b": "text", "c": Pair(2.5, n)}
    out, _ = interpret(g, [jt.tensor([1.0, 2.0, 3.0])])
    assert list(out) == ["a", "b", "c"] and out["b"] == "text"
    neg, (xs, three, none) = out["a"][0], out["a"][1]
    assert to_numpy(neg).tolist() == [-1.0, -2.0, -3.0] and to_numpy(xs).tolist() == [1.0, 2.0, 3.0]
    assert (three, none) == (3, None)
    assert isinstance(out["c"], Pair) and out["c"].first == 2.5 and out["c"].second is neg


def test_multi_output_nodes():
    g = Graph()
    x = g.add_input(ty(2, 3), "x")
    values, indices = g.add_node(OPS["max.dim"], (x, 1, False), [ty(2), ty(2, dtype=jt.int64)]).outputs
    parts = g.add_node(OPS["split"], (x, 2, 1), [ty(2, 2), ty(2, 1)]).outputs
    g.outputs = (values, indices, parts)
    verify(g)
    (v, i, (p0, p1)), _ = interpret(g, [jt.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]])])
    assert to_numpy(v).tolist() == [5.0, 7.0] and to_numpy(i).tolist() == [1, 0]
    assert to_numpy(p0).tolist() == [[1.0, 5.0], [7.0, 0.0]] and to_numpy(p1).tolist() == [[2.0], [3.0]]


def test_mutations_are_returned_not_written():
    g = Graph()
    x = g.add_input(ty(3), "x")
    w = g.add_constant("w", jt.zeros(3), ty(3))
    (y,) = g.add_node(OPS["add"], (x, 1, 1), [ty(3)]).outputs
    g.mutations = [(x, y), (w, x)]
    g.outputs = y
    verify(g)
    x_in = jt.tensor([1.0, 2.0, 3.0])
    out, mutations = interpret(g, [x_in])
    assert [(target, to_numpy(t).tolist()) for target, t in mutations] == [(x, [2.0, 3.0, 4.0]), (w, [1.0, 2.0, 3.0])]
    assert to_numpy(x_in).tolist() == [1.0, 2.0, 3.0] and to_numpy(g.constant_tensors["w"]).tolist() == [0.0] * 3


def test_views_read_their_input_compact():
    """``as_strided`` addresses the compact layout of its input, whatever the caller's strides;
    ``as_strided_scatter`` too, even on an expanded input whose storage is smaller than the tensor."""
    g = Graph()
    x = g.add_input(ty(2, 3), "x")
    e = g.add_input(ty(2, 3), "e")
    src = g.add_input(ty(2), "src")
    (a,) = g.add_node(OPS["as_strided"], (x, (2,), (1,), 2), [ty(2)]).outputs
    (s,) = g.add_node(OPS["as_strided_scatter"], (e, src, (2,), (3,), 1), [ty(2, 3)]).outputs
    g.outputs = (a, s)
    verify(g)
    x_t = jt.tensor([[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]).t()  # [[0, 1, 2], [3, 4, 5]], transposed strides
    e_x = jt.tensor([[9.0, 8.0, 7.0]]).expand(2, 3)
    (a_out, s_out), _ = interpret(g, [x_t, e_x, jt.tensor([-1.0, -2.0])])
    assert to_numpy(a_out).tolist() == [2.0, 3.0]
    assert to_numpy(s_out).tolist() == [[9.0, -1.0, 7.0], [9.0, -2.0, 7.0]]


def test_view_of_a_view_with_an_offset():
    g = Graph()
    x = g.add_input(ty(3, 2), "x")
    (row,) = g.add_node(OPS["select"], (x, 0, 1), [ty(2)]).outputs
    (a,) = g.add_node(OPS["as_strided"], (row, (1,), (1,), 1), [ty(1)]).outputs
    g.outputs = a
    verify(g)
    out, _ = interpret(g, [jt.arange(6.0).reshape(3, 2)])
    assert to_numpy(out).tolist() == [3.0]


@pytest.mark.parametrize("inputs, message", [
    ([], r"the graph takes 1 inputs, got 0"),
    ([jt.ones(2, 3), jt.ones(2, 3)], r"the graph takes 1 inputs, got 2"),
    ([jt.ones(3, 2)], r"input %x must be a tensor of type f32\[2, 3\], got f32\[3, 2\]"),
    ([jt.ones(2, 3, dtype=jt.float64)], r"input %x must be a tensor of type f32\[2, 3\], got f64\[2, 3\]"),
    ([np.ones((2, 3), np.float32)], r"input %x must be a tensor of type f32\[2, 3\], not ndarray"),
])
def test_inputs_must_match_their_types(inputs, message):
    with pytest.raises(ValueError, match=message):
        interpret(affine_graph(), inputs)


@pytest.mark.parametrize("constants, message", [
    ({"w": jt.ones(3)}, r"no tensor for constant 'b'"),
    ({"w": jt.ones(4), "b": jt.ones(())}, r"constant 'w' must be a tensor of type f32\[3\], got f32\[4\]"),
])
def test_constants_must_match_their_types(constants, message):
    with pytest.raises(ValueError, match=message):
        interpret(affine_graph(), [jt.ones(2, 3)], constants)


@given(graphs(runnable=True))
def test_random_graphs_give_their_types(case):
    """Valid random graphs verify and run; every result has its value's type, literals are kept."""
    graph, inputs = case
    verify(graph)
    outputs, mutations = interpret(graph, inputs)

    def check(value, result):
        if isinstance(value, Value):
            assert type_of(result) == value.type, f"%{value.name}: {type_of(result)}, expected {value.type}"
        elif isinstance(value, float) and np.isnan(value):
            assert np.isnan(result)
        else:
            assert result == value
    leaves, spec = tree_flatten(graph.outputs)
    got, got_spec = tree_flatten(outputs)
    assert got_spec == spec
    for value, result in zip(leaves, got):
        check(value, result)
    assert [target for target, _ in mutations] == [target for target, _ in graph.mutations]
    for (_, value), (_, result) in zip(graph.mutations, mutations):
        check(value, result)


def _views_of_computed_tensors(x):
    return x.contiguous()[::2, 0:-1:2], x.sigmoid()[-2:4, -1, :], x.exp().transpose(0, 2)[1:].unsqueeze(0)


def test_views_of_views_keep_eagers_strides_and_offsets():
    """A slice of a slice of a computed tensor is a view of that tensor, as in eager: the interpreter once
    compacted the first slice, giving other strides and offsets than eager (fuzz seeds 16, 24, 53)."""
    x = jt.randn(4, 10)[:, ::2].reshape(4, 5)  # non-contiguous input: contiguous() copies
    x = x.unsqueeze(2).expand(4, 5, 2) * 1.5
    graph = trace(_views_of_computed_tensors, x)
    got, _ = interpret(graph, [x])
    for g, e in zip(got, _views_of_computed_tensors(x)):
        assert (g.stride(), g.storage_offset()) == (e.stride(), e.storage_offset())
        np.testing.assert_array_equal(to_numpy(g), to_numpy(e))
