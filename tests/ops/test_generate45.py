"""Eager paths a GPT's generation runs, each giving the general path's bits: the descending stable order
behind ``sort`` and ``topk`` (`ops.shape_ops._argsort`, reversed by slices rather than ``np.flip``; the
sampling step calls ``topk`` once per token), the same indices as torch's stable descending sort (ties, NaN
and signed zeros included, along every dim); and eager ``matmul``'s shortcut for two small matrices, which
takes the swap `array_product` makes of few rows times a transposed weight (`ops.linalg._swapped`), as
``linear`` does."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops import linalg, shape_ops

from tests.ops.test_generation_speedups import swapped_calls  # noqa: F401 (a fixture)
from tests.support import general_path


def _with_ties(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, shape).astype(np.float32)  # few values: many ties
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size, 3)] = np.nan
    flat[rng.integers(0, flat.size, 3)] = -0.0
    return x


@pytest.mark.parametrize("shape", [(65,), (1, 65), (3, 4, 5), (2, 1, 7)])
def test_descending_argsort_keeps_ties_in_order_along_every_dim(shape):
    """Seed 45: integers in [-3, 3] with NaNs and negative zeros."""
    x = _with_ties(shape, 45)
    for axis in range(len(shape)):
        got = shape_ops._argsort(x, axis, True)
        flipped = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
        np.testing.assert_array_equal(got, (shape[axis] - 1) - np.flip(flipped, axis))
        want = torch.sort(torch.from_numpy(x), dim=axis, descending=True, stable=True).indices
        np.testing.assert_array_equal(got, want.numpy())


def test_topk_of_the_sampling_step_takes_the_shortcut_with_torchs_result(monkeypatch):
    """generate()'s ``topk(logits, min(200, 65))`` of one row of 65 logits with ties (seed 45): the general path's
    values and indices."""
    calls = []
    run = shape_ops._topk_cpu

    def spy(*args):
        calls.append(args[1].shape)
        return run(*args)
    monkeypatch.setattr(shape_ops, "_topk_cpu", spy)
    x = _with_ties((1, 65), 45)
    with jt.no_grad():
        values, indices = jt.topk(jt.from_numpy(x), 65)
    assert calls == [(1, 65)]  # (the fast path looks this name up; the general path runs the kernel defop kept)
    with jt.no_grad(), general_path():
        general_values, general_indices = jt.topk(jt.from_numpy(x), 65)
    assert calls == [(1, 65)]
    np.testing.assert_array_equal(indices.numpy(), general_indices.numpy())
    np.testing.assert_array_equal(values.numpy(), general_values.numpy())
    # torch orders ties its own way: its values, and each index pointing at its value
    np.testing.assert_array_equal(values.numpy(), torch.topk(torch.from_numpy(x), 65).values.numpy())
    np.testing.assert_array_equal(x[0, indices.numpy()[0]], values.numpy()[0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rows", [4, 8])
def test_matmul_shortcut_of_few_rows_times_a_transposed_weight_gives_the_general_paths_bits(swapped_calls, dtype, rows):
    """``x @ w.t()`` of 4 or 8 rows times a 512x128 weight (seed 45): under 2**20 multiply-adds eager matmul's
    shortcut called NumPy's matmul directly, while the general path (and ``linear``) ran the swapped product:
    the last bits differed (4 rows float32: most elements)."""
    swaps = swapped_calls
    rng = np.random.default_rng(45)
    x, w = rng.standard_normal((rows, 128)).astype(dtype), rng.standard_normal((512, 128)).astype(dtype)
    got = jt.from_numpy(x) @ jt.from_numpy(w).t()
    assert swaps == [((rows, 128), (128, 512))]  # the shortcut's call
    with general_path():
        general = jt.from_numpy(x) @ jt.from_numpy(w).t()
    assert len(swaps) == 2
    np.testing.assert_array_equal(got.numpy(), general.numpy())
    np.testing.assert_array_equal(got.numpy(), jt.nn.functional.linear(jt.from_numpy(x), jt.from_numpy(w)).numpy())
    assert got.is_contiguous()
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got.numpy(), (torch.from_numpy(x) @ torch.from_numpy(w).t()).numpy(), rtol=tol, atol=tol)


def test_matmul_shortcut_of_integer_matrices_is_not_swapped(monkeypatch):
    """Integer products never take the swap (`array_product` gives them to NumPy at once)."""
    monkeypatch.setattr(linalg, "_swapped_product", None)  # (a call would raise)
    x = np.arange(8 * 128, dtype=np.int64).reshape(8, 128) % 7
    w = np.arange(512 * 128, dtype=np.int64).reshape(512, 128) % 5
    got = jt.from_numpy(x) @ jt.from_numpy(w).t()
    np.testing.assert_array_equal(got.numpy(), x @ w.T)
