"""A compiled function guards the closure variables and globals it reads: rebinding one between calls
traces again (issue 15: later calls used the first binding), as torch.compile's guards do."""

import jitorch as jt
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
