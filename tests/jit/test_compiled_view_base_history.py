"""Compiled functions with views whose base gains a history through an in-place op after they were
made: the trace gives them the base's history as eager does (the graph runs, no eager fallback),
and views a compiled call returns of a tensor without history gain one from a later write into it.
torch is the oracle."""

import numpy as np
import pytest
import torch

import jitorch as jt


def ran_compiled(step):
    """Whether every call of ``step`` ran its graph (no entry fell back to eager)."""
    return bool(step.cache) and all(e.eager_reason is None and e.graph is not None for e in step.cache.values())


def views_of_a_copied_base(T, x):
    b = T.zeros(3)
    v, w = b[1], b[:2]
    b.copy_(x * 2)
    return v, w * 3, b


def empty_view_of_a_written_new_tensor(T, x):
    t0 = T.zeros(1, 4)
    v0 = t0[:-1, :]
    v0[:, 3] = x[0]
    return v0, t0 * 5


@pytest.mark.parametrize("program", [views_of_a_copied_base, empty_view_of_a_written_new_tensor],
                         ids=lambda p: p.__name__)
def test_compiled_view_of_base_without_history_differentiates_as_torch(program):
    tx = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    touts = program(torch, tx)
    sum(((o * (k + 2)).sum() for k, o in enumerate(touts)), torch.zeros(())).backward()
    x = jt.tensor([1.0, -2.0, 3.0], requires_grad=True)
    step = jt.compile(lambda x: program(jt, x))
    outs = step(x)
    assert ran_compiled(step)
    assert [o.requires_grad for o in outs] == [o.requires_grad for o in touts]
    sum(((o * (k + 2)).sum() for k, o in enumerate(outs)), jt.zeros(())).backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


def test_view_returned_by_compiled_call_gains_history_from_later_write_into_its_base():
    step = jt.compile(lambda b: b[1:])
    b = jt.zeros(3)
    v = step(b)
    assert ran_compiled(step) and v._base is b
    x = jt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b.copy_(x)
    assert v.requires_grad and v.grad_fn.name() == "AsStridedBackward0"
    (v * jt.tensor([5.0, 7.0])).sum().backward()
    assert x.grad.tolist() == [0.0, 5.0, 7.0]


def test_compiled_split_output_read_after_its_base_is_written_raises_torchs_error():
    def program(T, x):
        b = T.zeros(4)
        a, _ = b.split(2)
        b.mul_(x)
        return a * 2
    with pytest.raises(RuntimeError) as want:
        program(torch, torch.ones(4, requires_grad=True))
    with pytest.raises(RuntimeError) as got:
        jt.compile(lambda x: program(jt, x))(jt.ones(4, requires_grad=True))
    assert str(got.value) == str(want.value)


DETACHED_PROGRAMS = {
    "detached, result": lambda x: (lambda y: (y.detach(), y))(x * 2),
    "detached, view of result": lambda x: (lambda y: (y.detach(), y[0]))(x * 2),
    "result, view of detached": lambda x: (lambda y: (y, y.detach()[0]))(x * 2),
    "views of detached and of result": lambda x: (lambda y: (y.detach()[0], y[1]))(x * 2),
    "input detached, views of it and of input": lambda x: (x.detach(), x.detach()[0], x[0], x.t()),
}


def history(outs):
    """Per output: requires_grad, whether it has a grad_fn, and which output its ``_base`` is."""
    return [(o.requires_grad, o.grad_fn is not None,
             None if o._base is None else next((k for k, b in enumerate(outs) if b is o._base), "other"))
            for o in outs]


@pytest.mark.parametrize("requires_grad", [True, False])
@pytest.mark.parametrize("name", DETACHED_PROGRAMS)
def test_compiled_detached_aliases_of_outputs_have_no_history_as_torch(name, requires_grad):
    program = DETACHED_PROGRAMS[name]
    want = history(program(torch.ones(2, 3, requires_grad=requires_grad) * 1))
    step = jt.compile(program)
    for _ in range(2):  # the trace's call and a cached one
        assert history(step(jt.ones(2, 3, requires_grad=requires_grad) * 1)) == want
    assert ran_compiled(step)


def test_compiled_views_of_a_detached_input_gain_no_history_from_a_write_into_it():
    step = jt.compile(lambda x: (x.detach()[0], x[1]))
    x = jt.zeros(2, 3)
    of_detached, of_x = step(x)
    x.copy_(jt.ones(2, 3, requires_grad=True))
    assert (of_detached.requires_grad, of_x.requires_grad) == (False, True)


def view_of_a_base_with_history_written_later(T, x0, x1):
    base = x0[T.tensor([0, 0, 0])]  # (a history of x0's, unlike the bases above)
    view = base[:]
    base[None][:, 0].copy_(x1.reshape(1))  # written through another view, after ``view`` was made
    return view


@pytest.mark.parametrize("sink", [False, True], ids=["view alone", "view and base"])
def test_compiled_returned_view_of_memory_written_later_passes_gradient_to_what_was_written(sink):
    # the trace found the inputs an output's gradient reaches from the output's grad_fn, which for a view of
    # memory written after the view was made is its stale history (eager regenerates it from the base in the
    # backward): the written value's input was marked unreached and its .grad stayed None (fuzzer seed 7000022)
    def program(T, x0, x1):
        view = view_of_a_base_with_history_written_later(T, x0, x1)
        return (view, view * 2) if sink else (view,)
    weights = [1.0, 10.0, 100.0]
    tx0, tx1 = torch.tensor([1.0], requires_grad=True), torch.tensor(2.0, requires_grad=True)
    sum((o * torch.tensor(weights)).sum() for o in program(torch, tx0, tx1)).backward()
    x0, x1 = jt.tensor([1.0], requires_grad=True), jt.tensor(2.0, requires_grad=True)
    step = jt.compile(lambda a, b: program(jt, a, b))
    outs = step(x0, x1)
    assert ran_compiled(step)
    np.testing.assert_array_equal(outs[0].detach().numpy(), [2.0, 1.0, 1.0])
    sum((o * jt.tensor(weights)).sum() for o in outs).backward()
    assert x1.grad is not None
    np.testing.assert_array_equal(x1.grad.numpy(), tx1.grad.numpy())
    np.testing.assert_array_equal(x0.grad.numpy(), tx0.grad.numpy())
