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
}


@pytest.mark.parametrize("name", INPLACE_VIEWS)
def test_inplace_view_op_changes_callers_tensor_geometry(name):
    _check_every_mode(INPLACE_VIEWS[name])


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
