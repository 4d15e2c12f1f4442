"""Divergences from torch in indexing found by hand (session 38's hunt), each fixed and pinned against torch:
the same result, or the same exception type and message."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import jitorch as jt


def _outcome(M, f):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            r = f(M)
        except Exception as e:  # noqa: BLE001 (the error itself is what is compared)
            return type(e).__name__, str(e)
    return "ok", (str(r.dtype).split(".")[-1], r.tolist())


def _alike(f):
    assert _outcome(jt, f) == _outcome(torch, f)


INDEX_COPY = {
    "scalar_source_two_indices": lambda M: M.zeros(4, 5).index_copy(1, M.tensor([0, 1]), M.tensor(1.)),
    "dtypes_before_count": lambda M: M.zeros(4, 5).index_copy(1, M.tensor([0, 1]), M.zeros(4, 3, dtype=M.float64)),
    "index_dtype_first": lambda M: M.zeros(4, 5).index_copy(1, M.tensor([0, 1], dtype=M.int32),
                                                             M.zeros(4, 3, dtype=M.float64)),
    "slices_before_count": lambda M: M.zeros(4, 5).index_copy(1, M.tensor([0, 1]), M.zeros(3, 3)),
    "dimensionality": lambda M: M.zeros(4, 5).index_copy(1, M.tensor([0, 1]), M.zeros(3)),
    "index_rank": lambda M: M.zeros(4, 5).index_copy(0, M.tensor([[0, 1]]), M.zeros(3)),
    "scalar_source_into_a_matrix": lambda M: M.zeros(4, 5).index_copy(0, M.tensor([0]), M.tensor(1.)),
    "into_a_scalar": lambda M: M.tensor(1.).index_copy(0, M.tensor([0]), M.tensor([2.])),
    "count": lambda M: M.zeros(4, 5).index_copy(-1, M.tensor([1, 2]), M.zeros(4, 3)),
    "valid": lambda M: M.zeros(4, 5).index_copy(1, M.tensor([4, 0]), M.ones(4, 2)),
}


@pytest.mark.parametrize("case", INDEX_COPY)
def test_index_copy_checks_its_arguments_in_torchs_order(case):
    """index_copy read ``source.size(dim)`` before checking the ranks (an IndexError from a tuple for a 1-D
    source into a matrix), checked the count before the slice shapes, and copied a 0-d source into a matrix
    where torch raises."""
    _alike(INDEX_COPY[case])


INDEX_ADD = {
    "dim_past_the_source": lambda M: M.zeros(4, 5).index_add(1, M.tensor(1), M.zeros(4)),
    "dim_past_a_0d_source": lambda M: M.zeros(4, 5).index_add(1, M.tensor([1, 2]), M.tensor(1.)),
    "count_of_a_0d_source": lambda M: M.zeros(5).index_add(0, M.tensor([1, 2]), M.tensor(1.)),
    "negative_dim": lambda M: M.zeros(4, 5).index_add(-1, M.tensor([1, 2]), M.zeros(5)),
    "count": lambda M: M.zeros(4, 5).index_add(-1, M.tensor([1, 2]), M.zeros(4, 3)),
    "valid_0d": lambda M: M.tensor(1.).index_add(0, M.tensor(0), M.tensor(2.), alpha=3),
}
for _shape, _dim, _src in [((4, 5), 1, (4, 3)), ((4, 5), 0, (3, 5)), ((5,), 0, (3,)), ((4, 5, 2), 1, (4, 3, 2))]:
    for _alpha in (1, 2):
        INDEX_ADD[f"out_of_range_{len(_shape)}d_alpha_{_alpha}"] = (
            lambda M, s=_shape, d=_dim, src=_src, a=_alpha:
            M.zeros(s).index_add(d, M.tensor([0, -1, 2]), M.ones(src), alpha=a))


@pytest.mark.parametrize("case", INDEX_ADD)
def test_index_add_errors_are_torchs(case):
    """index_add read ``source.size(dim)`` past a source's dims (IndexError from a tuple where torch's
    "Indexing dim ... is out of bounds of the source tensor"); an index out of range is torch's IndexError
    "index out of range in self" except where torch's CPU kernel is index_put's (2-D self, alpha 1)."""
    _alike(INDEX_ADD[case])


def _set(x, index, value):
    x[index] = value
    return x


MASK, BYTES, INTS = ([True, False, True], "bool"), ([1, 0, 1], "uint8"), ([0, 2], "int64")
ONE_VALUE = {
    "float64_past_float32": (lambda M, i: _set(M.zeros(3), i, M.tensor(1e40, dtype=M.float64))),
    "float64_1_past_float32": (lambda M, i: _set(M.zeros(3), i, M.tensor([1e40], dtype=M.float64))),
    "300_into_uint8": (lambda M, i: _set(M.zeros(3, dtype=M.uint8), i, M.tensor(300))),
    "nan_into_int32": (lambda M, i: _set(M.zeros(3, dtype=M.int32), i, M.tensor(float("nan")))),
    "number": (lambda M, i: _set(M.zeros(3), i, 7.5)),
    "bool_into_int32": (lambda M, i: _set(M.zeros(3, dtype=M.int32), i, M.tensor(True))),
    "after_an_int": (lambda M, i: _set(M.zeros(2, 3), (0, i), M.tensor(1e40, dtype=M.float64))),
    "index_put_float64": (lambda M, i: M.zeros(3).index_put_((i,), M.tensor(1., dtype=M.float64))),
    "index_put_int64_into_float32": (lambda M, i: M.zeros(3).index_put((i,), M.tensor(3))),
    "index_put_300_into_uint8": (lambda M, i: M.zeros(3, dtype=M.uint8).index_put_((i,), M.tensor(300))),
    "index_put_accumulate": (lambda M, i: M.zeros(3).index_put_((i,), M.tensor(1., dtype=M.float64), True)),
}


@pytest.mark.parametrize("index", [MASK, BYTES, INTS], ids=lambda i: i[1])
@pytest.mark.parametrize("case", ONE_VALUE)
def test_one_value_through_one_mask_is_torchs_masked_fill(case, index):
    """torch's index_put_ of one value through one mask (and no other index tensor) is
    ``masked_fill_(mask, value.item())``: any dtype of value, which must fit self's dtype as a number, and
    a byte mask refused. jitorch cast the value (300 into uint8 wrote 44, NaN into int32 INT_MIN, 1e40 into
    float32 inf, where torch raises), refused a value of another dtype given to index_put_, and wrote
    through byte masks."""
    _alike(lambda M: ONE_VALUE[case](M, M.tensor(index[0], dtype=getattr(M, index[1]))))


def test_one_value_through_one_mask_compiled_and_its_gradient_as_torch():
    for M in (torch, jt):
        x = M.arange(6., requires_grad=True)
        v = M.tensor(2.5, dtype=M.float64, requires_grad=True)
        y = x * 1
        y[M.tensor([True, False, True, False, True, True])] = v
        (y * M.arange(6.)).sum().backward()
        assert v.grad.dtype == M.float64 and v.grad.item() == 11.0 and x.grad.tolist() == [0, 1, 0, 3, 0, 0]
    f = jt.compile(lambda a, m, b: a.index_put((m,), b))
    mask = jt.tensor([True, False, True])
    assert f(jt.zeros(3), mask, jt.tensor(2.5, dtype=jt.float64)).tolist() == [2.5, 0.0, 2.5]
    with pytest.raises(RuntimeError, match="value cannot be converted to type uint8_t without overflow"):
        f(jt.zeros(3, dtype=jt.uint8), mask, jt.tensor(300))


def test_an_index_of_a_wrong_dtype_is_reported_before_the_values_dtype():
    """torch checks the index tensors' dtypes (IndexError) before the values' shape and dtype."""
    _alike(lambda M: _set(M.zeros(3, 4), M.tensor([1.0]), M.arange(4)))
    _alike(lambda M: M.zeros(3, 4).index_put_((M.tensor([1.0]),), M.zeros(4, dtype=M.float64)))


def test_a_value_that_does_not_fit_a_mask_names_the_masks_count():
    """The shape check of a value against a mask's result waits for the mask's count (it named None)."""
    _alike(lambda M: _set(M.zeros(3, 4, 5), (M.tensor([True, False, True]), slice(None), M.tensor([1, 3])),
                          M.arange(5.)))
    np.testing.assert_array_equal(
        _set(jt.zeros(3, 4), jt.tensor([True, False, True]), jt.arange(4.)).numpy(),
        _set(torch.zeros(3, 4), torch.tensor([True, False, True]), torch.arange(4.)).numpy())
