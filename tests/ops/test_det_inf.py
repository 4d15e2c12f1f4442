"""det, slogdet and logdet of matrices holding inf or NaN: torch's values are those of its LU with partial pivoting
(LAPACK's getrf: the product of the pivots; NumPy's det is ``sign * exp(sum(log|pivot|))``), of the memory as a
column-major matrix (a C-contiguous matrix's transpose), with LAPACK's pivot choice that never takes a later NaN."""

import warnings

import numpy as np
import pytest
import torch

import jitorch

INF, NAN = float("inf"), float("nan")
CASES = {
    "inf on the diagonal": [[INF, 1.0], [2.0, 3.0]],
    "inf off the diagonal": [[1.0, INF], [2.0, 3.0]],
    "-inf": [[-INF, 1.0], [2.0, 3.0]],
    "inf and nan": [[INF, NAN], [2.0, 3.0]],
    "a nan below the pivot": [[1.0, 0.0, 2.0], [NAN, 1.0, 0.0], [2.0, 0.0, 1.0]],
    "inf times a zero pivot": [[1.0, 2.0, 3.0], [2.0, 4.0, INF], [0.0, 1.0, 1.0]],
    "elimination makes inf - inf in one order only": [[2.0, 1.0, 2.0, -INF], [2.0, 2.0, 1.0, 2.0],
                                                       [2.0, 1.0, 0.0, 1.0], [-1.0, -3.0, 3.0, 0.0]],
    "the transposed order's": [[-2.0, 0.0, -INF], [2.0, 3.0, INF], [-3.0, -1.0, -2.0]],
    "lgamma poles": [[INF, 0.5, 1.0, INF], [2.0, INF, 0.0, 1.0], [0.5, 1.0, INF, 2.0], [1.0, 3.0, 2.0, 0.0]],
}
LAYOUTS = {"contiguous": lambda x: x, "column-major": lambda x: x.mT.contiguous().mT,
           "sliced": lambda x: x.repeat(*[1] * (x.ndim - 1), 2)[..., :x.shape[-1]]}


def _values(lib, t):
    sign, logabsdet = lib.linalg.slogdet(t)
    return [lib.linalg.det(t), lib.logdet(t), sign, logabsdet]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES)
def test_det_of_a_matrix_holding_inf_is_torchs_lu_product_not_numpys_log_sum(case, layout, dtype):
    """Transform-fuzz seed 8300170: ``lgamma(t0, out=v3).det()`` with poles (inf) in the matrices gave 0
    (NumPy's ``sign * exp(log-sum)`` of a zero pivot) where torch's product of pivots gives inf."""
    a = np.array(CASES[case])
    t = LAYOUTS[layout](torch.tensor(a, dtype=getattr(torch, dtype)))
    j = LAYOUTS[layout](jitorch.tensor(a, dtype=getattr(jitorch, dtype)))
    assert j.stride() == t.stride()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for want, got in zip(_values(torch, t), _values(jitorch, j)):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)


def test_det_of_a_batch_takes_the_lu_product_only_for_its_non_finite_matrices():
    """A batch mixing finite matrices (NumPy's det, rounding-close to torch's) with ones holding inf (torch's
    pivot product); in float32 and in a batch-permuted layout, which torch factors column by column too."""
    batch = np.stack([np.array(CASES["lgamma poles"]), np.arange(16.0).reshape(4, 4) % 7 + np.eye(4),
                      np.array([[1.0, 2.0, 3.0, 0.0], [2.0, 4.0, INF, 0.0], [0.0, 1.0, 1.0, 0.0],
                                [0.0, 0.0, 0.0, 1.0]])])
    for dtype in ("float32", "float64"):
        for arrange in (lambda x: x, lambda x: x.transpose(0, 1).contiguous().transpose(0, 1)):
            t = arrange(torch.tensor(batch, dtype=getattr(torch, dtype)))
            j = arrange(jitorch.tensor(batch, dtype=getattr(jitorch, dtype)))
            for want, got in zip(_values(torch, t), _values(jitorch, j)):
                np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)


def test_lu_factor_never_pivots_on_a_later_nan():
    """LAPACK's i?amax takes a later element only if strictly larger than the first's magnitude: a NaN below the
    first is never the pivot (jitorch's argmax took it, making the whole factor NaN), a NaN first stays."""
    for column in ([NAN, 1.0, 2.0], [1.0, NAN, 2.0], [NAN, NAN, 2.0], [1.0, INF, NAN], [0.0, 0.0, 0.0]):
        a = np.eye(3)
        a[:, 0] = column
        want = torch.linalg.lu_factor_ex(torch.tensor(a))
        got = jitorch.linalg.lu_factor_ex(jitorch.tensor(a))
        assert got[1].tolist() == want[1].tolist()
        np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
