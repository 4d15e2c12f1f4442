"""Eager copies that transpose (a source striding far across the destination's unit-stride dim) run in
blocks along that dim: the same elements land where an unblocked copy puts them, dtype casts included."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
from jitorch.runtime import copy_parts


@pytest.mark.parametrize("shape, dims", [
    ((20, 6, 16, 16), (1, 2, 3, 0)),   # NCHW to a convolution's batch-last layout; 20 is no multiple of the block
    ((96, 1024), (1, 0)),              # a matrix transpose
    ((64, 32, 40), (2, 1, 0)),
])
def test_clone_of_a_far_strided_permutation_is_its_elements_in_order(shape, dims):
    x = jt.randn(*shape)
    p = x.permute(*dims)
    assert p.numpy().strides[-1] >= copy_parts._FAR_BYTES  # the blocked path
    np.testing.assert_array_equal(p.contiguous().numpy(), x.numpy().transpose(dims))


def test_a_scatter_of_a_transposed_source_into_a_padded_interior():
    x = jt.randn(40, 16, 10, 10)
    src = x.permute(1, 2, 3, 0)            # (16, 10, 10, 40), striding 1600 floats along its last dim
    out = jt.as_strided_scatter(jt.zeros(16, 12, 12, 40), src, (16, 10, 10, 40), (5760, 480, 40, 1), 520)
    expected = np.zeros((16, 12, 12, 40), np.float32)
    expected[:, 1:-1, 1:-1] = x.numpy().transpose(1, 2, 3, 0)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_a_far_strided_copy_into_another_dtype_casts_as_torch():
    x = jt.randn(300, 600, dtype=jt.float64)
    y = jt.empty(600, 300, dtype=jt.float32)
    y.copy_(x.t())
    np.testing.assert_array_equal(y.numpy(), x.numpy().T.astype(np.float32))
