"""Autograd hooks, as PyTorch's: tensor hooks and their handles and checks, hooks on backward
nodes (``grad_fn.register_prehook`` / ``register_hook``), post-accumulate-grad hooks, which nodes
``autograd.grad`` runs, and how compiled functions treat hooks."""

import warnings

import numpy as np
import pytest

import jitorch as jt
from jitorch.autograd import Function


def leaf(values, dtype=jt.float64):
    return jt.tensor(values, dtype=dtype, requires_grad=True)


# Tensor hooks ----------------------------------------------------------------------------------

def test_register_hook_returns_a_handle_that_removes_it():
    x = leaf([1.0, 2.0])
    y = x * 2
    handle = y.register_hook(lambda g: g * 10)
    leaf_handle = x.register_hook(lambda g: g + 1)
    y.sum().backward(retain_graph=True)
    assert x.grad.tolist() == [21.0, 21.0]
    handle.remove()
    leaf_handle.remove()
    x.grad = None
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_a_hook_may_remove_itself_while_running():
    x = leaf([1.0])
    calls = []

    def once(g):
        calls.append(1)
        handle.remove()
    handle = x.register_hook(once)
    (x * 2).sum().backward()
    (x * 2).sum().backward()
    assert calls == [1]


@pytest.mark.parametrize("on_leaf", [True, False])
def test_a_hook_result_is_checked_as_torch_does(on_leaf):
    def target():
        x = leaf([1.0, 2.0])
        return x if on_leaf else x * 2

    def shape(g):
        return jt.ones(3, dtype=jt.float64)
    t = target()
    t.register_hook(shape)
    with pytest.raises(RuntimeError, match="^hook 'shape' has changed the size of value$"):
        (t * 1).sum().backward()
    t = target()
    t.register_hook(lambda g: g.float())
    with pytest.raises(RuntimeError, match=r"hook '<lambda>' has changed the type of value \(was "
                                           r"jitorch.DoubleTensor got jitorch.FloatTensor\)"):
        (t * 1).sum().backward()
    t = target()
    t.register_hook(lambda g: 3)
    with pytest.raises(TypeError, match="expected Variable, but hook returned 'int'"):
        (t * 1).sum().backward()


def test_hooks_need_a_tensor_that_requires_grad():
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't require gradient"):
        jt.ones(2).register_hook(lambda g: g)
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't require gradient"):
        jt.ones(2).register_post_accumulate_grad_hook(lambda t: None)


# Hooks on backward nodes -------------------------------------------------------------------------

def test_node_prehook_and_hook_see_and_replace_gradients():
    x = leaf([1.0, 2.0])
    w = jt.tensor([3.0, 4.0], dtype=jt.float64)  # does not require grad: its entry is None
    y = x * w
    seen = []
    y.grad_fn.register_prehook(lambda go: (go[0] * 2,))
    y.grad_fn.register_hook(lambda gi, go: seen.append((gi[0].tolist(), gi[1], go[0].tolist())))
    y.sum().backward(retain_graph=True)
    # the pre-hook doubled the incoming ones; the post-hook sees d(x*w)/dx of that
    assert seen == [([6.0, 8.0], None, [2.0, 2.0])]
    assert x.grad.tolist() == [6.0, 8.0]
    x.grad = None
    y.grad_fn.register_hook(lambda gi, go: (gi[0] + 1, None))
    y.sum().backward()
    assert x.grad.tolist() == [7.0, 9.0]


def test_node_hook_results_are_checked():
    x = leaf([1.0, 2.0])
    y = x * 2
    y.grad_fn.register_prehook(lambda go: (go[0], go[0]))
    with pytest.raises(RuntimeError, match=r"hook '<lambda>' has returned an incorrect number of values "
                                           r"\(got 2, but expected 1\)"):
        y.sum().backward()
    y = x * 2
    y.grad_fn.register_prehook(lambda go: go[0])
    with pytest.raises(TypeError, match="expected tuple, but hook returned 'Tensor'"):
        y.sum().backward()
    y = x * jt.ones(2, dtype=jt.float64)
    y.grad_fn.register_hook(lambda gi, go: (gi[0], jt.ones(2, dtype=jt.float64)))
    with pytest.raises(RuntimeError, match="can't replace a None gradient with a non-None value"):
        y.sum().backward()


def test_custom_function_nodes_take_hooks():
    class Double(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = leaf([1.0, 2.0])
    y = Double.apply(x)
    y.grad_fn.register_hook(lambda gi, go: (gi[0] + go[0],))
    y.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


# Post-accumulate-grad hooks ------------------------------------------------------------------

def test_post_accumulate_grad_hooks_fire_after_accumulation():
    x = leaf([1.0, 2.0])
    seen = []
    first = x.register_post_accumulate_grad_hook(lambda t: seen.append(("a", t.grad.tolist())))
    x.register_post_accumulate_grad_hook(lambda t: seen.append(("b", t.grad.tolist())))
    x.register_hook(lambda g: g * 10)  # runs before accumulation
    (x * 2).sum().backward()
    (x * x).sum().backward(inputs=[x])
    assert seen == [("a", [20.0, 20.0]), ("b", [20.0, 20.0]), ("a", [40.0, 60.0]), ("b", [40.0, 60.0])]
    first.remove()
    jt.autograd.grad((x * 3).sum(), x)  # accumulates nothing: no hook
    assert len(seen) == 4
    (x * 3).sum().backward()
    assert seen[4:] == [("b", [70.0, 90.0])]


def test_post_accumulate_grad_hook_errors():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="post accumulate grad hooks cannot be registered on non-leaf tensors"):
        (x * 2).register_post_accumulate_grad_hook(lambda t: None)
    x.register_post_accumulate_grad_hook(lambda t: t.grad)
    with pytest.raises(RuntimeError, match="Tensor post accumulate grad hooks should return None."):
        (x * 2).sum().backward()


def test_optimizer_in_backward_with_post_accumulate_grad_hooks():
    w = leaf([1.0, -2.0])

    def sgd(p):
        with jt.no_grad():
            p.sub_(0.5 * p.grad)
        p.grad = None
    w.register_post_accumulate_grad_hook(sgd)
    (w * w).sum().backward()  # grad 2w
    assert w.tolist() == [0.0, 0.0] and w.grad is None


# Which nodes a backward runs ---------------------------------------------------------------------

def test_autograd_grad_runs_only_the_nodes_it_needs():
    x = leaf([1.0, 2.0])
    h = x * 3
    out = h * h
    ran = []
    h.grad_fn.register_prehook(lambda go: ran.append("h"))
    out.grad_fn.register_prehook(lambda go: ran.append("out"))
    (g,) = jt.autograd.grad(out.sum(), h, retain_graph=True)
    assert g.tolist() == [6.0, 12.0] and ran == ["out"]
    (g,) = jt.autograd.grad(out.sum(), x)
    assert g.tolist() == [18.0, 36.0] and ran == ["out", "out", "h"]


def test_inplace_on_an_input_a_custom_function_returned_is_an_error():
    class Identity(Function):
        @staticmethod
        def forward(ctx, a):
            return a

        @staticmethod
        def backward(ctx, g):
            return g

    x = leaf([1.0, 2.0])
    y = Identity.apply(x * 1)
    message = ("Output 0 of Identity is a view and is being modified inplace. This view was created inside a "
               "custom Function")
    with pytest.raises(RuntimeError, match=message):
        y.mul_(2)
    with pytest.raises(RuntimeError, match="Output 0 of Select is a view and is being modified inplace"):
        y[0].mul_(2)
    with jt.no_grad():
        y.detach().mul_(2)  # allowed, but the custom backward can no longer be used
    with pytest.raises(RuntimeError, match="Output 0 of Identity is a view and its base or another view of "
                                           "its base has been modified inplace"):
        y.sum().backward()


# Compiled functions --------------------------------------------------------------------------

def _sgd_in_backward(params, lr=0.1):
    def step(p):
        with jt.no_grad():
            p.sub_(lr * p.grad)
        p.grad = None
    for p in params:
        p.register_post_accumulate_grad_hook(step)


def test_compiled_step_runs_post_accumulate_grad_hooks_in_its_graph():
    x = jt.tensor(np.linspace(-1, 1, 12).reshape(4, 3), dtype=jt.float32)
    results = []
    for compiled in (False, True):
        w = jt.tensor([[0.5, -0.25, 1.0]], dtype=jt.float32, requires_grad=True)
        _sgd_in_backward([w])

        def step(x):
            loss = ((x * w).sum(1) ** 2).mean()
            loss.backward()
            return loss
        fn = jt.compile(step, fullgraph=True) if compiled else step
        losses = [fn(x).item() for _ in range(3)]
        results.append((losses, w.detach().numpy().copy()))
        assert w.grad is None
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6)
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-6)


def test_a_hook_added_after_compiling_makes_the_step_trace_again():
    w = leaf([1.0, 2.0])

    def step():
        w.grad = None
        (w * w).sum().backward()
        return w.grad
    fn = jt.compile(step, fullgraph=True)
    assert fn().tolist() == [2.0, 4.0]
    handle = w.register_hook(lambda g: g * 3)
    assert fn().tolist() == [6.0, 12.0]
    handle.remove()
    assert fn().tolist() == [2.0, 4.0]


def test_registering_a_hook_on_a_captured_tensor_inside_a_compiled_function_runs_it_eagerly():
    w = leaf([1.0, 2.0])

    def step():
        w.register_post_accumulate_grad_hook(lambda p: None)
        return (w * 2).sum()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert jt.compile(step)().item() == 6.0
    [warning] = caught
    assert "running step eagerly: register_post_accumulate_grad_hook() at" in str(warning.message)
    assert "adds a hook to a tensor that outlives the call" in str(warning.message)
    assert len(w._post_accumulate_grad_hooks) == 1  # the eager run registered it, once


def test_a_hook_on_an_intermediate_tensor_is_traced():
    w = leaf([1.0, 2.0])

    def step(x):
        w.grad = None
        y = w * x
        y.register_hook(lambda g: g * 5)
        loss = y.sum()
        loss.backward()
        return loss, w.grad
    x = jt.tensor([3.0, 4.0], dtype=jt.float64)
    loss, grad = jt.compile(step, fullgraph=True)(x)
    assert loss.item() == 11.0 and grad.tolist() == [15.0, 20.0]


def test_when_backward_ends_calls_once_at_the_end_of_the_backward_running_also_when_it_raises():
    from jitorch.autograd.engine import when_backward_ends

    calls = []

    def ends(label):
        when_backward_ends(lambda: calls.append(label))
    assert when_backward_ends(lambda: calls.append("outside")) is False  # no backward: nothing registered
    w = jt.ones(3, requires_grad=True)

    def hook(p):
        assert when_backward_ends(lambda: calls.append(("ended", p.grad.tolist())))
        inner = jt.ones(2, requires_grad=True)
        inner.register_post_accumulate_grad_hook(lambda q: ends("inner"))
        with jt.enable_grad():  # hooks run under no_grad
            (inner * 2).sum().backward()  # a backward inside a hook: its callbacks end with it
        calls.append("hook done")
    w.register_post_accumulate_grad_hook(hook)
    (w * 3).sum().backward()
    assert calls == ["inner", "hook done", ("ended", [3.0, 3.0, 3.0])]

    class Fails(jt.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            raise ValueError("gave up")
    calls.clear()
    v = jt.ones(3, requires_grad=True)
    v.register_post_accumulate_grad_hook(lambda p: ends("ended"))
    with pytest.raises(ValueError, match="gave up"):
        (Fails.apply(w) + v).sum().backward()  # v's hook ran before the raise
    assert calls == ["ended"]
