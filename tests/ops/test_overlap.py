"""Writes that read the memory they write (jitorch.ops.overlap), against torch.

Each case writes a tensor ``w`` (in place or through ``out=``) from an input ``i`` that shares its memory:
the same elements (``full``), some of them densely (``partial``), every other element (``too_hard``: torch
does not analyse it), or none (``disjoint``). jitorch must raise torch's error exactly where torch does;
where torch runs, jitorch's result is the one computed from the inputs' old values (torch's own is then
whatever its kernel's order gives: docs/differences-from-torch.md).
"""

import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops.overlap import FULL, NO, PARTIAL, TOO_HARD, overlap_status

N = 8


def _views(lib, dtype):
    base = lib.arange(1, 3 * N + 1).to(dtype)
    return base, base[0:N], {"full": base[0:N], "partial": base[2:N + 2], "too_hard": base[0:2 * N:2],
                             "disjoint": base[N:2 * N]}


def _long(lib, values):
    return lib.tensor(values, dtype=lib.int64)


# name -> fn(lib, w, i): writes w (a 1-d tensor of N elements) reading i (N elements, sharing w's memory)
CASES = {
    "add_": lambda L, w, i: w.add_(i),
    "add out": lambda L, w, i: L.add(i, 1, out=w),
    "lerp_": lambda L, w, i: w.lerp_(i, 0.5),
    "where out": lambda L, w, i: L.where(i > 3, i, w.clone(), out=w),
    # (fuzz seed 7400254: torch's ldexp multiplies by other's power, a new tensor: other is not checked)
    "ldexp_": lambda L, w, i: w.ldexp_(i),
    "ldexp out": lambda L, w, i: L.ldexp(i, w.clone(), out=w),
    "ldexp out other": lambda L, w, i: L.ldexp(w.clone(), i, out=w),
    "float_power_": lambda L, w, i: w.float_power_(i),
    "float_power out": lambda L, w, i: L.float_power(i, 2, out=w),
    "clamp_ min tensor": lambda L, w, i: w.clamp_(min=i),
    "copy_": lambda L, w, i: w.copy_(i),
    "eq out": lambda L, w, i: L.eq(i, 3, out=w),
    "maximum out": lambda L, w, i: L.maximum(i, w.clone(), out=w),
    "max.other out": lambda L, w, i: L.max(i, w.clone(), out=w),
    "sum out": lambda L, w, i: L.sum(i.view(2, 4), 0, out=w[:4]),
    "amax out": lambda L, w, i: L.amax(i.view(2, 4), 0, out=w[:4]),
    "max.dim out": lambda L, w, i: L.max(i.view(2, 4), 0, out=(w[:4], L.empty(4, dtype=L.int64))),
    # (found by the fuzzer: the kernels write values with the reduced dim kept, which a size-1 dim makes the input's
    # own geometry; an out of another shape is resized first)
    "max.dim out over a size-1 dim": lambda L, w, i: L.max(i.view(N, 1), 1, out=(w, L.empty(N, dtype=L.int64))),
    "min.dim keepdim out over a size-1 dim": lambda L, w, i: L.min(i.view(2, 1, 4), 1, True,
                                                                 out=(w.view(2, 1, 4), L.empty(0, dtype=L.int64))),
    "median.dim into a resized out": lambda L, w, i: L.median(i.view(N, 1), -1, out=(w[:0], L.empty(0, dtype=L.int64))),
    "std out": lambda L, w, i: L.std(i.view(2, 4), 0, out=w[:4]),
    "cumsum out": lambda L, w, i: L.cumsum(i, 0, out=w),
    "softmax out": lambda L, w, i: L.softmax(i, 0, out=w),
    "mm out": lambda L, w, i: L.mm(i.view(2, 4), L.ones(4, 4, dtype=w.dtype), out=w.view(2, 4)),
    "addmm_ self as mat1": lambda L, w, i: w.view(2, 4).addmm_(i.view(2, 4), L.ones(4, 4, dtype=w.dtype)),
    "baddbmm_": lambda L, w, i: w.view(1, 2, 4).baddbmm_(i.view(1, 2, 4), L.ones(1, 4, 4, dtype=w.dtype)),
    "outer out": lambda L, w, i: L.outer(i[:2], L.ones(4, dtype=w.dtype), out=w.view(2, 4)),
    "cat out": lambda L, w, i: L.cat([i[:4], i[:4]], out=w),
    "hstack out": lambda L, w, i: L.hstack([i[:4], i[:4]], out=w),
    "tril out": lambda L, w, i: L.tril(i.view(2, 4), out=w.view(2, 4)),
    "sort out": lambda L, w, i: L.sort(i, out=(w, L.empty(N, dtype=L.int64))),
    "topk out": lambda L, w, i: L.topk(i, 4, out=(w[:4], L.empty(4, dtype=L.int64))),
    "gather out": lambda L, w, i: L.gather(i, 0, _long(L, [1, 0, 2, 3, 4, 5, 6, 7]), out=w),
    "index_select out": lambda L, w, i: L.index_select(i, 0, _long(L, [1, 0, 2, 3, 4, 5, 6, 7]), out=w),
    "masked_select out": lambda L, w, i: L.masked_select(i, L.ones(N, dtype=L.bool), out=w),
    "take out": lambda L, w, i: L.take(i, _long(L, [1, 0, 2, 3, 4, 5, 6, 7]), out=w),
    "scatter_": lambda L, w, i: w.scatter_(0, _long(L, [1, 0]), i),
    "scatter_add_": lambda L, w, i: w.scatter_add_(0, _long(L, [1, 0]), i),
    "index_add_": lambda L, w, i: w.index_add_(0, _long(L, [1, 0]), i[:2]),
    "index_copy_": lambda L, w, i: w.index_copy_(0, _long(L, [1, 0]), i[:2]),
    "index_put_": lambda L, w, i: w.index_put_((L.arange(N),), i),
    "masked_fill_ 0-d value": lambda L, w, i: w.masked_fill_(L.ones(N, dtype=L.bool), i[0]),
    "fill_ 0-d value": lambda L, w, i: w.fill_(i[0]),
    "put_": lambda L, w, i: w.put_(_long(L, [1, 0]), i[:2]),
    # (last notes' leftover: torch's scans and sorts resize out= to the result's shape before they check it)
    "cumsum into a resized out": lambda L, w, i: L.cumsum(i.view(2, 4), 0, out=w[:4]),
    "sort into a resized out": lambda L, w, i: L.sort(i.view(2, 4), 0, out=(w[:4], L.empty(0, dtype=L.int64))),
    # (fuzz seed 7500064: torch's masked_scatter_ checks no overlap with its source or mask)
    "masked_scatter_": lambda L, w, i: w.masked_scatter_(L.tensor([True, False] * (N // 2)), i),
}


def _run(lib, name, kind, dtype):
    """The written base buffer after the call, or the error's class and message."""
    base, w, inputs = _views(lib, dtype)
    try:
        CASES[name](lib, w, inputs[kind])
    except RuntimeError as e:
        return str(e)
    return base.tolist()


def _old_values(name, kind):
    """torch's result computed from a clone of the input: the old values."""
    base, w, inputs = _views(torch, torch.float64)
    CASES[name](torch, w, inputs[kind].clone())
    return base.tolist()


@pytest.mark.parametrize("kind", ["full", "partial", "too_hard", "disjoint"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_an_overlapping_write_raises_where_torch_does_else_reads_old_values(name, kind):
    want = _run(torch, name, kind, torch.float64)
    got = _run(jt, name, kind, jt.float64)
    if isinstance(want, str):
        assert "single memory location" in want
        assert got == want
    else:
        assert np.allclose(got, _old_values(name, kind))


def test_overlap_status_follows_atens_rule():
    x = jt.arange(16.0)
    m = x.view(4, 4)
    assert overlap_status(x, x) == FULL
    assert overlap_status(x[:8], x[:8]) == FULL
    assert overlap_status(m, m.t()) == PARTIAL  # the same memory in another order
    assert overlap_status(x[:8], x[4:12]) == PARTIAL
    assert overlap_status(x[:8], x[::2]) == TOO_HARD
    assert overlap_status(x[:8], x[8:]) == NO
    assert overlap_status(x[:0], x) == NO
    assert overlap_status(x[0], x[:1]) == PARTIAL  # torch compares the strides of size-1 dims too
    assert overlap_status(x, jt.arange(16.0)) == NO


def test_addmm_into_its_own_first_matrix_reads_the_old_values():
    """Found by the fuzzer (seed 1000940): ``v.addmm_(v, m)`` wrote the result while torch's kernel still
    read ``v``; jitorch computes ``v + v @ m`` from the old ``v``."""
    v = jt.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=jt.float16)
    m = jt.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=jt.float16)
    want = v.float() + v.float() @ m.float()
    v.addmm_(v, m)
    assert v.float().tolist() == want.tolist()


def test_inplace_divide_by_a_strided_view_of_itself_reads_the_old_values():
    """Found by the fuzzer (seed 1002678): ``x.true_divide_(x[..., 2])``, a view torch does not analyse
    (it has gaps), divides by the old column, not by values already divided."""
    x = jt.arange(1.0, 17.0).view(1, 4, 4)
    want = x / x[..., 2].clone()
    x.true_divide_(x[..., 2])
    assert x.tolist() == want.tolist()


def test_inplace_partial_overlap_raises_before_writing():
    x = jt.arange(6.0)
    with pytest.raises(RuntimeError, match="single memory location"):
        x[:4].add_(x[2:])
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_setitem_of_a_bool_tensor_through_itself_as_its_mask():
    """Found by the fuzzer (seed 1000111): ``x[x] = x`` with one element is torch's masked fill (a
    one-element value through one mask), which does not check the value; with more elements it is an
    index_put_ that refuses the overlap."""
    for lib in (jt, torch):
        x = lib.tensor([True])
        x[x] = x
        assert x.tolist() == [True]
        y = lib.tensor([True, False, True])
        with pytest.raises(RuntimeError, match="single memory location"):
            y[y] = lib.tensor([True, True])
        z = lib.tensor([0, 1, 2])
        with pytest.raises(RuntimeError, match="single memory location"):
            z[z] = 5  # the index is the written tensor


def test_setitem_of_a_basic_index_judges_the_value_as_torchs_copy_to():
    for lib in (jt, torch):
        v = lib.tensor([1.5])
        v[0:] = v  # the same shape: a copy of the same elements
        w = lib.arange(6.0)
        w[2:4] = w[2]  # a 0-d value: a fill, not checked
        assert w.tolist() == [0.0, 1.0, 2.0, 2.0, 4.0, 5.0]
        with pytest.raises(RuntimeError, match="single memory location"):
            w[0:2] = w[1:3]


def test_an_empty_tensor_with_a_zero_stride_may_be_written():
    """Fuzz seed 7100708: ``nonzero`` of a (1, 0) result is (0, 2) with strides (1, 0); writing into it raised
    the internal-overlap error, which torch gives only where elements share memory (an empty tensor has none)."""
    for T in (torch, jt):
        v = T.tensor(1.0).nonzero().nonzero()
        assert tuple(v.shape) == (0, 2) and tuple(v.stride()) == (1, 0)
        v[:, ::1] = 2
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        jt.zeros(1).expand(3).add_(1)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_setitem_of_a_tensor_through_a_new_leading_dim_of_itself_as_torch(compiled):
    """Fuzz seed 7102279: ``v = x[None]; v[:, ::1] = x`` raised the partial-overlap error: torch expands the
    value with a new size-1 dim spanning the dims after it (inferExpandGeometry), the view's own layout, a full
    overlap; expand's strides are torch's."""
    def write(T, x):
        v = x[None]
        v[:, ::1] = x
        x.view(1, 4, 1)[:] = x.view(4, 1)
        return x * 1
    for T in (torch, jt):
        fn = jt.compile(lambda x: write(jt, x)) if compiled and T is jt else lambda x: write(T, x)
        assert fn(T.arange(4.0)).tolist() == [0.0, 1.0, 2.0, 3.0]
        x = T.arange(4.0)
        with pytest.raises(RuntimeError, match="single memory location"):
            x[None].copy_(x)  # a copy without the expansion: partial, as torch's
        with pytest.raises(RuntimeError, match="single memory location"):
            x[None][:, 1:] = x[:3]
    for shape, size in [((4,), (2, 1, 4)), ((3, 1), (1, 3, 4)), ((0, 2), (1, 0, 2)), ((), (1, 2))]:
        assert jt.zeros(shape).expand(size).stride() == torch.zeros(shape).expand(size).stride()


# name -> fn(lib, v): an in-place write torch makes through an expanded tensor v (3 rows over one row's memory)
EXPANDED_WRITES = {
    "index_put_ rows": lambda L, v: v.__setitem__(L.tensor([0]), L.tensor([1.0, 2.0, 3.0])),
    "index_put_ last row written holds": lambda L, v: v.__setitem__(L.tensor([0, 2]), L.tensor([[1.0, 2, 3], [4, 5, 6]])),
    "index_put_ accumulate adds each": lambda L, v: v.index_put_((L.tensor([0, 1]),), L.tensor(1.0), accumulate=True),
    "index_put_ columns": lambda L, v: v.__setitem__((slice(None), L.tensor([1])), -4.0),
    "bool mask": lambda L, v: v.__setitem__(L.tensor([True, False, True]), 9.0),
    "masked_fill_": lambda L, v: v.masked_fill_(L.tensor([False, True, False]), -1.0),
    "index_fill_": lambda L, v: v.index_fill_(0, L.tensor([1]), 7.0),
    "fill_": lambda L, v: v.fill_(2.0),
    "zero_": lambda L, v: v.zero_(),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", EXPANDED_WRITES)
def test_a_write_through_an_expanded_tensor_as_torch(name, compiled):
    """Fuzz seed 7202545: ``v9[indices] = -2`` into an expanded meshgrid output raised the internal-overlap error.
    torch lets fill_/zero_ write through an expanded tensor, and index_put_, masked_fill_ and index_fill_ with a
    deprecation warning, each element in turn into the shared memory (the last write to a location holds it,
    accumulate adds every one); a compiled call runs such a write eagerly (a graph's scatter would not order it)."""
    def program(L, x):
        v = x.clone().expand(3, 3)
        EXPANDED_WRITES[name](L, v)
        return v * 1, x
    with warnings.catch_warnings(record=True) as expected:
        warnings.simplefilter("always")
        want = program(torch, torch.tensor([1.0, 2.0, 3.0]))
    fn = jt.compile(lambda x: program(jt, x)) if compiled else lambda x: program(jt, x)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        result = fn(jt.tensor([1.0, 2.0, 3.0]))
    assert [r.tolist() for r in result] == [w.tolist() for w in want]
    deprecated = {str(w.message).split(" (Triggered")[0] for w in expected if "expanded tensors is" in str(w.message)}
    assert bool(deprecated) == bool({str(w.message) for w in got} & deprecated)
    if compiled and deprecated:
        assert any("eagerly" in str(w.message) and "expanded tensor" in str(w.message) for w in got)
    with pytest.raises(RuntimeError, match="single memory location"):  # others are refused as torch's
        jt.zeros(3).expand(3, 3).index_copy_(0, jt.tensor([1]), jt.ones(1, 3))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("write", ["index_put_", "fill_"])
def test_a_backward_through_a_write_into_an_expanded_tensor_raises_as_torchs(write, compiled):
    """Seed 7202545's write on a tensor with history: torch writes (the same values as without) and its backward
    raises the internal-overlap error (its as_strided backward of the written view); jitorch's gave a gradient as
    if the rows were distinct memory, which it is not (silently wrong)."""
    def program(T, x):
        v = T.meshgrid([x * 1, x * 2], indexing="ij")[-1]
        if write == "fill_":
            v.fill_(2.0)
        else:
            v[T.tensor([2, 1])] = -2.0
        return v * 1
    values = []
    for T in (torch, jt):
        x = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
        fn = jt.compile(lambda x: program(jt, x)) if compiled and T is jt else lambda x: program(T, x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            v = fn(x)
        values.append(v.tolist())
        assert v.grad_fn.name() == "MulBackward0"
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            v.sum().backward()
    assert values[0] == values[1]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("write", ["fill_ tensor", "setitem ellipsis", "setitem slice", "setitem value with grad",
                                   "fill_ number", "setitem row"])
def test_fill_of_a_tensor_value_and_basic_setitem_through_an_expanded_tensor_refuse_as_torch(write, compiled):
    """Found by the view/in-place chains test once views were made without grad mode too: ``e[...] = s`` into an
    expanded tensor wrote every row, where torch refuses it (its basic-index write is a ``fill_`` of the 0-d value,
    and torch's fill_ of a tensor refuses an internal overlap; its fill_ of a number writes)."""
    writes = {"fill_ tensor": lambda T, e, x: e.fill_(T.tensor(0.5)),
              "setitem ellipsis": lambda T, e, x: e.__setitem__(..., 0.5),
              "setitem slice": lambda T, e, x: e.__setitem__((slice(None), 0), 0.5),
              "setitem value with grad": lambda T, e, x: e.__setitem__(..., x[1] * 0.5),
              "fill_ number": lambda T, e, x: e.fill_(0.5),
              "setitem row": lambda T, e, x: e.__setitem__(0, -1.0)}

    def program(T, x):
        e = T.zeros(3, 4).expand(2, 3, 4)
        writes[write](T, e, x)
        return e * 1

    found = []
    for T in (torch, jt):
        fn = jt.compile(lambda x: program(jt, x)) if compiled and T is jt else lambda x: program(T, x)
        try:
            found.append(fn(T.ones(3, requires_grad=True)).tolist())
        except RuntimeError as e:
            found.append(str(e))
    assert found[1] == found[0]
    assert ("single memory location" in found[0]) == (write not in ("fill_ number", "setitem row"))


def test_float_powers_out_dtype_is_refused_before_its_overlap():
    """torch's float_power checks its out's dtype (float64 only) before pow's overlap check: jitorch checked the
    overlap first, as an ``out=`` op's own check came after it (the in-place form's came before)."""
    for lib in (torch, jt):
        x = lib.arange(1.0, 9.0)
        with pytest.raises(RuntimeError, match="the output given to float_power has dtype Float"):
            lib.float_power(x[:6], x[2:], out=x[:6])


def test_masked_scatter_of_a_bool_tensor_by_itself_reads_old_values():
    """Fuzz seed 7500064: ``x.masked_scatter_(x, x)`` (self, mask and source one bool tensor) runs in torch,
    which checks no overlap there; jitorch's result is the one from the old values."""
    values = [True, False, True, False, True]
    x = jt.tensor(values)
    x.masked_scatter_(x, x)
    want = torch.tensor(values).masked_scatter_(torch.tensor(values), torch.tensor(values))
    assert x.tolist() == want.tolist() == [True, False, False, False, True]
