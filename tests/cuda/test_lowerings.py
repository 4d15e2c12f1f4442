"""Lowerings with integer and IEEE corner cases as NVPTX kernels on the fake device: the division
family (with its fmod loop), shifts, fills and the logical, counting and NaN-skipping reductions each
launch their own generated kernel, give the CPU's results bit for bit, and assemble with ptxas.
tests/codegen/test_kernels.py covers the same lowerings on the CPU in depth."""

import numpy as np
import pytest

import jitorch as jt
from tests.codegen.test_kernels import EDGE_FLOATS, FUNCTIONS, assert_identical, integer_edges
from tests.cuda.test_ptx import assert_assembles, cuda_kernels


def on_device(fake, fn, *tensors):
    """(ops of each kernel launched, result back on the CPU) of ``fn`` on device copies of ``tensors``."""
    inputs = [t.cuda() for t in tensors]
    fake.launches.clear()
    out = fn(*inputs)
    return [launch.ops for launch in fake.launches], out.cpu()


def edge_grid(dtype):
    s = np.array(EDGE_FLOATS).astype(dtype.np)
    return tuple(jt.tensor(g.ravel()) for g in np.meshgrid(s, s))


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
@pytest.mark.parametrize("name", ["floor_divide", "_div_trunc", "remainder", "fmod", "hypot", "logaddexp"])
def test_float_binary_ops_run_as_kernels(fake, name, dtype):
    a, b = edge_grid(dtype)
    fn = FUNCTIONS[name]
    launched, got = on_device(fake, fn, a, b)
    assert launched == [[name]]
    expected = fn(a, b)
    if name in ("hypot", "logaddexp"):  # libm's and the math library's last bits may differ
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=4 * np.finfo(dtype.np).eps, equal_nan=True)
    else:
        assert_identical(got, expected)


@pytest.mark.parametrize("dtype", [jt.int8, jt.int64, jt.uint8])
def test_shifts_and_integer_divisions_by_a_number_run_as_kernels(fake, dtype, rng):
    x = integer_edges(dtype, rng)
    bits = dtype.itemsize * 8
    counts = jt.tensor(rng.integers(-bits - 2 if dtype.is_signed else 0, bits + 2, x.shape[0]).astype(dtype.np))
    for name in ("bitwise_left_shift", "bitwise_right_shift"):
        launched, got = on_device(fake, FUNCTIONS[name], x, counts)
        assert launched == [[name]]
        assert_identical(got, FUNCTIONS[name](x, counts))
    divisor = -7 if dtype.is_signed else 7
    for name in ("floor_divide", "remainder"):
        launched, got = on_device(fake, lambda t: FUNCTIONS[name](t, divisor), x)
        assert launched == [[name]]
        assert_identical(got, FUNCTIONS[name](x, divisor))


@pytest.mark.parametrize("name", ["all", "any", "count_nonzero", "nansum"])
def test_logical_counting_and_nan_reductions_run_as_block_kernels(fake, name, rng):
    arr = rng.standard_normal((5, 300)).astype(np.float32)
    arr[:, ::4] = 0
    arr[1, ::7] = np.nan
    arr[2] = 0
    x = jt.tensor(arr)
    for dims in (1, 0, None):
        fn = lambda t: getattr(jt, name)(t) if dims is None else getattr(jt, name)(t, dims)  # noqa: E731
        launched, got = on_device(fake, fn, x)
        assert launched == [[name]]
        if name == "nansum":
            np.testing.assert_allclose(got.numpy(), fn(x).numpy(), rtol=1e-5, atol=1e-4)
        else:
            assert_identical(got, fn(x))


def test_masked_fill_of_bfloat16_runs_as_a_kernel(fake, rng):
    x = jt.tensor(rng.standard_normal((4, 6)).astype(np.float32)).to(jt.bfloat16)
    mask = jt.tensor(rng.random(6) < 0.5)
    launched, got = on_device(fake, lambda t, m: t.masked_fill(m, 0.1), x, mask)
    assert launched == [["masked_fill"]]
    assert_identical(got, x.masked_fill(mask, 0.1))


def test_a_fused_graph_of_these_ops_assembles():
    x = jt.tensor(np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6))
    n = jt.tensor(np.arange(24, dtype=np.int32).reshape(4, 6))

    def fn(t, k):
        r = jt.fmod(t, 0.7) + jt.remainder(t, -1.3) + jt.floor_divide(t, 0.3) + jt.hypot(t, t) + jt.logaddexp(t, t)
        shifted = jt.bitwise_right_shift(k, k - 3) + jt.bitwise_left_shift(k, 2) // 3
        return r.masked_fill(t > 2, 1.0).nansum(1), (shifted != 0).all(0), shifted.count_nonzero(1), \
            jt.isclose(t, r, 0.1, 0.5).any(1)
    assert_assembles(cuda_kernels(fn, x, n))
