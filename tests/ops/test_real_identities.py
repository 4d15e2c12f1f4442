"""jitorch/ops/real_identities.py and the Tensor protocol pieces of the same list (containment, reversal,
deepcopy, apply_/map_/map2_, output_nr, dim_order), against torch."""

import copy

import pytest
import torch

import jitorch as jt


def pair(values=None):
    values = values or [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    return jt.tensor(values), torch.tensor(values)


@pytest.mark.parametrize("name", ["positive", "conj", "conj_physical", "resolve_conj", "resolve_neg", "real"])
def test_identities_on_real_dtypes_return_self_as_torch(name):
    x, t = pair()
    assert (getattr(jt, name)(x) is x) == (getattr(torch, name)(t) is t) is True
    if name != "real":
        assert getattr(x, name)() is x
    assert x.real is x and t.real is t and x.conj_physical_() is x


def test_positive_refuses_bool():
    for lib in (jt, torch):
        with pytest.raises(RuntimeError, match="The `\\+` operator, on a bool tensor is not supported."):
            lib.positive(lib.tensor([True]))


def test_narrow_copy_is_a_contiguous_copy():
    x, t = pair()
    ours, theirs = jt.narrow_copy(x.t(), 0, 1, 2), torch.narrow_copy(t.t(), 0, 1, 2)
    assert ours.tolist() == theirs.tolist() and ours.stride() == theirs.stride()
    assert ours.data_ptr() != x.data_ptr() and x.narrow_copy(1, 0, 1).tolist() == [[0.0], [3.0]]
    with pytest.raises(RuntimeError, match=r"start \(2\) \+ length \(2\) exceeds dimension size \(3\)."):
        jt.narrow_copy(x, 1, 2, 2)


@pytest.mark.parametrize("size", [(1, 3), (3,), (2, 1), (1,), (2, 3)])
def test_sum_to_size(size):
    x, t = pair()
    assert x.sum_to_size(*size).tolist() == t.sum_to_size(*size).tolist()
    assert x.sum_to_size(size).shape == t.sum_to_size(size).shape
    assert x.sum_to_size(2, 3) is x


def test_sum_to_size_refuses_a_size_self_does_not_expand_from():
    with pytest.raises(RuntimeError, match=r"size \{\[2, 2\]\} is not expandable to size \{\[2, 3\]\}."):
        pair()[0].sum_to_size(2, 2)


@pytest.mark.parametrize("call", [lambda lib, x: lib.unsafe_split(x, 1), lambda lib, x: lib.unsafe_chunk(x, 2, 1),
                                  lambda lib, x: x.unsafe_split_with_sizes([1, 1])])
def test_unsafe_splits_are_the_splits_sharing_memory(call):
    x, t = pair()
    ours, theirs = call(jt, x), call(torch, t)
    assert isinstance(ours, tuple) and [p.tolist() for p in ours] == [p.tolist() for p in theirs]
    assert ours[0].data_ptr() == x.data_ptr()


def _write_into_a_part(lib, split, a):
    b = a * 2
    parts = split(lib, b)
    parts[0].mul_(2)
    parts[1][0:] = parts[1] + 1
    return b.sum() + (parts[0] * 3).sum() + (parts[1] * b[-1]).sum()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("split", [lambda lib, x: lib.unsafe_split(x, 2), lambda lib, x: lib.unsafe_chunk(x, 2),
                                   lambda lib, x: x.unsafe_split_with_sizes([2, 2])],
                         ids=["unsafe_split", "unsafe_chunk", "unsafe_split_with_sizes"])
def test_unsafe_split_outputs_take_in_place_writes_under_grad_as_torch(split, compiled):
    """Fuzz seeds 7101099, 7101504, 7103254: in-place ops on an ``unsafe_`` split's output under grad raised the
    multiple-views error; torch's outputs are no views to autograd, so the write is allowed and rebases nothing
    (``b``'s gradient stays ``b``'s own)."""
    results = []
    for lib in (torch, jt):
        a = lib.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
        fn = jt.compile(_write_into_a_part) if compiled and lib is jt else _write_into_a_part
        loss = fn(lib, split, a)
        loss.backward()
        results.append((loss.item(), a.grad.tolist()))
    assert results[1] == results[0]
    x = jt.arange(4.0)
    part = split(jt, x)[1]
    assert part._base is None and part.data_ptr() == x[2:].data_ptr()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_unsafe_split_output_keeps_its_gradient_after_a_write_into_its_source_seed_7860540(compiled):
    """Fuzz seed 7860540: ``v = x.unsafe_split(1)[0]; x[0:] = s`` then a backward through ``v`` raised the
    multiple-views error (the output kept the split view's bookkeeping, which the write made stale); torch's
    output is no view: it reads the written value and its gradient goes to ``x``'s history before the write."""
    def program(lib, a):
        x = a * 2
        v = x.unsafe_split(1, 0)[0]
        x[0:] = -1.0
        return (v * 3).sum() + x.sum()

    results = []
    for lib in (torch, jt):
        a = lib.tensor([1.5, 2.5], requires_grad=True)
        fn = jt.compile(program) if compiled and lib is jt else program
        loss = fn(lib, a)
        loss.backward()
        results.append((loss.item(), a.grad.tolist()))
    assert results[1] == results[0] == (-5.0, [6.0, 0.0])


def test_contains_reversed_long():
    x, t = pair()
    for element in (3.0, 7, True):
        assert (element in x) == (element in t)
    assert (jt.tensor([0.0, 1.0, 2.0]) in x) == (torch.tensor([0.0, 1.0, 2.0]) in t)
    with pytest.raises(RuntimeError, match="Tensor.__contains__ only supports Tensor or scalar, but you passed in "
                                           "a <class 'str'>."):
        "a" in x  # noqa: B015
    assert reversed(x).tolist() == reversed(t).tolist() and reversed(jt.tensor(3.0)).item() == 3.0
    assert jt.tensor([2.7]).__long__() == torch.tensor([2.7]).__long__() == 2


def test_deepcopy_keeps_requires_grad_grad_and_shared_views():
    w = jt.ones(2, requires_grad=True)
    w.grad = jt.full((2,), 3.0)
    c = copy.deepcopy(w)
    assert c.requires_grad and c.is_leaf and c.grad.tolist() == [3.0, 3.0] and c.grad is not w.grad
    assert c.data_ptr() != w.data_ptr()
    x = jt.arange(6.0).view(2, 3)
    base, row = copy.deepcopy([x, x[1]])
    assert row.data_ptr() == base.data_ptr() + 3 * 4 and base.data_ptr() != x.data_ptr()
    base[1, 0] = 9
    assert row[0].item() == 9
    p = copy.deepcopy(jt.nn.Parameter(jt.ones(2)))
    assert type(p) is jt.nn.Parameter and p.requires_grad


def test_deepcopy_refuses_a_non_leaf_as_torch():
    with pytest.raises(RuntimeError, match="Only Tensors created explicitly by the user \\(graph leaves\\) support "
                                           "the deepcopy protocol"):
        copy.deepcopy(jt.ones(2, requires_grad=True) * 2)


def test_apply_map_map2_as_torch():
    results = []
    for lib in (jt, torch):
        y, i = lib.ones(3), lib.tensor([1, 2])
        assert y.apply_(lambda v: v * 2) is y
        y.map_(lib.arange(3.0), lambda a, b: a + b)
        y.map2_(lib.ones(3), lib.ones(1), lambda a, b, c: a + b + c)
        i.apply_(lambda v: v * 2.7)
        results.append((y.tolist(), i.tolist(), str(i.dtype)[-5:]))
        with pytest.raises(RuntimeError, match="Can't call apply_\\(\\) on Variable that requires grad"):
            lib.ones(2, requires_grad=True).apply_(abs)
    assert results[0] == results[1]


def test_output_nr_and_dim_order():
    parts, theirs = jt.ones(2, requires_grad=True).unbind(), torch.ones(2, requires_grad=True).unbind()
    assert [p.output_nr for p in parts] == [p.output_nr for p in theirs] == [0, 1]
    for make in (lambda lib: lib.ones(2, 3), lambda lib: lib.ones(2, 3).t(),
                 lambda lib: lib.empty(2, 3, 4).permute(2, 0, 1)):
        assert make(jt).dim_order() == make(torch).dim_order()
