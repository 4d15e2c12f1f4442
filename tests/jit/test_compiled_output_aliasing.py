"""A compiled function's outputs over memory it makes share that memory as eager's do (fuzz seeds 2500042,
2550095: ``v6 = v4.unsqueeze(-1); v6.erfc_(); return v4, v6`` came back as two separate tensors, so a
later write through one was lost to the other). As AOTAutograd, the graph returns each storage's base
once and the call rebuilds the outputs over it as views with eager's sizes, strides and offsets; with
autograd they are views of the compiled node's output, so gradients and later writes behave as eager."""

import pytest
import torch

import jitorch as jt
from jitorch.ir.graph import Value
from jitorch.runtime.pytree import tree_flatten

BACKENDS = ["llvm", "interpreter"]


def _written_view(T, x):  # seed 2550095
    y = T.sin(x)
    v = y.unsqueeze(-1)
    v.mul_(0.5)
    return y, v


def _selected_then_written(T, x):  # seed 2500042
    y = T.cos(x)  # (tanh in the seed: its backward reads the result this overwrites, eager and torch raise)
    row = y.select(0, 0)
    row.mul_(3.0)
    return row, y


def _two_views(T, x):
    y = x * 2
    return y[0], y.t()


def _same_view_twice(T, x):
    v = (x * 2)[1]
    return v, v


def _written_then_viewed(T, x):
    y = x + 1
    y[1:, :2].mul_(-1.0)
    return y[1:], y.view(-1)


def _unsafe_piece_and_source(T, x):  # seed 7952220 (its gather runs as an eager step, no kernel)
    v1 = x[T.tensor([0, 2])]
    return T.unsafe_chunk(v1, 2, -1)[-1], v1


def _unsafe_piece_of_a_piece(T, x):
    u = T.sin(x).unsafe_split_with_sizes([1, 2], 0)[1]
    return u.reshape(-1).unsafe_split(3)[1], u


# name -> (program over the namespace T, kernels its compiled form runs: as many as before the views were
# rebuilt after the call, which only spared eager steps)
PROGRAMS = {
    "unsqueeze of a result written through": (_written_view, 2),
    "select of a result written through": (_selected_then_written, 2),
    "view": (lambda T, x: (lambda y: (y, y.view(-1)))(x * 2), 1),
    "transpose": (lambda T, x: (lambda y: (y.t(), y))(x + 1), 1),
    "slice with an offset": (lambda T, x: (lambda y: (y, y[1:, 1:]))(x * 3), 1),
    "strided slice of a result not returned": (lambda T, x: T.exp(x)[1:, ::2], 1),
    "diagonal": (lambda T, x: (lambda y: (y.diagonal(), y))(T.sin(x)), 1),
    "expand": (lambda T, x: (lambda y: (y, y.expand(2, -1)))(x.sum(0)), 1),
    "two views of a result not returned": (_two_views, 1),
    "the same tensor twice": (lambda T, x: (lambda y: (y, y))(x * 2), 1),
    "the same view twice": (_same_view_twice, 1),
    "written, then two views": (_written_then_viewed, 2),
    "detached view": (lambda T, x: (lambda y: (y, y.detach()[0]))(x * 2), 1),
    "unsafe_chunk piece and its source": (_unsafe_piece_and_source, 0),
    "unsafe_split pieces of a result not returned": (lambda T, x: (x * 2).unsafe_split(1, 0)[::2], 1),
    "unsafe piece of an unsafe piece": (_unsafe_piece_of_a_piece, 1),
    "split pieces and their source": (lambda T, x: (lambda y: (*y.split(3, 1), y))(x + 1), 1),
    "split_with_sizes pieces": (lambda T, x: (x * 3).split_with_sizes([2, 1], 0), 1),
    "chunk pieces and their source": (lambda T, x: (lambda y: (y, *y.chunk(2, 1)))(T.exp(x)), 1),
    "tensor_split pieces": (lambda T, x: T.tensor_split(x * 2, 3, 1), 1),
    "unbind pieces and their source": (lambda T, x: (lambda y: (*y.unbind(1), y))(x - 1), 1),
}


def _x(T, requires_grad=False):
    return (T.arange(12.0).reshape(3, 4) / 4 - 1).requires_grad_(requires_grad)


def _flat(out):
    return [leaf for leaf in (tree_flatten(out)[0] if not isinstance(out, torch.Tensor) else [out])]


def _torch_flat(out):
    return list(out) if isinstance(out, tuple) else [out]


def _layout(t):
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


def _memory(t):
    return t._storage if isinstance(t, jt.Tensor) else t.untyped_storage().data_ptr()


def _sharing(outs):
    """Per pair of outputs: the same tensor, the same memory, or apart."""
    return [["same" if a is b else _memory(a) == _memory(b) for b in outs] for a in outs]


def _bases(outs):
    """Per output: which output its ``_base`` is (None: none; "other": a tensor not returned)."""
    return [None if o._base is None else next((k for k, b in enumerate(outs) if b is o._base), "other")
            for o in outs]


def _values(outs):
    return [torch.tensor(o.detach().tolist()) if isinstance(o, jt.Tensor) else o.detach() for o in outs]


def _assert_close(got, want):
    assert len(got) == len(want)
    for a, b in zip(_values(got), _values(want)):
        torch.testing.assert_close(a.reshape(b.shape), b)


def _write_through_each(outs):
    """Add k + 1 through each output k that writes each element once, as later code would."""
    for k, o in enumerate(outs):
        if 0 not in o.stride():
            o.add_(k + 1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", PROGRAMS)
def test_compiled_outputs_over_new_memory_share_it_as_eager(backend, name):
    program, _ = PROGRAMS[name]
    g = jt.compile(lambda x: program(jt, x), backend=backend)
    for _ in range(2):  # the trace's call and a cached one
        got, want = _flat(g(_x(jt))), _torch_flat(program(torch, _x(torch)))
        eager = _flat(program(jt, _x(jt)))
        assert [_layout(o) for o in got] == [_layout(o) for o in want]
        assert _sharing(got) == _sharing(want)
        assert _bases(got) == _bases(eager)
        _assert_close(got, want)
        _write_through_each(got)
        _write_through_each(want)
        _assert_close(got, want)  # each write shows in the outputs that share its memory, only there


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", PROGRAMS)
def test_compiled_outputs_over_new_memory_backpropagate_as_eager(backend, name):
    program, _ = PROGRAMS[name]
    g = jt.compile(lambda x: program(jt, x), backend=backend)
    for _ in range(2):
        x, xt = _x(jt, requires_grad=True), _x(torch, requires_grad=True)
        got, want = _flat(g(x)), _torch_flat(program(torch, xt))
        assert [o.requires_grad for o in got] == [o.requires_grad for o in want]
        assert _bases(got) == _bases(_flat(program(jt, _x(jt, requires_grad=True))))
        assert all(o.grad_fn is not None for o in got if o.requires_grad)
        sum(((o * (k + 2)) ** 2).sum() for k, o in enumerate(got) if o.requires_grad).backward()
        sum(((o * (k + 2)) ** 2).sum() for k, o in enumerate(want) if o.requires_grad).backward()
        torch.testing.assert_close(torch.tensor(x.grad.tolist()), xt.grad)


@pytest.mark.parametrize("name", PROGRAMS)
def test_compiled_graph_returns_each_new_storage_once(name):
    program, kernels = PROGRAMS[name]
    lowered = jt.compile(lambda x: program(jt, x)).lower(_x(jt))
    storages = {_memory(o) for o in _torch_flat(program(torch, _x(torch)))}  # (data pointers: ids of ints may differ)
    assert len(set(lowered.optimized_graph.output_values())) == len(storages)
    assert len(lowered.kernels) == kernels  # the views are rebuilt after the call: no kernel copies them


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_write_into_a_returned_view_after_the_call_reaches_the_base_gradient(backend):
    # autograd views of the compiled node's output: an in-place op through one rewrites the base's history
    def f(x):
        y = x * 2
        return y, y[0]
    for written in (0, 1):
        got, want = [], []
        for fn, T in ((jt.compile(f, backend=backend), jt), (f, torch)):
            x = _x(T, requires_grad=True)
            outs = fn(x)
            outs[written].mul_(3.0)
            (outs[0] ** 2).sum().backward()
            got, want = want, [x.grad, outs[0]]
        _assert_close(want, got)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_call_returns_a_tensor_returned_twice_once(backend):
    # a view of an input returned twice came back as two views
    def f(x):
        y, row = x + 1, x[0]
        return {"a": y, "b": [y, x.t(), x.t(), row, row]}
    g = jt.compile(f, backend=backend)
    x = _x(jt)
    out = g(x)
    assert out["a"] is out["b"][0] and out["b"][1] is not out["b"][2] and out["b"][3] is out["b"][4]
    assert out["b"][3]._storage is x._storage
    assert g.lower(x).graph.output_aliases[1] == (("leaf", 0), None)


def test_compiled_graph_records_the_base_its_views_are_rebuilt_over():
    g = jt.compile(lambda x: (lambda y: (y[1], y))(x * 2))
    graph = g.lower(_x(jt)).graph
    base, = graph.output_bases.values()
    assert isinstance(base, Value) and graph.output_values() == [base, base]
    assert graph.output_aliases == {0: (("output", 1), ((4,), (1,), 4, False)), 1: (("output", 1), None)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("split", ["unsafe_chunk", "unsafe_split", "unsafe_split_with_sizes"])
@pytest.mark.parametrize("written", [None, 0, 1], ids=["unwritten", "piece written", "source written"])
def test_compiled_unsafe_split_piece_returned_with_its_source_gets_both_gradients_seed_7952220(backend, split,
                                                                                             written):
    """Fuzz seed 7952220: ``v1 = x0[T.tensor([0])]; v3 = T.unsafe_chunk(v1, 3, -1)[-1]; return v3, v1`` gave
    x0 the gradient [0, 0, 5] compiled, [1, 1.25, 5] eagerly and in torch: the piece (no view in autograd's
    sense) was taken as the root of the outputs' memory, so the gradient of ``v1`` outside it was lost. The
    piece comes back as eager's (its own tensor, with a view's history): a write into it or into its source
    after the call rewrites no other output's gradient."""
    args = {"unsafe_chunk": (3, -1), "unsafe_split": (1, -1), "unsafe_split_with_sizes": ([2, 1], -1)}[split]

    def program(T, x0):
        v1 = x0[T.tensor([0])]
        v3 = getattr(T, split)(v1, *args)[-1]
        return v3, v1

    results = []
    for T, fn in ((torch, program), (jt, program), (jt, jt.compile(program, backend=backend))):
        x0 = T.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
        v3, v1 = fn(T, x0)
        if written is not None:
            (v3, v1)[written].mul_(3.0)
        weights = T.tensor([[1.0, 1.25, 1.0]])
        grad, = T.autograd.grad((v3, v1), x0, grad_outputs=(T.full_like(v3, 4.0), weights))
        results.append((v3._base is None, v1._base is None, v3.tolist(), v1.tolist(), grad.tolist()))
    assert results[2] == results[1] == results[0]
    if written is None:
        assert results[0][4] == [[1.0, 1.25, 5.0], [0.0, 0.0, 0.0]]
