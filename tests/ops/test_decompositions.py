"""The decomposition and solver kernels (jitorch/ops/decompositions.py) against torch: decompositions by
reconstruction and invariants (their vectors are unique up to sign), what LAPACK reports for singular and
indefinite matrices (infos, infinities, torch's messages), and the Householder ops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops.registry import OPS

RNG = np.random.default_rng(7)


def pair(*shape, dtype=np.float64):
    a = RNG.standard_normal(shape).astype(dtype)
    return jt.tensor(a), torch.tensor(a)


def close(got, want, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got.numpy() if isinstance(got, jt.Tensor) else got),
                               want.numpy() if isinstance(want, torch.Tensor) else want, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(2, 4, 3), (3, 5), (5, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_svd_qr_and_eigh_reconstruct_their_matrix_with_torchs_values(shape, dtype):
    A, tA = pair(*shape, dtype=dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    U, S, Vh = jt.linalg.svd(A, full_matrices=False)
    close(S, torch.linalg.svdvals(tA), tol)
    close((U * S.unsqueeze(-2)) @ Vh, tA, tol)
    close(U.mT @ U, np.broadcast_to(np.eye(U.shape[-1]), U.shape[:-2] + (U.shape[-1],) * 2), tol)
    Q, R = jt.linalg.qr(A)
    close(Q @ R, tA, tol)
    close(R.abs(), torch.linalg.qr(tA).R.abs(), tol)  # R is unique up to the signs of its rows
    assert np.allclose(np.tril(R.numpy(), -1), 0)
    sym, tsym = A @ A.mT, tA @ tA.mT
    w, V = jt.linalg.eigh(sym)
    close(w, torch.linalg.eigvalsh(tsym), tol * 10)
    close((V * w.unsqueeze(-2)) @ V.mT, tsym, tol * 10)


def test_full_svd_and_complete_qr_give_square_orthogonal_factors():
    A, tA = pair(4, 2)
    U, S, Vh = jt.linalg.svd(A)
    assert U.shape == (4, 4) and Vh.shape == (2, 2)
    close(U @ U.mT, np.eye(4), 1e-10)
    Q, R = jt.linalg.qr(A, mode="complete")
    assert Q.shape == (4, 4) and R.shape == (4, 2)
    close(Q @ R, tA, 1e-10)
    Q, R = jt.linalg.qr(A, mode="r")
    assert Q.shape == (0,) and R.shape == (2, 2)


def test_torch_svd_returns_v_and_zeros_without_compute_uv():
    A, tA = pair(3, 2)
    U, S, V = jt.svd(A)
    close((U * S) @ V.mT, tA, 1e-10)
    U, S, V = jt.svd(A, compute_uv=False)
    tU, tS, tV = torch.svd(tA, compute_uv=False)
    assert U.shape == tU.shape and V.shape == tV.shape and not U.numpy().any()
    close(S, tS)


def test_lu_factor_matches_torchs_getrf_and_unpacks():
    A, tA = pair(2, 4, 4)
    LU, pivots = jt.linalg.lu_factor(A)
    tLU, tpivots = torch.linalg.lu_factor(tA)
    close(LU, tLU, 1e-10)
    assert np.array_equal(pivots.numpy(), tpivots.numpy()) and pivots.dtype is jt.int32
    P, L, U = jt.lu_unpack(LU, pivots)
    close(P @ L @ U, tA, 1e-10)
    for left, adjoint in ((True, False), (True, True), (False, False), (False, True)):
        B, tB = pair(2, 4, 3) if left else pair(2, 3, 4)
        close(jt.linalg.lu_solve(LU, pivots, B, left=left, adjoint=adjoint),
              torch.linalg.lu_solve(tLU, tpivots, tB, left=left, adjoint=adjoint), 1e-9)


def test_singular_matrices_give_lapacks_infos_and_infinities():
    s = [[1.0, 2.0], [2.0, 4.0]]
    inverse, info = jt.linalg.inv_ex(jt.tensor(s))
    tinverse, tinfo = torch.linalg.inv_ex(torch.tensor(s))
    assert info.item() == tinfo.item() == 2
    assert np.array_equal(np.isinf(inverse.numpy()), np.isinf(tinverse.numpy()))
    X, info = jt.linalg.solve_ex(jt.tensor(s), jt.ones(2))
    assert info.item() == 2 and np.isinf(X.numpy()).all()
    L, info = jt.linalg.cholesky_ex(jt.tensor([[1.0, 2.0], [2.0, 1.0]]))
    tL, tinfo = torch.linalg.cholesky_ex(torch.tensor([[1.0, 2.0], [2.0, 1.0]]))
    assert info.item() == tinfo.item() == 2
    close(L, tL)
    assert jt.linalg.det(jt.tensor(s)).item() == 0.0
    sign, logabsdet = jt.linalg.slogdet(jt.tensor(s))
    assert sign.item() == 0 and logabsdet.item() == -np.inf


SINGULAR = jt.stack([jt.eye(3), jt.zeros(3, 3)])


@pytest.mark.parametrize("call, message", [
    (lambda: jt.linalg.inv(SINGULAR), "linalg.inv: (Batch element 1): The diagonal element 1 is zero, the inversion "
                                      "could not be completed because the input matrix is singular."),
    (lambda: jt.inverse(SINGULAR[1]), "linalg.inv: The diagonal element 1 is zero"),
    (lambda: jt.linalg.inv_ex(SINGULAR, check_errors=True), "linalg.inv_ex: (Batch element 1)"),
    (lambda: jt.linalg.solve(SINGULAR, jt.ones(2, 3)),
     "torch.linalg.solve: (Batch element 1): The solver failed because the input matrix is singular."),
    (lambda: jt.linalg.cholesky(-jt.eye(3)), "linalg.cholesky: The factorization could not be completed because the "
                                             "input is not positive-definite (the leading minor of order 1 is not "
                                             "positive-definite)."),
    (lambda: jt.cholesky(-jt.eye(3)), "cholesky: The factorization"),
])
def test_singular_and_indefinite_matrices_raise_linalg_error(call, message):
    with pytest.raises(jt.linalg.LinAlgError) as info:
        call()
    assert str(info.value).startswith(message)
    assert isinstance(info.value, RuntimeError)


def test_singular_lu_factor_raises_runtime_error_and_torch_lu_does_not():
    with pytest.raises(RuntimeError, match=r"torch.linalg.lu_factor: \(Batch element 1\): U\[1,1\] is zero"):
        jt.linalg.lu_factor(SINGULAR)
    LU, pivots, info = jt.lu(SINGULAR, get_infos=True)
    assert info.tolist() == [0, 1]


@pytest.mark.parametrize("call, exc, message", [
    (lambda: jt.linalg.det(jt.ones(2, 3)), RuntimeError,
     "linalg.det: A must be batches of square matrices, but they are 2 by 3 matrices"),
    (lambda: jt.linalg.det(jt.ones(3)), RuntimeError,
     "linalg.det: The input tensor A must have at least 2 dimensions."),
    (lambda: jt.linalg.inv(jt.ones(2, 2, dtype=jt.int64)), RuntimeError,
     "linalg.inv: Expected a floating point or complex tensor as input. Got Long"),
    (lambda: jt.linalg.inv(jt.ones(2, 2, dtype=jt.float16)), RuntimeError,
     "linalg.inv: Low precision dtypes not supported. Got Half"),
    (lambda: jt.det(jt.ones(2, 2, dtype=jt.float16)), NotImplementedError, "\"lu_cpu\" not implemented for 'Half'"),
    (lambda: jt.linalg.solve(jt.eye(3), jt.ones(4, 2)), RuntimeError,
     "linalg.solve: Incompatible shapes of A and B for the equation AX = B (3x3 and 4x2)"),
    (lambda: jt.linalg.solve(jt.eye(3), jt.ones(3, dtype=jt.float64)), RuntimeError,
     "linalg.solve: Expected A and B to have the same dtype, but found A of type Float and B of type Double instead"),
    (lambda: jt.linalg.qr(jt.ones(2, 2), mode="x"), RuntimeError, "qr received unrecognized mode 'x'"),
    (lambda: jt.linalg.eigh(jt.eye(2), UPLO="X"), RuntimeError, "Expected UPLO argument to be 'L' or 'U', but got X"),
    (lambda: jt.linalg.lu_factor(jt.eye(2), pivot=False), RuntimeError,
     "linalg.lu_factor: LU without pivoting is not implemented on the CPU"),
    (lambda: jt.trace(jt.ones(2, 2, 2)), RuntimeError, "trace: expected a matrix, but got tensor with dim 3"),
    (lambda: jt.addmv(jt.ones(2), jt.ones(2, 3), jt.ones(4)), RuntimeError,
     "size mismatch, got input (2), mat (2x3), vec (4)"),
    (lambda: jt.tensordot(jt.ones(2, 3), jt.ones(4, 5), 1), RuntimeError,
     "contracted dimensions need to match, but first has size 3 in dim 1 and second has size 4 in dim 0"),
    (lambda: jt.linalg.matrix_norm(jt.ones(2, 2), 3), RuntimeError, "linalg.matrix_norm: Order 3 not supported."),
    (lambda: jt.linalg.multi_dot([jt.ones(2, 3), jt.ones(4, 2)]), RuntimeError,
     "multi_dot(): tensors 0 and 1 with shapes [2, 3] and [4, 2] cannot be multiplied"),
])
def test_errors_name_shapes_and_dtypes_as_torch(call, exc, message):
    with pytest.raises(exc) as info:
        call()
    assert str(info.value).startswith(message)


def test_householder_ops_match_torch_and_geqrf_has_no_derivative():
    A, tA = pair(2, 5, 3)
    h, tau = jt.geqrf(A)
    th, ttau = torch.geqrf(tA)
    close(h.abs(), th.abs(), 1e-10)
    Q = jt.linalg.householder_product(h, tau)
    close(Q, torch.linalg.householder_product(th, ttau), 1e-10)
    close(jt.orgqr(h, tau), torch.orgqr(th, ttau), 1e-10)
    C, tC = pair(2, 5, 2)
    for left, transpose in ((True, False), (True, True)):
        close(jt.ormqr(h, tau, C, left, transpose), torch.ormqr(th, ttau, tC, left, transpose), 1e-10)
    D, tD = pair(2, 2, 5)
    close(jt.ormqr(h, tau, D, False, True), torch.ormqr(th, ttau, tD, False, True), 1e-10)
    x = A.detach().requires_grad_()
    with pytest.raises(NotImplementedError, match="the derivative for 'geqrf' is not implemented"):
        jt.geqrf(x)[0].sum().backward()


def test_matrix_exp_matches_torch_across_scales():
    for scale in (0.01, 1.0, 30.0):
        A, tA = pair(2, 4, 4)
        close(jt.matrix_exp(A * scale), torch.matrix_exp(tA * scale), 1e-9 * max(1.0, np.exp(4 * scale)))


def test_products_of_integers_and_promotion_match_torch():
    a, b = jt.tensor([[1, 2], [3, 4]]), torch.tensor([[1, 2], [3, 4]])
    assert jt.trace(a).dtype is jt.int64 and jt.trace(a).item() == torch.trace(b).item()
    assert np.array_equal(jt.kron(a, a).numpy(), torch.kron(b, b).numpy())
    assert jt.addr(jt.ones(2, 2), a[0], a[1].double()).dtype is jt.float64
    with pytest.raises(RuntimeError, match="argument beta must not be a floating point number"):
        jt.addr(a, a[0], a[1], beta=0.5)
    out = jt.ones(2)
    jt.ones(2).addmv_(jt.ones(2, 3), jt.ones(3), beta=0)
    assert out.addmv_(jt.ones(2, 3), jt.ones(3), beta=0.5).tolist() == [3.5, 3.5]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("shape", [(4, 5, 0), (4, 0, 5), (3, 0), (0, 3), (2, 0, 0)])
def test_svd_of_an_empty_matrix_gives_torchs_shapes_and_identities(shape, compiled):
    """Fuzz seed 7301509: ``svd`` of a 5 x 0 matrix raised jitorch's internal shape error (its U was 0 x 0, the meta
    rule's 5 x 0); torch's U and Vh are the first columns and rows of identities of sizes m and n."""
    def program(T, a):
        return (*T.linalg.svd(a, full_matrices=False), *T.linalg.svd(a, full_matrices=True), *T.svd(a, some=True))

    want = program(torch, torch.zeros(shape, dtype=torch.float64))
    fn = jt.compile(lambda a: program(jt, a)) if compiled else lambda a: program(jt, a)
    got = fn(jt.zeros(shape, dtype=jt.float64))
    assert [(tuple(t.shape), t.tolist()) for t in got] == [(tuple(t.shape), t.tolist()) for t in want]


@pytest.mark.parametrize("shape", [(1, 0), (0, 0), (3, 0, 2)])
def test_lu_without_pivoting_of_an_empty_matrix_returns_as_torch(shape):
    """Fuzz seed 7501794: ``torch.lu(A, False)`` of an empty ``A`` returns (torch's CPU kernel checks pivoting
    only for elements); jitorch raised. ``linalg.lu(pivot=False)`` gives an empty P, as torch's."""
    for lib in (torch, jt):
        LU, pivots = lib.linalg.lu_factor(lib.zeros(shape), pivot=False)
        assert tuple(LU.shape) == shape and tuple(pivots.shape) == shape[:-2] + (min(shape[-2:]),)
        P, L, U = lib.linalg.lu(lib.zeros(shape), pivot=False)
        assert tuple(P.shape) == (0,)
    with pytest.raises(RuntimeError, match="LU without pivoting is not implemented on the CPU"):
        jt.linalg.lu_factor(jt.eye(2), pivot=False)


@pytest.mark.parametrize("left, adjoint", [(True, False), (True, True), (False, False), (False, True)])
def test_lu_solve_of_a_singular_matrix_keeps_lapacks_infinities(left, adjoint):
    """lu_solve applied the pivots' permutation as a product with the permutation matrix, whose zeros turned an
    infinity of the singular U's triangular solve into NaN where torch's (LAPACK's row swaps) keep it: this made
    logdet's tangent at a singular matrix NaN where torch's is -inf (fuzz seed 7882824). It takes rows by index."""
    A = [[[1.0, 2.0], [2.0, 4.0]], [[0.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]], [[1.0, 1.0], [0.0, 0.0]],
         [[0.0, 0.0], [1.0, 1.0]]]
    B = [[[1.0, 0.5], [-0.25, 2.0]]] * len(A)
    got, want = (str(T.linalg.lu_solve(*T.linalg.lu_factor_ex(T.tensor(A, dtype=T.float64))[:2],
                                       T.tensor(B, dtype=T.float64), left=left, adjoint=adjoint).tolist())
                 for T in (jt, torch))
    assert "inf" in want and got == want
