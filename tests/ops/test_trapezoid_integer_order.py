"""cumulative_trapezoid by sample points computes in torch's order, ``((left + right) * dx).cumsum(dim) / 2``: for
integer tensors the sums and products wrap in their dtype before the halving, as torch's."""

import pytest
import torch

import jitorch as jt

CASES = {
    "uint8 samples at themselves": ("uint8", "uint8", [[3], [200], [10], [250], [7]]),
    "int16": ("int16", "int16", [[300], [-20000], [12000], [25000], [7]]),
    "int8 y, float x": ("int8", "float32", [[100], [90], [-120], [127], [1]]),
    "float32": ("float32", "float32", [[0.5], [1.25], [-3.0], [2.5], [0.125]]),
    "float64 y, int64 x": ("float64", "int64", [[0.5], [1.25], [-3.0], [2.5], [9.0]]),
}


@pytest.mark.parametrize("name", CASES)
def test_cumulative_trapezoid_wraps_integers_as_torch_seed_8400204(name):
    """Seed 8400204 of 40 statements: ``T.cumulative_trapezoid(x0, x0, dim=0)`` of a uint8 [5, 1] x0 gave 766.5 where
    torch gives 126.5: jitorch halved dx in float first, torch wraps ``(left + right) * dx`` in uint8."""
    ydt, xdt, values = CASES[name]
    results = []
    for T in (torch, jt):
        y = T.tensor(values).to(getattr(T, ydt))
        x = T.tensor(values).to(getattr(T, xdt)) * (-1 if xdt != "uint8" else 1)
        r = T.cumulative_trapezoid(y, x, dim=0)
        results.append((r.dtype.__repr__().split(".")[-1], r.tolist()))
    assert results[1] == results[0]
    compiled = jt.compile(lambda y, x: jt.cumulative_trapezoid(y, x, dim=0))
    y, x = (jt.tensor(values).to(getattr(jt, d)) for d in (ydt, xdt))
    x = x * (-1 if xdt != "uint8" else 1)
    assert compiled(y, x).tolist() == jt.cumulative_trapezoid(y, x, dim=0).tolist()
