"""Regression tests: state a compiled function depends on, changed between calls outside it, is never
served by a stale graph. Each case compares with eager after the change and checks what the compiled
function did about it (a new trace, or the graph that fits again)."""

import types

import pytest

import jitorch as jt
from jitorch import nn
from tests.jit.test_compile import counting

X = jt.tensor([0.5, -2.0, 3.0])


def test_a_branch_on_a_captured_tensors_item_follows_an_in_place_change():
    flag = jt.tensor(1.0)
    fn = counting(lambda x: x * 2 if flag.item() > 0 else x - 100)
    f = jt.compile(fn)
    assert f(X).tolist() == (X * 2).tolist()
    flag.fill_(-1.0)
    assert f(X).tolist() == (X - 100).tolist()
    flag.fill_(1.0)  # the value the first trace read again: its graph fits again
    assert f(X).tolist() == (X * 2).tolist()
    assert fn.runs == 2


def test_float_of_a_captured_tensor_follows_a_data_assignment():
    scale = jt.tensor(2.0)
    fn = counting(lambda x: x * float(scale))
    f = jt.compile(fn)
    assert f(X).tolist() == (X * 2).tolist()
    scale.data = jt.tensor(5.0)
    assert f(X).tolist() == (X * 5).tolist()
    assert fn.runs == 2


def test_a_branch_on_an_inputs_item_follows_the_input():
    f = jt.compile(lambda x, t: x * 2 if t.item() > 0 else x - 100)
    t = jt.tensor(1.0)
    with pytest.warns(UserWarning, match="running <lambda> eagerly: .item"):
        assert f(X, t).tolist() == (X * 2).tolist()
    t.fill_(-1.0)  # the same input tensor, changed in place
    assert f(X, t).tolist() == (X - 100).tolist()
    assert f(X, jt.tensor(3.0)).tolist() == (X * 2).tolist()


def test_resize_of_a_captured_tensor_traces_again():
    w = jt.tensor([1.0, 2.0, 3.0])
    fn = counting(lambda x: x * w)
    f = jt.compile(fn)
    assert f(X).tolist() == (X * w).tolist()
    w.resize_(1)
    assert f(X).tolist() == (X * w).tolist()
    assert fn.runs == 2


def test_set_of_a_captured_tensor_traces_again():
    w = jt.tensor([1.0, 2.0, 3.0])
    fn = counting(lambda x: x + w.sum() * w)
    f = jt.compile(fn)
    assert f(X).tolist() == (X + w.sum() * w).tolist()
    w.set_(jt.tensor([4.0]))
    assert f(X).tolist() == (X + w.sum() * w).tolist()
    assert fn.runs == 2


def test_data_assignments_of_another_shape_or_dtype_trace_again():
    w = jt.tensor([1.0, 2.0, 3.0])
    fn = counting(lambda x: x * w)
    f = jt.compile(fn)
    f(X)
    w.data = jt.tensor([-1.0])
    assert f(X).tolist() == (X * w).tolist()
    w.data = jt.tensor([1.0, 2.0, 3.0], dtype=jt.float64)
    out = f(X)
    assert out.dtype == (X * w).dtype == jt.float64 and out.tolist() == (X * w).tolist()
    assert fn.runs == 3


def test_a_replaced_parameter_of_a_module_called_through_a_list_traces_again():
    layers = [nn.Linear(3, 3)]
    f = jt.compile(lambda x: layers[0](x))
    with jt.no_grad():
        f(X)
        layers[0].weight = nn.Parameter(jt.ones(3, 3))
        assert f(X).tolist() == layers[0](X).tolist()


def test_a_bias_set_after_compiling_is_used():
    layer = nn.Linear(3, 3, bias=False)
    f = jt.compile(layer)
    with jt.no_grad():
        f(X)
        layer.bias = nn.Parameter(jt.tensor([10.0, 20.0, 30.0]))
        assert f(X).tolist() == layer(X).tolist()


def test_requires_grad_toggled_between_calls_gives_eagers_autograd():
    layer = nn.Linear(3, 3)
    f = jt.compile(layer)
    assert f(X).requires_grad
    layer.requires_grad_(False)
    out = f(X)
    assert not out.requires_grad and out.grad_fn is None and out.tolist() == layer(X).tolist()
    layer.weight.requires_grad_(True)
    out = f(X)
    assert out.requires_grad
    out.sum().backward()
    assert layer.weight.grad is not None and layer.bias.grad is None


def test_grad_mode_toggled_between_calls_gives_eagers_autograd():
    layer = nn.Linear(3, 3)
    f = jt.compile(layer)
    assert f(X).grad_fn is not None
    with jt.no_grad():
        out = f(X)
    assert out.grad_fn is None and not out.requires_grad
    assert f(X).grad_fn is not None


def test_train_and_eval_toggled_between_calls():
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    f = jt.compile(model)
    with jt.no_grad():
        jt.manual_seed(0)
        f(X)
        model.eval()
        assert f(X).tolist() == model(X).tolist()
        model.train()
        model[1].p = 1.0  # everything dropped: no randomness to compare
        assert f(X).tolist() == [0.0, 0.0, 0.0]


@pytest.fixture
def fake_cuda():
    from jitorch.backends.cuda.fake import FakeBackend
    from jitorch.runtime.cuda_backend import use_backend

    with use_backend(FakeBackend()) as backend:
        yield backend


def test_a_captured_tensor_moved_to_another_device_is_read_there(fake_cuda):
    w = jt.tensor([1.0, 2.0, 3.0], device="cuda")
    fn = counting(lambda x: x * w)
    f = jt.compile(fn)
    x = X.to("cuda")
    assert f(x).tolist() == (X * w.cpu()).tolist()
    w.data = w.data.cpu()
    with pytest.raises(RuntimeError) as eager:
        fn(x)
    with pytest.raises(RuntimeError) as compiled:
        f(x)
    assert str(compiled.value) == str(eager.value)
    w.data = jt.tensor([3.0, 2.0, 1.0], device="cuda")
    assert f(x).tolist() == (X * w.cpu()).tolist()


def test_a_module_moved_to_another_device_between_calls_runs_there(fake_cuda):
    layer = nn.Linear(3, 3)
    f = jt.compile(lambda x: layer(x.to(layer.weight.device)))
    with jt.no_grad():
        assert f(X).device.type == "cpu"
        expected = layer(X)
        layer.to("cuda")
        with pytest.warns(UserWarning, match="has tensors on cpu and cuda:0"):
            out = f(X)
    assert out.device.type == "cuda" and jt.allclose(out.cpu(), expected)


class Scaled(nn.Module):
    SCALE = 2.0

    def __init__(self):
        super().__init__()
        self._k = 1.0

    @property
    def k(self):
        return self._k

    def forward(self, x):
        return x * self.SCALE * self.k


class Config:
    S = 2.0


def test_class_attributes_and_properties_read_by_a_module_are_guarded(monkeypatch):
    model = Scaled()
    compiled = jt.compile(model)
    assert compiled(X).tolist() == model(X).tolist()
    monkeypatch.setattr(Scaled, "SCALE", 3.0)
    assert compiled(X).tolist() == model(X).tolist() == (X * 3).tolist()
    model.SCALE = 4.0  # an instance attribute now hides the class's
    assert compiled(X).tolist() == (X * 4).tolist()
    model._k = 5.0  # read through the property
    assert compiled(X).tolist() == model(X).tolist() == (X * 20).tolist()


def test_a_class_attribute_read_through_a_global_class_is_guarded(monkeypatch):
    fn = counting(lambda x: x * Config.S)
    f = jt.compile(fn)
    assert f(X).tolist() == (X * 2).tolist()
    monkeypatch.setattr(Config, "S", 4.0)
    assert f(X).tolist() == (X * 4).tolist()
    assert fn.runs == 2


def test_a_tensor_made_from_python_data_and_stored_in_python_state_runs_eagerly():
    """Fuzz seed 7200446: ``M.t = jt.tensor(M.n.tolist()); return M.t`` compiled returned a copy of the tensor
    its trace stored, so the output was no longer ``M.t`` (eagerly each call stores and returns a new tensor):
    such a store sends the call back to eager, as one of a computed tensor does."""
    M = types.SimpleNamespace(n=jt.tensor(3))

    def fn(x):
        M.t = jt.tensor(M.n.tolist())
        return M.t

    compiled = jt.compile(fn)
    with pytest.warns(UserWarning, match=r"stores tensors it computes in Python state \(.*\.t\)"):
        first = compiled(jt.ones(2))
    assert first is M.t
    with pytest.warns(UserWarning, match="stores tensors it computes"):
        second = compiled(jt.ones(2))
    assert second is M.t and second is not first and second.tolist() == 3


class _Stored:
    t = None


@pytest.mark.parametrize("where", ["local class", "global class", "class through a namespace"])
def test_a_tensor_stored_into_a_class_attribute_runs_eagerly(where):
    """Last stop's fuzzing: a store into a class's attribute (``S.t = x + 1``, S a class the function reaches by
    name) was not seen as a store into Python state: the trace left a traced tensor there, whose values do not
    exist. Such a store sends the call back to eager, as a store into a global or an attribute of an object."""
    class Local:
        t = None
    holder = types.SimpleNamespace(S=Local)
    S = {"local class": Local, "global class": _Stored, "class through a namespace": Local}[where]

    def fn(x):
        if where == "class through a namespace":
            holder.S.t = x + 1
        elif where == "local class":
            Local.t = x + 1
        else:
            _Stored.t = x + 1
        return x * 2

    compiled = jt.compile(fn)
    for k in (1.0, 2.0):
        with pytest.warns(UserWarning, match=r"stores tensors it computes in Python state \(.*t\)"):
            assert compiled(jt.full((2,), k)).tolist() == [2 * k] * 2
        assert S.t.tolist() == [k + 1] * 2
