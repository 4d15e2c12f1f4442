"""Cases the first tests of the device factories, scatter_reduce, sorts, scans and compactions missed, each
checked against the CPU on the fake device running the kernels (see test_device_ops.py)."""

import numpy as np
import pytest

import jitorch as jt
from jitorch.codegen.nvptx import scan
from tests.cuda.test_device_ops import expect
from tests.cuda.test_ptx import assert_assembles


@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_bfloat16_scatter_reduce_without_self_starts_from_the_identity(reduce):
    """The identity of a bfloat16 max or min is an infinity: NumPy's iinfo knows nothing of ml_dtypes' type,
    so it must be taken for the float32 copy the reduction runs in."""
    x = jt.tensor([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]]).to(jt.bfloat16)
    index = jt.tensor([[1, 0, 1]])
    src = jt.tensor([[-7.0, 9.0, 2.5]]).to(jt.bfloat16)
    launched = expect(lambda t, i, s: t.scatter_reduce(0, i, s, reduce, include_self=False), x, index, src)
    assert f"scatter_reduce_{reduce}" in launched


@pytest.mark.parametrize("long_line", [False, True])
@pytest.mark.parametrize("op", ["argmax", "argmin", "max", "min"])
def test_bfloat16_arg_reductions(op, long_line, monkeypatch):
    """bfloat16 values are held as integer bits: the walks compare them as the float32s they widen to, in a
    thread per line and in chunks (LONG_LINE made 40)."""
    values = np.random.default_rng(3).integers(-20, 20, (2, 90)).astype(np.float32) / 4
    values[1, 7] = np.nan
    x = jt.tensor(values).to(jt.bfloat16)
    if long_line:
        monkeypatch.setattr(scan, "LONG_LINE", 40)
    launched = expect(lambda t: getattr(t, op)(1), x)
    assert launched == {op if op.startswith("arg") else f"{op}.dim"}


def test_the_bfloat16_walks_assemble():
    kernels = [scan.arg_kernel("argmax", (2, 90), 1, (jt.bfloat16, (90, 1)))]
    kernels += [scan.chunked_kernel("max.dim", phase, (2, 90), 1, (jt.bfloat16, (90, 1)), None, 32)
                for phase in ("extremes", "pick")]
    assert_assembles(kernels)
