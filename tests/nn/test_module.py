"""Module: registration, traversal, state dicts, modes, conversions, hooks, repr."""

from __future__ import annotations

import copy
import pickle
from collections import OrderedDict

import numpy as np
import pytest

import jitorch as jt
from jitorch import nn
from jitorch.nn import Parameter


class Net(nn.Module):
    """Two layers, a buffer and a non-persistent buffer: a small tree to walk."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(4, 2, bias=False)
        self.register_buffer("steps", jt.zeros((), dtype=jt.int64))
        self.register_buffer("scratch", jt.ones(2), persistent=False)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def test_torch_style_namespace():
    assert jt.nn is nn and nn.functional.linear is not None and nn.init.kaiming_uniform_ is not None
    assert nn.utils.clip_grad_norm_ is not None and nn.Parameter is Parameter


def test_parameter_is_a_leaf_tensor_sharing_data():
    data = jt.arange(6.0).view(2, 3)
    p = Parameter(data)
    assert isinstance(p, jt.Tensor) and isinstance(p, Parameter)
    assert p.requires_grad and p.is_leaf
    p.data.add_(1)  # same storage
    np.testing.assert_array_equal(data.numpy(), np.arange(6.0).reshape(2, 3) + 1)
    assert type(p * 2) is jt.Tensor
    assert not Parameter(jt.ones(2), requires_grad=False).requires_grad
    assert Parameter().shape == (0,)


def test_parameter_repr_copy_and_pickle():
    p = Parameter(jt.tensor([1.0, 2.0]))
    assert repr(p) == "Parameter containing:\ntensor([1., 2.], requires_grad=True)"
    for q in (copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        assert type(q) is Parameter and q.requires_grad
        assert q.tolist() == [1.0, 2.0] and q.data_ptr() != p.data_ptr()


def test_ops_accept_parameters_without_grad():
    # a Parameter takes the dispatcher's general path (the fast paths want exact Tensors)
    p = Parameter(jt.tensor([[1.0, 2.0], [3.0, 4.0]]), requires_grad=False)
    assert (p @ p).tolist() == [[7.0, 10.0], [15.0, 22.0]]
    assert p.exp().shape == (2, 2) and jt.cat([p, p]).shape == (4, 2) and p.sum().item() == 10.0


def test_module_pickles():
    net = Net()
    twin = pickle.loads(pickle.dumps(net))
    assert isinstance(twin.fc1.weight, Parameter) and twin.steps.dtype is jt.int64
    np.testing.assert_array_equal(twin.fc1.weight.detach().numpy(), net.fc1.weight.detach().numpy())


def test_parameter_of_a_non_tensor():
    with pytest.raises(TypeError, match="must be Tensor, not list"):
        Parameter([1.0])


def test_gradients_reach_parameters():
    p = Parameter(jt.tensor([1.0, 2.0]))
    (p * p).sum().backward()
    assert p.grad.tolist() == [2.0, 4.0]


def test_registration_and_names():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == ["fc1.weight", "fc1.bias", "fc2.weight"]
    assert [n for n, _ in net.named_buffers()] == ["steps", "scratch"]
    assert [n for n, _ in net.named_children()] == ["fc1", "act", "fc2"]
    assert [n for n, _ in net.named_modules()] == ["", "fc1", "act", "fc2"]
    assert [n for n, _ in net.named_parameters(prefix="model")] == ["model.fc1.weight", "model.fc1.bias",
                                                                      "model.fc2.weight"]
    assert list(net.named_parameters(recurse=False)) == []
    assert len(list(net.parameters())) == 3 and len(list(net.buffers())) == 2
    assert list(net.children()) == [net.fc1, net.act, net.fc2]
    assert list(net.modules())[0] is net
    assert net.get_submodule("fc2") is net.fc2 and net.get_submodule("") is net


def test_shared_parameters_listed_once_unless_asked():
    net = nn.Module()
    net.a = nn.Linear(2, 2)
    net.b = net.a
    assert [n for n, _ in net.named_parameters()] == ["a.weight", "a.bias"]
    assert [n for n, _ in net.named_parameters(remove_duplicate=False)] == ["a.weight", "a.bias", "b.weight",
                                                                            "b.bias"]
    assert [n for n, _ in net.named_modules()] == ["", "a"]


def test_attribute_assignment_moves_between_tables():
    m = nn.Module()
    m.x = Parameter(jt.ones(1))
    assert "x" in m._parameters
    m.x = None
    assert m._parameters["x"] is None
    m.register_buffer("b", jt.ones(1))
    m.b = jt.zeros(2)
    assert m._buffers["b"].shape == (2,)
    m.c = nn.ReLU()
    m.c = None
    assert m._modules["c"] is None
    m.plain = 3
    assert m.plain == 3 and "plain" in m.__dict__


def test_delete_attributes():
    net = Net()
    del net.fc1, net.steps
    assert "fc1" not in net._modules and "steps" not in net._buffers
    net.extra = 1
    del net.extra
    with pytest.raises(AttributeError, match="'Net' object has no attribute 'fc1'"):
        net.fc1


def test_dir_lists_members():
    names = dir(Net())
    assert {"fc1", "fc2", "steps", "forward", "training"} <= set(names)


@pytest.mark.parametrize("call, exc, message", [
    (lambda m: m.register_buffer("weight", jt.ones(1)), KeyError, "attribute 'weight' already exists"),
    (lambda m: m.register_parameter("a.b", None), KeyError, "parameter name can.*t contain"),
    (lambda m: m.register_parameter("", None), KeyError, "parameter name can.*t be empty string"),
    (lambda m: m.register_buffer(3, None), TypeError, "buffer name should be a string. Got int"),
    (lambda m: m.register_buffer("b", 3), TypeError, r"cannot assign 'int' object to buffer 'b'"),
    (lambda m: m.register_parameter("p", jt.ones(1)), TypeError,
     r"cannot assign 'jitorch.FloatTensor' object to parameter 'p' \(jitorch.nn.Parameter or None required\)"),
    (lambda m: setattr(m, "weight", jt.ones(1)), TypeError,
     r"cannot assign 'jitorch.FloatTensor' as parameter 'weight' \(jitorch.nn.Parameter or None expected\)"),
    (lambda m: m.add_module("x", 3), TypeError, "int is not a Module subclass"),
    (lambda m: m.add_module("a.b", nn.ReLU()), KeyError, "module name can.*t contain \".\", got: a.b"),
    (lambda m: m.add_module("", nn.ReLU()), KeyError, "module name can.*t be empty string"),
    (lambda m: m.train(1), ValueError, "training mode is expected to be boolean"),
    (lambda m: m.to(jt.int64), TypeError, "nn.Module.to only accepts floating point or complex dtypes, but got "
     "desired dtype=jitorch.int64"),
    (lambda m: m.load_state_dict(3), TypeError, "Expected state_dict to be dict-like, got <class 'int'>."),
    (lambda m: m.missing, AttributeError, "'Linear' object has no attribute 'missing'"),
    (lambda m: nn.Module()(3), NotImplementedError, 'Module \\[Module\\] is missing the required "forward" function'),
    (lambda m: nn.Module(3), TypeError, r"Module.__init__\(\) takes 1 positional argument but 2 were given"),
])
def test_registration_errors(call, exc, message):
    with pytest.raises(exc, match=message):
        call(nn.Linear(2, 3))


def test_child_module_slot_refuses_other_values():
    m = nn.Module()
    m.lin = nn.Linear(1, 1)
    with pytest.raises(TypeError, match=r"cannot assign 'int' as child module 'lin' \(jitorch.nn.Module or None"):
        m.lin = 3


def test_non_leaf_parameter_refused():
    m = nn.Module()
    p = Parameter(jt.ones(2))
    p.grad_fn = (p * 2).grad_fn  # a Parameter that claims a history, as torch's check guards against
    with pytest.raises(ValueError, match="Cannot assign non-leaf Tensor to parameter 'p'"):
        m.register_parameter("p", p)


def test_assignment_before_init():
    class Early(nn.Module):
        def __init__(self):
            self.w = Parameter(jt.ones(1))

    with pytest.raises(AttributeError, match=r"cannot assign parameters before Module.__init__\(\) call"):
        Early()


def test_state_dict_round_trip():
    a, b = Net(), Net()
    a.steps.fill_(5)
    sd = a.state_dict()
    assert isinstance(sd, OrderedDict)
    assert list(sd) == ["steps", "fc1.weight", "fc1.bias", "fc2.weight"]
    assert not sd["fc1.weight"].requires_grad and sd["fc1.weight"].data_ptr() == a.fc1.weight.data_ptr()
    assert a.state_dict(keep_vars=True)["fc1.weight"] is a.fc1.weight
    result = b.load_state_dict(sd)
    assert repr(result) == "<All keys matched successfully>"
    assert result.missing_keys == [] and result.unexpected_keys == []
    for key, value in b.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), sd[key].numpy())
    assert isinstance(b.fc1.weight, Parameter) and b.fc1.weight.requires_grad


def test_load_state_dict_strict_errors_copy_nothing():
    net = nn.Linear(2, 3)
    before = net.weight.detach().clone()
    bad = {"weight": jt.ones(2, 2), "x": jt.ones(1)}
    with pytest.raises(RuntimeError) as info:
        net.load_state_dict(bad)
    assert str(info.value) == (
        "Error(s) in loading state_dict for Linear:\n"
        "\tMissing key(s) in state_dict: \"bias\". \n"
        "\tUnexpected key(s) in state_dict: \"x\". \n"
        "\tsize mismatch for weight: copying a param with shape jitorch.Size([2, 2]) from checkpoint, "
        "the shape in current model is jitorch.Size([3, 2]).")
    np.testing.assert_array_equal(net.weight.detach().numpy(), before.numpy())


def test_load_state_dict_non_strict_reports_keys():
    net = Net()
    result = net.load_state_dict({"fc1.bias": jt.zeros(4), "other.weight": jt.ones(1)}, strict=False)
    assert result.missing_keys == ["steps", "fc1.weight", "fc2.weight"]
    assert result.unexpected_keys == ["other.weight"]
    assert net.fc1.bias.tolist() == [0.0] * 4
    with pytest.raises(RuntimeError, match="size mismatch for fc1.bias"):
        net.load_state_dict({"fc1.bias": jt.zeros(3)}, strict=False)


def test_load_state_dict_assign_takes_the_tensors():
    net = nn.Linear(2, 1)
    w, b = jt.ones(1, 2), jt.zeros(1)
    net.load_state_dict({"weight": w, "bias": b}, assign=True)
    assert net.weight.data_ptr() == w.data_ptr() and isinstance(net.weight, Parameter)


def test_train_eval_and_requires_grad():
    net = Net()
    assert net.training and net.fc1.training
    assert net.eval() is net and not net.fc1.training and not net.act.training
    net.train()
    assert net.fc2.training
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_zero_grad():
    net = nn.Linear(2, 1)
    net(jt.ones(3, 2)).sum().backward()
    net.zero_grad(set_to_none=False)
    assert net.weight.grad.tolist() == [[0.0, 0.0]]
    net.zero_grad()
    assert net.weight.grad is None and net.bias.grad is None


def test_apply_visits_children_first():
    order = []
    Net().apply(lambda m: order.append(type(m).__name__))
    assert order == ["Linear", "ReLU", "Linear", "Net"]


def test_to_dtype_keeps_parameter_objects():
    net = Net()
    w = net.fc1.weight
    net(jt.ones(1, 3)).sum().backward()
    assert net.double() is net
    assert net.fc1.weight is w and w.dtype is jt.float64 and w.grad.dtype is jt.float64
    assert net.steps.dtype is jt.int64  # integer buffers keep their dtype
    assert net.scratch.dtype is jt.float64
    net.to(jt.float32)
    assert w.dtype is jt.float32
    net.half()
    assert w.dtype is jt.float16
    net.to("cpu", dtype=jt.float32).float()
    assert w.dtype is jt.float32 and w.device.type == "cpu"
    net.to(jt.ones(1, dtype=jt.float64))
    assert w.dtype is jt.float64 and net.cpu() is net
    assert net(jt.ones(2, 3, dtype=jt.float64)).dtype is jt.float64


def test_forward_hooks_and_handles():
    net = nn.Linear(2, 2)
    calls = []
    pre = net.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    post = net.register_forward_hook(lambda m, args, out: calls.append(out.shape) or out + 1)
    out = net(jt.ones(1, 2))
    np.testing.assert_allclose(out.detach().numpy(), net.bias.detach().numpy()[None] + 1, rtol=1e-6)
    assert calls == [(1, 2)]
    pre.remove()
    post.remove()
    post.remove()  # a second remove is harmless
    np.testing.assert_allclose(net(jt.zeros(1, 2)).detach().numpy(), net.bias.detach().numpy()[None], rtol=1e-6)
    assert calls == [(1, 2)]


def test_hooks_with_kwargs_prepend_and_context_manager():
    class Scale(nn.Module):
        def forward(self, x, factor=1.0):
            return x * factor

    m = Scale()
    order = []
    m.register_forward_hook(lambda mod, args, out: order.append("second"))
    m.register_forward_hook(lambda mod, args, out: order.append("first"), prepend=True)
    with m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {"factor": 3.0}), with_kwargs=True):
        assert m(jt.ones(1)).tolist() == [3.0]
    assert m(jt.ones(1)).tolist() == [1.0]
    assert order == ["first", "second", "first", "second"]
    seen = []
    m.register_forward_hook(lambda mod, args, kwargs, out: seen.append(kwargs), with_kwargs=True)
    m(jt.ones(1), factor=2.0)
    assert seen == [{"factor": 2.0}]
    m.register_forward_pre_hook(lambda mod, args, kwargs: 5, with_kwargs=True)
    with pytest.raises(RuntimeError, match="forward pre-hook must return None or a tuple of"):
        m(jt.ones(1))


def test_repr_nested_like_torch():
    net = Net()
    assert repr(net) == (
        "Net(\n"
        "  (fc1): Linear(in_features=3, out_features=4, bias=True)\n"
        "  (act): ReLU()\n"
        "  (fc2): Linear(in_features=4, out_features=2, bias=False)\n"
        ")")
    outer = nn.Module()
    outer.inner = net
    assert repr(outer).splitlines()[1:3] == ["  (inner): Net(",
                                             "    (fc1): Linear(in_features=3, out_features=4, bias=True)"]
    assert repr(nn.Module()) == "Module()"


def test_deepcopy_is_independent():
    net = Net()
    twin = copy.deepcopy(net)
    twin.fc1.weight.data.fill_(0)
    assert not np.all(net.fc1.weight.detach().numpy() == 0)
    assert isinstance(twin.fc1.weight, Parameter)


def test_a_compiled_function_calling_a_module_traces_again_after_eval():
    jt.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))
    forward = jt.compile(lambda x: net(x))
    x = jt.randn(8, 4)
    forward(x)
    net.eval()
    with jt.no_grad():
        expected = net(x)
    np.testing.assert_allclose(forward(x).detach().numpy(), expected.numpy(), rtol=1e-6)
