"""Composite arrangements (jitorch/ops/arrangements.py) against torch where their memory sharing is the point."""

import numpy as np
import pytest
import torch

import jitorch as jt


def _layouts(lib):
    """Tensors of one set of values, laid out as torch's ravel tells apart: (name, tensor)."""
    base = lib.arange(40.0).reshape(10, 2, 2)
    return [("contiguous", base), ("every other element", base[::2, :1, 1:]), ("transposed", base.transpose(0, 2)),
            ("offset, contiguous", base[3:]), ("expanded", lib.arange(3.0).expand(2, 3))]


@pytest.mark.parametrize("i", range(5))
@pytest.mark.parametrize("compiled", [False, True])
def test_ravel_copies_unless_contiguous_as_torch(i, compiled):
    # ravel was reshape(-1): a non-contiguous tensor whose strides merge (every other element) came back as a
    # view, where torch's ravel (contiguous().view(-1)) copies, so a write into the result changed the input
    name, t = _layouts(torch)[i]
    _, j = _layouts(jt)[i]
    ravel = jt.compile(lambda x: x.ravel()) if compiled else (lambda x: x.ravel())
    want, got = t.ravel(), ravel(j)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    shares = want.data_ptr() == t.data_ptr() and want.stride() == (1,)
    assert (got.data_ptr() == j.data_ptr()) == shares, name
    got.add_(1)  # a copy leaves the input as it was; a view (of a contiguous input) writes into it
    np.testing.assert_array_equal(j.numpy(), (t + 1 if shares else t).numpy())
