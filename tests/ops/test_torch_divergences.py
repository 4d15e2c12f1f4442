"""Divergences from torch found by hand (session 37's hunt), each fixed and pinned bit for bit against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt


@pytest.mark.parametrize("dim", [0, 1])
def test_float32_logcumsumexp_carries_its_scan_in_float64_as_torch(dim):
    """torch's CPU kernel accumulates a float32 logcumsumexp in double and rounds each output; jitorch's
    float32 NumPy scan differed from it in the last bit in about half the elements."""
    rng = np.random.default_rng(0)
    x = rng.normal(0, 3, (60, 40)).astype(np.float32)
    x[0, 3], x[1, 2], x[2, 5] = np.inf, -np.inf, np.nan
    t = torch.from_numpy(x).logcumsumexp(dim).numpy()
    j = jt.tensor(x).logcumsumexp(dim).numpy()
    np.testing.assert_array_equal(j, t)
    f = jt.compile(lambda a: (a * 2).logcumsumexp(dim))
    np.testing.assert_array_equal(f(jt.tensor(x)).numpy(), (torch.from_numpy(x) * 2).logcumsumexp(dim).numpy())


NAN, INF = float("nan"), float("inf")
SEQUENCES = {
    "nan_at_the_end": [-INF, -0.0, 0.0, 1.0, 1.0, 2.0, 3.0, INF, NAN, NAN],
    "nan_inside": [1.0, NAN, 2.0, 3.0],
    "unsorted": [5.0, 1.0, 3.0, 2.0, 9.0, 0.0, 4.0],
    "sorted": [-1.0, 0.0, 0.0, 2.5, 7.0],
}


@pytest.mark.parametrize("sequence", SEQUENCES)
@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_is_torchs_binary_search_with_nan_and_unsorted_sequences(sequence, right):
    """torch searches by comparisons that are false for NaN (a NaN value goes past every element; a NaN in
    the sequence sends the search right); NumPy's searchsorted ordered NaN last and gave other indices."""
    values = [3.0, NAN, 1.0, -INF, 1.0, INF, -0.0, 0.0, 2.0, 0.5, 9.5, -1.0]
    for dtype in ("float32", "float64", "float16"):
        seq = torch.tensor(SEQUENCES[sequence], dtype=getattr(torch, dtype))
        val = torch.tensor(values, dtype=getattr(torch, dtype))
        expected = torch.searchsorted(seq, val, right=right)
        got = jt.searchsorted(jt.tensor(SEQUENCES[sequence]).to(getattr(jt, dtype)),
                              jt.tensor(values).to(getattr(jt, dtype)), right=right)
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
        np.testing.assert_array_equal(jt.bucketize(jt.tensor(values), jt.tensor(SEQUENCES[sequence]), right=right).numpy(),
                                      torch.bucketize(torch.tensor(values), torch.tensor(SEQUENCES[sequence]),
                                                      right=right).numpy())


def test_searchsorted_of_empty_and_batched_sequences_and_sorter_as_torch():
    for seq, val, kw in [([], [1.0, 2.0], {}), ([[1, 3, 5, 7], [2, 4, 6, 8]], [[3, 6, 9], [3, 6, 9]], {"right": True}),
                         ([3.0, 1.0, 7.0, 5.0], [4.0, 6.0], {"sorter": [1, 0, 3, 2]})]:
        t_kw = {k: torch.tensor(v) if k == "sorter" else v for k, v in kw.items()}
        j_kw = {k: jt.tensor(v) if k == "sorter" else v for k, v in kw.items()}
        np.testing.assert_array_equal(jt.searchsorted(jt.tensor(seq), jt.tensor(val), **j_kw).numpy(),
                                      torch.searchsorted(torch.tensor(seq), torch.tensor(val), **t_kw).numpy())
    np.testing.assert_array_equal(jt.searchsorted(jt.zeros(2, 0), jt.zeros(2, 3)).numpy(),
                                  torch.searchsorted(torch.zeros(2, 0), torch.zeros(2, 3)).numpy())


@pytest.mark.parametrize("name", ["mean", "nanmean"])
def test_an_integer_mean_over_a_dim_out_of_range_raises_the_dtype_error_first_as_torch(name):
    for shape in [(), (0,)]:
        with pytest.raises(RuntimeError) as t:
            getattr(torch, name)(torch.zeros(shape, dtype=torch.int64), 1)
        with pytest.raises(RuntimeError) as j:
            getattr(jt, name)(jt.zeros(shape, dtype=jt.int64), 1)
        assert str(j.value) == str(t.value)


def test_autograd_grad_with_no_inputs_raises_as_torch():
    for T in (torch, jt):
        x = T.tensor([1.0, 2.0], requires_grad=True)
        with pytest.raises(RuntimeError, match="`inputs` argument to `grad\\(\\)` cannot be empty."):
            T.autograd.grad((x * 2).sum(), [])
        assert x.grad is None


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64"])
def test_kthvalue_picks_torchs_element_among_equal_values_and_signed_zeros(dtype):
    """torch's kthvalue is a quickselect: among equal values (-0.0 and 0.0 too) its choice of index, and of
    zero, is no sort's; jitorch's stable sort gave ``kthvalue([0., -0., 1.], 1)`` as 0.0 at 0 where torch gives
    -0.0 at 1. Rows with and without ties, NaN, every k, over each dim, keepdim or not, bit for bit."""
    rng = np.random.default_rng(5)
    pool = [0.0, -0.0, 1.0, -1.0, NAN, 2.0] if dtype != "int64" else [0, 1, 2, -1]
    for trial in range(60):
        shape = (2, int(rng.integers(1, 14)), 3)
        x = torch.tensor(rng.choice(pool, size=shape).tolist(), dtype=getattr(torch, dtype))
        y = jt.tensor(x.tolist(), dtype=getattr(jt, dtype))
        dim = trial % 3
        for k in range(1, shape[dim] + 1):
            want = torch.kthvalue(x, k, dim, keepdim=trial % 2 == 0)
            got = jt.kthvalue(y, k, dim, keepdim=trial % 2 == 0)
            assert got.indices.tolist() == want.indices.tolist()
            assert got.values.float().numpy().tobytes() == want.values.float().numpy().tobytes()
    assert jt.kthvalue(jt.tensor([0.0, -0.0, 1.0]), 1).indices.item() == 1


ERROR_ORDER = {
    "logcumsumexp_of_integers_into_a_float_out": lambda L: L.logcumsumexp(L.tensor([1, 2]), 0, out=L.empty(2)),
    "logcumsumexp_out_dtype_before_the_dim": lambda L: L.logcumsumexp(L.tensor([1.0, 2]), 5,
                                                                       out=L.empty(2, dtype=L.int64)),
    "cummax_out_dtype_before_the_dim": lambda L: L.cummax(L.tensor([1, 2]), 5,
                                                          out=(L.empty(2), L.empty(2, dtype=L.int64))),
    "median_of_an_empty_bool_tensor_over_a_dim": lambda L: L.median(L.zeros(0, dtype=L.bool), 0),
    "median_of_a_bool_tensor_over_a_dim_out_of_range": lambda L: L.median(L.tensor([True]), 5),
    "half_mean_into_an_integer_out": lambda L: L.mean(L.ones(3, dtype=L.half), 0, out=L.empty((), dtype=L.int64)),
    "double_mean_into_a_bool_out": lambda L: L.mean(L.ones(3, dtype=L.float64), 0, out=L.empty((), dtype=L.bool)),
    "nanmean_into_an_integer_out": lambda L: L.nanmean(L.ones(3), 0, out=L.empty((), dtype=L.int32)),
    "nanmean_of_integers_with_out": lambda L: L.nanmean(L.tensor([1, 2]), 0, out=L.empty(())),
    "nanmean_with_out_dim_out_of_range": lambda L: L.nanmean(L.ones(3), 5, out=L.empty((), dtype=L.int64)),
}


@pytest.mark.parametrize("case", list(ERROR_ORDER))
def test_out_errors_come_in_torchs_order_with_torchs_message(case):
    """Session 37's leftovers: torch's first error (type and message) where several apply, before anything is
    written: logcumsumexp compares its out tensor with the input before the dim and the dtype's kernel;
    median over a dim checks the dim before refusing bool; mean into an integer out names the division's Float
    (torch sums into the out tensor, then divides it in place); nanmean with out= has its own messages."""
    errors = []
    for lib in (torch, jt):
        with pytest.raises(Exception) as info:
            ERROR_ORDER[case](lib)
        errors.append((type(info.value).__name__, str(info.value)))
    assert errors[1] == errors[0]


@pytest.mark.parametrize("dtype, base, exponent", [("int64", 0, 1e-300), ("int32", 0, -1e-300),
                                                   ("float32", -1.0, 3.0000000001), ("uint8", 0, 1e-50)])
def test_a_power_by_a_python_float_takes_the_exponent_in_the_result_dtype_as_torchs_vector_loop(dtype, base,
                                                                                                exponent):
    """Session 38's leftover ``int_tensor ** 1e-300``: torch 2.13 takes the exponent rounded to float32 in its
    vector loop and the float64 exponent for the elements that loop leaves over (its last partial chunk: a
    tensor's position decides; documented). jitorch takes the rounded one everywhere: torch's answer on the
    first 16 elements (a whole chunk on every CPU torch vectorises for), the same on the rest."""
    theirs = (torch.full((40,), base, dtype=getattr(torch, dtype)) ** exponent).numpy()
    ours = (jt.full((40,), base, dtype=getattr(jt, dtype)) ** exponent).numpy()
    np.testing.assert_array_equal(ours[:16], theirs[:16])
    assert (ours == ours[0]).all() and str(ours.dtype) == str(theirs.dtype)


@pytest.mark.parametrize("name", ["gcd", "lcm"])
def test_gcd_and_lcm_of_floats_raise_torchs_not_implemented_error(name):
    """Session 38 listed these as raising NotImplementedError where torch raises TypeError: torch 2.13 raises
    NotImplementedError too, with this message, as jitorch does."""
    errors = []
    for lib in (torch, jt):
        with pytest.raises(NotImplementedError) as info:
            getattr(lib, name)(lib.tensor([4, 6]), lib.tensor([2.0, 3.0]))
        errors.append(str(info.value))
    assert errors[1] == errors[0] == f'"{name}_cpu" not implemented for \'Float\''


def test_searchsorted_with_a_sorter_out_of_range_raises_torchs_error():
    """NumPy's IndexError from take_along_axis leaked out; torch checks the sorter first."""
    errors = []
    for lib in (torch, jt):
        with pytest.raises(RuntimeError) as info:
            lib.searchsorted(lib.tensor([1.0, 2.0]), lib.tensor([1.5]), sorter=lib.tensor([7, 1]))
        errors.append(str(info.value))
    assert errors[1] == errors[0] == "torch.searchsorted(): sorter index out of range"
