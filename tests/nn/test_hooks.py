"""Module backward hooks (``register_full_backward_hook`` / ``register_full_backward_pre_hook``)
with torch's semantics, eager and compiled, and the Module path API (get_parameter, get_buffer,
set_submodule, register_module)."""

import warnings

import numpy as np
import pytest

import jitorch as jt
from jitorch import nn
from jitorch.autograd import gradcheck


class Square(nn.Module):
    def forward(self, a):
        return a * a


class Pair(nn.Module):
    """Two tensor inputs and a non-tensor one; two outputs."""

    def forward(self, a, b, scale):
        return a * scale, b * 3


def leaf(values):
    return jt.tensor(values, dtype=jt.float64, requires_grad=True)


# Semantics ----------------------------------------------------------------------------------------

def test_hooks_see_input_and_output_gradients_once_per_call():
    m, log = Square(), []
    m.register_full_backward_pre_hook(lambda mod, go: log.append(("pre", go[0].tolist())))
    m.register_full_backward_hook(lambda mod, gi, go: log.append(("post", gi[0].tolist(), go[0].tolist())))
    m.register_full_backward_hook(lambda mod, gi, go: log.append(("first",)), prepend=True)
    x = leaf([1.0, 2.0])
    y = m(m(x))  # two calls: y = x**4
    y.sum().backward()
    # the outer call first: d(sum)/dy = 1, then d/d(x**2) = 2 x**2; the inner call: 4 x**3
    assert log == [("pre", [1.0, 1.0]), ("first",), ("post", [2.0, 8.0], [1.0, 1.0]),
                   ("pre", [2.0, 8.0]), ("first",), ("post", [4.0, 32.0], [2.0, 8.0])]
    assert x.grad.tolist() == [4.0, 32.0]


def test_entries_for_non_tensors_and_unused_outputs():
    m, log = Pair(), []
    m.register_full_backward_pre_hook(lambda mod, go: log.append(go))
    m.register_full_backward_hook(lambda mod, gi, go: log.append(gi))
    a, b = leaf([1.0, 2.0]), leaf([1.0, 1.0])
    out_a, _ = m(a, b, 5.0)
    out_a.sum().backward()
    grad_output, grad_input = log
    assert grad_output[0].tolist() == [1.0, 1.0] and grad_output[1] is None
    # an input that requires grad but got none has zeros (torch's materialized gradient); None for 5.0
    assert grad_input[0].tolist() == [5.0, 5.0] and grad_input[1].tolist() == [0.0, 0.0]
    assert grad_input[2] is None


def test_hooks_replace_gradients():
    m = Square()
    m.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 0.5,))
    m.register_full_backward_pre_hook(lambda mod, go: (go[0] + 1,))
    x = leaf([1.0, 3.0])
    m(x).sum().backward()
    assert x.grad.tolist() == [2.0, 6.0]  # (1 + 1) * 2x * 0.5
    x.grad = None
    m2 = Square()
    m2.register_full_backward_hook(lambda mod, gi, go: [None])
    w = leaf([1.0, 1.0])
    m2(x * w).sum().backward()
    assert x.grad is None and w.grad is None


def test_handles_remove_hooks():
    m, calls = Square(), []
    handle = m.register_full_backward_hook(lambda *a: calls.append("post"))
    with m.register_full_backward_pre_hook(lambda *a: calls.append("pre")):
        m(leaf([1.0])).sum().backward()
    handle.remove()
    m(leaf([1.0])).sum().backward()
    assert calls == ["pre", "post"]


def test_no_input_requiring_grad_fires_with_the_output_gradient_and_warns():
    lin = nn.Linear(3, 2)
    seen = []
    lin.register_full_backward_hook(lambda mod, gi, go: seen.append((gi, go[0].shape)))
    with pytest.warns(UserWarning, match="Full backward hook is firing when gradients are computed with respect "
                                         "to module outputs since no inputs require gradients"):
        lin(jt.ones(4, 3)).sum().backward()
    assert seen == [((None,), (4, 2))]
    assert lin.bias.grad.tolist() == [4.0, 4.0]
    lin.register_full_backward_hook(lambda mod, gi, go: (jt.ones(4, 3),))
    with pytest.warns(UserWarning), pytest.raises(
            RuntimeError, match="Backward hook for Modules where no input requires gradient should always return "
                                "None or None for all gradients."):
        lin(jt.ones(4, 3)).sum().backward()


def test_a_hook_returning_the_wrong_number_of_gradients_raises():
    m = Square()
    m.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0]))
    with pytest.raises(RuntimeError, match="Backward hook returned an invalid number of grad_input, got 2, but "
                                           "expected 1"):
        m(leaf([1.0])).sum().backward()
    m = Square()
    m.register_full_backward_pre_hook(lambda mod, go: (go[0], go[0], go[0]))
    with pytest.raises(RuntimeError, match="Backward pre hook returned an invalid number of grad_output, got 3, "
                                           "but expected 1"):
        m(leaf([1.0])).sum().backward()


def test_inputs_and_outputs_modified_in_place_are_an_error():
    class InPlace(nn.Module):
        def forward(self, a):
            return a.mul_(2)

    message = "Output 0 of BackwardHookFunction is a view and is being modified inplace"
    m = InPlace()
    m.register_full_backward_hook(lambda *a: None)
    with pytest.raises(RuntimeError, match=message):
        m(leaf([1.0]) * 1)
    lin = nn.Linear(2, 2)
    lin.register_full_backward_hook(lambda *a: None)
    with pytest.raises(RuntimeError, match=message):
        nn.ReLU(inplace=True)(lin(leaf([[1.0, 2.0]]).float()))


def test_an_output_that_is_a_view_gets_its_gradient():
    class First(nn.Module):
        def forward(self, a):
            return a[0]

    m, seen = First(), []
    m.register_full_backward_hook(lambda mod, gi, go: seen.append((gi[0].tolist(), go[0].tolist())))
    x = leaf([[1.0, 2.0], [3.0, 4.0]])
    (m(x * 1) * 3).sum().backward()
    assert seen == [([[3.0, 3.0], [0.0, 0.0]], [3.0, 3.0])]


def test_outputs_other_than_tensors_and_tuples_warn_and_get_no_hooks():
    class Dict(nn.Module):
        def forward(self, a):
            return {"y": a * 2}

    m, calls = Dict(), []
    m.register_full_backward_hook(lambda *a: calls.append(1))
    with pytest.warns(UserWarning, match="For backward hooks to be called, module output should be a Tensor or a "
                                         "tuple of Tensors but received <class 'dict'>"):
        out = m(leaf([1.0]))
    out["y"].sum().backward()
    assert calls == []


def test_forward_hooks_see_the_wrapped_inputs_and_their_output_is_wrapped():
    m, seen = Square(), []
    m.register_forward_hook(lambda mod, args, out: out * 10)
    m.register_full_backward_hook(lambda mod, gi, go: seen.append((gi[0].tolist(), go[0].tolist())))
    x = leaf([1.0, 2.0])
    m(x).sum().backward()
    assert seen == [([20.0, 40.0], [1.0, 1.0])] and x.grad.tolist() == [20.0, 40.0]


def test_no_grad_calls_set_up_no_hooks():
    m = Square()
    m.register_full_backward_hook(lambda *a: None)
    with jt.no_grad():
        assert not m(leaf([1.0])).requires_grad


def test_gradients_through_the_identity_wrappers_pass_gradcheck():
    lin = nn.Linear(3, 2).double()
    lin.register_full_backward_hook(lambda mod, gi, go: None)
    lin.register_full_backward_pre_hook(lambda mod, go: None)
    x = jt.tensor(np.linspace(-1, 1, 12).reshape(4, 3), dtype=jt.float64, requires_grad=True)
    assert gradcheck(lambda a: jt.tanh(lin(a)), (x,))


# Compiled -------------------------------------------------------------------------------------

def _net():
    jt.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    net[2].register_full_backward_hook(lambda mod, gi, go: (gi[0] * 0.5,))
    net[0].register_full_backward_pre_hook(lambda mod, go: (go[0] * 2,))
    return net


def test_a_compiled_training_step_runs_backward_hooks_as_eager_does():
    x = jt.tensor(np.linspace(-1, 1, 15).reshape(5, 3), dtype=jt.float32)
    target = jt.tensor(np.linspace(1, -1, 10).reshape(5, 2), dtype=jt.float32)
    results = []
    for compiled in (False, True):
        net = _net()
        opt = jt.optim.SGD(net.parameters(), lr=0.1)

        def step(x, target):
            opt.zero_grad()
            loss = ((net(x) - target) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        fn = jt.compile(step, fullgraph=True) if compiled else step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # net[0]'s input needs no grad: torch's warning
            losses = [fn(x, target).item() for _ in range(3)]
        results.append((losses, [p.detach().numpy().copy() for p in net.parameters()]))
    (eager_losses, eager_params), (compiled_losses, compiled_params) = results
    np.testing.assert_allclose(compiled_losses, eager_losses, rtol=1e-5)
    for a, b in zip(compiled_params, eager_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_a_compiled_module_with_backward_hooks_gives_eager_gradients():
    x = jt.tensor(np.linspace(-1, 1, 15).reshape(5, 3), dtype=jt.float32, requires_grad=True)
    grads = []
    for compiled in (False, True):
        net = _net()
        fn = jt.compile(net) if compiled else net
        x.grad = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(x).sum().backward()
        grads.append((x.grad.numpy().copy(), net[0].weight.grad.numpy().copy()))
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_adding_or_removing_a_module_hook_after_compiling_traces_again():
    lin = nn.Linear(2, 1)
    x = jt.tensor([[1.0, 2.0]], requires_grad=True)

    def step(x):
        x.grad = None
        loss = lin(x).sum()
        loss.backward()
        return loss, x.grad
    fn = jt.compile(step, fullgraph=True)
    weight = lin.weight.detach().numpy()
    np.testing.assert_allclose(fn(x)[1].numpy(), weight)
    handle = lin.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 3,))
    np.testing.assert_allclose(fn(x)[1].numpy(), 3 * weight)
    handle.remove()
    np.testing.assert_allclose(fn(x)[1].numpy(), weight)


def test_registering_a_module_hook_inside_a_compiled_function_runs_it_eagerly():
    lin = nn.Linear(2, 1)

    def step(x):
        lin.register_full_backward_hook(lambda *a: None)
        return lin(x)
    with pytest.warns(UserWarning, match="running step eagerly: register_full_backward_hook\\(\\) at .*adds a "
                                         "hook to a module"):
        jt.compile(step)(jt.ones(1, 2))
    assert len(lin._backward_hooks) == 1


# Module paths ----------------------------------------------------------------------------------

def _tree():
    return nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.BatchNorm1d(2)))


def test_get_parameter_and_get_buffer():
    net = _tree()
    assert net.get_parameter("0.weight") is net[0].weight
    assert net.get_buffer("1.0.running_mean") is net[1][0].running_mean
    for call, target, message in [
            (net.get_parameter, "0.nope", "Linear has no attribute `nope`"),
            (net.get_parameter, "2.weight", "Sequential has no attribute `2`"),
            (net.get_parameter, "1.0.running_mean", "`running_mean` is not an nn.Parameter"),
            (net.get_parameter, "0.in_features", "`in_features` is not an nn.Parameter"),
            (net.get_parameter, "0.weight.x", "`weight` is not an nn.Module"),
            (net.get_buffer, "1.0.weight", "`weight` is not a buffer"),
            (net.get_buffer, "1.0.momentum", "`momentum` is not a buffer"),
            (net.get_buffer, "x.y", "Sequential has no attribute `x`")]:
        with pytest.raises(AttributeError, match=message):
            call(target)


def test_set_submodule_and_register_module():
    net = _tree()
    relu = nn.ReLU()
    net.set_submodule("1.0", relu)
    assert net[1][0] is relu
    net.set_submodule("1.extra", nn.Tanh())
    assert isinstance(net.get_submodule("1.extra"), nn.Tanh)
    with pytest.raises(AttributeError, match="Sequential has no attribute `new`"):
        net.set_submodule("1.new", nn.Tanh(), strict=True)
    with pytest.raises(AttributeError, match="Sequential has no attribute `5`"):
        net.set_submodule("5.0", nn.Tanh())
    with pytest.raises(AttributeError, match="`weight` is not an nn.Module"):
        net.set_submodule("0.weight", nn.Tanh())
    with pytest.raises(ValueError, match="Cannot set the submodule without a target name!"):
        net.set_submodule("", nn.Tanh())
    with pytest.raises(ValueError, match="`module` is not an nn.Module, found <class 'int'>"):
        net.set_submodule("1", 5)
    net.register_module("head", nn.Linear(2, 1))
    assert list(net._modules) == ["0", "1", "head"]
    with pytest.raises(TypeError, match="int is not a Module subclass"):
        net.register_module("bad", 3)


def test_handles_are_importable_from_torch_utils_hooks_path():
    from jitorch.utils.hooks import RemovableHandle
    handle = jt.nn.Linear(2, 2).register_full_backward_hook(lambda m, gi, go: None)
    assert isinstance(handle, RemovableHandle)
