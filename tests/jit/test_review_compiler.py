"""Review of the compiler's Python-state handling: adversarial cases where a compiled call must
equal eager (aliasing with captured tensors, keyword arguments of compiled modules, tracing while
other threads run eagerly, Python state that keeps changing)."""

import re
import sys
import threading
import warnings

import numpy as np
import pytest

import jitorch as jt
from jitorch import nn


def test_an_input_that_is_a_mutated_captured_tensor_runs_as_eager():
    def make():
        w = jt.ones(3)

        def f(x):
            w.add_(x)
            return x * 2
        return w, f

    w_eager, f_eager = make()
    w_comp, f_comp = make()
    f_comp = jt.compile(f_comp)
    for _ in range(2):
        np.testing.assert_array_equal(f_comp(w_comp).numpy(), f_eager(w_eager).numpy())
        np.testing.assert_array_equal(w_comp.numpy(), w_eager.numpy())


def test_an_input_viewing_a_mutated_captured_tensor_sees_the_write():
    def make():
        w = jt.ones(2, 3)

        def f(x):
            w.mul_(2)
            return x + 1
        return w, f

    w_eager, f_eager = make()
    w_comp, f_comp = make()
    f_comp = jt.compile(f_comp)
    # traced and cached on separate memory first
    np.testing.assert_array_equal(f_comp(jt.zeros(3)).numpy(), f_eager(jt.zeros(3)).numpy())
    for _ in range(2):
        np.testing.assert_array_equal(f_comp(w_comp[0]).numpy(), f_eager(w_eager[0]).numpy())
        np.testing.assert_array_equal(w_comp.numpy(), w_eager.numpy())


def test_eager_ops_in_another_thread_are_not_traced():
    errors, stop = [], threading.Event()
    a = jt.arange(10.)

    def eager_worker():
        while not stop.is_set():
            try:
                float((a * 2 + 1).sum())
            except Exception as e:  # a trace in the main thread took over this thread's ops
                errors.append(e)
                return

    def f(x):
        for _ in range(30):
            x = x * 1.01 + 0.1
        return x

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    worker = threading.Thread(target=eager_worker)
    worker.start()
    try:
        for n in range(1, 16):
            jt.compile(f, backend="interpreter")(jt.ones(n))
    finally:
        stop.set()
        worker.join()
        sys.setswitchinterval(interval)
    assert errors == []


class Scaled(nn.Module):
    """A module whose forward takes keyword and non-tensor arguments and returns a dict."""

    def __init__(self):
        super().__init__()
        jt.manual_seed(0)
        self.lin = nn.Linear(4, 3)

    def forward(self, x, scale=1.0, mask=None):
        y = self.lin(x) * scale
        if mask is not None:
            y = y * mask
        return {"y": y, "n": 3, "pair": [y.sum(), None]}


def _grads_of_a_call(module, call):
    module.zero_grad()
    out = call(module)
    (out["y"].square().sum() + out["pair"][0]).backward()
    return [p.grad.numpy().copy() for p in module.parameters()], out


@pytest.mark.parametrize("call", [
    lambda m: m(jt.ones(2, 4), scale=2.0),
    lambda m: m(jt.ones(2, 4), mask=jt.full((2, 3), 0.5)),
    lambda m: m(jt.ones(2, 4), 3.0, None),
], ids=["float-kwarg", "tensor-kwarg", "positional-non-tensors"])
def test_a_compiled_module_called_with_keywords_or_numbers_differentiates_its_parameters(call):
    eager, model = Scaled(), Scaled()
    compiled = jt.compile(model)
    for _ in range(2):
        expected, eager_out = _grads_of_a_call(eager, call)
        got, out = _grads_of_a_call(compiled, call)
        assert out["n"] == 3 and out["pair"][1] is None
        assert out["y"].grad_fn is not None
        np.testing.assert_allclose(out["y"].detach().numpy(), eager_out["y"].detach().numpy(), rtol=1e-6)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_a_compiled_call_differentiates_a_tensor_keyword_argument():
    def f(x, *, w):
        return (x * w).sin(), x.cos()

    x, w = jt.randn(5, requires_grad=True), jt.randn(5, requires_grad=True)
    a, b = jt.compile(f)(x, w=w)
    (a.sum() + b.sum()).backward()
    gx, gw = x.grad.numpy().copy(), w.grad.numpy().copy()
    x.grad = w.grad = None
    a, b = f(x, w=w)
    (a.sum() + b.sum()).backward()
    np.testing.assert_allclose(gx, x.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gw, w.grad.numpy(), rtol=1e-6)


def _mlp():
    jt.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


@pytest.mark.parametrize("trainable_after", [False, True], ids=["freeze", "unfreeze"])
def test_freezing_or_unfreezing_a_parameter_after_a_compiled_call_retraces(trainable_after):
    eager, model = _mlp(), _mlp()
    compiled = jt.compile(model)
    x = jt.randn(5, 3)
    for flag in (not trainable_after, trainable_after):
        for m in (eager, model):
            m.zero_grad()
            m[0].weight.requires_grad_(flag)
        compiled(x).square().sum().backward()
        eager(x).square().sum().backward()
        for p, q in zip(model.parameters(), eager.parameters()):
            assert (p.grad is None) == (q.grad is None)
            if q.grad is not None:
                np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_python_state_that_changes_every_call_stops_retracing_at_the_recompile_limit(monkeypatch):
    monkeypatch.setattr(jt.jit.config, "recompile_limit", 3)
    scale = {"value": 1.0}
    traces = []

    def f(x):
        if jt.compiler.is_compiling():
            traces.append(scale["value"])
            seen = scale["value"]
            jt.compiler.guard(lambda: scale["value"] == seen, "the scale is unchanged")
        return x * scale["value"]

    compiled = jt.compile(f)
    with pytest.warns(UserWarning, match="retraced 3 times"):
        for step in range(8):
            scale["value"] = float(step)
            assert compiled(jt.ones(2)).tolist() == [float(step)] * 2
    assert len(traces) == 3


def _base_and_view():
    w = jt.zeros(2, 3)
    return w, w[0]


@pytest.mark.parametrize("body, eager", [
    (lambda w, wv, x: (w.add_(x), wv * 2)[1], False),  # the view, met after its base, reads the base's value
    (lambda w, wv, x: (wv.add_(x[0]), w * 2)[1], True),
], ids=["write-base-read-view", "write-view-read-base"])
def test_captured_tensors_sharing_memory_see_each_others_writes(body, eager):
    (w_e, wv_e), (w_c, wv_c) = _base_and_view(), _base_and_view()
    compiled = jt.compile(lambda x: body(w_c, wv_c, x))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            x = jt.ones(2, 3)
            np.testing.assert_array_equal(compiled(x).numpy(), body(w_e, wv_e, x).numpy())
            np.testing.assert_array_equal(w_c.numpy(), w_e.numpy())
    assert any(re.search("captured tensors .* share memory", str(w.message)) for w in caught) == eager


def test_a_returned_input_or_captured_tensor_is_the_tensor_itself():
    def scale(x):
        x.mul_(2)
        return x

    x = jt.arange(3.0)
    assert jt.compile(scale)(x) is x
    np.testing.assert_array_equal(x.numpy(), [0.0, 2.0, 4.0])
    transposed = jt.arange(6.0).reshape(2, 3).t()  # not compact: the graph works on a copy
    assert jt.compile(scale)(transposed) is transposed

    w = jt.ones(2)

    def bump(z):
        w.add_(z)
        return w, z * 1

    got, other = jt.compile(bump)(jt.ones(2))
    assert got is w and other is not w
    np.testing.assert_array_equal(w.numpy(), [2.0, 2.0])
    assert jt.compile(lambda x: x.t())(jt.ones(2, 3)).shape == (3, 2)  # a view is a new tensor


def test_a_graph_is_reused_when_the_python_state_it_assumed_comes_back():
    jt.manual_seed(0)
    net = jt.nn.Sequential(jt.nn.Linear(4, 4), jt.nn.Dropout(0.5))
    forward = jt.compile(lambda x: net(x))
    x = jt.randn(3, 4)
    graphs = set()
    with jt.no_grad():  # one guard key: only the modules' training flags change
        for _ in range(6):  # train/eval flips: more than the recompile limit allows traces
            net.train()
            forward(x)
            graphs.update(id(e.graph) for e in forward.cache.values())
            net.eval()
            np.testing.assert_allclose(forward(x).numpy(), net(x).numpy(), rtol=1e-6)
            graphs.update(id(e.graph) for e in forward.cache.values())
    assert len(graphs) == 2  # one graph per mode, each reused at every flip
    assert forward._stale == 1


def test_counted_increments_reads_the_counter_chain_off_the_graph():
    from jitorch import compiler
    counter, other = jt.tensor(3.0), jt.tensor(1.0)
    assert compiler.counted_increments(counter) is None  # outside a trace
    seen = {}

    def f(x, given):
        seen["none yet"] = compiler.counted_increments(counter)
        counter.add_(1)
        counter.add_(1)
        seen["two"] = compiler.counted_increments(counter)
        other.mul_(2)
        seen["multiplied"] = compiler.counted_increments(other)
        given.add_(1)
        seen["an input"] = compiler.counted_increments(given)
        return x + counter
    jt.compile(f)(jt.ones(2), jt.tensor(0.0))
    assert seen == {"none yet": 0, "two": 2, "multiplied": None, "an input": None}


def test_dynamic_scalars_are_written_before_every_call():
    from jitorch import compiler
    box = {"a": 1.5, "b": 2.0}
    assert compiler.dynamic_scalars(lambda: (box["a"], box["b"]), ("a", "b"), jt.float64) == (1.5, 2.0)
    f = jt.compile(lambda x: x * compiler.dynamic_scalars(lambda: (box["a"], box["b"]), ("a", "b"), jt.float64)[0]
                   + compiler.dynamic_scalars(lambda: (box["a"], box["b"]), ("a", "b"), jt.float64)[1])
    np.testing.assert_array_equal(f(jt.ones(2)).numpy(), [3.5, 3.5])
    box.update(a=-1.0, b=0.25)
    np.testing.assert_array_equal(f(jt.ones(2)).numpy(), [-0.75, -0.75])
    assert {"a", "b"} <= set(f.lower(jt.ones(2)).graph.constant_tensors)


def test_a_dynamic_scalar_is_written_before_every_call_as_fill_writes_it():
    """A float32 holder takes each new Python float straight into its memory, without a fill_ dispatch, rounded
    as fill_ rounds it; a value that overflows float32 raises fill_'s error."""
    from jitorch import compiler
    from jitorch.profiler import profile
    box = {"lr": 0.1}
    g = jt.compile(lambda x: x * compiler.dynamic_scalar(lambda: box["lr"], dtype=jt.float32))
    x = jt.ones(2, dtype=jt.float32)
    g(x)
    for lr in (1e-3 / 3, 3.4e38, float("inf"), 0.1):
        box["lr"] = lr
        expected = x * jt.zeros((), dtype=jt.float32).fill_(lr)
        with profile() as prof:
            out = g(x)
        assert out.numpy().tobytes() == expected.numpy().tobytes()
        assert not [e for e in prof.events() if e.name.startswith("aten::fill")]
    box["lr"] = 1e39
    with pytest.raises(RuntimeError, match="value cannot be converted to type float without overflow"):
        g(x)
