"""torch.linalg.ldl_factor, ldl_factor_ex and ldl_solve: LAPACK's unblocked Bunch-Kaufman (sytf2) step for
step gives torch's pivots, and its LD to the rounding of MKL's update kernels (bit for bit on an AMD host,
where MKL runs its generic code; a few ulps of the largest factor on an Intel AVX-512 host); solves close to
torch's; torch's errors, zero pivots and missing derivative."""

import numpy as np
import pytest
import torch

import jitorch as jt


def symmetric(rng, shape, small_diagonal=False, dtype="float64"):
    m = rng.standard_normal(shape)
    a = m + np.swapaxes(m, -1, -2)
    if small_diagonal:  # (2x2 pivots)
        n = shape[-1]
        a[..., np.arange(n), np.arange(n)] *= 0.01
    return a.astype(dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_factors_are_torchs_to_the_rounding_of_mkls_kernels(dtype, rng):
    """The pivots equal torch's; the factors differ by at most 8 n ulps of the largest (measured on 20 seeds
    per size on an Intel AVX-512 host: up to 1.03 n ulps in float64, 4.2 n in float32, where MKL's update
    kernels fuse multiply-adds; 0 on AMD)."""
    cases = [symmetric(rng, batch + (n, n), small, dtype)
             for n, batch, small in [(1, (), False), (2, (), True), (5, (3,), True), (8, (), False),
                                     (11, (2,), True), (24, (), True), (40, (), False)]]
    cases.append(np.array([[0.0, 1.0], [1.0, 0.0]], dtype))  # one 2x2 block
    two_by_two = 0
    for a in cases:
        LD, pivots = jt.linalg.ldl_factor(jt.tensor(a))
        expected = torch.linalg.ldl_factor(torch.from_numpy(a))
        np.testing.assert_array_equal(pivots.numpy(), expected.pivots.numpy())
        ulp = np.finfo(dtype).eps * np.abs(expected.LD.numpy()).max()
        np.testing.assert_allclose(LD.numpy(), expected.LD.numpy(), rtol=0, atol=8 * a.shape[-1] * ulp)
        assert pivots.dtype == jt.int32
        two_by_two += int((pivots.numpy() < 0).any())
    assert two_by_two >= 4


def test_a_large_matrix_takes_torchs_pivots(rng):
    """MKL factors 100 x 100 in blocks (another rounding): the pivots agree, the factors to 1e-12."""
    a = symmetric(rng, (100, 100))
    LD, pivots = jt.linalg.ldl_factor(jt.tensor(a))
    expected = torch.linalg.ldl_factor(torch.from_numpy(a))
    np.testing.assert_array_equal(pivots.numpy(), expected.pivots.numpy())
    np.testing.assert_allclose(LD.numpy(), expected.LD.numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_solve_matches_torch_and_solves(dtype, rng):
    a = symmetric(rng, (2, 6, 6), True, dtype)
    b = rng.standard_normal((2, 6, 3)).astype(dtype)
    LD, pivots = jt.linalg.ldl_factor(jt.tensor(a))
    x = jt.linalg.ldl_solve(LD, pivots, jt.tensor(b)).numpy()
    t = torch.linalg.ldl_factor(torch.from_numpy(a))
    expected = torch.linalg.ldl_solve(t.LD, t.pivots, torch.from_numpy(b)).numpy()
    tol = 1e-12 if dtype == "float64" else 2e-4
    np.testing.assert_allclose(x, expected, rtol=tol, atol=tol)
    np.testing.assert_allclose(a @ x, b, rtol=tol * 10, atol=tol * 10)
    # int64 pivots and a broadcast right-hand side, as torch takes them
    x1 = jt.linalg.ldl_solve(LD, pivots.long(), jt.tensor(b[0])).numpy()
    np.testing.assert_allclose(x1[1], torch.linalg.ldl_solve(t.LD, t.pivots.long(), torch.from_numpy(b[0])).numpy()[1],
                               rtol=tol, atol=tol)


def test_a_zero_pivot_is_reported_as_torch():
    zeros = np.zeros((2, 2))
    LD, pivots, info = jt.linalg.ldl_factor_ex(jt.tensor(zeros))
    expected = torch.linalg.ldl_factor_ex(torch.from_numpy(zeros))
    assert int(info) == int(expected.info) == 1
    np.testing.assert_array_equal(pivots.numpy(), expected.pivots.numpy())
    for fn, name in ((lambda lib: lib.linalg.ldl_factor(lib.zeros(2, 2)), "ldl_factor"),
                     (lambda lib: lib.linalg.ldl_factor_ex(lib.zeros(2, 2), check_errors=True), "ldl_factor_ex")):
        with pytest.raises(RuntimeError, match=f"torch.linalg.{name}: Unknown error code: 1."):
            fn(torch)
        with pytest.raises(RuntimeError, match=f"torch.linalg.{name}: Unknown error code: 1."):
            fn(jt)


@pytest.mark.parametrize("call", [
    lambda lib: lib.linalg.ldl_factor(lib.ones(2, 3)),
    lambda lib: lib.linalg.ldl_factor(lib.ones(2, 2, dtype=lib.int64)),
    lambda lib: lib.linalg.ldl_factor(lib.ones(3)),
    lambda lib: lib.linalg.ldl_factor(lib.ones(2, 2).half()),
    lambda lib: lib.linalg.ldl_solve(lib.ones(2), lib.ones(2, dtype=lib.int32), lib.ones(2, 1)),
    lambda lib: lib.linalg.ldl_solve(lib.ones(2, 3), lib.ones(2, dtype=lib.int32), lib.ones(2, 1)),
    lambda lib: lib.linalg.ldl_solve(lib.ones(2, 2), lib.ones(2, dtype=lib.int32), lib.ones(3, 1)),
    lambda lib: lib.linalg.ldl_solve(lib.ones(2, 2), lib.ones(2, dtype=lib.int32), lib.ones(2, 1).double()),
    lambda lib: lib.linalg.ldl_solve(lib.ones(2, 2), lib.ones(3, dtype=lib.int32), lib.ones(2, 1)),
    lambda lib: lib.linalg.ldl_solve(lib.ones(2, 2), lib.ones(2), lib.ones(2, 1)),
    lambda lib: lib.linalg.ldl_solve(lib.ones(2, 2), lib.ones(2, dtype=lib.int32), lib.ones(2)),
    lambda lib: lib.linalg.ldl_solve(lib.ones(2, 2).half(), lib.ones(2, dtype=lib.int32), lib.ones(2, 1).half()),
])
def test_refusals_are_torchs(call):
    with pytest.raises(Exception) as expected:
        call(torch)
    with pytest.raises(expected.type) as got:
        call(jt)
    assert str(got.value) == str(expected.value)


def test_no_derivative_as_torch():
    a = jt.tensor([[2.0, 1.0], [1.0, -3.0]], dtype=jt.float64, requires_grad=True)
    LD, pivots, info = jt.linalg.ldl_factor_ex(a)
    assert LD.requires_grad and not pivots.requires_grad and not info.requires_grad
    with pytest.raises(RuntimeError, match="derivative for aten::linalg_ldl_factor_ex is not implemented"):
        LD.sum().backward()
    b = jt.ones(2, 1, dtype=jt.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="derivative for aten::linalg_ldl_solve is not implemented"):
        jt.linalg.ldl_solve(LD.detach(), pivots, b).sum().backward()


def test_compiled_runs_them_as_eager_steps_with_eagers_bits(rng):
    a, b = jt.tensor(symmetric(rng, (5, 5), True)), jt.tensor(rng.standard_normal((5, 2)))

    def solve(a, b):
        LD, pivots = jt.linalg.ldl_factor(a)
        return jt.linalg.ldl_solve(LD, pivots, b) * 2

    compiled = jt.compile(solve)
    np.testing.assert_array_equal(compiled(a, b).numpy(), solve(a, b).numpy())
    steps = compiled.lower(a, b).executable.profiled_steps()
    assert ("linalg_ldl_factor_ex", "eager_step") in steps and ("linalg_ldl_solve", "eager_step") in steps


def test_empty_matrices():
    LD, pivots = jt.linalg.ldl_factor(jt.zeros(3, 0, 0))
    assert tuple(LD.shape) == (3, 0, 0) and tuple(pivots.shape) == (3, 0)
    assert tuple(jt.linalg.ldl_solve(LD, pivots, jt.zeros(3, 0, 2)).shape) == (3, 0, 2)
