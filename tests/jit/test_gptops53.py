"""Session 53's per-call work of a compiled GPT training step outside its kernels: ``stack`` written straight
into its arena buffer (clip_grad_norm_'s per-gradient norms)."""

import numpy as np
import torch

import jitorch as jt
from jitorch.jit.executor import EagerStep, _stack_into


def executable(fn, *args):
    return jt.compile(fn).lower(*args).executable


def stack_steps(ex):
    """The eager steps holding a ``stack`` node, with the node."""
    return [(s, n) for s in ex.steps if isinstance(s, EagerStep) for n in s.nodes if n.op.name == "stack"]


def test_stack_of_norms_writes_into_its_arena_buffer_bit_for_bit():
    """clip_grad_norm_'s ``stack`` of per-gradient 0-d norms is one assignment into its arena buffer (no eager
    dispatch checking each input); the values are the eager stack's bits, NaN payloads and signed zeros too."""
    def norms(a, b, c):
        total = jt.stack([a.norm(), (b * 2).norm(), c.sum(), c.amax()]).norm()
        return total * 3

    g = jt.Generator().manual_seed(0)
    a, b = jt.randn(5, 7, generator=g), jt.randn(128, generator=g)
    c = jt.tensor([-0.0, -0.0])
    ex = executable(norms, a, b, c)
    # (session 56: the kernels computing the norms write them into the stack's buffer, which no step then fills:
    # `executor.fold_pieces_into_stacks`)
    (node,) = [n for n in ex.graph.nodes if n.op.name == "stack"]
    assert not stack_steps(ex) and node.outputs[0] in ex.plan.slots
    assert all(ex.plan.slots[v] == ex.plan.slots[node.outputs[0]] for v in node.args[0])
    compiled = jt.compile(norms)
    for _ in range(2):  # (the second call reuses the arena)
        out = compiled(a, b, c)
        assert out.numpy().tobytes() == norms(a, b, c).numpy().tobytes()
    ta, tb, tc = (torch.from_numpy(t.numpy()) for t in (a, b, c))
    expected = torch.stack([ta.norm(), (tb * 2).norm(), tc.sum(), tc.amax()]).norm() * 3
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-6)

    # the writer keeps each value's bits: a NaN's payload, a signalling NaN, -0.0 and a denormal, from 0-d arrays
    for dtype, words in ((np.float32, np.array([0x7FC00001, 0x7FA00000, 0x80000000, 1], np.uint32)),
                         (np.float64, np.array([0x7FF0000000000001, 0x8000000000000000, 1], np.uint64))):
        values = words.view(dtype)
        out = np.full(len(values), 7, dtype)
        _stack_into([[v.reshape(()).copy() for v in values]], out)
        assert out.tobytes() == values.tobytes()


def test_stack_along_an_inner_dim_and_of_matrices_equals_eager_and_torch():
    """A stack of matrices (along dim 0 and dim -1) is NumPy's stack into the arena buffer: eager's values."""
    def f(x, y, dim):
        return jt.stack([x.exp(), y * 2, x + y], dim).relu().sum(0)

    g = jt.Generator().manual_seed(1)
    x, y = jt.randn(3, 5, generator=g), jt.randn(3, 5, generator=g)
    tx, ty = torch.from_numpy(x.numpy()), torch.from_numpy(y.numpy())
    for dim in (0, -1):
        ex = executable(lambda x, y: f(x, y, dim), x, y)
        if dim == 0:  # (session 56: its pieces' kernel writes them into it: `executor.fold_pieces_into_stacks`)
            assert not stack_steps(ex) and len(ex.plan.offsets) == 3
        else:
            ((step, node),) = stack_steps(ex)
            assert node.outputs[0] in step.into_arena
        out = jt.compile(lambda x, y: f(x, y, dim))(x, y)
        np.testing.assert_array_equal(out.numpy(), f(x, y, dim).numpy())
        expected = torch.stack([tx.exp(), ty * 2, tx + ty], dim).relu().sum(0)
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-6)
    # mixed dtypes (eager promotes): not written as it is, run eagerly as before
    i = jt.arange(15).reshape(3, 5)
    h = lambda x, i: jt.stack([x, i], 0).relu().sum(0)  # noqa: E731
    ex = executable(h, x, i)
    assert not [s for s, n in stack_steps(ex) if n.outputs[0] in s.into_arena | s.into_fresh]
    np.testing.assert_array_equal(jt.compile(h)(x, i).numpy(), h(x, i).numpy())
