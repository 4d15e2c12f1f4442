"""The optimisation passes: each pass on small graphs (what it rewrote and what it must leave),
the pass manager (rounds, verification, logs), exactness on NaN, infinities and signed zeros,
and random graphs that optimise to valid graphs computing exactly what the originals compute."""

from __future__ import annotations

import logging
import textwrap

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
import torch

import jitorch as jt
from jitorch.ir import Value, VerifyError, interpret, parse
from jitorch.ir.passes import DEFAULT_PASSES, cse, dce, fold, optimize, simplify, transpose
from jitorch.ir.passes.manager import MAX_ROUNDS
from jitorch.ops.pointwise import POW_BY_OTHER_OPS
from jitorch.jit import trace
from jitorch.runtime.pytree import tree_flatten
from tests.ir.graphs import graphs
from tests.ops.samples import VALUES_UNDEFINED
from tests.support import to_numpy


def text(source):
    """A graph's text written indented in a test."""
    return textwrap.dedent(source).strip()


def graph_of(source):
    return parse(text(source))


def ops(graph):
    return [node.op.name for node in graph.nodes]


def bits(a):
    """The bytes of an array's values: equal bits, so NaN equals NaN and -0.0 differs from 0.0."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def assert_same_tensor(got, expected, what):
    assert (got.shape, got.dtype) == (expected.shape, expected.dtype), what
    assert np.array_equal(bits(to_numpy(got)), bits(to_numpy(expected))), \
        f"{what}: {to_numpy(got)} != {to_numpy(expected)}"


def run(graph, inputs):
    """``interpret`` with every tensor result copied (a result may be an input itself),
    the generators of the graph restored afterwards so that a second run draws the same."""
    states = {name: g.get_state() for name, g in graph.objects.items()}
    outputs, mutations = interpret(graph, inputs)
    for name, state in states.items():
        graph.objects[name].set_state(state)
    leaves, spec = tree_flatten(outputs)
    copy = [t.clone() if isinstance(t, jt.Tensor) else t for t in leaves]
    return copy, spec, [(target, t.clone()) for target, t in mutations]


def assert_runs_the_same(graph, inputs, passes=DEFAULT_PASSES):
    """Optimise ``graph`` (verifying after every pass) and check that it computes exactly what it
    did and that its outputs alias no more than they did."""
    before = str(graph)
    returned = tree_flatten(graph.outputs)[0]
    sources = dict(zip(graph.inputs, inputs)) | {v: graph.constant_tensors[n] for n, v in graph.constants.items()}
    expected, spec, writes = run(graph, inputs)
    optimize(graph, passes, verify=True)
    what = f"\n{before}\noptimised to\n{graph}"
    got, got_spec, got_writes = run(graph, inputs)
    assert got_spec == spec, what
    for i, (g, e) in enumerate(zip(got, expected)):
        if isinstance(e, jt.Tensor):
            assert_same_tensor(g, e, f"output {i}{what}")
        else:
            assert g == e or g != g and e != e, f"output {i}{what}"
    assert_no_new_aliases(returned, tree_flatten(graph.outputs)[0], what)
    # a write-back may go (one of a value into itself), but every target must end up the same
    written, got_written = dict(writes), dict(got_writes)
    assert set(got_written) <= set(written), what
    for target, e in written.items():
        assert_same_tensor(got_written.get(target, sources.get(target)), e, f"%{target.name} <- {what}")


def memory_of(v):
    """The value whose memory an output ``v`` is in: the source its chain of views starts from."""
    while isinstance(v, Value) and v.node is not None and v.node.op.view is not None:
        v = v.node.args[0]
    return v


def assert_no_new_aliases(old, new, what):
    """Output leaves ``new`` are in the memory of an input or constant only where ``old`` were, and two
    of them in one memory only where ``old`` were (views count as their sources' memory)."""
    old, new = [memory_of(v) for v in old], [memory_of(v) for v in new]
    for i, (a, b) in enumerate(zip(old, new)):
        if isinstance(b, Value):
            assert b.node is not None or b is a, f"output {i}: %{a.name} became %{b.name}{what}"
            for j in range(i):
                assert new[j] is not b or old[j] is a, f"outputs {j} and {i} became one tensor{what}"


# Dead code elimination ------------------------------------------------------------------------

def test_dce_removes_unused_nodes_and_constants_but_not_inputs():
    g = graph_of("""
        graph(%x: f32[3], %unused: f32[3]):
          %w : f32[3] = constant['w']
          %c : f32[3] = constant['c']
          %0 : f32[3] = mul(%x, %w)
          %1 : f32[3] = exp(%0)
          %2 : f32[3] = add(%x, %c)
          return %2
    """)
    assert dce.run(g) == 3
    assert str(g) == text("""
        graph(%x: f32[3], %unused: f32[3]):
          %c : f32[3] = constant['c']
          %2 : f32[3] = add(%x, %c)
          return %2
    """)
    assert list(g.constant_tensors) == ["c"]


def test_dce_keeps_random_ops_and_what_mutations_use():
    g = graph_of("""
        graph(%x: f32[3]):
          %w : f32[3] = constant['w']
          %0 : f32[3] = rand(size=[3], generator=@g)
          %1 : f32[3] = exp(%0)
          %2 : f32[3] = neg(%x)
          %w <- %2
          %x <- %x
          return None
    """)
    assert dce.run(g) == 2  # exp(rand) and the write-back of x into itself
    assert ops(g) == ["rand", "neg"] and g.mutations == [(g.constants["w"], g.nodes[1].outputs[0])]


def test_dce_keeps_a_written_constant_nothing_reads():
    g = graph_of("""
        graph(%x: f32[3]):
          %w : f32[3] = constant['w']
          %w <- %x
          return None
    """)
    assert dce.run(g) == 0 and list(g.constants) == ["w"]


# Common subexpressions ------------------------------------------------------------------------

def test_cse_merges_repeated_nodes_and_replaces_uses_everywhere():
    g = graph_of("""
        graph(%x: f32[3], %y: f32[3]):
          %0 : f32[3] = exp(%x)
          %1 : f32[3] = exp(%x)
          %2 : f32[6] = cat([%0, %1])
          %3 : f32[6] = cat([%0, %1])
          %4 : f32[3] = add(%x, %1, alpha=2)
          %5 : f32[3] = add(%x, %0, alpha=2)
          %y <- %5
          return {'a': [%2], 'b': %4}
    """)
    assert cse.run(g) == 3
    assert str(g) == text("""
        graph(%x: f32[3], %y: f32[3]):
          %0 : f32[3] = exp(%x)
          %2 : f32[6] = cat([%0, %0])
          %4 : f32[3] = add(%x, %0, alpha=2)
          %y <- %4
          return {'a': [%2], 'b': %4}
    """)


def test_cse_merges_multi_output_nodes():
    g = graph_of("""
        graph(%x: f32[2, 3]):
          %0 : f32[2], %1 : i64[2] = max.dim(%x, dim=1)
          %2 : f32[2], %3 : i64[2] = max.dim(%x, dim=1)
          %4 : f32[2] = mul(%0, %2)
          %5 : i64[2] = add(%1, %3)
          return (%4, %5)
    """)
    assert cse.run(g) == 1
    assert [v.name for v in g.nodes[1].args] == ["0", "0"] and [v.name for v in g.nodes[2].args[:2]] == ["1", "1"]


@pytest.mark.parametrize("a, b", [("1", "1.0"), ("1", "True"), ("0.0", "-0.0"), ("2", "3"), ("1.0", "inf")])
def test_cse_tells_literals_apart_by_type_and_value(a, b):
    g = graph_of(f"""
        graph(%x: f32[3]):
          %0 : f32[3] = mul(%x, {a})
          %1 : f32[3] = mul(%x, {b})
          %2 : f32[3] = add(%0, %1)
          return %2
    """)
    assert cse.run(g) == 0


def test_cse_merges_equal_nan_literals():
    g = graph_of("""
        graph(%x: f32[3]):
          %0 : f32[3] = add(%x, nan)
          %1 : f32[3] = add(%x, nan)
          %2 : f32[3] = mul(%0, %1)
          return %2
    """)
    assert cse.run(g) == 1


def test_cse_never_merges_random_ops():
    g = graph_of("""
        graph(%x: f32[3]):
          %0 : f32[3] = rand(size=[3], generator=@g)
          %1 : f32[3] = rand(size=[3], generator=@g)
          %2 : f32[3] = add(%0, %1)
          return %2
    """)
    assert cse.run(g) == 0


def test_cse_keeps_two_returned_values_apart():
    """Eager returns two tensors; the optimised graph must not return one tensor twice."""
    g = trace(lambda x: (x.exp(), x.exp(), x.exp() + 1), jt.ones(3))
    assert cse.run(g) == 1
    assert str(g) == text("""
        graph(%x: f32[3]):
          %0 : f32[3] = exp(%x)
          %1 : f32[3] = exp(%x)
          %3 : f32[3] = add(%0, 1)
          return (%0, %1, %3)
    """)


# Constant folding -----------------------------------------------------------------------------

W = jt.tensor([1.0, 2.0, 3.0])
GENERATOR = jt.Generator().manual_seed(0)


def test_fold_computes_from_creation_ops_now():
    g = trace(lambda x: x + (jt.arange(3.0) * 2).exp(), jt.ones(3))
    assert fold.run(g) == 2 and dce.run(g) == 2  # arange, and the constant of arange * 2
    assert str(g) == text("""
        graph(%x: f32[3]):
          %fold_2 : f32[3] = constant['fold_2']
          %3 : f32[3] = add(%x, %fold_2)
          return %3
    """)
    expected = np.exp(np.arange(3.0, dtype=np.float32) * 2)
    np.testing.assert_array_equal(to_numpy(g.constant_tensors["fold_2"]), expected)
    assert g.constant_tensors["fold_2"].is_contiguous()


def test_passes_run_the_ops_as_the_graph_has_them_under_autocast():
    """Compiling inside an autocast region: folding evaluates the traced float32 product as such (autocast
    would make it bfloat16, which no longer fits the node, and nothing would fold)."""
    g = trace(lambda x: x + jt.ones(2, 2) @ jt.full((2, 2), 3.0), jt.ones(2, 2))
    with jt.autocast("cpu"):
        optimize(g, verify=True)
    assert ops(g) == ["add"]
    assert [t.dtype for t in g.constant_tensors.values()] == [jt.float32]


def test_fold_of_a_view_holds_a_compact_copy():
    g = trace(lambda x: x + jt.arange(6.0).reshape(2, 3).t().exp(), jt.ones(3, 2))
    optimize(g)
    assert ops(g) == ["add"]
    (folded,) = g.constant_tensors.values()
    assert folded.is_contiguous() and folded.storage_offset() == 0 and len(folded.untyped_storage()) == 6


@pytest.mark.parametrize("fn, kept", [
    (lambda x: x * 2 + 1, ["mul", "add"]),                                        # inputs
    (lambda x: x + W * 2, ["mul", "add"]),                                        # constants are read per call
    (lambda x: x + jt.rand(3, generator=GENERATOR) * 2, ["rand", "mul", "add"]),  # each call draws anew
    (lambda x: x + jt.arange(5000.0).sum(), ["arange", "sum", "add"]),             # too large
    (lambda x: (x, jt.arange(3.0) * 2), ["arange", "mul"]),                        # returned: a fresh tensor per call
    (lambda x: x + jt.arange(3) // 0, ["arange", "floor_divide", "add"]),           # eager raises: left to the call
], ids=["input", "constant", "random", "large", "returned", "raises"])
def test_fold_leaves(fn, kept):
    g = trace(fn, jt.ones(3))
    optimize(g, verify=True)
    assert ops(g) == kept


def test_folded_graph_still_reads_constants_at_call_time():
    w = jt.tensor([1.0, 2.0, 3.0])
    g = trace(lambda x: x + w * jt.arange(3.0).exp(), jt.ones(3))
    optimize(g, verify=True)
    assert ops(g) == ["mul", "add"]
    w.mul_(2)
    (out,), _, _ = run(g, [jt.zeros(3)])
    np.testing.assert_allclose(to_numpy(out), 2 * np.array([1, 2, 3]) * np.exp(np.arange(3.0)), rtol=1e-6)


# Algebraic simplification ---------------------------------------------------------------------

F32 = jt.ones(6)
I32 = jt.ones(6, dtype=jt.int32)
BOOL = jt.ones(6, dtype=jt.bool)
F16 = jt.ones(6, dtype=jt.float16)
BF16 = jt.ones(6, dtype=jt.bfloat16)


def then(y):
    """A use of ``y`` that no pass removes, and no view of it, so that ``y`` itself is no returned value
    (a returned view's source is one: replacing it by ``x`` would return a view of ``x``)."""
    return y * 2


@pytest.mark.parametrize("fn, x, left", [
    (lambda x: then(x * 1), F32, []),
    (lambda x: then(1 * x), F32, []),
    (lambda x: then(x * 1.0), F32, []),
    (lambda x: then(x / 1), F32, []),
    (lambda x: then(x - 0), F32, []),
    (lambda x: then(x - 0.0), F32, []),
    (lambda x: then(x ** 1), F32, []),
    (lambda x: then(-(-x)), F32, []),
    (lambda x: then(x.clone()), F32, []),
    (lambda x: then(x.view(6).expand(6)), F32, []),
    (lambda x: then(x + 0), I32, []),
    (lambda x: then(0 + x), I32, []),
    (lambda x: then(x * 1), I32, []),
    (lambda x: then(x * True), BOOL, []),
    (lambda x: then(x ** 2), F32, ["mul"]),
    (lambda x: then(x ** 2), I32, ["mul"]),
    (lambda x: then(x ** 3), F32, ["mul", "mul"]),
    (lambda x: then(x ** 3.0), F32, ["mul", "mul"]),
    (lambda x: then(x ** -1), F32, ["reciprocal"]),
    (lambda x: then(x ** -2), F32, ["mul", "reciprocal"]),
    (lambda x: then(x ** 0.5), F32, ["sqrt"]),
    (lambda x: then(x ** -0.5), F32, ["rsqrt"]),
    (lambda x: then(x ** 11), I32, ["mul", "mul", "mul", "mul", "mul"]),  # ((x^2)^2 x)^2 x
    (lambda x: then(x ** 3), BF16, ["mul", "mul"]),
    # never exact or never the same type
    (lambda x: then(x + 0), F32, ["add"]),          # -0.0 + 0 is +0.0
    (lambda x: then(x - (-0.0)), F32, ["sub"]),     # -0.0 - -0.0 is +0.0
    (lambda x: then(x.sub(0, alpha=-1)), F32, ["sub"]),
    (lambda x: then(x * 1.0), I32, ["mul"]),        # a float result
    (lambda x: then(x / 1), I32, ["true_divide"]),
    (lambda x: then(x * 1), BOOL, ["mul"]),         # an int64 result
    (lambda x: then(x ** 2), BOOL, ["pow"]),
    (lambda x: then(x ** 4), F32, ["pow"]),         # torch's pow, not products
    (lambda x: then(x ** 3), F16, ["pow"]),
    (lambda x: then(x ** 0.5), F16, ["pow"]),
    (lambda x: then(x ** 17), I32, ["pow"]),
    (lambda x: then(x ** 1.5), F32, ["pow"]),
    (lambda x: then(x * 2), F32, ["mul"]),
    (lambda x: then(-x), F32, ["neg"]),
    (lambda x: then(x.view(2, 3).t().reshape(6)), F32, ["view", "t", "view"]),  # the copy goes: values are logical
])
def test_simplify(fn, x, left):
    g = trace(fn, x)
    before = ops(g)
    optimize(g, [simplify.run, dce.run], verify=True)
    assert ops(g)[:-1] == left, f"{before} -> {ops(g)}"


@pytest.mark.parametrize("line, becomes", [
    ("alias(%x)", "x"), ("clone(%x)", "x"), ("view(%x, size=[3, 3])", "x"), ("view_as(%x, %y)", "x"),
    ("unflatten(%x, dim=1, sizes=[3])", "x"), ("squeeze(%x)", "x"), ("expand(%x, size=[3, 3])", "x"),
    ("expand_as(%x, %y)", "x"), ("broadcast_to(%x, size=[3, 3])", "x"), ("narrow(%x, dim=1, start=0, length=3)", "x"),
    ("slice(%x, dim=1, start=0, end=9)", "x"), ("copy(%y, %x)", "x"),
    # the same type, another map
    ("t(%x)", "0"), ("flip(%x, dims=[0])", "0"), ("as_strided(%x, size=[3, 3], stride=[1, 3])", "0"),
    ("copy(%y, %r)", "0"),
])
def test_simplify_drops_views_and_copies_to_the_same_type(line, becomes):
    g = graph_of(f"""
        graph(%x: f32[3, 3], %y: f32[3, 3], %r: f32[3]):
          %0 : f32[3, 3] = {line}
          %1 : f32[3, 3] = exp(%0)
          return %1
    """)
    inputs = [jt.arange(9.0).reshape(3, 3), jt.ones(3, 3), jt.tensor([-0.0, 1.0, float("nan")])]
    assert_runs_the_same(g, inputs)
    assert g.nodes[-1].args[0].name == becomes


def test_simplify_replaces_to_copy_to_its_own_type():
    g = graph_of("""
        graph(%x: f32[3]):
          %0 : f32[3] = _to_copy(%x, dtype=f32)
          %1 : f64[3] = _to_copy(%0, dtype=f64)
          %2 : f64[3] = _to_copy(%1, device=device('cpu'))
          %3 : f64[3] = exp(%2)
          return %3
    """)
    assert simplify.run(g) == 2
    assert ops(g) == ["_to_copy", "exp"] and g.nodes[0].args[0] is g.inputs[0]


def test_simplify_leaves_returned_values_fresh():
    """``return x * 1`` must not return the input itself, nor ``return y, y * 1`` one tensor twice."""
    def f(x):
        y = x.exp()
        return x * 1, -(-x), y, y * 1
    g = trace(f, jt.ones(3))
    assert simplify.run(g) == 0


@pytest.mark.parametrize("fn", [
    lambda x: x.clone().t(),
    lambda x: (x * 1).expand(2, 2, 3),
    lambda x: jt.zeros(3, 2).copy_(x.t()).t(),
    lambda x: (x * 1, (x * 1).view(6)),
], ids=["clone-then-view", "identity-then-expand", "copy-then-view", "view-of-returned"])
def test_simplify_leaves_returned_views_over_fresh_memory(fn):
    """A returned view's source was replaced by the input (``x.clone().t()`` returned ``x.t()``, and a
    compiled call a view of the caller's tensor: fuzz seed 1000160, a parameter's memory)."""
    x = jt.ones(2, 3)
    assert_runs_the_same(trace(fn, x), [x], passes=[simplify.run])
    f = jt.compile(fn)
    for out in tree_flatten(f(x))[0]:
        assert out._storage is not x._storage


@pytest.mark.parametrize("program", [
    lambda T, c0, x: (c0.ceil_(), c0.diag())[1],
    lambda T, c0, x: (x.add_(1), x.diag())[1],
    lambda T, c0, x: (x.mul_(2), x[0].clone())[1],
], ids=["captured ceil_ then diag", "input add_ then diag", "input mul_ then select's clone"])
def test_returned_copy_of_a_view_of_a_written_value_stays_a_copy_seed_7952461(program):
    """Fuzz seed 7952461: ``c0.ceil_(); return c0.diag()`` on a captured 1x1 tensor returned a view of ``c0``
    compiled (eager's ``diag`` of a matrix is a copy): simplify replaced the copy by the view of the value the
    call writes into ``c0``, which the call computes in ``c0``'s memory. The copy stays, and the output is
    memory of its own (a write into it leaves ``c0`` and ``x`` as they were), as eager's and torch's."""
    results = []
    for T, compiled in ((torch, False), (jt, False), (jt, True)):
        c0, x = T.tensor([[2]]), T.tensor([[1.5]])
        fn = jt.compile(lambda x: program(T, c0, x)) if compiled else lambda x: program(T, c0, x)
        for _ in range(2):  # the trace's call and a cached one
            out = fn(x)
            out.fill_(7)
            results.append((out.tolist(), c0.tolist(), x.tolist()))
        if compiled:
            assert "clone" in ops(fn.lower(x).optimized_graph)
    assert results[4:] == results[2:4] == results[:2]


def test_simplify_never_replaces_mutation_targets():
    def f(x, w):
        w.copy_(x * 1)
        x.mul_(1)
        return None
    g = trace(f, jt.ones(3), jt.ones(3))
    optimize(g, verify=True)
    assert str(g) == text("""
        graph(%x: f32[3], %w: f32[3]):
          %w <- %x
          return None
    """)


SPECIAL = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1.5, -2.0, 1e-40, 3e38]


def test_signed_zeros_nan_and_infinities_survive():
    def f(x):
        return [then(y) for y in (x + 0, x * 1, 1 * x, x - 0, x / 1, x ** 1, x ** 2, -(-x), x.clone())]
    for dtype in (jt.float16, jt.bfloat16, jt.float32, jt.float64):
        x = jt.tensor(SPECIAL[:6], dtype=dtype)
        expected = f(x)
        g = trace(f, x)
        optimize(g, verify=True)
        assert ops(g).count("mul") == 10 and len(g.nodes) == 11  # the uses; only x + 0 and x ** 2 (as x * x) stay
        got, _, _ = run(g, [x])
        for i, (gt, e) in enumerate(zip(got, expected)):
            assert_same_tensor(gt, e, f"{dtype} case {i}")
        plus_zero, times_one = to_numpy(got[0]).reshape(-1), to_numpy(got[1]).reshape(-1)
        assert not np.signbit(plus_zero[1]) and np.signbit(times_one[1])  # -0.0 + 0 is +0.0; -0.0 * 1 is -0.0
        assert np.isnan(plus_zero[2]) and np.isnan(times_one[2]) and times_one[3] == np.inf


def pow_samples(dtype):
    """Every value of the 16-bit floats; special and random values over the whole range of the others."""
    if dtype in (jt.float16, jt.bfloat16):
        storage_dtype = np.float16 if dtype == jt.float16 else ml_dtypes.bfloat16
        return jt.tensor(np.arange(2 ** 16, dtype=np.uint16).view(storage_dtype), dtype=dtype)
    if dtype.is_floating_point:
        rng = np.random.default_rng(0)
        values = np.concatenate([SPECIAL, np.negative(SPECIAL), rng.standard_normal(1000) * 10.0 ** rng.integers(-40, 40, 1000)])
        return jt.tensor(values, dtype=dtype)
    info = np.iinfo(str(dtype).removeprefix("jitorch."))
    return jt.tensor(np.linspace(info.min, info.max, 1001).astype(np.int64).astype(info.dtype), dtype=dtype)


POWER_CASES = [(e, d) for e, (dtypes, _) in POW_BY_OTHER_OPS.items() for d in sorted(dtypes, key=str)] + \
    [(e, d) for e in (0, 2, 3, 7, 16) for d in (jt.uint8, jt.int8, jt.int16, jt.int32, jt.int64)] + \
    [(0, d) for d in (jt.float16, jt.bfloat16, jt.float32, jt.float64)]


@pytest.mark.filterwarnings("ignore:overflow encountered in cast", "ignore:invalid value", "ignore:divide by zero")
@pytest.mark.parametrize("exponent, dtype", POWER_CASES, ids=str)
def test_power_by_other_ops_is_exact_in_eager_and_torchs(exponent, dtype):
    """``pow(x, n)`` is rewritten (no pow node is left) only where the ops it becomes give eager's bits,
    and eager's are torch's: signed zeros, infinities and NaN included."""
    x = pow_samples(dtype)
    g = trace(lambda t: t ** exponent, x)
    optimize(g, [simplify.run, dce.run], verify=True)
    assert "pow" not in ops(g), str(g)
    expected = x ** exponent
    assert_same_tensor(run(g, [x])[0][0], expected, f"{dtype} ** {exponent}")
    want = (torch.from_numpy(x.double().numpy()).to(getattr(torch, str(dtype).removeprefix("jitorch."))) ** exponent)
    got, want = expected.double().numpy(), want.double().numpy()
    # NaN where torch's is; other values and their signs equal (NaN's own sign bit is the library's)
    assert np.array_equal(np.isnan(got), np.isnan(want)), "torch's NaN"
    numbers = ~np.isnan(want)
    assert np.array_equal(np.signbit(got[numbers]), np.signbit(want[numbers])), "torch's signs"
    if exponent == 0.5 and dtype in (jt.float32, jt.float64):
        # torch's float sqrt is not correctly rounded (an ulp off, on about one value in six); jitorch's is
        tight = np.dtype(str(dtype).removeprefix("jitorch."))
        np.testing.assert_array_max_ulp(got[numbers].astype(tight), want[numbers].astype(tight), 1)
        assert np.array_equal(np.isinf(got), np.isinf(want)) and np.array_equal(got == 0, want == 0)
    else:
        assert np.array_equal(got[numbers], want[numbers]), "torch"


def test_a_cube_compiles_as_products_in_a_gelu():
    """GELU written with ``x ** 3`` compiled to a general pow, four times slower than with ``x * x * x``:
    now both compile to one kernel of the same ops, giving the same bits."""
    def gelu(x, cube):
        return 0.5 * x * (1 + (0.7978845608 * (x + 0.044715 * cube(x))).tanh())
    x = jt.tensor([0.0, -0.0, 1.5, -2.0, 3e38, float("inf"), -float("inf"), float("nan")])
    by_pow, by_products = (jt.compile(lambda t, c=cube: gelu(t, c)) for cube in (lambda t: t ** 3, lambda t: t * t * t))
    assert_same_tensor(by_pow(x), by_products(x), "gelu")
    assert by_pow.lower(x).kernels[0].ops == by_products.lower(x).kernels[0].ops
    assert "pow" not in by_pow.lower(x).kernels[0].ops


# The pass manager -----------------------------------------------------------------------------

def test_optimize_repeats_until_nothing_changes_and_logs(caplog):
    g = trace(lambda x: (x.exp() * 1 + x.exp() * 1 + jt.ones(3) * 2).exp(), jt.ones(3))
    with caplog.at_level(logging.INFO, logger="jitorch.passes"):
        assert optimize(g) is g
    assert str(g) == text("""
        graph(%x: f32[3]):
          %fold_6 : f32[3] = constant['fold_6']
          %0 : f32[3] = exp(%x)
          %4 : f32[3] = add(%0, %0)
          %7 : f32[3] = add(%4, %fold_6)
          %8 : f32[3] = exp(%7)
          return %8
    """)
    assert [r.getMessage() for r in caplog.records if r.name == "jitorch.passes"] == [
        "simplify: rewrote 2 nodes", "fold: folded 1 nodes into constants", "cse: merged 1 nodes",
        "dce: removed 1 nodes, constants and write-backs",
    ]


@pytest.mark.parametrize("counts, rounds", [([0], 1), ([2, 1, 0], 3), ([1] * 10, MAX_ROUNDS)])
def test_optimize_repeats_while_a_pass_rewrites_at_most_a_few_rounds(counts, rounds):
    counts = iter(counts)
    calls = []

    def counting(graph):
        calls.append(1)
        return next(counts)
    optimize(trace(lambda x: x.exp(), jt.ones(1)), [counting, dce.run])
    assert len(calls) == rounds


def broken(graph):
    """A pass that breaks the graph: its output no longer has its type."""
    graph.nodes[0].outputs[0].type = graph.inputs[0].type.__class__((7,), jt.float32, jt.device("cpu"))
    return 1


@pytest.mark.parametrize("env, verify, raises", [
    (None, None, False), ("1", None, True), ("0", None, False), (None, True, True), ("1", False, False),
])
def test_optimize_verifies_after_each_pass_in_debug_mode(monkeypatch, env, verify, raises):
    if env is None:
        monkeypatch.delenv("JITORCH_DEBUG", raising=False)
    else:
        monkeypatch.setenv("JITORCH_DEBUG", env)
    g = trace(lambda x: x.exp(), jt.ones(3))
    if raises:
        with pytest.raises(VerifyError, match=r"after broken: 1 rewrites: .*meta rule of exp gives f32\[3\]"):
            optimize(g, [broken], verify=verify)
    else:
        optimize(g, [broken], verify=verify)


# Random graphs --------------------------------------------------------------------------------

@given(graphs(runnable=True))
def test_random_graphs_optimise_to_the_same_results(case):
    graph, inputs = case
    assume(not any(node.op.name in VALUES_UNDEFINED for node in graph.nodes))
    assert_runs_the_same(graph, inputs)


DTYPES = [jt.float16, jt.float32, jt.float64, jt.int32, jt.int64]
UNARY = [
    lambda a: a * 1, lambda a: 1.0 * a, lambda a: a + 0, lambda a: 0 + a, lambda a: a - 0, lambda a: a - 0.0,
    lambda a: a - (-0.0), lambda a: a / 1, lambda a: a ** 1, lambda a: a ** 2, lambda a: a ** 2.0, lambda a: -a,
    lambda a: -(-a), lambda a: a.clone(), lambda a: a.to(jt.float64), lambda a: a.view(-1).view(a.shape),
    lambda a: a.expand(a.shape), lambda a: a.abs(), lambda a: a * 2,
    lambda a: a + jt.arange(a.shape[-1]) * 2, lambda a: a * jt.ones(a.shape[-1]).exp(),
    lambda a: a + jt.rand(a.shape[-1], generator=GENERATOR),
]
BINARY = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: jt.maximum(a, b), lambda a, b: jt.where(a > b, a, b)]


@st.composite
def programs(draw):
    """``(fn, inputs)``: a chain of ops that the passes rewrite (identities, duplicates, constants
    to fold, random draws), on inputs holding NaN, infinities and signed zeros, with some results
    returned (some twice, some inputs) and some written back into the inputs."""
    dtype = draw(st.sampled_from(DTYPES))
    values = np.array(draw(st.lists(st.sampled_from(SPECIAL), min_size=6, max_size=6))).reshape(2, 3)
    if not dtype.is_floating_point:
        values = np.clip(np.nan_to_num(values), -7, 7).astype(np.int64)
    inputs = [jt.tensor(values, dtype=dtype), jt.tensor(values[::-1].copy(), dtype=dtype)]
    steps = draw(st.lists(st.tuples(st.integers(0, len(UNARY) + len(BINARY) - 1), st.integers(0, 99),
                                    st.integers(0, 99)), min_size=1, max_size=8))
    returned = draw(st.lists(st.integers(0, 99), max_size=4))
    write_back = draw(st.booleans())

    def fn(x, y):
        seen = [x, y]
        for k, i, j in steps:
            a, b = seen[i % len(seen)], seen[j % len(seen)]
            seen.append(UNARY[k](a) if k < len(UNARY) else BINARY[k - len(UNARY)](a, b))
        if write_back:
            x.copy_(seen[-1])
        return tuple(seen[i % len(seen)] for i in returned)
    return fn, inputs


@given(programs())
def test_traced_programs_optimise_to_the_same_results(program):
    fn, inputs = program
    graph = trace(fn, *inputs)
    assert_runs_the_same(graph, inputs)


# Transposed products -------------------------------------------------------------------------------

@pytest.mark.parametrize("view", ["t(%p)", "transpose(%p, dim0=-1, dim1=0)", "permute(%p, dims=[1, 0])",
                                  "as_strided(%p, size=[5, 3], stride=[1, 5])"])
def test_transpose_computes_a_product_read_transposed_transposed(view):
    g = graph_of(f"""
        graph(%a: f32[3, 4], %b: f32[4, 5]):
          %p : f32[3, 5] = mm(%a, %b)
          %0 : f32[5, 3] = {view}
          %1 : f32[5, 3] = mul(%0, 2.0)
          return %1
    """)
    inputs = [jt.arange(12.0).reshape(3, 4), jt.arange(20.0).reshape(4, 5) - 7]
    assert_runs_the_same(g, inputs)
    assert ops(g) == ["t", "t", "mm", "mul"]
    assert g.nodes[2].args == (g.nodes[0].outputs[0], g.nodes[1].outputs[0])
    assert [n.args[0] for n in g.nodes[:2]] == [g.inputs[1], g.inputs[0]]


@pytest.mark.parametrize("source", [
    # the product has another reader: it would run twice
    """graph(%a: f32[3, 4], %b: f32[4, 5]):
         %p : f32[3, 5] = mm(%a, %b)
         %0 : f32[5, 3] = t(%p)
         %1 : f32[5, 3] = mul(%0, 2.0)
         %2 : f32[3, 5] = exp(%p)
         return (%1, %2)""",
    # the transpose is returned: eager's result is a view of the product's memory
    """graph(%a: f32[3, 4], %b: f32[4, 5]):
         %p : f32[3, 5] = mm(%a, %b)
         %0 : f32[5, 3] = t(%p)
         return %0""",
    # batched products keep their layout
    """graph(%a: f32[2, 3, 4], %b: f32[2, 4, 5]):
         %p : f32[2, 3, 5] = bmm(%a, %b)
         %0 : f32[2, 5, 3] = transpose(%p, dim0=1, dim1=2)
         %1 : f32[2, 5, 3] = mul(%0, 2.0)
         return %1""",
])
def test_transpose_leaves(source):
    g = graph_of(source)
    before = ops(g)
    assert transpose.run(g) == 0
    assert ops(g) == before


# Permutation chains ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fn, left", [
    (lambda x: x.t().t() * 2, []),
    (lambda x: x.transpose(0, 1).transpose(1, 0) * 2, []),
    (lambda x: x.transpose(-1, 0).t() * 2, []),
    (lambda x: x.t().permute(1, 0) * 2, []),
    (lambda x: x.unsqueeze(0).permute(2, 0, 1).permute(1, 2, 0).transpose(0, 0) * 2, ["unsqueeze"]),
    (lambda x: x.unsqueeze(0).permute(2, 0, 1).transpose(0, 1) * 2, ["unsqueeze", "permute"]),
    (lambda x: x.unsqueeze(0).transpose(0, 2).permute(2, 0, 1).permute(1, 2, 0) * 2, ["unsqueeze", "permute"]),
])
def test_simplify_reads_a_chain_of_permutations_as_one_permute_or_its_base(fn, left):
    x = jt.arange(6.0).reshape(2, 3)
    g = trace(fn, x)
    assert_runs_the_same(g, [x], passes=[simplify.run, dce.run])
    assert ops(g) == left + ["mul"]
    expected = fn(torch.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(interpret(g, [x])[0].numpy(), expected.numpy())
    if "permute" in left:  # one permute of unsqueeze(x) taking the dims the whole chain takes
        permute = g.nodes[1]
        assert permute.args[0] is g.nodes[0].outputs[0]
        assert permute.args[1] == {(1, 3, 2): (0, 2, 1), (3, 2, 1): (2, 1, 0)}[permute.outputs[0].type.shape]


def test_simplify_reads_a_linear_weight_gradient_as_the_product_it_is():
    """The backward of ``x @ w.t()`` traces ``w``'s gradient ``t(transpose(dy.t() @ x))``: the transpose pass
    made the inner transpose a transposed product and left the outer ``t``, a transposed view that its readers
    copied; it is the product itself."""
    g = graph_of("""
        graph(%dy: f32[8, 4], %x: f32[8, 3], %w: f32[4, 3]):
          %0 : f32[4, 8] = t(%dy)
          %1 : f32[4, 3] = mm(%0, %x)
          %2 : f32[3, 4] = transpose(%1, dim0=0, dim1=1)
          %3 : f32[4, 3] = t(%2)
          %4 : f32[4, 3] = mul(%3, 0.1)
          %5 : f32[4, 3] = sub(%w, %4, alpha=1)
          return %5
    """)
    rng = np.random.default_rng(0)
    inputs = [jt.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in ((8, 4), (8, 3), (4, 3))]
    assert_runs_the_same(g, inputs)
    assert ops(g) == ["t", "mm", "mul", "sub"]
    assert g.nodes[2].args[0] is g.nodes[1].outputs[0]


@pytest.mark.parametrize("fn", [lambda x: x.t().t(), lambda x: (x * 3).t().t(),
                                lambda x: (x * 3, (x * 3).t().t())],
                         ids=["of-an-input", "of-a-returned-value", "of-another-output"])
def test_simplify_keeps_a_returned_chain_of_permutations_a_view(fn):
    """A returned ``x.t().t()`` is a view of ``x``: returning ``x`` would hand the caller its own tensor; the
    chain becomes one ``permute`` over the same memory."""
    x = jt.arange(6.0).reshape(2, 3)
    g = trace(fn, x)
    assert_runs_the_same(g, [x], passes=[simplify.run, dce.run])
    assert ops(g).count("permute") == 1 and "t" not in ops(g)
    out = jt.compile(fn)(x)
    for got, expected in zip(tree_flatten(out)[0], tree_flatten(fn(torch.arange(6.0).reshape(2, 3)))[0]):
        assert got is not x
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_a_compiled_training_step_updates_linear_weights_with_their_products_untransposed():
    """A whole step (forward, backward, SGD) of Linear layers: each weight's gradient, ``t(transpose(dy.t() @
    x))`` as traced, is the product the update reads, not a transposed view of one."""
    def step(model, x):
        loss = model(x).square().mean()
        loss.backward()
        with jt.no_grad():
            for p in model.parameters():
                p.sub_(0.1 * p.grad)
                p.grad = None
        return loss
    jt.manual_seed(0)
    model = jt.nn.Sequential(jt.nn.Linear(6, 5), jt.nn.Tanh(), jt.nn.Linear(5, 3))
    eager = jt.nn.Sequential(jt.nn.Linear(6, 5), jt.nn.Tanh(), jt.nn.Linear(5, 3))
    eager.load_state_dict(model.state_dict())
    x = jt.randn(4, 6)
    compiled = jt.compile(step)
    graph = compiled.lower(model, x).executable.graph
    permuted = [n for n in graph.nodes if n.op.name in ("t", "transpose", "permute")]
    readers = {n.outputs[0]: [m.op.name for m in graph.nodes if n.outputs[0] in m.input_values()] for n in permuted}
    # what is left transposed is a product's operand (BLAS reads it through its flags): w.t(), dy.t(); no
    # product is read transposed
    assert len(permuted) == 4 and all(names == ["matmul"] for names in readers.values())
    assert not any(n.args[0].node is not None and n.args[0].node.op.name == "matmul" for n in permuted)
    for _ in range(2):
        np.testing.assert_allclose(compiled(model, x).item(), step(eager, x).item(), rtol=1e-6)
    for p, q in zip(model.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-6, atol=1e-7)
