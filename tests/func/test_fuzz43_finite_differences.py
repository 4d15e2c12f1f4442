"""jvp failures the transform fuzzer (tests/fuzz/transforms.py) found in session 43 where jitorch's tangent
differed from central differences or torch's: two jitorch bugs (QR of a wide matrix at a singular block, det of a
matrix holding NaN) and the cases where the differences or torch's float32 ``i0`` are the wrong side, each against
a second oracle (torch.func.jvp on the program without what torch refuses, torch's reverse mode, float64)."""

import dataclasses
import math
import warnings

import numpy as np
import pytest
import torch

import jitorch
from tests.fuzz import transforms
from tests.fuzz.bessel_oracle import Float64Bessel
from tests.fuzz.generator import generate, op_table

TABLE = op_table()


def _tensor(T, values):
    return T.tensor(values, dtype=T.float64)


def _jvp(T, f, x, t):
    """``jvp`` of ``f`` at ``x`` along ``t`` (float64 lists) in library ``T``: the tangents as nested lists."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, tangent = T.func.jvp(f, (_tensor(T, x),), (_tensor(T, t),))
    return [v.tolist() for v in tangent] if isinstance(tangent, tuple) else tangent.tolist()


def _same(a, b):
    """Equal nested lists of floats (or lists of them, of other shapes), NaN equal to NaN, infinities by sign."""
    try:
        a, b = np.array(a, dtype=np.float64), np.array(b, dtype=np.float64)
    except ValueError:  # (the tangents of several outputs)
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a.shape == b.shape and np.allclose(a, b, rtol=1e-12, atol=1e-12, equal_nan=True)


def _passes(seed):
    program, _ = generate(seed, table=TABLE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = transforms.check(program)
    return not outcome.mismatches and outcome.ran.get("jvp"), program


# jitorch bugs -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("A", [
    [[0.0, 0.0]],                          # the seed's: a 1-by-2 matrix of zeros, R_1 = [[0]]
    [[0.0, 0.0, 0.0]],
    [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]],    # rank 1: R_1's last diagonal element 0
    [[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]],   # full rank
])
def test_qr_of_a_wide_matrix_with_a_singular_leading_block_has_torchs_tangent_seed_7892786(A):
    """Seed 7892786: ``x0.divide_(c1, rounding_mode='trunc').qr()`` of 1-by-2 matrices, some all zeros (a zero
    tangent too): jitorch's tangent of R was NaN where torch's is 0. jitorch's forward mode transposes the reverse
    rule, which solved with R_1 last; the rule is now torch's linalg_qr_backward for m < n, the op-by-op transpose
    of torch's forward formula, whose strict lower triangle drops what the solve with a singular R_1 made infinite
    (a 1-by-n A: dQ = 0, dR = dA, as central differences give: Q is [[1]] near it)."""
    t = [[1.0, -2.0, 0.5][:len(A[0])], [0.25, 3.0, -1.0][:len(A[0])]][:len(A)]
    got, want = (_jvp(T, lambda a, T=T: T.linalg.qr(a), A, t) for T in (jitorch, torch))
    assert _same(got, want)
    assert not np.isnan(np.array(got[1])).any() and not np.isnan(np.array(got[0])).any()
    if len(A) == 1:
        assert got == [[[0.0]], t]
    gradients = []
    for T in (jitorch, torch):
        x = _tensor(T, [[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]]).requires_grad_(True)
        Q, R = T.linalg.qr(x)
        (Q.sum() + (R * _tensor(T, [[1.0, -1.0, 2.0], [0.5, 3.0, 1.0]])).sum()).backward()
        gradients.append(x.grad.tolist())
    assert _same(gradients[0], gradients[1])


def test_the_wide_qr_rule_passes_gradcheck_and_its_seed():
    """The new m < n rule, reverse and forward, by gradcheck on a full-rank 2-by-4 matrix; and the seed's program
    passes the transform check."""
    x = jitorch.tensor([[1.0, 2.0, 3.0, -1.0], [0.5, -1.0, 2.0, 4.0]], dtype=jitorch.float64, requires_grad=True)
    assert jitorch.autograd.gradcheck(lambda a: jitorch.linalg.qr(a), (x,), check_forward_ad=True)
    assert _passes(7892786)[0]


def test_det_and_logdet_of_a_matrix_holding_nan_have_torchs_nan_tangent_and_gradient_seed_7895132():
    """Seed 7895132: ``sqrt(x1).det()`` with negative elements: jvp raised LinAlgError "SVD did not converge"
    (det's rule factors A by SVD, which refuses NaN); torch's tangent and gradient are NaN. The rule now factors
    zeros in such a matrix's place and gives it NaN cofactors. And slogdet's sign of it was NumPy's ±1, so
    ``logdet``'s tangent (a choice between NaN and the log by that sign) was 0: the sign is torch's 0 now."""
    A = [[[1.0, math.nan], [2.0, 3.0]], [[1.0, 2.0], [3.0, 4.0]]]
    t = [[[1.0, -1.0], [0.5, 2.0]], [[1.0, 0.25], [-2.0, 1.0]]]
    for name in ("det", "logdet", "slogdet"):
        found = []
        for T in (jitorch, torch):
            f = (lambda M, T=T: T.linalg.slogdet(M)[1]) if name == "slogdet" else getattr(T, name)
            x = _tensor(T, A).requires_grad_(True)
            f(x).sum().backward()
            found.append((_jvp(T, f, A, t), x.grad.tolist()))
        assert _same(found[0][0], found[1][0]) and _same(found[0][1], found[1][1]), name
        assert math.isnan(found[0][0][0]) and np.isnan(found[0][1][0]).all()
    for T in (jitorch, torch):
        sign, logabsdet = T.linalg.slogdet(_tensor(T, A))
        assert sign.tolist() == [0.0, -1.0] and math.isnan(logabsdet[0].item())
    assert _passes(7895132)[0]


# The oracle is the wrong side --------------------------------------------------------------------------------------

def test_the_transform_fuzzer_takes_torchs_float32_i0_from_its_float64_seed_7998041():
    """Seed 7998041: ``x0.i0_()`` of a float32 0, then ``float_power(t0, -x0)`` of negative ``t0``: jitorch's
    ``i0(0)`` is 1 (correctly rounded), torch's float32 kernel gives ``1 - 2**-24``, so torch's power of a negative
    base is NaN where jitorch's is ``t0 ** -1``, and ``v.less_equal_(0)`` of it 0 where jitorch's is 1 (vmap and jvp
    outputs). float64 says jitorch's is right; the transform fuzzer's torch runs now take ``i0`` from torch's
    float64, as the eager fuzzer's do (`bessel_oracle.Float64Bessel`)."""
    def f(T):
        def run(x):
            v = T.float_power(_tensor(T, [-0.125]), -x.clone().i0_())
            return v.less_equal_(0)
        return run
    zero = [0.0]
    assert f(jitorch)(jitorch.tensor(zero)).tolist() == [1.0]
    assert f(torch)(torch.tensor(zero, dtype=torch.float64)).tolist() == [1.0]
    assert f(torch)(torch.tensor(zero)).tolist() == [0.0]  # torch's float32 i0: the wrong side
    with Float64Bessel():
        assert f(torch)(torch.tensor(zero)).tolist() == [1.0]
        assert torch.func.jvp(f(torch), (torch.tensor(zero),), (torch.ones(1),))[0].tolist() == [1.0]
    assert _passes(7998041)[0]


def test_finite_differences_leave_out_a_program_whose_mask_moves_seed_8008279():
    """Seed 8008279: ``masked_select(x0, x0 != 0)`` with ``x0[0] == 0``, then ``index_fill`` of the first two
    elements and a sum of three: at ``x0 ± eps t`` the mask selects ``x0[0]`` too, each later element moves up one,
    and, the two values alike (0.375), no output jumps; the differences gave the other element's tangent (-2.125
    where jitorch's is -0.25). jitorch's is torch.func.jvp's (the mask is constant at the point); the differences
    now judge no program that decides otherwise (a shape, a mask, an integer) at any of their steps."""
    def f(T):
        def run(x):
            selected = T.masked_select(x, x != 0)
            return selected.index_fill(0, T.tensor([1, 0]), -1.5)[:3].sum()
        return run
    x, t = [0.0, -2.0, 0.375, 0.375], [-0.625, -1.5, -2.125, -0.25]
    assert _jvp(jitorch, f(jitorch), x, t) == _jvp(torch, f(torch), x, t) == -0.25
    passes, program = _passes(8008279)
    assert passes
    keep = transforms.tensor_outputs(jitorch, program)[0]
    floats, _ = transforms.float_split(program)
    at_point, moved = (transforms._outputs_at(program, keep, floats, step)[1] for step in (0.0, 1e-6))
    assert at_point["v1"] == ((3,), None) and moved["v1"] == ((4,), None)


@pytest.mark.parametrize("seed", [7997322, 8003963])
def test_nextafter_of_a_tensor_and_itself_has_torchs_zero_tangent_seed(seed):
    """Seeds 7997322 (``T.nextafter(x0, x0)``), 8003963 (``x0.nextafter(x0)``), where torch refused the program
    (an ``out=`` call): jitorch's tangent 0 against central differences' ``t`` (``nextafter(x, x)`` is ``x``).
    torch's derivative of nextafter is 0 where ``self == other``, in forward and reverse mode, and jitorch's is
    torch's (fuzz seed 7100128); the differences do not see that convention, so the fuzzer leaves such programs to
    torch alone (`transforms.FD_BLIND`)."""
    x, t = [0.5, -2.0, 1.0], [1.0, 3.0, -0.5]
    got, forward = (_jvp(T, lambda v, T=T: T.nextafter(v, v), x, t) for T in (jitorch, torch))
    leaf = _tensor(torch, x).requires_grad_(True)
    torch.nextafter(leaf, leaf).sum().backward()
    assert got == forward == leaf.grad.tolist() == [0.0, 0.0, 0.0]
    passes, program = _passes(seed)
    assert passes and transforms._fd_blind(program)
    assert [transforms._of_itself(line) for line in ("v2 = T.nextafter(x0, x0)", "v5 = x0.nextafter(x0)",
                                                     "v5 = x0.nextafter_(v1)", "v2 = T.nextafter(x0, v3)")] == \
        [True, True, False, False]


def _zero_tangent_programs(T):
    """The four seeds' programs reduced: a tangent that is 0 at the point meets a derivative that is infinite
    there (runnable by torch.func.jvp: no ``out=``, no write of a captured tensor, no ``atanh_``)."""
    def hypot_of_a_constant(x):  # 8001568: t0.sub(x0, alpha=0) is t0 (0 at [0]); hypot(0, 0)
        v = T.tensor([0, 2, 0, 1]).sub(x, alpha=0)
        return T.hypot(v, v)

    def sqrt_of_a_compared_tensor(x):  # 8003644: x.not_equal_(x) is 0; sqrt_ of 0
        v = x.clone()
        v.not_equal_(v)
        w = T.sub(v, v, alpha=0.5)
        w.absolute_()
        return w.sqrt_()

    def sqrt_of_a_cut_pseudoinverse(x):  # 8006090: pinverse with rcond 2 is 0 (all cut); sqrt of 0
        return T.sqrt(T.pinverse(x.reshape(2, 2), 2.0))

    def asin_of_a_sign(x):  # 7897283: sgn_ gives 1 (a zero tangent); asin of 1
        v = x.conj_physical()
        v.sgn_()
        return v.asin()
    return hypot_of_a_constant, sqrt_of_a_compared_tensor, sqrt_of_a_cut_pseudoinverse, asin_of_a_sign


@pytest.mark.parametrize("which, seed", [(0, 8001568), (1, 8003644), (2, 8006090), (3, 7897283)])
def test_a_zero_tangent_through_an_infinite_derivative_is_nan_as_torch_func_jvps_seed(which, seed):
    """Seeds 8001568, 8003644, 8006090, 7897283: jitorch's tangent NaN where central differences give 0 (the output
    is constant near the point) and torch refused the program. jitorch's is torch.func.jvp's on the same program
    without what torch refuses: its forward formulas multiply the zero tangent by the infinite derivative (0 * inf,
    as for ``fix(x).logit_()``, seed 7875465). The differences now leave out an element whose tangent is NaN along
    zero tangents too."""
    x, t = [0.5, 1.25, -2.0, 3.0], [1.0, -2.0, 0.5, 1.5]
    got, want = (_jvp(T, _zero_tangent_programs(T)[which], x, t) for T in (jitorch, torch))
    assert _same(got, want) and np.isnan(np.array(got)).any()
    assert _passes(seed)[0]


def test_finite_differences_still_judge_a_nan_tangent_that_zero_tangents_do_not_give():
    """The NaN leave-out is narrow: jitorch's tangents of seed 7870041 (float64 throughout, finite) with one element
    made NaN are caught (its tangent along zeros is 0 there)."""
    program, _ = generate(7870041, table=TABLE)
    floats, _ = transforms.float_split(program)
    keep = transforms.tensor_outputs(jitorch, program)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = transforms.jvp_run(jitorch, program, keep, floats)
        half = len(got.outputs) // 2
        first = got.outputs[half]
        values = first.values.astype(np.float64).copy()
        values.reshape(-1)[0] = math.nan
        wrong = dataclasses.replace(got, outputs=got.outputs[:half] + [dataclasses.replace(first, values=values)]
                                    + got.outputs[half + 1:])
        found = []
        transforms.finite_differences(program, keep, floats, got, found)
        assert not found
        transforms.finite_differences(program, keep, floats, wrong, found)
    assert [m.what for m in found] == ["tangent 0 values"]
