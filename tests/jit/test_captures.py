"""A compiled function guards the closure variables and globals it reads: rebinding one between calls
traces again (issue 15: later calls used the first binding), as torch.compile's guards do."""

import types

import pytest

import jitorch as jt
from jitorch import nn
from jitorch.runtime.storage import Storage
from tests.jit.test_compile import counting

OFFSET = 1.0
WEIGHT = jt.tensor(2.0)


def scaled(x):
    return x * WEIGHT + OFFSET


def calls_a_helper(x):
    return scaled(x) - 1.0


def closure(scale, k):
    """``f`` reading the closure variables ``scale`` and ``k``, and a function that rebinds them."""
    def f(x):
        return x * scale + k

    def rebind(new_scale, new_k):
        nonlocal scale, k
        scale, k = new_scale, new_k
    return f, rebind


def test_compiled_closure_rebound_between_calls_uses_the_new_values():
    f, rebind = closure(jt.tensor(5.0), -1.0)
    compiled = jt.compile(f)
    x = jt.ones(2)
    assert compiled(x).tolist() == [4.0, 4.0]
    rebind(jt.tensor(5.0), 3.0)
    assert compiled(x).tolist() == f(x).tolist() == [8.0, 8.0]
    rebind(jt.tensor(2.0), 3.0)
    assert compiled(x).tolist() == f(x).tolist() == [5.0, 5.0]


def test_compiled_globals_rebound_between_calls_use_the_new_values(monkeypatch):
    compiled = jt.compile(scaled)
    x = jt.ones(2)
    assert compiled(x).tolist() == [3.0, 3.0]
    monkeypatch.setitem(globals(), "OFFSET", 10.0)
    assert compiled(x).tolist() == [12.0, 12.0]
    monkeypatch.setitem(globals(), "WEIGHT", jt.tensor(-1.0))
    assert compiled(x).tolist() == [9.0, 9.0]


def test_compiled_globals_of_a_called_helper_are_guarded(monkeypatch):
    compiled = jt.compile(calls_a_helper)
    assert compiled(jt.ones(1)).tolist() == [2.0]
    monkeypatch.setitem(globals(), "OFFSET", 5.0)
    assert compiled(jt.ones(1)).tolist() == [6.0]


def test_compiled_module_forward_reading_a_global_is_guarded(monkeypatch):
    class Shift(jt.nn.Module):
        def forward(self, x):
            return x + OFFSET

    model = jt.compile(Shift())
    assert model(jt.zeros(1)).tolist() == [1.0]
    monkeypatch.setitem(globals(), "OFFSET", 7.0)
    assert model(jt.zeros(1)).tolist() == [7.0]


def test_same_values_and_in_place_changes_need_no_new_trace():
    scale = jt.tensor(2.0)
    k = 1.5
    fn = counting(lambda x: x * scale + k)
    compiled = jt.compile(fn)
    x = jt.ones(1)
    assert compiled(x).tolist() == [3.5]
    scale.fill_(3.0)  # the same tensor, changed in place: the graph reads it at each call
    k = float("1.5")  # another float object, equal
    assert compiled(x).tolist() == [4.5]
    assert fn.runs == 1


def test_rebinding_back_reuses_the_first_graph():
    scale = jt.tensor(1.0)
    f, rebind = closure(scale, 0.0)
    fn = counting(f)
    compiled = jt.compile(fn)
    x = jt.ones(1)
    compiled(x)
    rebind(scale, 1.0)
    assert compiled(x).tolist() == [2.0]
    rebind(scale, 0.0)
    assert compiled(x).tolist() == [1.0]
    assert fn.runs == 2


def test_explain_says_which_captured_variable_changed():
    f, rebind = closure(jt.tensor(1.0), 0.0)
    compiled = jt.compile(f)
    x = jt.ones(1)
    compiled(x)
    assert "python state: closure variable k == 0.0" in str(jt.explain(compiled, x))
    rebind(jt.tensor(1.0), 2.5)
    report = str(jt.explain(compiled, x))
    assert "these arguments were traced now" in report
    assert "retraced: no longer true: closure variable" in report
    assert compiled(x).tolist() == [3.5]


# attribute chains (fuzz seeds 1, 14, 35, 51, 68-72: a module attribute rebound between calls was ignored)

def test_compiled_function_reading_a_module_attribute_rebound_between_calls_uses_the_new_tensor():
    M = types.ModuleType("state")
    M.t = jt.tensor([1.0, 2.0])
    M.scale = 2.0
    fn = counting(lambda x: x * M.scale + M.t)
    compiled = jt.compile(fn)
    x = jt.ones(2)
    assert compiled(x).tolist() == [3.0, 4.0]
    M.t = jt.tensor([10.0, 20.0])
    assert compiled(x).tolist() == [12.0, 22.0]
    M.scale = -1.0
    assert compiled(x).tolist() == [9.0, 19.0]
    M.t.add_(1.0)  # in place: the same tensor, no new trace
    assert compiled(x).tolist() == [10.0, 20.0]
    assert fn.runs == 3
    guards = next(iter(compiled.cache.values())).guards()
    assert "python state: closure variable M.t is the same Tensor" in guards


def test_compiled_method_reading_a_nested_config_attribute_rebound_between_calls_uses_the_new_value():
    class Scaler(nn.Module):
        def __init__(self):
            super().__init__()
            self.cfg = types.SimpleNamespace(scale=2.0, sub=types.SimpleNamespace(w=jt.tensor(1.0)))
            self.mask = jt.tensor([1.0, 0.0])

        def forward(self, x):
            return x * self.cfg.scale * self.mask + self.cfg.sub.w

    model = Scaler()
    compiled = jt.compile(model)
    x = jt.ones(2)
    assert compiled(x).tolist() == [3.0, 1.0]
    model.cfg.scale = 5.0
    assert compiled(x).tolist() == [6.0, 1.0]
    model.mask = jt.tensor([0.0, 1.0])
    assert compiled(x).tolist() == [1.0, 6.0]
    model.cfg.sub.w = jt.tensor(-1.0)
    assert compiled(x).tolist() == [-1.0, 4.0]
    model.cfg.sub = types.SimpleNamespace(w=jt.tensor(0.5))
    assert compiled(x).tolist() == model(x).tolist() == [0.5, 5.5]


def test_compiled_module_retraces_when_a_parameter_is_replaced_but_not_when_it_is_updated_in_place():
    jt.manual_seed(0)
    linear = nn.Linear(2, 1)
    compiled = jt.compile(linear)
    x = jt.ones(1, 2)
    with jt.no_grad():
        compiled(x)
        (function,) = compiled._by_mode.values()
        linear.weight.mul_(2.0)  # an optimizer step: no new trace
        assert jt.allclose(compiled(x), linear(x))
        assert function.retrace_reason is None
        linear.weight = nn.Parameter(jt.tensor([[3.0, 4.0]]))
        assert jt.allclose(compiled(x), linear(x))
    assert "no longer true: self.weight is the same Parameter" in function.retrace_reason


def test_compiled_training_step_does_not_retrace_on_later_steps():
    jt.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = jt.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        loss = model(x).pow(2).sum()
        loss.backward()
        opt.step()
        return loss

    counted = counting(step)
    compiled = jt.compile(counted)
    x = jt.ones(2, 3)
    losses = [compiled(x).item() for _ in range(4)]
    assert losses == sorted(losses, reverse=True)
    assert counted.runs <= 2  # the first trace initialises the optimizer's state (one-shot), then one graph


def test_compiled_function_reading_an_attribute_not_set_yet_traces_again_once_it_is():
    holder = types.SimpleNamespace()

    def f(x):
        return x + holder.bias if "bias" in vars(holder) else x

    compiled = jt.compile(f)
    assert compiled(jt.zeros(1)).tolist() == [0.0]
    holder.bias = jt.tensor([2.0])
    assert compiled(jt.zeros(1)).tolist() == [2.0]


# state writes (fuzz seeds 4, 13, 23, ...: "captured M.stored0 after the call: unreadable TraceError")

def test_compiled_function_storing_a_tensor_on_a_python_module_leaves_a_real_tensor_there():
    M = types.ModuleType("state")
    M.count = 0

    def f(x):
        M.count += 1
        M.stored = x[:] * 2
        return x + 1

    compiled = jt.compile(f)
    for i in range(3):
        with pytest.warns(UserWarning, match=r"Python state \(M\.stored\)"):
            assert compiled(jt.full((2,), float(i))).tolist() == [i + 1.0] * 2
        assert type(M.stored._storage) is Storage and M.stored.tolist() == [2.0 * i] * 2
        assert M.count == i + 1  # the trace's own increment was taken back: the call ran once, eagerly


def test_compiled_function_appending_a_tensor_to_a_list_or_dict_it_reads_leaves_real_tensors():
    state = types.SimpleNamespace(history=[], by_name={})

    def f(x):
        y = x.exp()
        state.history.append(y)
        state.by_name["last"] = (y, 1)
        return y

    compiled = jt.compile(f)
    with pytest.warns(UserWarning, match="stores tensors"):
        out = compiled(jt.zeros(2))
    assert len(state.history) == 1 and state.history[0] is out
    assert state.by_name["last"][0] is out and type(out._storage) is Storage


def test_a_failed_trace_puts_back_what_it_stored_on_a_plain_object():
    state = types.SimpleNamespace(last=None)

    def f(x):
        state.last = x * 2
        return x if x.sum() > 0 else -x

    with pytest.raises(jt.jit.TraceError, match="on a traced tensor"):
        jt.compile(f, fullgraph=True)(jt.ones(2))
    assert state.last is None
