"""A captured tensor reshaped or given other memory OUTSIDE the compiled function between calls (``c.t_()``,
``c.unsqueeze_(0)``, ``c.data = other``) makes the next call trace again, as torch.compile's guards do: the
graph kept reading (and returning, and writing) the tensor in its traced geometry, silently, or past its
memory. Each case runs under torch, eagerly, compiled and with the interpreter backend over several calls,
and compares the results and the captured tensor's layout and values after each call."""

import types
import warnings

import pytest
import torch

import jitorch as jt
from jitorch import nn
from jitorch.jit import captures
from jitorch.tensor import GEOMETRY_EPOCH


def _layout(t):
    return tuple(t.shape), tuple(t.stride()), t.storage_offset(), str(t.dtype).split(".")[-1]


BODIES = {
    "reads values and shape": lambda T, x, c: c * x + c.shape[0],
    "returns a view of it": lambda T, x, c: c[0],
    "returns it": lambda T, x, c: (x, c)[1],
    "writes into it": lambda T, x, c: (c.add_(x), c.sum(-1))[1],
}

# (what the captured tensor starts as, what is done to it outside the function between calls)
CHANGES = {
    "unsqueeze_": (lambda T: T.arange(6.0).reshape(2, 3), lambda T, c: c.unsqueeze_(0)),
    "squeeze_": (lambda T: T.arange(6.0).reshape(1, 2, 1, 3), lambda T, c: c.squeeze_(0)),
    "t_": (lambda T: T.arange(6.0).reshape(2, 3), lambda T, c: c.t_()),
    "transpose_": (lambda T: T.arange(6.0).reshape(2, 3), lambda T, c: c.transpose_(0, 1)),
    "swapdims_": (lambda T: T.arange(6.0).reshape(2, 3), lambda T, c: c.swapdims_(1, 0)),
    "swapaxes_": (lambda T: T.arange(6.0).reshape(2, 3), lambda T, c: c.swapaxes_(0, 1)),
    "as_strided_ with an offset": (lambda T: T.arange(6.0).reshape(2, 3),
                                   lambda T, c: c.as_strided_((2, 2), (1, 2), 1)),
    "resized as an out= tensor": (lambda T: T.arange(6.0).reshape(2, 3),
                                  lambda T, c: T.mul(T.arange(4.0), 2, out=c)),
    ".data of another shape": (lambda T: T.arange(6.0).reshape(2, 3), lambda T, c: setattr(c, "data", T.arange(4.0))),
    ".data of another dtype": (lambda T: T.arange(6.0).reshape(2, 3), lambda T, c: setattr(c, "data", c.double())),
    ".data of a transposed tensor": (lambda T: T.arange(6.0).reshape(2, 3),
                                     lambda T, c: setattr(c, "data", T.arange(6.0).reshape(3, 2).t())),
    ".data of a view with an offset": (lambda T: T.arange(6.0).reshape(2, 3),
                                       lambda T, c: setattr(c, "data", T.arange(9.0)[3:].reshape(2, 3))),
    ".data of new memory like its own": (lambda T: T.arange(6.0).reshape(2, 3),
                                         lambda T, c: setattr(c, "data", c * 10)),
}


def _calls(lib, body, change, backend=None):
    """Five calls of ``body`` on one captured tensor, changed outside the function after the first and the
    third: per call the result's layout and values and the captured tensor's after it."""
    make, reshape = CHANGES[change]
    c = make(lib)
    fn = (lambda x: BODIES[body](lib, x, c))
    run = fn if backend is None else jt.compile(fn, backend=backend)
    seen = []
    for i in range(5):
        result = run(lib.full((1,), float(i)))
        seen.append((_layout(result), result.tolist(), _layout(c), c.tolist()))
        if i in (0, 2):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch's and jitorch's warning of a resized out= tensor
                reshape(lib, c)
    return seen, run


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("change", CHANGES)
def test_captured_tensor_reshaped_outside_the_compiled_function_between_calls(change, body):
    expected, _ = _calls(torch, body, change)
    assert _calls(jt, body, change)[0] == expected
    for backend in ("llvm", "interpreter"):
        got, compiled = _calls(jt, body, change, backend)
        assert got == expected, backend
        if change == ".data of new memory like its own":  # same geometry, same size of memory: no new trace
            assert len(compiled.cache) == 1 and compiled.retrace_reason is None
        else:
            assert "have the geometry and memory they were traced with" in compiled.retrace_reason


def test_captured_tensor_changed_back_takes_up_its_first_graph():
    traced = []
    c = jt.arange(6.0).reshape(2, 3)

    def fn(x):
        traced.append(tuple(c.shape))
        return x + c

    compiled = jt.compile(fn)
    for _ in range(4):
        assert compiled(jt.ones(1)).tolist() == (jt.ones(1) + c).tolist()
        c.t_()
    assert traced == [(2, 3), (3, 2)] and c.shape == (2, 3)


def test_module_attribute_reshaped_outside_the_compiled_function():
    def run(lib, backend=None):
        M = types.SimpleNamespace(w=lib.arange(4.0).reshape(1, 4))
        fn = (lambda x: x * M.w)
        fn = fn if backend is None else jt.compile(fn, backend=backend)
        seen = [fn(lib.ones(1)).tolist()]
        M.w.unsqueeze_(-1)
        seen.append(fn(lib.ones(1)).tolist())
        M.w.squeeze_()
        return seen + [fn(lib.ones(1)).tolist()]
    expected = run(torch)
    assert run(jt, "llvm") == run(jt, "interpreter") == expected


def test_module_parameters_given_another_dtype_after_compiling():
    """``model.double()`` gives the parameters new memory of another dtype through ``p.data =``."""
    jt.manual_seed(0)
    model = nn.Linear(3, 2)
    compiled = jt.compile(model)
    with jt.no_grad():
        assert compiled(jt.ones(1, 3)).dtype == jt.float32
        model.double()
        x = jt.ones(1, 3, dtype=jt.float64)
        result = compiled(x)
    assert result.dtype == jt.float64 and result.tolist() == model(x).tolist()


def test_captured_tensors_made_to_share_memory_see_each_others_writes():
    """``b.data = a`` outside: the graph treated b and a as separate memory."""
    def run(lib, backend=None):
        a, b = lib.zeros(3), lib.ones(3)

        def fn(x):
            a.add_(x)
            return b * 2
        fn = fn if backend is None else jt.compile(fn, backend=backend)
        seen = [fn(lib.ones(1)).tolist()]
        b.data = a
        return seen + [fn(lib.ones(1)).tolist(), fn(lib.ones(1)).tolist(), a.tolist(), b.tolist()]
    expected = run(torch)
    assert run(jt, "llvm") == run(jt, "interpreter") == expected


METADATA_OPS = {
    **{name: reshape for name, (_, reshape) in CHANGES.items()},
    "unsqueeze_ of a tensor used by no graph": lambda T, c: c[0].unsqueeze_(0),
}


@pytest.mark.parametrize("name", METADATA_OPS)
def test_every_inplace_metadata_change_moves_the_geometry_epoch(name):
    """Compiled calls re-read their captured tensors only when `GEOMETRY_EPOCH` moved: every way of changing
    a tensor's geometry or memory must move it."""
    c = jt.arange(6.0).reshape(2, 3)
    before = GEOMETRY_EPOCH[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        METADATA_OPS[name](jt, c)
    assert GEOMETRY_EPOCH[0] > before


def test_compiled_calls_read_their_captured_tensors_geometry_only_after_a_geometry_change(monkeypatch):
    ps = [jt.ones(2) for _ in range(3)]
    compiled = jt.compile(lambda x: x + ps[0] + ps[1] + ps[2])
    x = jt.ones(2)
    compiled(x)
    reads = []
    geometry = captures._geometry
    monkeypatch.setattr(captures, "_geometry", lambda tensors: reads.append(len(tensors)) or geometry(tensors))
    for _ in range(3):
        compiled(x)
    assert reads == []  # nothing moved the epoch
    jt.zeros(2, 3).t_()  # any tensor's
    compiled(x)
    compiled(x)
    assert reads == [3]
