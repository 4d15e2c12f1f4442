"""jvp failures the transform fuzzer (tests/fuzz/transforms.py) found in session 43 (seeds 8100000-8105650) where
torch.func.jvp is the wrong side: its forward formulas of ``atan2`` at (0, 0), ``nanmedian`` of all NaN, ``logit``
with ``eps`` at NaN and ``clamp`` by a NaN tensor bound disagree with its own reverse formulas, which jitorch's
tangents follow (checked against torch's reverse-mode jvp and, where the derivative exists, its value); and a
program whose outputs each take one of torch's two conventions, which the fuzzer now judges output by output."""

import warnings

import numpy as np
import pytest
import torch

import jitorch

NAN = float("nan")


def _jvp(T, f, primals, tangents):
    """``jvp`` of ``f`` in library ``T`` at float64 ``primals`` along float64 ``tangents``: the tangent as a
    NumPy array."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, tangent = T.func.jvp(f, tuple(T.tensor(p, dtype=T.float64) for p in primals),
                                tuple(T.tensor(t, dtype=T.float64) for t in tangents))
    return np.array(tangent.tolist(), dtype=np.float64)


def _reverse_jvp(f, primals, tangents):
    """torch's tangent by its reverse formulas (``torch.autograd.functional.jvp``)."""
    _, tangent = torch.autograd.functional.jvp(f, tuple(torch.tensor(p, dtype=torch.float64) for p in primals),
                                               tuple(torch.tensor(t, dtype=torch.float64) for t in tangents))
    return tangent.numpy()


def _same(a, b):
    return a.shape == b.shape and np.allclose(a, b, rtol=1e-12, atol=1e-12, equal_nan=True)


def test_atan2_at_the_origin_has_the_reverse_rules_tangent_not_torch_forward_nan():
    """Seed 8101104: ``v1.atan2(v1)`` with ``v1 = x[0] * 0`` (a constant 0, tangent 0). torch.func.jvp's forward
    formula gives 0 / 0 = NaN; torch's gradient there is 0, and so is its reverse-mode jvp and jitorch's tangent.
    Along zero tangents the value is the constant ``atan2(0, 0) = 0``, so the derivative is 0."""
    args = ([0.0, 0.0, 1.0], [0.0, 0.0, -2.0]), ([0.0, 0.0, 0.5], [0.0, 0.0, 0.25])
    got = _jvp(jitorch, jitorch.atan2, *args)
    assert _same(got, _reverse_jvp(torch.atan2, *args))
    assert _same(got, np.array([0.0, 0.0, (-2.0 * 0.5 - 1.0 * 0.25) / 5.0]))
    assert np.isnan(_jvp(torch, torch.atan2, *args)[:2]).all()  # (what the fuzzer's rule steps around)


@pytest.mark.parametrize("values, tangent", [([NAN], [3.0]), ([NAN, NAN], [3.0, 5.0]), ([1.0, NAN], [3.0, 5.0])])
def test_nanmedian_of_all_nan_has_the_reverse_rules_tangent_not_torch_forward_nan(values, tangent):
    """Seeds 8102107, 8102074: ``nanmedian`` of all NaN. torch.func.jvp's forward formula gives a NaN tangent;
    torch's gradient picks the first NaN (or shares among tied NaNs), and jitorch's tangent is the reverse-mode
    jvp's: the picked element's tangent, or the mean over the ties."""
    got = _jvp(jitorch, jitorch.nanmedian, (values,), (tangent,))
    assert _same(got, _reverse_jvp(torch.nanmedian, (values,), (tangent,)))
    assert np.isfinite(got)


def test_logit_with_eps_of_nan_has_a_nan_tangent_as_torch_gradient():
    """Seed 8101803: ``x.logit(0.001)`` at NaN (``acos_`` of ``|x| > 1``). torch.func.jvp's forward formula gives 0
    there, its gradient NaN; jitorch's tangent is NaN, the clamp's flat parts 0, elsewhere ``t / (x (1 - x))``."""
    x, t = [NAN, 2.0, 0.0005, 0.5, -3.0], [1.0, 1.0, 1.0, 1.0, 1.0]
    got = _jvp(jitorch, lambda a: a.logit(0.001), (x,), (t,))
    assert _same(got, _reverse_jvp(lambda a: a.logit(0.001), (x,), (t,)))
    assert _same(got, np.array([NAN, 0.0, 0.0, 4.0, 0.0]))




@pytest.mark.parametrize("bounded", [lambda x, m: x.clamp_min(m), lambda x, m: x.clamp_max(m),
                                     lambda x, m: x.clamp(min=m), lambda x, m: x.clip(max=m),
                                     lambda x, m: x.clamp(m, m), lambda x, m: x.clone().clamp_min_(m)])
def test_clamp_by_a_nan_tensor_bound_has_the_reverse_rules_zero_tangent(bounded):
    """Seed 8102442: ``v.clamp_min(x)`` with ``x`` NaN (``logit_`` of a float outside [0, 1]). torch.func.jvp's
    forward formulas give the bound's tangent there (the input's, with both bounds); torch's gradient gives
    neither operand any, and jitorch's tangent is its reverse-mode jvp's, 0."""
    args = ([0.0, 1.0], [NAN, NAN]), ([1.0, 1.0], [NAN, 2.0])
    got = _jvp(jitorch, bounded, *args)
    assert _same(got, _reverse_jvp(bounded, *args))
    assert _same(got, np.zeros(2))


def test_the_transform_fuzzer_judges_each_output_by_either_of_torchs_modes_seed_8102107():
    """Seed 8102107: ``v8 = nanmedian(arccosh(x))`` of all NaN (jitorch's tangent the NaN element's, as torch's
    reverse-mode jvp; torch.func's NaN) and ``angle(...).logit_()`` (a structurally zero tangent times an infinite
    derivative: jitorch's NaN, as torch.func's; torch's reverse-mode jvp 0). Each output matches one of torch's
    modes and neither mode matches both, so `transforms.check_jvp` compares output by output."""
    from tests.fuzz import transforms
    from tests.fuzz.generator import generate, op_table

    program, _ = generate(8102107, table=op_table())
    floats, _ = transforms.float_split(program)
    keep = transforms.tensor_outputs(jitorch, program)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = [transforms.jvp_run(jitorch, program, keep, floats), transforms.jvp_run(torch, program, keep, floats),
                transforms._torch_reverse_jvp(program, keep, floats)]
        half = len(runs[0].outputs) // 2
        tangents = [np.array([o.values for o in r.outputs[half:]], dtype=np.float64) for r in runs]
        agrees = [[_same(np.array(a), np.array(b)) for a, b in zip(tangents[0], other)] for other in tangents[1:]]
        assert not all(agrees[0]) and not all(agrees[1])
        assert all(f or r for f, r in zip(*agrees))
        outcome = transforms.Outcome()
        transforms.check_jvp(program, outcome)
    assert outcome.ran["jvp"] == 1 and not outcome.mismatches, outcome.mismatches


@pytest.mark.parametrize("linalg", [True, False])
def test_slogdets_sign_takes_no_tangent_so_lgamma_of_it_has_torchs_zero_tangent_seed_8105088(linalg):
    """Seed 8105088: ``slogdet(x)[0].lgamma_()`` at a matrix of sign -1. The sign is locally constant and its
    gradient never read (`rule.only_with_grads_of`), so as torch's it takes no tangent at all: lgamma's rule
    multiplied its zero tangent by digamma's pole (0 * inf = NaN), where both of torch's modes, and the
    derivative, give 0. The log-determinant's tangent is unchanged (the trace of x^-1 t)."""
    def sign_then_lgamma(T):
        return lambda x: (T.linalg.slogdet(x) if linalg else T.slogdet(x))[0].lgamma()

    x, t = [[0.0, 1.0], [1.0, 0.0]], [[1.0, 1.0], [1.0, 1.0]]
    got = _jvp(jitorch, sign_then_lgamma(jitorch), [x], [t])
    assert _same(got, np.array(0.0))
    _, forward = torch.func.jvp(sign_then_lgamma(torch), (torch.tensor(x, dtype=torch.float64),),
                                (torch.tensor(t, dtype=torch.float64),))
    assert forward._is_zerotensor()  # (torch's undefined tangent: a zero that holds no memory)
    assert _same(got, _reverse_jvp(sign_then_lgamma(torch), [x], [t]))
    logabsdet = _jvp(jitorch, lambda m: jitorch.linalg.slogdet(m)[1], [x], [t])
    assert _same(logabsdet, _jvp(torch, lambda m: torch.linalg.slogdet(m)[1], [x], [t]))
    assert _same(logabsdet, np.array(2.0))
