"""torch.autograd.graph.allow_mutation_on_saved_tensors (jitorch/autograd/mutation_on_saved.py) against torch:
a saved tensor written in place is cloned first, so backward sees the saved values; out= writes too; backward
outside the context and nested contexts raise torch's errors; without the context the write is refused."""

import pytest
import torch

import jitorch as jt


def _graph(T):
    return T.autograd.graph


@pytest.mark.parametrize("T", [torch, jt], ids=["torch", "jitorch"])
def test_a_saved_tensor_written_in_place_is_cloned_for_backward(T):
    with _graph(T).allow_mutation_on_saved_tensors():
        a = T.ones(2, 3, requires_grad=True)
        b = a.clone()
        out = (b ** 2).sum()
        b.sin_()
        out.backward()
        assert a.grad.tolist() == [[2.0] * 3] * 2  # 2 b with b's saved ones, not its sines
        x = T.tensor([1.0, 2.0], requires_grad=True)
        c = T.tensor([3.0, 4.0])
        out = (x * c).sum()
        T.add(c, 1, out=c)  # an out= write into a saved tensor
        out.backward()
        assert x.grad.tolist() == [3.0, 4.0]


def test_a_write_through_another_view_of_the_saved_memory_is_caught():
    """torch matches memory by a view's data pointer, so writing c[1:] (another pointer) reaches its saved c and
    its gradient is 3 c'^2 of the written values (1200, 2700): silently wrong. jitorch matches the storage."""
    with jt.autograd.graph.allow_mutation_on_saved_tensors():
        a = jt.tensor([1.0, 2.0, 3.0], requires_grad=True)
        c = a * 1
        out = (c ** 3).sum()
        c[1:].mul_(10)
        out.backward()
        assert a.grad.tolist() == [3.0, 12.0, 27.0]


@pytest.mark.parametrize("T", [torch, jt], ids=["torch", "jitorch"])
def test_backward_outside_and_nested_contexts_raise_as_torch(T):
    with _graph(T).allow_mutation_on_saved_tensors():
        a = T.ones(2, requires_grad=True)
        out = ((a * 2) ** 2).sum()
    with pytest.raises(AssertionError, match="Trying to backward outside of the 'allow_mutation_on_saved_tensors'"):
        out.backward()
    with pytest.raises(RuntimeError, match="allow_mutation_on_saved_tensors contexts cannot be nested"):
        with _graph(T).allow_mutation_on_saved_tensors():
            with _graph(T).allow_mutation_on_saved_tensors():
                pass
    a = T.ones(2, requires_grad=True)
    b = a * 2
    out = (b ** 2).sum()
    b.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_the_context_leaves_no_hook_installed():
    from jitorch.ops import registry
    before = list(registry.DISPATCH_HOOKS)
    with jt.autograd.graph.allow_mutation_on_saved_tensors() as ctx:
        assert len(registry.DISPATCH_HOOKS) == len(before) + 1
        b = jt.ones(3, requires_grad=True) * 1
        out = (b * b).sum()
        assert len(ctx.original) == 2 and out.requires_grad  # (b saved twice, as both operands)
    assert registry.DISPATCH_HOOKS == before and not ctx.original
