"""index_add's CPU formula (`ops.indexing.index_add_into`) reads a source of the result's dtype where it lies,
without converting it into a copy first, unless it shares memory with the result."""

from __future__ import annotations

import numpy as np
import torch

import jitorch as jt
from jitorch.ops import indexing


def _counting_convert(monkeypatch):
    calls = []
    real = indexing.convert

    def convert(values, dtype):
        calls.append(np.shape(values))
        return real(values, dtype)
    monkeypatch.setattr(indexing, "convert", convert)
    return calls


def test_a_source_of_the_results_dtype_is_read_in_place(monkeypatch):
    rng = np.random.default_rng(0)
    x, src = rng.standard_normal((65, 128)).astype(np.float32), rng.standard_normal((768, 128)).astype(np.float32)
    idx = rng.integers(0, 65, 768)
    calls = _counting_convert(monkeypatch)
    got = jt.tensor(x).index_add(0, jt.tensor(idx), jt.tensor(src))
    assert (768, 128) not in calls  # (the embedding backward's 768 rows are not copied)
    want = torch.tensor(x).index_add(0, torch.tensor(idx), torch.tensor(src))
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_a_source_that_overlaps_the_result_is_read_before_the_adds():
    # (the ops refuse an overlapping source, as torch does, but a compiled graph's arena buffer goes straight in:
    # each row added is its value before any add, as from a copy)
    rng = np.random.default_rng(2)
    out = rng.standard_normal((80, 64)).astype(np.float32)
    idx = rng.integers(0, 80, 70)
    want = out.copy()
    np.add.at(want, idx, out[:70].copy())
    indexing.index_add_into(out, out, 0, idx, out[:70])
    np.testing.assert_array_equal(out, want)


def test_a_source_along_a_later_dim_and_of_another_dtype():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5, 70)).astype(np.float64)
    src = rng.standard_normal((3, 40, 70)).astype(np.float32)
    idx = rng.integers(0, 5, 40)
    got = jt.tensor(x).index_add(1, jt.tensor(idx), jt.tensor(src).double(), alpha=0.5)
    want = torch.tensor(x).index_add(1, torch.tensor(idx), torch.tensor(src).double(), alpha=0.5)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    out = np.zeros((3, 5, 70))
    indexing.index_add_into(out, None, 1, idx, src)  # (a float32 source into float64: converted)
    np.testing.assert_allclose(out, torch.zeros(3, 5, 70, dtype=torch.float64).index_add(
        1, torch.tensor(idx), torch.tensor(src).double()).numpy(), rtol=1e-12, atol=1e-12)
