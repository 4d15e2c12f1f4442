"""torch.autograd.graph as torch's: saved-tensor hooks (pack at save, unpack at backward, nesting, save_on_cpu,
disabling, custom Functions, double backward, compiled functions), register_multi_grad_hook, Node,
GradientEdge, get_gradient_edge and increment_version."""

import numpy as np
import pytest
import torch

import jitorch as jt


def _program(lib, x, w):
    h = (x @ w).tanh()
    return (h * h.exp()).sigmoid().sum() + x.pow(2).mean() + lib.nn.functional.relu(x).sum() + x.softmax(1).log().sum()


def _inputs(lib):
    rng = np.random.default_rng(0)
    x = lib.tensor(rng.standard_normal((3, 4)), dtype=lib.float64, requires_grad=True)
    w = lib.tensor(rng.standard_normal((4, 2)), dtype=lib.float64, requires_grad=True)
    return x, w


def _run_with_hooks(lib, make_hooks=None):
    """The program's gradients and the hook log ('p' per pack, 'u' per unpack) under saved_tensors_hooks."""
    log = []

    def pack(t):
        log.append("p")
        return t.clone()

    def unpack(t):
        log.append("u")
        return t
    x, w = _inputs(lib)
    with lib.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = _program(lib, x, w)
    packed = len(log)
    y.backward()
    return x.grad.numpy(), w.grad.numpy(), packed, log


def test_saved_tensors_hooks_pack_what_torch_saves_and_unpack_it_in_backward():
    gx, gw, packed, log = _run_with_hooks(jt)
    tx, tw, tpacked, tlog = _run_with_hooks(torch)
    assert packed == tpacked == 11
    assert log == tlog  # every pack during the forward, every unpack during the backward
    np.testing.assert_allclose(gx, tx, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gw, tw, rtol=1e-12, atol=1e-14)


def test_saved_tensors_hooks_apply_only_while_open_and_innermost_pair_wins():
    for lib in (jt, torch):
        log = []
        x = lib.tensor([0.5, 1.5], dtype=lib.float64, requires_grad=True)

        def pair(tag):
            return (lambda t: (log.append("pack " + tag), t)[1]), (lambda t: (log.append("unpack " + tag), t)[1])
        with lib.autograd.graph.saved_tensors_hooks(*pair("outer")):
            a = x.exp()
            with lib.autograd.graph.saved_tensors_hooks(*pair("inner")):
                b = a.sin()
            c = b * 3.0
        d = c.cos()  # saved outside any hooks
        (d.sum()).backward()
        if lib is jt:
            got, got_grad = log, x.grad.numpy()
        else:
            want, want_grad = log, x.grad.numpy()
    assert got == want == ["pack outer", "pack inner", "unpack inner", "unpack outer"]
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-13)


def test_retain_graph_unpacks_again_on_each_backward():
    calls = []
    x = jt.tensor([1.0, 2.0], dtype=jt.float64, requires_grad=True)
    with jt.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: (calls.append(1), t)[1]):
        y = x.exp().sum()
    y.backward(retain_graph=True)
    y.backward()
    assert len(calls) == 2
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp([1.0, 2.0]), rtol=1e-14)


def test_double_backward_through_unpacked_tensors_reaches_their_history_as_torch():
    results = []
    for lib in (jt, torch):
        x = lib.tensor([0.3, -0.7, 1.1], dtype=lib.float64, requires_grad=True)
        with lib.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t):
            y = (x.sin() * x.exp()).sum()
        (g,) = lib.autograd.grad(y, x, create_graph=True)
        (gg,) = lib.autograd.grad(g.sum(), x)
        results.append((g.detach().numpy(), gg.numpy()))
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-13)


def test_custom_function_save_for_backward_goes_through_the_hooks():
    class Cube(jt.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x * x * g
    log = []
    x = jt.tensor([1.0, 2.0], dtype=jt.float64, requires_grad=True)
    with jt.autograd.graph.saved_tensors_hooks(lambda t: (log.append("p"), t.clone())[1],
                                               lambda t: (log.append("u"), t)[1]):
        y = Cube.apply(x)
    y.sum().backward()
    assert log == ["p", "u"]
    assert x.grad.tolist() == [3.0, 12.0]


def test_save_on_cpu_gives_torch_gradients_with_and_without_pinned_memory():
    for pin in (False, True):
        grads = []
        for lib in (jt, torch):
            x, w = _inputs(lib)
            with lib.autograd.graph.save_on_cpu(pin_memory=pin):
                y = _program(lib, x, w)
            y.backward()
            grads.append((x.grad.numpy(), w.grad.numpy()))
        for got, want in zip(*grads):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_hook_errors_as_torch():
    x = jt.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="A saved tensor pack hook is modifying its input in place"):
        with jt.autograd.graph.saved_tensors_hooks(lambda t: t.add_(1), lambda t: t):
            (x * 2).exp()
    with jt.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: 3):
        y = x.exp()
    with pytest.raises(TypeError, match="unpack_hook expected to be a Tensor but got result of type int"):
        y.sum().backward()


def test_disable_saved_tensors_hooks_raises_the_message_and_restores_the_previous_one():
    with jt.autograd.graph.disable_saved_tensors_hooks("outer off"):
        with jt.autograd.graph.disable_saved_tensors_hooks("inner off"):
            with pytest.raises(RuntimeError, match="^inner off$"):
                with jt.autograd.graph.save_on_cpu():
                    pass
        with pytest.raises(RuntimeError, match="^outer off$"):
            with jt.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                pass
    with jt.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        pass  # enabled again


def test_a_compiled_function_under_saved_tensors_hooks_runs_eagerly_through_them():
    """A graph keeps its saved values inside it: under hooks the call runs eagerly, so every saved tensor
    is packed, and the next call without hooks uses the compiled graph again."""
    w = jt.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=jt.float64, requires_grad=True)

    def step(x):
        w.grad = None
        loss = ((x @ w).tanh() * x.sum()).exp().sum()
        loss.backward()
        return loss, w.grad
    x = jt.tensor([[1.0, 0.5], [-0.5, 0.2]], dtype=jt.float64)
    want_loss, want_grad = (t.detach().numpy().copy() for t in step(x))
    eager_log = []
    with jt.autograd.graph.saved_tensors_hooks(lambda t: (eager_log.append(1), t)[1], lambda t: t):
        step(x)
    fn = jt.compile(step, fullgraph=True)
    fn(x)
    [entry] = fn.cache.values()
    assert entry.graph is not None and entry.calls == 1  # compiled outside hooks
    log = []
    with jt.autograd.graph.saved_tensors_hooks(lambda t: (log.append(1), t)[1], lambda t: t):
        loss, grad = fn(x)
    assert len(log) == len(eager_log) > 0 and entry.calls == 1  # the eager path ran, through the hooks
    np.testing.assert_allclose(loss.detach().numpy(), want_loss, rtol=1e-14)
    np.testing.assert_allclose(grad.numpy(), want_grad, rtol=1e-14)
    fn(x)
    assert entry.calls == 2


def test_a_compiled_differentiable_call_under_hooks_packs_its_saved_tensors():
    fn = jt.compile(lambda a: (a.sin() * a).sum())
    x = jt.tensor([0.1, 0.2, 0.3], dtype=jt.float64, requires_grad=True)
    fn(x).backward()
    want = x.grad.numpy().copy()
    x.grad = None
    log = []
    with jt.autograd.graph.saved_tensors_hooks(lambda t: (log.append(1), t)[1], lambda t: t):
        y = fn(x)
    y.backward()
    assert len(log) == 3  # sin's input, mul's two
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-15)


def _multi_hook_calls(lib, mode):
    a = lib.tensor([[0.1, 0.2], [0.3, 0.4]], requires_grad=True)
    b = lib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    c, d = a * b, a * b
    calls = []
    if mode == "all":
        handle = lib.autograd.graph.register_multi_grad_hook(
            (a, b, c, d), lambda grads: calls.append([g is not None for g in grads]))
    else:
        handle = lib.autograd.graph.register_multi_grad_hook(
            (a, b, c, d), lambda g: calls.append(g.tolist()), mode="any")
    c.sum().backward(retain_graph=True)
    c.sum().backward(inputs=(a,), retain_graph=True)
    (c + d).sum().backward(inputs=(b,), retain_graph=True)
    handle.remove()
    c.sum().backward(retain_graph=True)
    return calls


@pytest.mark.parametrize("mode", ["all", "any"])
def test_register_multi_grad_hook_as_torch(mode):
    assert _multi_hook_calls(jt, mode) == _multi_hook_calls(torch, mode)
    with pytest.raises(ValueError, match="Expects mode to be one of"):
        jt.autograd.graph.register_multi_grad_hook((), print, mode="some")


def test_nodes_edges_and_versions_as_torch():
    x = jt.tensor([1.0, 2.0], dtype=jt.float64, requires_grad=True)
    y = x.exp()
    g = jt.autograd.graph
    assert isinstance(y.grad_fn, g.Node) and not isinstance(x, g.Node)
    edge = g.get_gradient_edge(x)
    assert isinstance(edge.node, g.Node) and edge.node.name() == "torch::autograd::AccumulateGrad"
    assert edge.output_nr == 0 and y.grad_fn.next_functions[0][0] is edge.node
    assert g.get_gradient_edge(y).node is y.grad_fn
    (via_edge,) = jt.autograd.grad(y.sum() * 2, g.get_gradient_edge(y), retain_graph=True)
    assert via_edge.tolist() == [2.0, 2.0]
    (via_leaf_edge,) = jt.autograd.grad(y.sum(), edge, retain_graph=True)
    np.testing.assert_allclose(via_leaf_edge.numpy(), np.exp([1.0, 2.0]), rtol=1e-15)
    with pytest.raises(RuntimeError, match="for a Tensor that does not require gradients"):
        g.get_gradient_edge(jt.ones(2))
    z = x * 1.0
    w = z.exp()  # saves its result
    g.increment_version(w)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        w.sum().backward()
    g.increment_version([x, z])
    assert x._version == 1 and z._version == 1
