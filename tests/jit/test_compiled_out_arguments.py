"""``out=`` arguments inside compiled functions behave as eagerly and in torch: the out= autograd rule
(an op refuses to write into ``out=`` while an input or the out tensor requires grad, before anything is
written; softmax's out= form gives a result whose backward raises), the plain write of a result without
history (``gt`` into a float tensor that requires grad), and an out= tensor resized to its result. Each
case runs under torch, eagerly, compiled and with the interpreter backend, twice, and compares results
or errors, warnings and the caller's tensors afterwards."""

import types
import warnings

import pytest
import torch

import jitorch as jt
from jitorch.jit.tracer import trace


def _rounded(values):
    if isinstance(values, list):
        return [_rounded(v) for v in values]
    return float(f"{values:.5g}") if isinstance(values, float) else values


def _tensor_state(t):
    return tuple(t.shape), tuple(t.stride()), str(t.dtype).split(".")[-1], _rounded(t.tolist()), t.requires_grad


def _outcome(run, lib, x, M):
    """The call's results (state, whether they have history), or the error it raised."""
    try:
        result = run(lib, x, M)
    except RuntimeError as e:
        return "raised", str(e)
    results = result if isinstance(result, tuple) else (result,)
    return [(_tensor_state(r), r.grad_fn is not None) for r in results]


def _observe(lib, fn, backend=None, x_requires_grad=False):
    """Two calls of ``fn(lib, x, M)`` (``M.leaf`` a leaf that requires grad, ``M.b`` a captured tensor):
    per call the outcome, the warnings, and ``x``'s, ``M.leaf``'s and ``M.b``'s state afterwards."""
    compiled = None if backend is None else jt.compile(lambda x, M: fn(lib, x, M), backend=backend)
    run = fn if compiled is None else (lambda lib, x, M: compiled(x, M))
    seen = []
    for _ in range(2):
        x = (lib.arange(6.0).reshape(2, 3) - 2).requires_grad_(x_requires_grad)
        M = types.SimpleNamespace(leaf=lib.zeros(2, 3, requires_grad=True), b=lib.zeros(3, 4))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outcome = _outcome(run, lib, x, M)
        seen.append((outcome, [str(w.message)[:60] for w in caught], _tensor_state(x), _tensor_state(M.leaf),
                     _tensor_state(M.b)))
    return seen


def _check_every_mode(fn, x_requires_grad=False):
    expected = _observe(torch, fn, x_requires_grad=x_requires_grad)
    assert _observe(jt, fn, x_requires_grad=x_requires_grad) == expected
    for backend in ("llvm", "interpreter"):
        assert _observe(jt, fn, backend, x_requires_grad) == expected


# name -> fn(T, x, M), called with x requiring grad
INPUT_REQUIRES_GRAD = {
    "exp": lambda T, x, M: T.exp(x, out=T.zeros(2, 3)),
    "add into a float64 out": lambda T, x, M: T.add(x, 1, out=T.zeros(2, 3, dtype=T.float64)),
    "sum": lambda T, x, M: T.sum(x, 1, out=T.zeros(2)),
    "matmul": lambda T, x, M: T.matmul(x, x.t(), out=T.zeros(2, 2)),
    "cat": lambda T, x, M: T.cat([x, x], out=T.zeros(4, 3)),
    "exp into a captured tensor": lambda T, x, M: (T.exp(x, out=M.b[:2, :3]), M.b)[1],
    "softmax (autograd fallback)": lambda T, x, M: T.softmax(x, 1, out=T.zeros(2, 3)),
    "softmax resized, then used": lambda T, x, M: T.softmax(x, 1, out=T.zeros(0)) * 2,
    "softmax's backward raises": lambda T, x, M: T.autograd.grad(T.softmax(x, 1, out=T.zeros(2, 3)).sum(), x),
    "argmax (not differentiable)": lambda T, x, M: T.argmax(x, 1, out=T.zeros(2, dtype=T.int64)),
    "eq (not differentiable)": lambda T, x, M: T.eq(x, 0, out=T.zeros(2, 3)),
}


@pytest.mark.parametrize("name", INPUT_REQUIRES_GRAD)
def test_compiled_out_with_an_input_that_requires_grad_follows_the_autograd_rule(name):
    _check_every_mode(INPUT_REQUIRES_GRAD[name], x_requires_grad=True)


def _no_grad(T, f):
    with T.no_grad():
        return f()


# name -> fn(T, x, M), writing into M.leaf (a leaf that requires grad)
INTO_A_LEAF = {
    "exp": lambda T, x, M: T.exp(x, out=M.leaf),
    "add of integers": lambda T, x, M: T.add(x.long(), 1, out=M.leaf),
    "sum into a row": lambda T, x, M: T.sum(x, 0, out=M.leaf[0]),
    "exp under no_grad": lambda T, x, M: _no_grad(T, lambda: T.exp(x, out=M.leaf)),
    "gt (not differentiable)": lambda T, x, M: T.gt(x, 0, out=M.leaf),
    "gt, then used": lambda T, x, M: T.gt(x, 0, out=M.leaf) * 2,
}


@pytest.mark.parametrize("name", INTO_A_LEAF)
def test_compiled_out_into_a_leaf_that_requires_grad_follows_the_autograd_rule(name):
    _check_every_mode(INTO_A_LEAF[name])


# name -> fn(T, x, M), whose out= tensor the function makes in a size other than its result's
RESIZED = {
    "sum into a larger tensor": lambda T, x, M: T.sum(x, 1, out=T.zeros(5)),
    "exp into a larger tensor": lambda T, x, M: T.exp(x, out=T.zeros(20)),
    "index_select into a larger tensor": lambda T, x, M: T.index_select(x, 1, T.tensor([2, 0]), out=T.zeros(7)),
    "exp of a transposed input into an empty tensor": lambda T, x, M: T.exp(x.t(), out=T.zeros(0)),
    "exp of a transposed input into a smaller tensor": lambda T, x, M: T.exp(x.t(), out=T.zeros(5)),
    "cumsum of a transposed input": lambda T, x, M: T.cumsum(x.t(), 1, out=T.zeros(0)),
    "sort of a transposed input": lambda T, x, M: tuple(T.sort(x.t(), 1, out=(T.zeros(0), T.zeros(4, dtype=T.int64)))),
    "mul into a transposed tensor": lambda T, x, M: (lambda o: (T.mul(x, 2, out=o), o)[1])(T.zeros(2, 2).t()),
    "resized, then read through a view": lambda T, x, M: (lambda o: (T.mul(x, 2, out=o), o[1])[1])(T.zeros(4)),
}


@pytest.mark.parametrize("name", RESIZED)
def test_compiled_out_made_in_another_size_is_resized_as_eagerly(name):
    _check_every_mode(RESIZED[name])


def test_out_grad_refusal_raised_by_the_trace_writes_nothing():
    compiled = jt.compile(lambda x, o: jt.exp(x, out=o))
    o = jt.zeros(2, 3)
    with pytest.raises(RuntimeError, match=r"exp\(\): functions with out=\.\.\. arguments don't support"):
        compiled(jt.ones(2, 3, requires_grad=True), o)
    assert o.tolist() == [[0.0] * 3] * 2 and not o.requires_grad
    with jt.no_grad():  # the graph traced without grad is not reused with it
        compiled(jt.ones(2, 3, requires_grad=True), o)
    with pytest.raises(RuntimeError, match="functions with out="):
        compiled(jt.ones(2, 3, requires_grad=True), jt.zeros(2, 3))


def test_plain_out_write_is_recorded_without_a_copy_node():
    graph = trace(lambda x, o: jt.exp(x, out=o), jt.ones(2, 3), jt.zeros(2, 3))
    assert [n.op.name for n in graph.nodes] == ["exp"]
    assert len(graph.mutations) == 1


def test_resized_out_is_written_through_its_new_geometry():
    # the trace read the out tensor's old value (shape [5]) after resizing it: the interpreter refused the graph
    graph = trace(lambda x: jt.sum(x, 1, out=jt.zeros(5)), jt.ones(2, 3))
    assert [n.op.name for n in graph.nodes] == ["zeros", "sum", "as_strided_scatter"]
    assert graph.nodes[-1].args[1].type.shape == (2,)
