"""Compiled calls change the geometry of the caller's tensors as eager does: in-place view ops on an
input or captured tensor (``x.t_()``) and ``out=`` tensors resized to their result's shape. Each case
runs under torch, eagerly, compiled and with the interpreter backend, and compares the results, the
warnings and the caller's tensors' shapes, strides and offsets afterwards."""

import types
import warnings

import pytest
import torch

import jitorch as jt


def _layout(t):
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


def _observe(lib, fn, compiled=None):
    """Two calls of ``fn(lib, x, M)``: per call the results (layout, values, whether it is ``x``), the
    warnings, and ``x``'s and ``M.w``'s layout and values after it."""
    run = fn if compiled is None else jt.compile(lambda x, M: fn(lib, x, M), backend=compiled)
    seen = []
    for _ in range(2):
        x = lib.arange(6.0).reshape(2, 3)
        M = types.SimpleNamespace(w=lib.arange(4.0).reshape(1, 4))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = run(lib, x, M) if compiled is None else run(x, M)
        results = result if isinstance(result, tuple) else (result,)
        seen.append(([(_layout(r), r.tolist(), r is x) for r in results],
                     [str(w.message).split(" (Triggered internally")[0] for w in caught
                      if "jitorch.compile" not in str(w.message)],
                     _layout(x), x.tolist(), _layout(M.w), M.w.tolist()))
    return seen


def _check_every_mode(fn):
    expected = _observe(torch, fn)
    assert _observe(jt, fn) == expected
    assert _observe(jt, fn, compiled="llvm") == expected
    assert _observe(jt, fn, compiled="interpreter") == expected


INPLACE_VIEWS = {
    "t_": lambda T, x, M: x.t_(),
    "t_ then read": lambda T, x, M: (x.t_(), x.sum(1))[1],
    "unsqueeze_ then mul": lambda T, x, M: x.unsqueeze_(0).mul(2),
    "squeeze_ of a view and itself": lambda T, x, M: (x[None].squeeze_(), x.squeeze_())[1],
    "transpose_ then add_": lambda T, x, M: (x.transpose_(0, 1), x.add_(1))[1],
    "swapdims_": lambda T, x, M: x.swapdims_(1, 0),
    "as_strided_ with an offset": lambda T, x, M: x.as_strided_((2, 2), (1, 2), 1),
    "captured t_": lambda T, x, M: (M.w.t_(), x * 2)[1],
    "captured unsqueeze_ returned": lambda T, x, M: M.w.unsqueeze_(0),
    # Python reads a captured tensor's geometry after an in-place view op (fuzz seed 2200742): the trace
    # read the geometry from before it (an IndexError, or silently other values)
    "captured squeeze_ then index assignment": lambda T, x, M: (M.w.squeeze_(), M.w.__setitem__(1, -1.5), x)[2],
    "captured t_ then shape read": lambda T, x, M: (M.w.t_(), x * M.w.shape[0])[1],
    "captured transpose_ then len": lambda T, x, M: (M.w.transpose_(0, 1), x * len(M.w))[1],
    "captured swapaxes_ then iteration": lambda T, x, M: (M.w.swapaxes_(1, 0), x + sum(M.w))[1],
    "captured swapdims_ then stride read": lambda T, x, M: (M.w.swapdims_(0, 1), x * M.w.stride(0))[1],
    "captured unsqueeze_ then ndim": lambda T, x, M: (M.w.unsqueeze_(-1), x * M.w.ndim, M.w[0, 1])[1:],
    "captured as_strided_ then index": lambda T, x, M: (M.w.as_strided_((2, 2), (1, 2), 0), M.w[1] * x[:, :2])[1],
    # a graph cannot give the caller's tensor other memory: these run eagerly
    "captured .data replaced": lambda T, x, M: (setattr(M.w, "data", x * 3), M.w + 1)[1],
    "input .data replaced": lambda T, x, M: (setattr(x, "data", M.w), x + 1)[1],
}


@pytest.mark.parametrize("name", INPLACE_VIEWS)
def test_inplace_view_op_changes_callers_tensor_geometry(name):
    _check_every_mode(INPLACE_VIEWS[name])


def _calls_on_one_captured_tensor(lib, fn, make, compiled=None, calls=3):
    """``calls`` calls of ``fn(lib, x, c)`` on one captured tensor ``c``: per call the result's values and
    ``c``'s layout and values after it."""
    c = make(lib)
    run = (lambda x: fn(lib, x, c)) if compiled is None else jt.compile(lambda x: fn(lib, x, c), backend=compiled)
    seen = []
    for i in range(calls):
        result = run(lib.full((2,), float(i)))
        seen.append((result.tolist(), _layout(c), c.tolist()))
    return seen, run


RESHAPED_AT_EACH_CALL = {
    # the fuzz program of seed 2200742: a 0-d tensor gains a dim at each call
    "unsqueeze_ then index assignment": (lambda T, x, c: (c.unsqueeze_(-1), c.__setitem__(slice(None, None, 2), x[0]),
                                                          x + c.sum())[2], lambda T: T.tensor(2.0)),
    "t_ then shape read": (lambda T, x, c: x * c.shape[0] + c.sum(0)[:2], lambda T: T.arange(6.0).reshape(2, 3)),
    "squeeze_ of a tensor squeezed before": (lambda T, x, c: (c.squeeze_(), x * c.ndim)[1],
                                             lambda T: T.arange(4.0).reshape(1, 4, 1)),
}


@pytest.mark.parametrize("name", RESHAPED_AT_EACH_CALL)
def test_a_captured_tensor_reshaped_at_each_call_gets_a_graph_for_its_geometry(name):
    """A graph that reshapes a captured tensor is guarded on the tensor's geometry: the next call finds it
    reshaped and traces again (the graph ran on it as traced, silently, or the interpreter refused it)."""
    fn, make = RESHAPED_AT_EACH_CALL[name]
    if name.startswith("t_"):
        fn = (lambda body: lambda T, x, c: (c.t_(), body(T, x, c))[1])(fn)
    expected, _ = _calls_on_one_captured_tensor(torch, fn, make)
    assert _calls_on_one_captured_tensor(jt, fn, make)[0] == expected
    for backend in ("llvm", "interpreter"):
        got, compiled = _calls_on_one_captured_tensor(jt, fn, make, compiled=backend)
        assert got == expected, backend


def test_a_captured_tensor_transposed_at_each_call_takes_up_its_earlier_graph():
    traced = []

    def fn(x):
        traced.append(tuple(c.shape))
        c.t_()
        return x * c.shape[0]

    c = jt.ones(2, 3)
    compiled = jt.compile(fn)
    assert [compiled(jt.ones(1)).tolist() for _ in range(4)] == [[3.0], [2.0], [3.0], [2.0]]
    assert traced == [(2, 3), (3, 2)] and c.shape == (2, 3)


def test_a_trace_that_fails_after_an_inplace_view_op_leaves_the_captured_tensor_as_it_was():
    """The trace reshapes the captured tensor for Python to read; the eager run it falls back to must start
    from the tensor's own geometry, not the trace's."""
    c = jt.arange(6.0).reshape(2, 3)

    def fn(x):
        c.t_()
        return x * c.nonzero().shape[0]  # an output size the data decides: no graph

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = jt.compile(fn)(jt.ones(1))
    assert any("running fn eagerly" in str(w.message) for w in caught)
    assert result.tolist() == [5.0] and c.shape == (3, 2) and c.stride() == (1, 3)


def test_t_on_input_compiled_records_a_geometry_change():
    compiled = jt.compile(lambda x: x.t_())
    x = jt.ones(2, 3)
    assert compiled(x) is x
    graph = next(iter(compiled.cache.values())).graph
    assert graph.geometry_changes == {0: ((3, 2), (1, 3), 0)}
    assert not graph.mutations


RESIZED_OUTS = {
    "mul into an empty tensor": lambda T, x, M: (lambda o: (T.mul(x, 2.5, out=o), o)[1])(T.zeros((0,))),
    "mul into a smaller tensor": lambda T, x, M: (lambda o: (T.mul(x, 2.5, out=o), o + 1)[1])(T.zeros((2,))),
    "stack into a double tensor": lambda T, x, M: (lambda o: (T.stack([x, x], out=o), o)[1])(
        T.zeros((1,), dtype=T.float64)),
    "add into an empty view of the input": lambda T, x, M: (T.mul(x, 2, out=x[:0]), x)[1],
    "mul into a view of a larger local": lambda T, x, M: (lambda o: (T.mul(x, 3, out=o[2:3]), o)[1])(
        T.ones((9,))),
}


@pytest.mark.parametrize("name", RESIZED_OUTS)
def test_out_of_another_shape_is_resized_when_compiled(name):
    _check_every_mode(RESIZED_OUTS[name])


def test_out_resize_of_an_input_past_its_memory_runs_eagerly():
    def f(x, o):
        jt.mul(x, 2, out=o)
        return o

    x, o = jt.arange(6.0), jt.zeros(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jt.compile(f)(x, o)
    messages = [str(w.message) for w in caught]
    assert any("running f eagerly: an out= tensor over an input's" in m for m in messages)
    assert any(m.startswith("An output with one or more elements was resized") for m in messages)
    assert o.shape == (6,) and o.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
