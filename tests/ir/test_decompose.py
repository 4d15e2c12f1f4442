"""Decompositions (jitorch/ir/passes/decompose.py): reductions the code generator cannot lower,
rewritten into ops it can. Compiled results equal eager over shapes, dims, keepdim, corrections,
orders and dtypes (NaN and infinities included), the compiled graph runs no eager step for the op
any more, nodes whose decomposition does not apply stay, and gradients through compiled training
steps with BatchNorm equal eager's."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jitorch as jt
from jitorch import nn
from jitorch.jit.executor import EagerStep
from jitorch.codegen.lowering import kind_of
from jitorch.export import Dim
from jitorch.ir import interpret, parse, print_graph, verify
from jitorch.ir.passes import decompose, optimize
from jitorch.jit import trace
from jitorch.runtime.pytree import tree_flatten
from tests.codegen.test_compiled import assert_matches
from tests.support import classifier_step, random_array, shapes, to_numpy

# name -> (the op as traced code: fn(x, dim, keepdim, extra), strategy of ``extra``): a correction, a
# dtype or an order
CASES = {
    "var.correction": (lambda x, dim, keepdim, c: x.var(dim, correction=c, keepdim=keepdim),
                       st.sampled_from([None, 0, 1, 2, 0.5, 7])),
    "std.correction": (lambda x, dim, keepdim, c: x.std(dim, correction=c, keepdim=keepdim),
                       st.sampled_from([None, 0, 1, 3])),
    "nanmean": (lambda x, dim, keepdim, dtype: x.nanmean(dim, keepdim=keepdim, dtype=dtype),
                st.sampled_from([None, jt.float64])),
    "logsumexp": (lambda x, dim, keepdim, _: x.logsumexp(dim if dim is not None else [], keepdim=keepdim),
                  st.none()),
    "norm": (lambda x, dim, keepdim, p: x.norm(p, dim, keepdim),
             st.sampled_from([2, 1, 0, 3, 0.5, -1, math.inf, -math.inf, "fro"])),
}
FLOATS = [jt.float32, jt.float64, jt.float16, jt.bfloat16]
SPECIALS = np.array([np.nan, np.inf, -np.inf])


@st.composite
def cases(draw, names=tuple(CASES)):
    """(op name, fn of one tensor, input tensor, dim): random shapes with empty and size-1 dims, dims
    given as None, one int or a list (negative ones too), NaN and infinities now and then."""
    name = draw(st.sampled_from(names))
    op, extras = CASES[name]
    # norms of negative or infinite order refuse empty reductions, as eager does
    shape = draw(shapes(max_dims=3, min_side=1 if name == "norm" else 0))
    span = max(len(shape), 1)  # a 0-d tensor takes dim 0 or -1
    dim = draw(st.none() | st.lists(st.integers(-span, span - 1), unique_by=lambda d: d % span, max_size=span))
    if dim is not None and len(dim) == 1 and draw(st.booleans()):
        dim = dim[0]
    keepdim, extra = draw(st.booleans()), draw(extras)
    dtype = draw(st.sampled_from(FLOATS + ([jt.int64] if name == "logsumexp" else [])))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    a = random_array(shape, dtype, rng)
    if dtype.is_floating_point and a.size and draw(st.booleans()):
        special = rng.random(a.size) < 0.2
        a.reshape(-1)[special] = rng.choice(SPECIALS, size=special.sum())
    return name, lambda x: op(x, dim, keepdim, extra), jt.tensor(a, dtype=dtype), dim


def matches(got, expected, what=""):
    """Compiled ``got`` equals eager's ``expected`` leaf by leaf, to the compiled tests' tolerances."""
    assert_matches(tree_flatten(got)[0], tree_flatten(expected)[0], what)


def eager_ops(steps):
    return [n.op.name for s in steps if isinstance(s, EagerStep) for n in s.nodes]


def reduces_nothing(x, dim):
    """Whether a reduction of ``x`` over ``dim`` reduces each result element over no elements."""
    if dim is None or dim == [] or x.ndim == 0:
        return x.numel() == 0
    return math.prod(x.shape[d] for d in ([dim] if isinstance(dim, int) else dim)) == 0


@settings(max_examples=60)
@given(case=cases())
def test_compiled_decomposition_equals_eager_and_runs_no_eager_step(case):
    name, fn, x, dim = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degrees of freedom <= 0: eager warns, and gives inf or NaN
        expected = fn(x)
        compiled = jt.compile(fn)
        got = compiled(x)
        steps = compiled.lower(x).steps
    matches(got, expected, name)
    # logsumexp over no elements keeps eager's kernel (amax, its first step, has no identity)
    stays = name == "logsumexp" and reduces_nothing(x, dim)
    assert (name in eager_ops(steps)) == stays, [type(s).__name__ for s in steps]


@settings(max_examples=150)
@given(case=cases())
def test_decomposed_graph_verifies_lowers_and_interprets_as_eager(case):
    """The pass alone, on many more cases than compiling allows: the graph it leaves verifies,
    holds only nodes that lower, and the reference interpreter runs it to eager's values."""
    name, fn, x, dim = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = fn(x)
        graph = trace(fn, x)
        applies = not (name == "logsumexp" and reduces_nothing(x, dim))
        assert decompose.run(graph) == applies
        verify(graph)
        assert all(kind_of(n) != "external" for n in graph.nodes) == applies
        outputs, _ = interpret(graph, [x])
    matches(outputs, expected, name)


@given(case=cases())
def test_the_interpreter_backend_runs_the_op_itself(case):
    name, fn, x, dim = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = jt.compile(fn, backend="interpreter")
        got, expected = compiled(x), fn(x)
        assert compiled.lower(x).steps == []
        assert name in [n.op.name for n in compiled.lower(x).graph.nodes]
    assert got.dtype is expected.dtype
    np.testing.assert_array_equal(to_numpy(got), to_numpy(expected))


def test_var_mean_computes_the_mean_once():
    def f(x):
        return jt.var_mean(x, [0, 2], correction=1), jt.std_mean(x, 1, keepdim=True)

    x = jt.randn(4, 3, 5)
    low = jt.compile(f).lower(x)
    ops = [n.op.name for n in low.optimized_graph.nodes]
    assert ops.count("mean") == 2, low.optimized_graph  # one per (dims, keepdim), shared with its variance
    assert not eager_ops(low.steps)
    matches(jt.compile(f)(x), f(x))


@pytest.mark.parametrize("fn, x", [
    (lambda x: x.norm("nuc"), jt.randn(3, 4)),        # a matrix norm: a singular value decomposition
    (lambda x: x.logsumexp(1), jt.randn(3, 0)),       # over no elements
])
def test_nodes_whose_decomposition_does_not_apply_stay(fn, x):
    graph = trace(fn, x)
    before = str(graph)
    assert decompose.run(graph) == 0
    assert str(graph) == before
    compiled = jt.compile(fn)
    matches(compiled(x), fn(x))
    assert eager_ops(compiled.lower(x).steps) == [graph.nodes[0].op.name]


def test_a_returned_and_reused_node_is_replaced_everywhere():
    def f(x):
        v = x.var(1)
        return v, v * 2, x.logsumexp([0, 1]) + v.sum()

    x = jt.randn(5, 6)
    graph = trace(f, x)
    assert decompose.run(graph) == 2
    optimize(graph, verify=True)
    assert parse(str(graph)) == graph  # the decomposed graph prints and parses back
    outputs, _ = interpret(graph, [x])
    matches(outputs, f(x))


def test_exported_programs_decompose_when_compiled_at_each_size(tmp_path):
    def f(x):
        return x.var(0), x.std(1), x.logsumexp([0])

    ep = jt.export(f, (jt.randn(5, 4),), dynamic_shapes={"x": {0: Dim("batch", min=2, max=16)}})
    assert "var.correction" in str(ep.graph)  # the program keeps the traced op; compiling decomposes it
    ep.save(tmp_path / "v.jtx")
    loaded = jt.export.load(tmp_path / "v.jtx")
    for n in (5, 9):
        x = jt.randn(n, 4)
        matches(loaded(x), f(x))
        assert not eager_ops(loaded.specialise({"batch": n}).steps)


def bn_net():
    jt.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(), nn.Flatten(),
                         nn.Linear(3 * 6 * 6, 3))


def bn_batch():
    g = jt.Generator().manual_seed(1)
    return jt.randn(6, 1, 6, 6, generator=g), jt.tensor([0, 1, 2, 0, 1, 2])


def close(a, b, tol=2e-5):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def test_compiled_training_step_with_batch_norm_equals_eager():
    eager_model, model = bn_net(), bn_net()
    eager_opt = jt.optim.SGD(eager_model.parameters(), lr=0.05, momentum=0.9)
    opt = jt.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    eager, compiled = classifier_step(eager_model, eager_opt), jt.compile(classifier_step(model, opt))
    x, y = bn_batch()
    for _ in range(4):
        close(compiled(x, y), eager(x, y))
        for p, q in zip(eager_model.parameters(), model.parameters()):
            close(q, p)
            close(q.grad, p.grad)
        for b_eager, b in zip(eager_model.buffers(), model.buffers()):
            close(b, b_eager)
    assert not {"var.correction", "std.correction"} & set(eager_ops(compiled.lower(x, y).steps))


def test_compiled_module_backward_through_decomposed_reductions_equals_eager():
    """`jitorch.compile(module)`: the compiled forward decomposes; the backward, a compiled graph of
    the ops' own derivative rules, gives eager's gradients."""
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = bn_net()

        def forward(self, x):
            z = self.net(x)
            return z.logsumexp(1).mean() + z.norm() + z.std(0).sum() + z.nanmean()

    eager, model = Head(), Head()
    compiled = jt.compile(model)
    x, _ = bn_batch()
    for _ in range(2):
        expected = eager(x)
        expected.backward()
        out = compiled(x)
        close(out, expected)
        out.backward()
        for p, q in zip(eager.parameters(), model.parameters()):
            close(q.grad, p.grad)
    assert not set(CASES) & set(eager_ops(compiled.lower(x).steps))
    eager.eval()
    model.eval()
    close(compiled(x), eager(x))


def test_a_node_like_one_decomposed_before_takes_a_copy_of_its_nodes(monkeypatch):
    """Nodes of one op, literals and argument types decompose once: the others copy the nodes recorded
    (`decompose._templates`), giving the graph the trace gives; another type or literal traces anew."""
    def f(x, y, z):
        return x.var(dim=1), y.var(dim=1), z.var(dim=1), x.var(dim=1, correction=0), (x * y).var(dim=1)

    args = (jt.randn(4, 8), jt.randn(4, 8), jt.randn(4, 8, dtype=jt.float64))
    traced = []
    trace_one = decompose._traced
    monkeypatch.setattr(decompose, "_traced", lambda *a: traced.append(a[1].op.name) or trace_one(*a))
    monkeypatch.setattr(decompose, "_templates", {})
    plain = trace(f, *args)
    monkeypatch.setattr(decompose, "_template_key", lambda node: (None, []))  # every node traced
    assert decompose.run(plain) == 5 and len(traced) == 5
    monkeypatch.undo()
    monkeypatch.setattr(decompose, "_traced", lambda *a: traced.append(a[1].op.name) or trace_one(*a))
    monkeypatch.setattr(decompose, "_templates", {})
    traced.clear()
    copied = trace(f, *args)
    assert decompose.run(copied) == 5
    assert len(traced) == 3  # float32 correction 1 (x, y and x * y), float64, correction 0
    assert print_graph(copied, canonical=True) == print_graph(plain, canonical=True)
    verify(copied)
    got, _ = interpret(copied, list(args))
    for g, want in zip(got, f(*args)):
        np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=1e-5)


@pytest.mark.parametrize("correction", [-1, -2.5, 0, 1])
def test_a_variance_over_no_elements_is_nan_whatever_the_correction(correction):
    """Fuzz seed 7400138: var and std of no elements with a negative correction gave 0 (the sum of no
    squared deviations over ``N - correction`` > 0) eagerly and compiled; torch's is NaN for any correction.
    The compiled call decomposes the reductions (no eager step) and gives torch's values too."""
    import torch

    def f(x, T=jt):
        return (x.var(correction=correction), x.std(0, correction=correction), x.var(1, correction=correction),
                T.var_mean(x, 0, correction=correction)[0])

    x = jt.zeros(0, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = [t.tolist() for t in f(torch.zeros(0, 3), torch)]
        eager = f(x)
        low = jt.compile(f).lower(x)
        compiled = jt.compile(f)(x)
    assert not eager_ops(low.steps)
    assert math.isnan(want[0]) and want[2] == []
    for got in (eager, compiled):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g.tolist(), float), np.asarray(w, float))
