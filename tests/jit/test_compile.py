"""`jitorch.compile`: decorator forms, the cache and its guards, eager fallback, lower, explain, logs."""

import importlib
import logging
import warnings

import numpy as np
import pytest

import jitorch as jt
from jitorch.jit import TraceError
from tests.ops.test_registry import OVERFLOWING_SIZES


def counting(fn):
    """``fn`` wrapped to count how often Python runs it (traces plus eager runs)."""
    def wrapped(*args, **kwargs):
        wrapped.runs += 1
        return fn(*args, **kwargs)
    wrapped.runs = 0
    wrapped.__name__ = fn.__name__
    return wrapped


def test_decorator_forms():
    @jt.compile
    def a(x):
        return x + 1

    @jt.compile(fullgraph=True, backend="interpreter")
    def b(x):
        return x * 2

    c = jt.compile(lambda x: x - 1)
    x = jt.ones(2)
    assert a(x).tolist() == [2.0, 2.0] and b(x).tolist() == [2.0, 2.0] and c(x).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        jt.compile(lambda x: x, backend="tpu")


def test_callable_objects_compile():
    class Scale:
        def __init__(self):
            self.w = jt.full((3,), 2.0)

        def __call__(self, x):
            return x * self.w

    s = Scale()
    f = jt.compile(s)
    assert f(jt.ones(3)).tolist() == [2.0, 2.0, 2.0]
    assert list(f.lower(jt.ones(3)).graph.constants) == ["w"]


def test_second_call_reuses_the_graph():
    fn = counting(lambda x: x.exp())
    f = jt.compile(fn)
    x = jt.arange(3.0)
    r1, r2 = f(x), f(x)
    assert fn.runs == 1
    np.testing.assert_allclose(r2.numpy(), np.exp(np.arange(3.0)), rtol=1e-6)
    assert r1 is not r2 and r1.untyped_storage() is not r2.untyped_storage()


@pytest.mark.parametrize("first, second", [
    (jt.ones(3), jt.ones(4)),                                   # shape
    (jt.ones(3), jt.ones(3, dtype=jt.float64)),                 # dtype
    (jt.ones(2, 3), jt.ones(3, 2).t()),                         # contiguity
    (jt.ones(3), jt.ones(3, requires_grad=True)),               # requires_grad
])
def test_each_tensor_guard_retraces(first, second):
    fn = counting(lambda x: x * 2)
    f = jt.compile(fn)
    f(first)
    f(first)
    f(second)
    # a call whose output requires grad also traces the joint forward and backward it runs (jit.partition)
    assert fn.runs == 2 + second.requires_grad and len(f.cache) == 2


def test_python_scalars_are_guarded_by_value():
    fn = counting(lambda x, n: x * n)
    f = jt.compile(fn)
    x = jt.ones(2)
    assert f(x, 2).tolist() == [2.0, 2.0]
    assert f(x, 3).tolist() == [3.0, 3.0]
    f(x, 3)
    assert fn.runs == 2


def test_the_default_dtype_is_guarded():
    fn = counting(lambda x: x + 1.5 * jt.ones(2))
    f = jt.compile(fn)
    x = jt.ones(2, dtype=jt.int64)
    assert f(x).dtype == jt.float32
    jt.set_default_dtype(jt.float64)
    try:
        assert f(x).dtype == jt.float64  # not the float32 graph traced before
    finally:
        jt.set_default_dtype(jt.float32)
    assert f(x).dtype == jt.float32 and fn.runs == 2
    assert "default dtype: jitorch.float32" in str(jt.explain(f, x))


def test_recompile_limit_warns_once_then_runs_eagerly(monkeypatch):
    monkeypatch.setattr(jt.jit.config, "recompile_limit", 2)
    fn = counting(lambda x: x + 1)
    f = jt.compile(fn)
    f(jt.ones(1))
    f(jt.ones(2))
    with pytest.warns(UserWarning, match="retraced 2 times"):
        assert f(jt.ones(3)).tolist() == [2.0] * 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(jt.ones(4))
    assert len(f.cache) == 2


def test_untraceable_function_runs_eagerly_with_one_warning():
    def f(x):
        return x * 2 if x.sum() > 0 else x

    g = jt.compile(f)
    with pytest.warns(UserWarning, match="running f eagerly: bool"):
        assert g(jt.ones(2)).tolist() == [2.0, 2.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert g(jt.ones(2)).tolist() == [2.0, 2.0]


def test_fullgraph_raises_trace_error():
    g = jt.compile(lambda x: x.tolist(), fullgraph=True)
    with pytest.raises(TraceError, match=r"\.tolist\(\)"):
        g(jt.ones(2))


def test_mutated_inputs_are_written_back_each_call():
    @jt.compile
    def step(p, g):
        p.sub_(g, alpha=0.5)
        return p.sum()

    p = jt.ones(3)
    for _ in range(3):
        step(p, jt.ones(3))
    assert p.tolist() == [-0.5] * 3
    assert p._version == 3


def test_compiled_method_has_a_cache_per_instance():
    class Model:
        def __init__(self, k):
            self.k = jt.full((2,), float(k))

        @jt.compile
        def forward(self, x):
            return x * self.k

    a, b = Model(2), Model(3)
    assert a.forward(jt.ones(2)).tolist() == [2.0, 2.0]
    assert b.forward(jt.ones(2)).tolist() == [3.0, 3.0]


def test_lower_gives_graph_and_text():
    f = jt.compile(lambda x, y: (x @ y).relu())
    low = f.lower(jt.ones(2, 3), jt.ones(3, 4))
    assert [n.op.name for n in low.graph.nodes] == ["matmul", "relu"]
    assert low.text() == str(low.graph) and "f32[2, 4] = relu(%0)" in low.text()


def test_explain_reports_graph_guards_and_eager_reasons():
    report = jt.explain(lambda x: (x * 2).sum(), jt.ones(3))
    text = str(report)
    assert "traced: 1 inputs, 0 constants, 2 nodes (mul, sum)" in text
    assert "x: Tensor shape=[3] dtype=jitorch.float32 device=cpu contiguous requires_grad=False" in text
    assert "= mul(%x, 2)" in text
    eager = str(jt.explain(lambda x: x.item(), jt.ones(1)))
    assert "runs eagerly: .item() on a traced tensor" in eager


def test_explain_of_a_compiled_function_shows_its_cache():
    f = jt.compile(lambda x: x + 1)
    f(jt.ones(2))
    assert "these arguments reuse one" in str(jt.explain(f, jt.ones(2)))
    assert "cache: 2 entries" in str(jt.explain(f, jt.ones(5)))


def test_logs_show_graphs_guards_and_recompiles(caplog):
    jt.runtime.logs.set_logs("graph,guards,recompiles")
    try:
        f = jt.compile(lambda x: x + 1)
        with caplog.at_level(logging.INFO, logger="jitorch"):
            f(jt.ones(2))
            f(jt.ones(3))
        text = caplog.text
        assert "traced <lambda>" in text and "= add(%x, 1)" in text
        assert "guards of <lambda> entry 1" in text
        assert "retracing <lambda>: shape of x changed from [2] to [3]" in text
    finally:
        jt.runtime.logs.set_logs("")


def test_write_backs_read_every_value_before_writing():
    @jt.compile
    def swap(a, b):
        old = a.clone()
        a.copy_(b)
        b.copy_(old)
        return a.sum()

    a, b = jt.zeros(2), jt.ones(2)
    swap(a, b)
    assert a.tolist() == [1.0, 1.0] and b.tolist() == [0.0, 0.0]
    swap(a, b)
    assert a.tolist() == [0.0, 0.0] and b.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("name,fn,error,match", OVERFLOWING_SIZES, ids=[c[0] for c in OVERFLOWING_SIZES])
def test_compiled_sizes_overflowing_int64_raise_as_eager_while_tracing(name, fn, error, match):
    """The trace's meta rules raise eager's error: no graph with an impossible shape runs (it gave zeros)."""
    compiled = jt.compile(fn, fullgraph=True)
    with pytest.raises(error, match=match):
        compiled(jt.ones(3))
    assert not compiled.cache


def test_compiled_function_of_meta_tensors_runs_eagerly_not_kernels_over_no_memory():
    """A compiled CPU kernel read a meta tensor's missing data: the process died (segmentation fault)."""
    f = jt.compile(lambda a: a * 2)
    with pytest.warns(UserWarning, match="meta device"):
        out = f(jt.ones(2, device="meta"))
    assert out.device.type == "meta" and tuple(out.shape) == (2,)


def test_a_call_that_needs_a_backward_takes_the_fast_path_after_its_first(monkeypatch):
    compile_module = importlib.import_module("jitorch.jit.compile")  # (jitorch.jit.compile is the function)
    f = jt.compile(lambda x, w: (x * w).sin())
    x, w = jt.randn(5), jt.randn(5, requires_grad=True)
    f(x, w).sum().backward()
    keys = []
    guard_key = compile_module.guard_key
    monkeypatch.setattr(compile_module, "guard_key", lambda *a: keys.append(a) or guard_key(*a))
    w.grad = None
    out = f(x, w)
    assert keys == []  # no pytree guard key: the flat key of its tensors found the entry
    assert out.grad_fn.name() == "CompiledCallBackward"
    out.sum().backward()
    # within float32 rounding, not bits: eager cos is NumPy's and the compiled one jitorch's math library, which
    # differ in the last bit on some inputs (docs/differences-from-torch.md); this test is about the fast path
    np.testing.assert_allclose(w.grad.numpy(), ((x * w.detach()).cos() * x).numpy(), rtol=1e-6, atol=1e-7)
    with jt.no_grad():  # grad mode is in the key: no backward node then
        assert f(x, w).grad_fn is None
    assert f(x, w.detach()).grad_fn is None  # nor for a w that does not require grad
    (entry,) = [e for e in f.cache.values() if e.calls == 2]
    assert entry.with_backward
