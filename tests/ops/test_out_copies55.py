"""Ops whose torch out= form computes the result and copy_-s it into out (quantile, inner, matrix_power, the
nuclear norm, ...: ``out_copies``) check no overlap of out with their inputs, as torch's: fuzz seed 5590870
(``--out-views``) found ``quantile(x, q, out=x)`` on a 0-d ``x`` raising TypeError (the overlap check asked a
composite op without a meta function for its result's shape)."""

import numpy as np
import pytest
import torch

import jitorch as jt


def _both(program):
    """``program(lib)``'s result and its written input as arrays, in jitorch and in torch."""
    return [tuple(np.asarray(t.tolist()) for t in program(lib)) for lib in (jt, torch)]


CASES = {
    "quantile of a 0-d input into itself, seed 5590870":
        lambda m: (lambda x: (m.quantile(x, 0.001, out=x.moveaxis(-1, -1)), x))(m.tensor(3.0)),
    "nanquantile into an element of its input":
        lambda m: (lambda x: (m.nanquantile(x, 0.25, out=x[0, 0]), x))(m.arange(6.0).reshape(2, 3)),
    "quantile along a dim into a row of its input":
        lambda m: (lambda x: (m.quantile(x, 0.5, dim=0, out=x[0]), x))(m.arange(6.0).reshape(2, 3)),
    "inner into an element of its input":
        lambda m: (lambda a: (m.inner(a, a, out=a[0]), a))(m.arange(3.0)),
    "matrix_power 1 into its input":
        lambda m: (lambda a: (m.linalg.matrix_power(a, 1, out=a), a))(m.eye(2) * 2),
    "the nuclear norm into an element of its input":
        lambda m: (lambda a: (m.norm(a, "nuc", out=a[0, 0]), a))(m.eye(2) * 2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_an_out_copied_result_may_alias_its_input_as_in_torch(name):
    ours, theirs = _both(CASES[name])
    for got, expected in zip(ours, theirs):
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_a_pointwise_out_overlapping_its_input_still_raises_torchs_error():
    x = jt.arange(4.0)
    with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor"):
        jt.add(x[:3], 1, out=x[1:])
