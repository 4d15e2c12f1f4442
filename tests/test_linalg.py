"""``jitorch.linalg`` against ``torch.linalg``: every function on batched float32 and float64 matrices (values,
dtypes, shapes; vectors of decompositions by magnitude), compiled and on the emulated CUDA device."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.ops import registry
from jitorch.runtime.cuda_backend import use_backend


def _inputs(dtype):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 3)) + 3 * np.eye(3)
    spd = a @ np.swapaxes(a, -1, -2) + np.eye(3)
    arrays = {"A": a, "B": rng.standard_normal((3, 2)), "v": rng.standard_normal(3), "P": spd,
              "S": a + np.swapaxes(a, -1, -2), "R": rng.standard_normal((4, 3)),
              "T": (rng.standard_normal((4, 4)) + 4 * np.eye(4)).reshape(2, 2, 2, 2)}
    return ({k: jt.tensor(v.astype(dtype)) for k, v in arrays.items()},
            {k: torch.tensor(v.astype(dtype)) for k, v in arrays.items()})


# (name, call on (linalg namespace, tensors), compare by magnitude)
CALLS = [
    ("vector_norm", lambda L, x: L.vector_norm(x["A"], 3, 1), False),
    ("vector_norm inf", lambda L, x: L.vector_norm(x["A"], math.inf), False),
    *[(f"matrix_norm {o}", (lambda o: lambda L, x: L.matrix_norm(x["A"], o, keepdim=True))(o), False)
      for o in ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf)],
    ("norm", lambda L, x: L.norm(x["A"]), False),
    ("norm matrix", lambda L, x: L.norm(x["A"][0], 1), False),
    ("norm dim", lambda L, x: L.norm(x["A"], 3, dim=(0,)), False),
    ("det", lambda L, x: L.det(x["A"]), False),
    ("slogdet", lambda L, x: L.slogdet(x["A"]), False),
    ("inv", lambda L, x: L.inv(x["A"]), False),
    ("inv_ex", lambda L, x: L.inv_ex(x["A"]), False),
    ("solve", lambda L, x: L.solve(x["A"], x["B"]), False),
    ("solve vector", lambda L, x: L.solve(x["A"], x["v"]), False),
    ("solve right", lambda L, x: L.solve(x["A"], x["R"], left=False), False),
    ("solve_ex", lambda L, x: L.solve_ex(x["A"], x["B"]), False),
    ("solve_triangular", lambda L, x: L.solve_triangular(x["A"], x["B"], upper=True), False),
    ("solve_triangular right", lambda L, x: L.solve_triangular(x["A"], x["B"].mT, upper=False, left=False,
                                                               unitriangular=True), False),
    ("cholesky", lambda L, x: L.cholesky(x["P"], upper=True), False),
    ("cholesky_ex", lambda L, x: L.cholesky_ex(x["P"]), False),
    ("qr", lambda L, x: L.qr(x["R"], "complete"), True),
    ("svd", lambda L, x: L.svd(x["R"]), True),
    ("svdvals", lambda L, x: L.svdvals(x["A"]), False),
    ("eigh", lambda L, x: L.eigh(x["S"], "U"), True),
    ("eigvalsh", lambda L, x: L.eigvalsh(x["S"]), False),
    ("lstsq", lambda L, x: L.lstsq(x["R"], x["R"][:, :2]), False),
    ("lstsq gelsd", lambda L, x: L.lstsq(x["R"], x["R"][:, :2] + 1, driver="gelsd"), False),
    ("lu", lambda L, x: L.lu(x["A"]), False),
    ("lu_factor", lambda L, x: L.lu_factor(x["A"]), False),
    ("lu_factor_ex", lambda L, x: L.lu_factor_ex(x["R"]), False),
    ("lu_solve", lambda L, x: L.lu_solve(*L.lu_factor(x["A"]), x["B"], adjoint=True), False),
    ("matrix_rank", lambda L, x: L.matrix_rank(x["A"]), False),
    ("matrix_rank hermitian", lambda L, x: L.matrix_rank(x["S"], hermitian=True, atol=1.0), False),
    ("pinv", lambda L, x: L.pinv(x["R"]), False),
    ("pinv hermitian", lambda L, x: L.pinv(x["S"], hermitian=True), False),
    ("matrix_power", lambda L, x: L.matrix_power(x["A"], -3), False),
    ("matrix_exp", lambda L, x: L.matrix_exp(x["A"]), False),
    ("multi_dot", lambda L, x: L.multi_dot([x["v"], x["A"][0], x["A"][1], x["R"].mT, x["R"], x["v"]]), False),
    ("cross", lambda L, x: L.cross(x["A"], x["S"]), False),
    ("vecdot", lambda L, x: L.vecdot(x["A"], x["v"]), False),
    ("vander", lambda L, x: L.vander(x["v"], N=4), False),
    ("diagonal", lambda L, x: L.diagonal(x["A"], offset=1), False),
    ("matmul", lambda L, x: L.matmul(x["A"], x["B"]), False),
    ("cond", lambda L, x: L.cond(x["A"]), False),
    ("cond fro", lambda L, x: L.cond(x["A"], "fro"), False),
    ("tensorinv", lambda L, x: L.tensorinv(x["T"]), False),
    ("tensorsolve", lambda L, x: L.tensorsolve(x["T"], x["T"][0, 0]), False),
    ("tensorsolve dims", lambda L, x: L.tensorsolve(x["T"], x["T"][:, 0, :, 0], dims=(1,)), False),
    ("householder_product", lambda L, x: L.householder_product(x["R"], x["v"][:2]), False),
]


def _leaves(result):
    return [x for r in result for x in _leaves(r)] if isinstance(result, (tuple, list)) else [result]


@pytest.mark.parametrize("name, call, up_to_sign", CALLS, ids=[c[0] for c in CALLS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_linalg_function_matches_torch(name, call, up_to_sign, dtype):
    mine, theirs = _inputs(dtype)
    got, want = _leaves(call(jt.linalg, mine)), _leaves(call(torch.linalg, theirs))
    assert len(got) == len(want)
    tol = 2e-4 if dtype == np.float32 else 1e-9
    for g, w in zip(got, want):
        assert g.shape == tuple(w.shape) and g.dtype.name == str(w.dtype).split(".")[1], (g, w)
        a, b = np.asarray(g.numpy()), w.numpy()
        if up_to_sign:
            a, b = np.abs(a), np.abs(b)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def test_linalg_error_is_torchs_runtime_error_subclass():
    assert issubclass(jt.linalg.LinAlgError, RuntimeError)
    assert jt.linalg.LinAlgError.__module__ == "jitorch.linalg"


def test_out_writes_the_result():
    A = jt.eye(3) * 2
    out = jt.empty(0)
    assert jt.linalg.inv(A, out=out) is out and out.tolist()[0] == [0.5, 0.0, 0.0]
    values = jt.empty(0)
    jt.linalg.eigvalsh(A, out=values)
    assert values.tolist() == [2.0, 2.0, 2.0]


def test_compiled_solves_and_decompositions_match_eager_with_gradients():
    A = jt.tensor(np.random.default_rng(0).standard_normal((3, 3)) + 3 * np.eye(3), dtype=jt.float32)
    B = jt.ones(3, 2)

    def loss(A, B):
        return (jt.linalg.solve(A, B).sum() + jt.linalg.det(A) + jt.linalg.svdvals(A).sum()
                + jt.linalg.eigvalsh(A @ A.mT).sum())

    leaf = A.clone().requires_grad_()
    eager = loss(leaf, B)
    eager.backward()
    compiled_leaf = A.clone().requires_grad_()
    compiled = jt.compile(loss)(compiled_leaf, B)
    compiled.backward()
    np.testing.assert_allclose(compiled.item(), eager.item(), rtol=1e-5)
    np.testing.assert_allclose(compiled_leaf.grad.numpy(), leaf.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_cuda_tensors_fall_back_to_the_host_kernels():
    with use_backend(FakeBackend()):
        A = jt.tensor(np.eye(3) * 2 + 0.5, dtype=jt.float32).cuda().requires_grad_()
        X = jt.linalg.solve(A, jt.ones(3, 2).cuda())
        assert X.device.type == "cuda"
        np.testing.assert_allclose(X.cpu().detach().numpy(), np.linalg.solve(A.cpu().detach().numpy(), np.ones((3, 2))),
                                   rtol=1e-6)
        assert jt.linalg.qr(A).Q.device.type == jt.linalg.lu_factor(A).pivots.device.type == "cuda"
        jt.linalg.inv(A).sum().backward()
        assert A.grad.device.type == "cuda"


def test_torch_cross_without_dim_takes_the_first_dim_of_size_3_with_torchs_warning(monkeypatch):
    monkeypatch.setattr(registry, "WARNED_ONCE", set())
    a, b = np.random.default_rng(1).standard_normal((2, 3, 4, 3))
    with pytest.warns(UserWarning, match="Using torch.cross without specifying the dim arg is deprecated"):
        got = jt.cross(jt.tensor(a), jt.tensor(b))
    np.testing.assert_allclose(got.numpy(), torch.cross(torch.tensor(a), torch.tensor(b), dim=0).numpy())
    with pytest.raises(RuntimeError, match="no dimension of size 3 in input"):
        jt.cross(jt.ones(2, 4), jt.ones(2, 4))


@pytest.mark.parametrize("compiled_first", [False, True], ids=["eager first", "compiled first"])
def test_cross_without_dim_warns_once_per_process_as_torch(monkeypatch, compiled_first):
    """Closing note 31: the deprecation warning came at every eager call but only at a compiled function's
    first (its trace); torch's is TORCH_WARN_ONCE: the process's first call warns, eager or compiled, no other."""
    monkeypatch.setattr(registry, "WARNED_ONCE", set())
    compiled = jt.compile(lambda x, y: jt.cross(x, y) + 1)
    calls = [lambda x, y: jt.cross(x, y) + 1, compiled] * 2
    if compiled_first:
        calls.reverse()
    counts = []
    for call in calls:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call(jt.ones(3, 2), jt.ones(3, 2))
        counts.append(sum("without specifying the dim" in str(w.message) for w in caught))
    assert counts == [1, 0, 0, 0]


EMPTY_CALLS = {  # empty matrices: torch's results (or errors), many reaching no kernel and so no dtype check
    "cholesky": lambda T, a: T.cholesky(a), "linalg.cholesky": lambda T, a: T.linalg.cholesky(a),
    "cholesky_ex": lambda T, a: T.linalg.cholesky_ex(a), "eigh": lambda T, a: T.linalg.eigh(a),
    "svd": lambda T, a: T.linalg.svd(a), "lu_factor": lambda T, a: T.linalg.lu_factor(a),
    "lu": lambda T, a: T.linalg.lu(a), "lu_unpack": lambda T, a: T.lu_unpack(*T.linalg.lu_factor(a)),
    "solve": lambda T, a: T.linalg.solve(a, a), "det": lambda T, a: T.linalg.det(a),
    "cond": lambda T, a: T.linalg.cond(a), "cond 1": lambda T, a: T.linalg.cond(a, 1),
    "cond fro": lambda T, a: T.linalg.cond(a, "fro"), "cholesky_inverse": lambda T, a: T.cholesky_inverse(a),
    "cholesky_solve": lambda T, a: T.cholesky_solve(a, a), "geqrf": lambda T, a: T.geqrf(a),
    "lu_solve": lambda T, a: T.linalg.lu_solve(a, T.zeros(a.shape[:-2] + (min(a.shape[-2:]),), dtype=T.int32), a),
}


def _outcome(fn, T, shape, dtype):
    try:
        r = fn(T, T.empty(shape, dtype=getattr(T, dtype)))
    except Exception as e:  # noqa: BLE001  (the error is what is compared)
        return f"{type(e).__name__}: {e}"
    return [(tuple(x.shape), str(x.dtype).split(".")[-1]) for x in (r if isinstance(r, tuple) else (r,))]


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(EMPTY_CALLS))
def test_empty_matrices_give_torchs_results_and_errors(name, dtype):
    """torch.cholesky of an empty int64 tensor gives it back (jitorch raised "cholesky_cpu" not implemented), and
    an empty matrix reaches no LAPACK kernel in linalg.cholesky, eigh, svd, lu and solve (half types passed);
    lu_factor, lu and lu_unpack of any empty matrix raised ValueError, cond IndexError; cholesky_inverse's,
    cholesky_solve's and lu_solve's errors now name A as torch's."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch.cholesky's deprecation)
        for shape in ((0, 0), (2, 0, 0), (0, 3), (2, 3, 0)):
            assert _outcome(EMPTY_CALLS[name], jt, shape, dtype) == _outcome(EMPTY_CALLS[name], torch, shape, dtype)
