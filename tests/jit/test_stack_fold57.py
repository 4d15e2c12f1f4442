"""Stacks written in place by their pieces' kernels (`jit.executor.fold_pieces_into_stacks`, session 56): the
same bits as eager's, each element written by the same kernel at another address, and no step copying them."""

import numpy as np

import jitorch as jt
from jitorch.jit.executor import EagerStep


def stacked(fn, *args):
    """The compiled graph of ``fn`` and its result against eager's, bit for bit."""
    compiled = jt.compile(fn)
    np.testing.assert_array_equal(compiled(*args).numpy(), fn(*args).numpy())
    return compiled.lower(*args).executable


def stack_steps(compiled):
    return [s for s in compiled.steps if isinstance(s, EagerStep) and any(n.op.name == "stack" for n in s.nodes)]


def test_a_stack_of_kernels_results_and_a_stack_of_such_stacks_run_no_step():
    x = jt.randn(3, 5)
    fn = lambda x: jt.stack([jt.stack([x * 3, x - 2]), jt.stack([x.abs(), x + 1])]).sum(0)  # noqa: E731
    compiled = stacked(fn, x)
    assert stack_steps(compiled) == []
    assert len(compiled.plan.offsets) == 6  # four pieces and two inner stacks, inside the outer one


def test_a_stack_with_a_view_among_its_pieces_copies_only_that_one():
    x = jt.randn(4, 6)
    fn = lambda x: jt.stack([x + 1, x.t().t(), x * 3]) * 2  # noqa: E731
    (step,) = stack_steps(stacked(fn, x))
    assert len(step.placed) == 2


def test_stacks_along_later_dims_or_returned_keep_their_step():
    """Pieces of a stack along dim 1 are not runs of its result; a returned stack's memory is the caller's."""
    x = jt.randn(4, 6)
    assert len(stack_steps(stacked(lambda x: jt.stack([x + 1, x * 3], dim=1) * 2, x))) == 1
    assert len(stack_steps(stacked(lambda x: jt.stack([x + 1, x * 3]), x))) == 1
