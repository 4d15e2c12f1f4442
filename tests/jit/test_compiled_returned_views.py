"""A compiled function returns what eager returns over its inputs' and captured tensors' memory: the
tensor itself for ``return x``, and for a view of one (``x.t()``, ``x[0]``, ``M.t.view(-1)``) a view
of the real tensor with eager's sizes, strides and offset, so a later write into it reaches the
tensor (fuzz seeds 3, 18, 97, 116: such outputs came back as copies)."""

import types

import pytest
import torch

import jitorch as jt

BACKENDS = ["llvm", "interpreter"]

LAYOUTS = {
    "contiguous": lambda: jt.arange(12.0).reshape(3, 4),
    "sliced with an offset": lambda: jt.arange(40.0).reshape(5, 8)[1:4, 2:6],
    "strided": lambda: jt.arange(24.0).reshape(3, 8)[:, ::2],
    "transposed": lambda: jt.arange(12.0).reshape(4, 3).t(),
}

VIEWS = {
    "t": lambda x: x.t(),
    "row": lambda x: x[1],
    "strided slice": lambda x: x[1:, ::2],
    "unsqueeze then expand": lambda x: x[0].unsqueeze(0).expand(3, -1),
    "diagonal": lambda x: x.diagonal(),
    "detach": lambda x: x.detach(),
    "as_strided": lambda x: x[0].as_strided((2, 2), (1, 1)),
}


def geometry(t):
    return tuple(t.shape), t.stride(), t.storage_offset()


def assert_same_view(got, want, base):
    assert got._storage is base._storage
    assert geometry(got) == geometry(want)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.filterwarnings("ignore:jitorch.compile. running f eagerly")  # as_strided of a slice runs eagerly
def test_compiled_view_of_an_input_is_a_view_of_the_real_input(backend, layout, view):
    def f(x):
        return VIEWS[view](x) * 1, VIEWS[view](x)
    g = jt.compile(f, backend=backend)
    for _ in range(2):  # the trace's call and a cached one
        x = LAYOUTS[layout]()
        _, want = f(x)
        _, got = g(x)
        assert_same_view(got, want, x)
        x.mul_(-1.0)  # a later write into the input shows through both
        assert got.tolist() == want.tolist() != f(LAYOUTS[layout]())[1].tolist()


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_returned_input_is_the_input_itself(backend):
    g = jt.compile(lambda x, y: (x, y.t(), x + 1), backend=backend)
    x, y = jt.ones(2, 3), jt.ones(3, 2)
    a, b, _ = g(x, y)
    assert a is x and b._storage is y._storage


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_views_of_one_input_returned_together_share_its_memory(backend):
    # seed 18: the second view of the first came back as a view of a copy, aliasing only it
    def f(x):
        row = x[-1]
        return row.reshape(1), jt.zeros(1), row
    g = jt.compile(f, backend=backend)
    x = jt.tensor([True, False]).t()
    first, _, last = g(x)
    assert first._storage is x._storage and last._storage is x._storage
    assert geometry(first) == geometry(f(x)[0]) and geometry(last) == geometry(f(x)[2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_view_of_a_captured_module_tensor_is_a_view_of_it(backend):
    m = types.ModuleType("m")
    m.t = jt.arange(6.0).reshape(2, 3)
    g = jt.compile(lambda x: (m.t.view(-1), m.t.unbind(0)[-1] + x), backend=backend)
    flat, _ = g(jt.ones(3))
    assert flat._storage is m.t._storage and geometry(flat) == ((6,), (1,), 0)
    flat[0] = 7.0
    assert m.t[0, 0].item() == 7.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_view_of_a_captured_tensor_it_writes_shows_the_write(backend):
    # seed 3: the view of M.t1 returned after writing into M.t1
    m = types.ModuleType("m")
    m.t = jt.zeros(3)

    def f(x):
        m.t[0] = x
        return m.t.unbind(0)[0], m.t[1:]
    g = jt.compile(f, backend=backend)
    first, rest = g(jt.tensor(5.0))
    assert first.item() == 5.0 and first._storage is m.t._storage
    assert geometry(rest) == ((2,), (1,), 1) and rest._storage is m.t._storage


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_view_of_a_closure_parameter_is_a_view_of_it(backend):
    # seed 26: c1.view(...) of a captured parameter, with grad mode on
    p = jt.arange(16.0).reshape(2, 2, 4).requires_grad_()
    g = jt.compile(lambda x: (p.view(2, 2, -1), x * 2), backend=backend)
    got, _ = g(jt.ones(2))
    assert got._storage is p._storage and got.requires_grad
    got.sum().backward()
    assert p.grad.tolist() == jt.ones(2, 2, 4).tolist()


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_views_of_an_input_that_requires_grad_backpropagate_as_eager(backend):
    def f(x):
        return x.t(), x * 2, x, x.detach()[0]
    g = jt.compile(f, backend=backend)
    x = jt.arange(6.0).reshape(2, 3).requires_grad_()
    t, doubled, itself, detached = g(x)
    assert itself is x and t._storage is x._storage and detached._storage is x._storage
    assert t.requires_grad and not detached.requires_grad
    (t.sum() * 3 + doubled.sum()).backward()
    xt = torch.arange(6.0).reshape(2, 3).requires_grad_()
    (xt.t().sum() * 3 + (xt * 2).sum()).backward()
    assert x.grad.tolist() == xt.grad.tolist()


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_write_into_a_view_of_a_leaf_that_requires_grad_raises_as_eager(backend):
    g = jt.compile(lambda x: (x[0], x * 2), backend=backend)
    row, _ = g(jt.ones(2, 3, requires_grad=True))
    with pytest.raises(RuntimeError, match="view of a leaf Variable"):
        row.mul_(2.0)


def test_compiled_graph_records_the_returned_views_it_regenerates():
    g = jt.compile(lambda x: (x, x[1:].t(), x + 1))
    graph = g.lower(jt.ones(3, 2)).graph
    assert graph.output_aliases == {0: (0, None), 1: (0, ((2, 2), (1, 2), 2, False))}
