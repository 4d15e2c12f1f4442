"""Tensor values read into Python while tracing (``item``, ``tolist``) and tensors the traced code makes from
Python data (``jitorch.tensor([...])``): compiled calls give eager's results at every call."""

import warnings

import pytest

import jitorch as jt
from jitorch.jit import trace
from tests.jit.test_compile import counting

BACKENDS = ["llvm", "interpreter"]


def compiled(fn, backend):
    return jt.compile(fn, backend=backend) if backend != "llvm" else jt.compile(fn)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tensor_made_from_data_and_written_in_place_starts_from_its_data_at_every_call(backend):
    """Fuzz seed 1001586: the tensor made while tracing was a captured constant, so the in-place write was
    written back into it and the next call of the same graph started from the written values."""
    c = jt.tensor([[0.0, 1.5, -2.0]])

    def fn(x):
        v = jt.tensor(c.tolist())
        v.logical_not_()
        return v + x

    graph = trace(fn, jt.zeros(3))
    assert not graph.mutations and [n.op.name for n in graph.nodes][0] == "clone"
    f = compiled(fn, backend)
    for _ in range(3):
        assert f(jt.zeros(3)).tolist() == [[1.0, 0.0, 0.0]]
    assert c.tolist() == [[0.0, 1.5, -2.0]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tensor_made_from_data_and_returned_is_a_new_tensor_at_every_call(backend):
    f = compiled(lambda x: (jt.tensor([1.0, 2.0]), x + 1), backend)
    first = f(jt.zeros(2))[0]
    first.add_(10)
    second = f(jt.zeros(2))[0]
    assert second.tolist() == [1.0, 2.0] and second._storage is not first._storage


def test_a_captured_tensor_read_by_item_is_guarded_on_its_values():
    """The value read into Python was baked into the graph with no guard: changing the captured tensor
    in place left the compiled function using the old value."""
    c = jt.tensor([2.0])
    fn = counting(lambda x: x + c.item())
    f = jt.compile(fn)
    assert f(jt.zeros(1)).tolist() == [2.0]
    c.fill_(10.0)
    assert f(jt.zeros(1)).tolist() == [10.0]
    assert "the values of c, read into Python while tracing, are unchanged" in f.retrace_reason
    c.fill_(2.0)
    assert f(jt.zeros(1)).tolist() == [2.0] and fn.runs == 2  # the first graph holds again


def test_reading_a_tensor_the_function_wrote_runs_it_eagerly():
    """The real tensor's values are the ones before the traced write: the graph returned 1 where eager
    returns 2."""
    c = jt.tensor([1.0])

    def fn(x):
        c.add_(1)
        return x + c.item()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert jt.compile(fn)(jt.zeros(1)).tolist() == [2.0]
    assert c.tolist() == [2.0]
    assert any("reads into Python the values of a tensor that the function wrote" in str(w.message)
               for w in caught)

    def made(x):
        v = jt.tensor([1.0])
        v.add_(1)
        return x + v.item()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert jt.compile(made)(jt.zeros(1)).tolist() == [2.0]
