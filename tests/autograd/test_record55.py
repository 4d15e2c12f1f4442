"""The recording shortcut (session 55): `engine._fast_recorder`'s generated functions, one per op and pattern of
tensor arguments, and the pointwise flat path that records `x * y` itself. Each node they record must be the node
the general path (`engine.record` given ``versions``) records for the same call, field by field, and keep its
semantics: saved-tensor version checks, saved-tensor hooks, anomaly traces, no_grad/inference_mode, double backward.
Also the backward's shortcuts: a full reduction's gradient expanded at once, the layout memo of pointwise results."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.autograd import engine
from jitorch.autograd.rule import Unsaved
from jitorch.ops import registry


def _pair(shape=(3, 4), seed=0):
    data = np.random.default_rng(seed).standard_normal((2, *shape)).astype(np.float32)
    return data[0], data[1] + 2  # (the second positive: a divisor, a log's argument)


# (op name, arguments in schema order built from two tensors a, b and numbers): the calls recorded both ways
CALLS = {
    "mul": lambda a, b: [a, b],
    "add": lambda a, b: [a, b, 2],
    "sub": lambda a, b: [a, b, 1],
    "div": lambda a, b: [a, b, None],
    "relu": lambda a, b: [a],
    "exp": lambda a, b: [b],
    "log": lambda a, b: [b],
    "tanh": lambda a, b: [a],
    "sum": lambda a, b: [a, None, False, None],
    "mm": lambda a, b: [a, b.T],
    "atan2": lambda a, b: [a, b],
    "where.self": lambda a, b: [a > 0, a, b],
}


def _node_fields(node, result):
    """What a node holds, comparable between two recordings of the same call (tensors by identity, its own
    result as "result")."""
    def part(v):
        if isinstance(v, Unsaved):
            return ("unsaved", v.shape, v._stride, v._offset, v.dtype, v.requires_grad, v.what)
        return "result" if v is result else id(v)
    return (type(node), node.name(), node.next_functions, node.input_specs, node.saving, node.packed,
            [(part(t), v) for t, v in node.versions], [part(v) for v in node.args], part(node.out))


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("grads", [(True, False), (False, True), (True, True)])
def test_the_shortcut_records_the_general_paths_node(name, grads):
    op = registry.OPS[name]
    a, b = _pair()
    x, y = jt.tensor(a, requires_grad=grads[0]), jt.tensor(b, requires_grad=grads[1])
    with jt.no_grad():
        fast_result, general_result = (registry.call(op, CALLS[name](x, y)) for _ in range(2))
    args = CALLS[name](x, y)
    engine.record(op, list(args), fast_result)
    engine.record(op, list(args), general_result, versions={})  # (given versions: the general path)
    assert engine._FAST_RECORDERS[op] is not None
    if fast_result.grad_fn is None:  # (neither input the rule differentiates requires grad: no node either way)
        assert general_result.grad_fn is None
        return
    fast, general = fast_result.grad_fn, general_result.grad_fn
    assert _node_fields(fast, fast_result) == _node_fields(general, general_result)
    assert fast_result._requires_grad and fast_result._output_nr == 0
    seed = jt.tensor(np.linspace(-1, 1, fast_result.numel()).astype(np.float32).reshape(fast_result.shape))
    got = jt.autograd.grad(fast_result, [t for t in (x, y) if t.requires_grad], seed, allow_unused=True)
    expected = jt.autograd.grad(general_result, [t for t in (x, y) if t.requires_grad], seed, allow_unused=True)
    for g, e in zip(got, expected):
        assert (g is None) == (e is None)
        if g is not None:
            np.testing.assert_array_equal(g.numpy(), e.numpy())


def test_a_product_records_through_the_flat_path_with_torchs_saved_tensors():
    """``x * y`` with x requiring grad saves y alone (torch's MulBackward0 saves ``other`` for ``self``'s
    gradient): a write into y fails the backward, a write into x's producer's output does not, as in torch."""
    for T in (jt, torch):
        x = T.tensor([1.0, 2.0], requires_grad=True)
        y = T.tensor([3.0, 4.0])
        a = x * 1
        z = a * y
        assert z.grad_fn.name() == "MulBackward0"
        a.add_(1)  # not read by z's node
        z.sum().backward(retain_graph=True)
        np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])
        y.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.sum().backward()
    node = (jt.tensor([1.0], requires_grad=True) * jt.tensor([2.0])).grad_fn
    assert [type(v) for v in node.args] == [Unsaved, jt.Tensor] and isinstance(node.out, Unsaved)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_the_flat_path_records_nothing_without_grad_mode(mode):
    x = jt.ones(3, requires_grad=True)
    with getattr(jt, mode)():
        for r in (x * x, x + x, jt.relu(x), x.exp()):
            assert r.grad_fn is None and not r.requires_grad


def test_saved_tensor_hooks_see_what_torchs_see():
    """Under saved_tensors_hooks a shortcut-recorded node packs what it saves, as torch's node does."""
    counts = []
    for T in (jt, torch):
        packed = []
        x = T.tensor([1.0, 2.0], requires_grad=True)
        y = T.tensor([3.0, 4.0], requires_grad=True)
        with T.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
            z = (x * y).exp()
        z.sum().backward()
        counts.append(len(packed))
        np.testing.assert_allclose(x.grad.numpy(), (y * z).detach().numpy(), rtol=1e-6)
    assert counts[0] == counts[1] == 3  # (x and y for the product, the result for exp)


def test_an_anomaly_trace_ends_where_the_general_paths_ends():
    """At `record`'s caller, as the general path's trace (`forward_trace`): no frame of the engine's own."""
    x = jt.tensor([1.0, -1.0], requires_grad=True)
    y = jt.tensor([2.0, 3.0])
    op = registry.OPS["mul"]
    with jt.autograd.detect_anomaly(check_nan=False):
        z = x * y  # the line in the trace
        with jt.no_grad():
            fast, general = x * y, x * y
        engine.record(op, [x, y], fast)
        engine.record(op, [x, y], general, versions={})
    # (the flat path calls the op's recorder itself: its trace ends at the caller's line, as torch's does)
    assert "the line in the trace" in z.grad_fn.trace.strip().splitlines()[-1]
    fast_lines, general_lines = (r.grad_fn.trace.strip().splitlines() for r in (fast, general))
    assert fast_lines[:-2] == general_lines[:-2] and "engine.record(op, [x, y], fast)" in fast_lines[-1]


def test_double_backward_through_shortcut_nodes_as_torch():
    a, b = _pair((5,), seed=1)
    grads = []
    for T in (jt, torch):
        x, y = T.tensor(a, requires_grad=True), T.tensor(b, requires_grad=True)
        g, = T.autograd.grad((x * y * x).relu().sum(), x, create_graph=True)
        (g * g).sum().backward()
        grads.append((g.detach().numpy(), x.grad.numpy(), y.grad.numpy()))
    for mine, theirs in zip(*grads):
        np.testing.assert_allclose(mine, theirs, rtol=1e-6)


@pytest.mark.parametrize("shape", [(), (1,), (3, 4), (2, 1, 3)])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_a_full_reductions_gradient_is_torchs(shape, reduction):
    """A 0-d gradient expands to the input at once (no unsqueezes first): torch's values and layout, with one
    ExpandBackward0 node where the backward records."""
    data = np.arange(1, 1 + int(np.prod(shape)), dtype=np.float32).reshape(shape)
    results = []
    for T in (jt, torch):
        x = T.tensor(data, requires_grad=True)
        g, = T.autograd.grad(getattr(x * x, reduction)(), x, create_graph=True)
        results.append(g)
        g.sum().backward()
        results.append(x.grad)
    for mine, theirs in zip(results[:2], results[2:]):
        np.testing.assert_allclose(mine.detach().numpy(), theirs.detach().numpy(), rtol=1e-6)
        assert mine.stride() == theirs.stride()


@pytest.mark.parametrize("layout", ["expanded", "transposed", "row"])
def test_pointwise_layouts_are_torchs_on_every_call(layout):
    """`_in_torch_order` remembers the strides per layout: a second call (remembered) gives what the first
    (computed) gave, torch's."""
    a, b = _pair((4, 3), seed=2)
    make = {"expanded": lambda T, t: T.tensor(1.5).expand(4, 3),
            "transposed": lambda T, t: T.tensor(np.ascontiguousarray(a.T)).T,
            "row": lambda T, t: T.tensor(a[0]).expand(4, 3)}[layout]
    for _ in range(2):
        strides = []
        for T in (jt, torch):
            y = T.tensor(b)
            strides.append(((make(T, y) * y).stride(), (y * make(T, y)).stride(),
                            (make(T, y) * make(T, y)).stride()))
        assert strides[0] == strides[1]


def test_the_flat_path_skips_only_an_identity_conversion():
    """The flat path records with the operands and the op's defaults as they are, not converted: for every op it
    serves, conversion leaves two float tensors and the defaults as they are."""
    x, y = jt.ones(3), jt.ones(3)
    served = [op for op in set(registry.OPS.values()) if op.fast_pair is not None or op.fast_one is not None]
    assert len(served) > 50
    for op in served:
        n = 2 if op.fast_pair is not None else 1
        args = [x, y][:n] + [a.default for a in op.schema.args[n:]]
        converted = op.convert(list(args))
        assert all(c is v for c, v in zip(converted, args)), op.name


@pytest.mark.parametrize("seed_kind", ["contiguous", "broadcast", "transposed"])
def test_relus_backward_shortcut_gives_the_ops_bits_and_torchs(seed_kind):
    """`_relu_backward`'s NumPy selection (plain tensors, a backward that records nothing) against the ops it
    stands for (``where(y <= 0, 0, g)``) and torch's threshold_backward: NaN and infinite gradients, a NaN and
    zeros of both signs in the input."""
    from jitorch.autograd.rules.elementwise import _relu_backward
    data = np.array([[1.0, -1.0, 0.0, -0.0], [np.nan, 2.0, -3.0, 4.0], [5.0, -6.0, 7.0, 0.5]], np.float32)
    seed = {"contiguous": np.array([[np.inf, 1.0, -2.0, np.nan], [1.0, -np.inf, np.nan, -0.0], [3.0, 4.0, 5.0, 6.0]],
                                   np.float32),
            "broadcast": np.float32(-0.0), "transposed": np.arange(12, dtype=np.float32).reshape(4, 3)}[seed_kind]
    def jt_seed():
        if seed_kind == "broadcast":
            return jt.tensor(seed).expand(3, 4)
        return jt.tensor(seed).T if seed_kind == "transposed" else jt.tensor(seed)
    x = jt.tensor(data, requires_grad=True)
    y = jt.relu(x)
    y.backward(jt_seed())
    with jt.no_grad():
        shortcut = _relu_backward(jt_seed(), y.detach())
        ops = jt.where(y.detach() <= 0, 0, jt_seed())
    bits = lambda t: np.ascontiguousarray(t.numpy()).view(np.uint32)
    np.testing.assert_array_equal(bits(shortcut), bits(ops))
    np.testing.assert_array_equal(bits(x.grad), bits(ops))
    assert shortcut.stride() == ops.stride() == x.grad.stride()
    tx = torch.tensor(data, requires_grad=True)
    torch_seed = torch.tensor(seed).expand(3, 4) if seed_kind == "broadcast" else (
        torch.tensor(seed).T if seed_kind == "transposed" else torch.tensor(seed))
    torch.relu(tx).backward(torch_seed)
    np.testing.assert_array_equal(bits(x.grad), tx.grad.numpy().view(np.uint32))


def test_a_rule_replaced_after_its_recorder_was_built_is_the_one_that_runs(monkeypatch):
    """The recorder and the backward's rule lookup are built once per op, but follow a replaced rule (a
    monkeypatch): found when test_saved_tensors.py's patched mul ran after a recorded ``x * y``."""
    x, y = jt.ones(3, requires_grad=True), jt.full((3,), 2.0)
    (x * y).sum().backward()  # (mul's recorder and its rule's lookup, built)
    rule = registry.OPS["mul"].pieces["derivative"]
    backward = lambda g, a, out: {"self": g * 10}  # noqa: E731
    backward.saves = lambda needed: {"self", "other"}
    backward.differentiates = frozenset({"self", "other"})
    monkeypatch.setitem(registry.OPS["mul"].pieces, "derivative", type(rule)("mul", backward))
    x.grad = None
    z = x * y
    assert [type(v) for v in z.grad_fn.args] == [jt.Tensor, jt.Tensor]  # (both saved, as the new rule says)
    z.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [10.0, 10.0, 10.0])
