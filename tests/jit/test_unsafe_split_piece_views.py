"""Views of an ``unsafe_split``/``unsafe_chunk`` output returned by a compiled function are autograd views of
that output, as eager's and torch's: the output is a tensor of its own (no view in autograd's sense), so a
write into such a view after the call rewrites the output's history, not the history of the tensor it was
split from (and a write into that tensor leaves the view's history alone)."""

import pytest
import torch

import jitorch as jt

BACKENDS = ["llvm", "interpreter"]


def _piece(T, y):
    return y.unsafe_split(2, 0)[0]


PROGRAMS = {  # name -> program over the namespace T returning tensors of one storage
    "index of a piece": lambda T, x: (lambda y: (_piece(T, y)[0], y))(x * 2),
    "view of a piece": lambda T, x: (lambda y: (_piece(T, y).view(-1), y))(x * 2),
    "transpose of a chunk": lambda T, x: (lambda y: (T.unsafe_chunk(y, 2, 0)[1].t(), y))(x * 2),
    "unsqueeze of a piece, source first": lambda T, x: (lambda y: (y, _piece(T, y).unsqueeze(0)))(x + 1),
    "two views of one piece": lambda T, x: (lambda y, p: (p[0], p[1], y))(*(lambda y: (y, _piece(T, y)))(x * 2)),
    "a piece and its view": lambda T, x: (lambda y, p: (p[1:], p, y))(*(lambda y: (y, _piece(T, y)))(x - 1)),
    "view of a piece only": lambda T, x: (_piece(T, x * 2)[1],),
}


def _x(T):
    return (T.arange(12.0).reshape(4, 3) / 4 - 1).requires_grad_(True)


def _run(T, fn, written):
    x = _x(T)
    outs = fn(x)
    bases = [None if o._base is None else next((k for k, b in enumerate(outs) if b is o._base), "other")
             for o in outs]
    if written is not None:
        outs[written].mul_(3.0)
    loss = sum(((o * (k + 2)) ** 2).sum() for k, o in enumerate(outs))
    grad, = T.autograd.grad(loss, x)
    return bases, [o.detach().tolist() for o in outs], grad.tolist()


CASES = [(name, written) for name, program in PROGRAMS.items()  # (none written, or each output)
         for written in [None, *range(len(program(torch, _x(torch))))]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name,written", CASES)
def test_compiled_view_of_an_unsafe_split_piece_is_a_view_of_the_piece_as_eager(backend, name, written):
    """``y = x * 2; p = y.unsafe_split(2, 0)[0]; return p[0], y`` came back compiled with ``p[0]`` an autograd
    view of ``y`` (the base the call rebuilds its outputs over): writing into it after the call gave x the
    gradient [-360, -270, ...] where eager and torch give [-312, -234, ...] (the write rebases the piece, whose
    view y is not for autograd), and a write into ``y`` regenerated the view's history from y's."""
    program = PROGRAMS[name]
    want = _run(torch, lambda x: program(torch, x), written)
    assert _run(jt, lambda x: program(jt, x), written) == want
    compiled = jt.compile(lambda x: program(jt, x), backend=backend)
    for _ in range(2):  # the trace's call and a cached one
        assert _run(jt, compiled, written) == want


@pytest.mark.parametrize("name", ["two views of one piece", "a piece and its view"])
def test_compiled_views_of_one_unsafe_split_piece_share_it_as_eager(name):
    """The leaves over one piece are views of one tensor (the piece returned, where it is), as eager's."""
    outs = jt.compile(lambda x: PROGRAMS[name](jt, x))(_x(jt))
    eager = PROGRAMS[name](jt, _x(jt))
    views = [k for k, o in enumerate(eager) if o._base is not None]
    assert len(views) >= 1 and len({id(outs[k]._base) for k in views}) == 1
    assert all(outs[k]._base._base is None for k in views)
    if name == "a piece and its view":
        assert outs[0]._base is outs[1]
