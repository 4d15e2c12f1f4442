"""Forward-mode (jvp) failures the transform fuzzer found in session 43 (tests/fuzz/transforms.py, seeds
7990000-8008656), each against torch.func.jvp or, where torch is the wrong or limited side, against a second
oracle: torch's reverse-mode jvp (``torch.autograd.functional.jvp``), central differences in float64, torch's
eager op."""

import math
import warnings

import pytest
import torch

import jitorch
from jitorch.autograd import forward_ad as fwd
from tests.fuzz import transforms
from tests.fuzz.generator import AMONG_TIES, generate, op_table
from tests.fuzz.oracle import TORCH_TOLERANCE

TABLE = op_table()


def _jvp(T, build, x, t, dtype="float64"):
    """``jvp`` of ``build(T)`` at ``x`` along ``t`` (nested lists, of ``dtype``): primal and tangent as lists."""
    d = getattr(T, dtype)
    primal, tangent = T.func.jvp(build(T), (T.tensor(x, dtype=d),), (T.tensor(t, dtype=d),))
    return primal.tolist(), tangent.tolist()


def _reverse_jvp(build, x, t):
    """torch's tangent by its reverse-mode formulas (the double-vjp trick, as jitorch's forward mode)."""
    f = build(torch)
    return torch.autograd.functional.jvp(lambda v: f(v.clone()), torch.tensor(x, dtype=torch.float64),
                                         torch.tensor(t, dtype=torch.float64))[1].tolist()


def _differences(build, x, t, eps=1e-6):
    """Central differences of ``build(torch)`` at ``x`` along ``t`` in float64."""
    f = build(torch)
    x, t = torch.tensor(x, dtype=torch.float64), torch.tensor(t, dtype=torch.float64)
    return ((f(x + eps * t) - f(x - eps * t)) / (2 * eps)).tolist()


def _same(a, b):
    """Nested lists of floats equal to float64's last bits (NumPy's and torch's log or sin may round apart), NaN
    equal to NaN and infinities to infinities."""
    return torch.allclose(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64), rtol=1e-14,
                          atol=0, equal_nan=True)


def _check(seed):
    program, _ = generate(seed, table=TABLE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return program, transforms.check(program)


# An in-place view op keeps the tangent's memory -------------------------------------------------------------------

@pytest.mark.parametrize("reshape", [
    lambda v: v.swapaxes_(0, -1), lambda v: v.unsqueeze_(-1).swapaxes_(0, -1), lambda v: v.t_(),
    lambda v: v.as_strided_((3, 1), (1, 1)), lambda v: v.squeeze_(0).unsqueeze_(1)])
def test_a_view_of_a_tensor_an_in_place_view_op_reshaped_sees_later_writes_seed_8008245(reshape):
    """Seed 8008245: ``v.unsqueeze_(-1); v.swapaxes_(0, -1); w = v[0:3:3, :]; v[0:] = 1``: ``w``'s tangent kept
    ``v``'s old values (-5.25) where torch's is 0. The in-place view op gave ``v`` a tangent computed by the
    transpose trick, new memory whose strides (of its size-1 dims) differ from ``v``'s, so ``w`` took a tangent of
    its own rather than a view of ``v``'s, and the write into ``v`` missed it. The target's tangent now takes the
    op's geometry over its old memory (`forward_ad.ForwardHook._regeometry`)."""
    def build(T):
        def f(x):
            v = x * 1
            reshape(v)
            w = v[0:1]
            v[0:] = 1.5
            return w, v
        return f
    got, want = ([[u.tolist() for u in part] for part in T.func.jvp(
        build(T), (T.tensor([[1.0, 2.0, 3.0]]),), (T.tensor([[1.0, -2.0, 3.0]]),))] for T in (jitorch, torch))
    assert got == want
    assert all(e == 0 for e in torch.tensor(got[1][0]).flatten().tolist())


@pytest.mark.parametrize("view", ["view_as", "expand_as", "reshape_as", "type_as"])
def test_a_view_shaped_as_another_dual_tensor_sees_later_writes_seed_8201832(view):
    """Seed 8201832: ``v5 = v2.view_as(v1); v2.acos_()`` with ``v1`` dual too: ``v5``'s tangent kept ``v2``'s old
    one (0.375 where torch's is -inf). A view op's tangent is the same view of its operand's only where one
    operand has a tangent, and ``other``, which gives the view its size alone, had one; so the tangent was a
    copy (from the rule) that the write into ``v2`` missed. The operand whose memory the result shares is the
    viewed one now (`forward_ad._viewed`)."""
    def build(T):
        def f(x):
            v1 = x * 2
            v2 = x.exp()
            v5 = getattr(v2, view)(v1)
            v2.sin_()
            return v5
        return f
    got, want = (_jvp(T, build, [0.5, -1.0, 2.0], [1.0, 2.0, 3.0]) for T in (jitorch, torch))
    assert _same(got, want)
    assert got[1][0] == pytest.approx(math.cos(math.exp(0.5)) * math.exp(0.5))


def test_an_in_place_view_op_keeps_its_targets_tangent_memory():
    """What the fix does: after ``v.swapaxes_(0, -1)`` ``v``'s tangent is a view of the same memory (so views of
    ``v`` made since share it), laid out as ``v``."""
    with fwd.dual_level():
        v = fwd.make_dual(jitorch.tensor([[1.0, 2.0, 3.0]]), jitorch.tensor([[1.0, -2.0, 3.0]])) * 1
        before = fwd.unpack_dual(v).tangent
        v.swapaxes_(0, -1)
        after = fwd.unpack_dual(v).tangent
        assert after._storage is before._storage
        assert (tuple(after.shape), after.stride()) == (tuple(v.shape), v.stride()) == ((3, 1), (1, 3))


# logit with eps ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("eps", [0.25, 2.0])
def test_logit_with_eps_has_a_zero_tangent_where_it_clamps_at_0_and_1_seed_7992359(eps):
    """Seed 7992359: ``x.logit(2.0)`` at ``x = 0``: tangent NaN, torch's 0. The clamp to ``[eps, 1 - eps]`` is flat
    there, so the derivative is 0 (central differences agree where the primal is finite). jitorch's rule divided
    the gradient by ``x (1 - x)`` before zeroing the flat parts, and the transpose trick sent the 0 through that
    division (0 / 0 at ``x`` = 0 or 1); it divides by 1 there now. torch's reverse-mode jvp has the same NaN (its
    ``logit_backward`` divides the same way), so torch.func.jvp is the oracle; the gradient stays torch's."""
    x, t = [0.0, 1.0, 0.1, 0.5, 0.95, 0.6], [0.75, -1.0, 2.0, 1.0, 1.0, -3.0]

    def build(T):
        return lambda v: v.logit(eps)
    got, want = (_jvp(T, build, x, t) for T in (jitorch, torch))
    assert _same(got, want)
    assert got[1][:2] == [0.0, 0.0]
    if eps < 0.5:
        assert got[1] == pytest.approx(_differences(build, x, t), abs=1e-6)
    grads = []
    for T in (jitorch, torch):
        v = T.tensor(x, dtype=T.float64, requires_grad=True)
        grads.append(T.autograd.grad(v.logit(eps), v, T.tensor(t, dtype=T.float64))[0].tolist())
    assert _same(grads[0], grads[1])


# cumulative_trapezoid's dtype --------------------------------------------------------------------------------------

@pytest.mark.parametrize("y_dtype", ["bfloat16", "float16", "float32", "float64", "int16"])
@pytest.mark.parametrize("x_dtype", ["int16", "uint8", "int64", "bfloat16", "float64"])
def test_cumulative_trapezoid_computes_in_the_promoted_type_of_y_and_x_seed_7999678(y_dtype, x_dtype):
    """Seed 7999678: ``cumulative_trapezoid(y, x)`` of a bfloat16 ``y`` and int16 ``x`` gave a float32 result (and
    tangent), torch a bfloat16 one: jitorch halved the integer spacings first (float32), torch multiplies them
    by ``y``'s sums and halves the running sum. jitorch now takes torch's order: the same dtype and bits."""
    ys = [[1.375, -2.0], [0.625, 3.0], [-1.25, 2.5], [2.0, -0.5]]
    xs = [[0, 1], [2, 3], [5, 4], [6, 6]]
    got, want = (T.cumulative_trapezoid(T.tensor(ys, dtype=getattr(T, y_dtype)),
                                        T.tensor(xs, dtype=getattr(T, x_dtype)), dim=0) for T in (jitorch, torch))
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert got.double().tolist() == want.double().tolist()


def test_the_tangent_of_cumulative_trapezoid_of_bfloat16_is_bfloat16_seed_7999678():
    """The seed's statement under jvp: primal and tangent in bfloat16, torch's values."""
    found = []
    for T in (jitorch, torch):
        x = T.tensor([[0, 1], [2, 3], [5, 4]], dtype=T.int16)
        primal, tangent = T.func.jvp(lambda y: T.cumulative_trapezoid(y, x, dim=0),
                                     (T.tensor([[1.0, -2.0], [0.5, 3.0], [1.25, 2.0]], dtype=T.bfloat16),),
                                     (T.full((3, 2), 0.5, dtype=T.bfloat16),))
        assert primal.dtype == tangent.dtype == T.bfloat16
        found.append([primal.tolist(), tangent.tolist()])
    assert found[0] == found[1]
    assert found[0][1] == [[1.0, 1.0], [2.5, 1.5]]


# torch's reverse-mode jvp as the oracle: the fuzzer's harness -------------------------------------------------------

@pytest.mark.parametrize("seed", [7990252, 7993453, 8007855, 8008311])
def test_torchs_reverse_jvp_runs_programs_that_write_a_tensor_its_backward_saved(seed):
    """Seeds 7990252 (``v0 / x1`` then ``v0.fix_()``), 7993453, 8007855, 8008311: torch.func.jvp's tangent differed
    from jitorch's, and the second oracle, torch's reverse-mode jvp, raised "modified by an inplace operation"
    (the programs write a tensor an op saved, which forward AD takes). `transforms._torch_reverse_jvp` now saves
    copies (saved-tensor hooks, not a dispatch mode, under which torch's autograd takes other formulas): it runs,
    and gives jitorch's tangents."""
    program, outcome = _check(seed)
    floats, _ = transforms.float_split(program)
    keep = transforms.tensor_outputs(jitorch, program)[0]
    got, want = (transforms.jvp_run(T, program, keep, floats) for T in (jitorch, torch))
    reverse = transforms._torch_reverse_jvp(program, keep, floats)
    assert not reverse.error
    table = transforms._tangent_tolerances(program)
    differ, agree = [], []
    transforms._compare(differ, "jvp", "torch", transforms.Run(outputs=got.outputs), want, table)
    transforms._compare(agree, "jvp", "torch.autograd", transforms.Run(outputs=got.outputs),
                        transforms.Run(outputs=reverse.outputs), table)
    assert differ and not agree
    assert not outcome.mismatches


def test_torchs_reverse_jvp_judges_the_outputs_alone_seed_7992798():
    """Seed 7992798 (``x0.log_()`` then ``nanmedian`` of ``x0.rsqrt()``): torch.func's tangent of the nanmedian is
    NaN (its forward formula multiplies every element's tangent, NaN ones too, by the 0 or 1 of the selection),
    torch's reverse-mode jvp gives jitorch's -0.4. It was still reported: the reverse run differentiates copies of
    the inputs, so the written ``x0`` differed. The inputs are judged against torch.func's run alone now."""
    program, outcome = _check(7992798)
    floats, _ = transforms.float_split(program)
    keep = transforms.tensor_outputs(jitorch, program)[0]
    got = transforms.jvp_run(jitorch, program, keep, floats)
    reverse = transforms._torch_reverse_jvp(program, keep, floats)
    assert got.inputs[0].values.tolist() != reverse.inputs[0].values.tolist()
    assert got.outputs[-1].values.item() == reverse.outputs[-1].values.item() == pytest.approx(-0.4, abs=1e-3)
    assert not outcome.mismatches


def test_a_tie_of_minimum_with_an_infinite_tangent_takes_that_tangent_seed_7993453():
    """The kind of seed 7993453: ``T.min(y, y)`` with ``y = arccos(x)`` at ``x = 1`` (tangent -inf). torch.func's
    forward formula at a tie, ``t_other + 0.5 (t_self - t_other)``, gives -inf - -inf: NaN; its reverse-mode jvp
    and jitorch give -inf, ``y``'s own tangent, as ``min(y, y)`` is ``y`` (torch.func's tangent of ``y`` is -inf)."""
    def build(T):
        def f(v):
            y = v.arccos()
            return T.min(y, y)
        return f
    x, t = [1.0, 0.5], [0.25, 1.0]
    got, want = (_jvp(T, build, x, t) for T in (jitorch, torch))
    reverse = _reverse_jvp(build, x, t)
    assert got[1][0] == reverse[0] == _jvp(torch, lambda T: (lambda v: v.arccos()), x, t)[1][0] == -math.inf
    assert math.isnan(want[1][0]) and got[1][1] == want[1][1] == reverse[1]


def test_a_quotient_at_a_pole_has_torchs_reverse_tangent_seed_7990252():
    """The kind of seed 7990252: ``maximum(uint8 [2, 4, 0, 1], x) / x`` at ``x = 0`` (the quotient is infinite).
    torch.func's forward formula of div, ``(t_self - t_other * result) / other``, gives -inf; its reverse-mode jvp,
    ``t_self / other - t_other * self / other²``, NaN (0 / 0 for ``t_self``, maximum's tangent 0 there), and so
    does jitorch's, which transposes the reverse rule. No derivative exists where the value is infinite."""
    def build(T):
        def f(v):
            return T.tensor([2, 4, 0, 1], dtype=T.uint8).maximum(v) / v
        return f
    got, want = (_jvp(T, build, 0.0, 3.0) for T in (jitorch, torch))
    reverse = _reverse_jvp(build, 0.0, 3.0)
    assert all(math.isnan(v) for v in got[1] + reverse) and want[1][0] == -math.inf


def test_nanmedian_takes_the_tangent_of_the_median_element_alone_seed_8008311():
    """The kind of seed 8008311: ``nanmedian(erfinv(x))`` where other elements' tangents are NaN or infinite (``x``
    outside [-1, 1], or -1). torch.func's forward formula sums ``t * (x == median)`` over every element, so
    NaN * 0 makes the tangent NaN; jitorch's is the median element's, as central differences in float64 (with the
    tangent at -1 zero, which leaves it -inf) and torch's reverse-mode jvp give."""
    def build(T):
        return lambda v: T.nanmedian(T.erfinv(v))
    x = [0.5, -2.0, -2.75, 1.5, -0.5, -1.0, 0.625]
    t = [1.625, -2.75, 0.375, 2.375, 1.0, 0.0, 1.5]
    got, want = (_jvp(T, build, x, t) for T in (jitorch, torch))
    assert math.isnan(want[1])
    assert got[1] == pytest.approx(_differences(build, x, t), rel=1e-6) == pytest.approx(_reverse_jvp(build, x, t))


def test_a_nan_result_of_a_constant_operand_has_torchs_reverse_tangent_seed_8007855():
    """The kind of seed 8007855: ``mv(log1p(round(x)), c)`` with a constant ``c``, where ``log1p`` is NaN at -2
    (its tangent 0, round's). torch.func's forward formula adds ``log1p(...) @ 0`` for ``c``'s zero tangent, NaN
    times 0; the derivative along ``x`` is ``0 @ c`` = 0, torch's reverse-mode jvp's and jitorch's."""
    def build(T):
        c = T.tensor([-0.5, 1.625], dtype=T.float64)
        return lambda v: T.mv(v.round().log1p(), c)
    got, want = (_jvp(T, build, [[2.75, -2.0]], [[-0.5, -2.0]]) for T in (jitorch, torch))
    assert got[1] == _reverse_jvp(build, [[2.75, -2.0]], [[-0.5, -2.0]]) == [0.0] and math.isnan(want[1][0])


# Ties, roundings and torch's refusals in the fuzzer ----------------------------------------------------------------

def test_a_quantile_over_tied_elements_is_judged_by_finite_differences_seed_7994905():
    """Seed 7994905: ``v0.quantile(1)`` of 36 elements holding the maximum 3.0 twice (at 13 and 22): torch's
    unstable sort puts 13 last, and its tangent is that element's (1.75); jitorch's stable sort puts 22 last (0).
    Either is the derivative on one side of the kink, and the gradients' sums over the tied elements agree
    (docs/differences-from-torch.md). The generator marks such a quantile `AMONG_TIES`, and the fuzzer judges the
    program's tangents by finite differences and gives it no gradient run against torch."""
    values = [-0.375, -0.875, -2.75, 2.625, 1.5, -1.5, -0.25, 0.625, 0.0, -0.875, 1.5, 1.25, -1.375, 3.0, -1.75, 0.25,
              0.125, 0.125, -1.375, 2.875, 1.875, -2.0, 3.0, -1.625, -0.25, -0.75, -1.25, -2.75, 2.0, 1.125, 1.25, 1.75,
              0.0, -0.5, 1.875, -2.625]  # (the seed's v0, flattened)
    order = [T.tensor(values).sort().indices.tolist()[-1] for T in (torch, jitorch)]
    assert order == [13, 22]
    tangents = [0.5] * 36
    tangents[13], tangents[22] = 1.75, 0.0
    got, want = (_jvp(T, lambda T: (lambda v: v.quantile(1.0)), values, tangents, "float32")[1] for T in
                 (jitorch, torch))
    assert (got, want) == (0.0, 1.75)
    program, outcome = _check(7994905)
    assert [s.tag for s in program.body if s.tag.startswith("quantile")] == ["quantile" + AMONG_TIES]
    assert transforms._torch_tangent_wrong(program, transforms.Run()) and not outcome.mismatches


def test_a_float64_output_of_a_half_tangent_takes_the_half_tolerance_seed_8000179():
    """Seed 8000179: ``asinh(x).to(T.float64)`` of a float16 ``x`` = -2.25: jitorch's tangent 0.15234375, torch's
    0.1522216796875, an ulp of float16 apart, compared in float64. Both round ``t * rsqrt(x² + 1)`` to float16; torch's
    rsqrt of one element (its scalar loop) rounds the square root to float16 first, jitorch's once, the value
    nearest the exact 0.152302 (docs/differences-from-torch.md). The fuzzer's tangents now take `oracle.tolerances`,
    whose float64 is as loose as the program's narrowest float input."""
    got, want = (_jvp(T, lambda T: T.asinh, -2.25, 0.375, "float16")[1] for T in (jitorch, torch))
    exact = 0.375 / math.sqrt(2.25 ** 2 + 1)
    assert (got, want) == (0.15234375, 0.1522216796875) and abs(got - exact) < abs(want - exact)
    assert torch.full((32,), 6.0625, dtype=torch.float16).rsqrt()[0].item() == 0.40625 != \
        torch.tensor(6.0625, dtype=torch.float16).rsqrt().item()
    program, outcome = _check(8000179)
    assert transforms._tangent_tolerances(program)["float64"] == 4 * TORCH_TOLERANCE["float16"]
    assert not outcome.mismatches


def _pow_bool(T):
    mask = T.tensor([True, False, True])
    return lambda v: v.pow(mask)


def _pow_float(T):
    return lambda v: v.pow(T.tensor([1.0, 0.0, 1.0], dtype=T.float64))


def _logcumsumexp_empty(T):
    return lambda v: T.logcumsumexp(v[v > 5], 0)


def _sgn_then_fill(T):
    def f(v):
        y = T.sgn(v[0])
        y.fill_(2.0)
        return y
    return f


def _matmul_into_empty(T):
    m = T.tensor([[[1.0, 2.0], [3.0, 4.0]]], dtype=T.float64)

    def f(v):
        out = T.zeros(0, dtype=T.float64)
        T.matmul(m, m, out=out)
        return v * out.sum()
    return f


def _cov_of_a_half_std(T):
    return lambda v: T.cov(v.bfloat16()[0].std([])).double() + v


@pytest.mark.parametrize("build, oracle", [(_pow_bool, _pow_float), (_logcumsumexp_empty, None),
                                           (_sgn_then_fill, None), (_matmul_into_empty, None),
                                           (_cov_of_a_half_std, None)])
def test_jvp_runs_where_torchs_forward_formula_raises(build, oracle):
    """Seeds 7990257, 7993309, 7994203, 7994822, 7998673, 8001477, 8004508 (``x.pow(mask)`` with a bool exponent:
    torch's forward formula subtracts 1 from the exponent, which it refuses for a bool), 7993021, 8003646 (``logcumsumexp``
    over a dim of size 0: its formula takes the max there), 7990074 (``sgn`` of a 0-dim tensor, then ``fill_``: its
    zero tangent is a ZeroTensor, which refuses the write), 8200271 (``matmul`` of 3-D constants into an empty
    ``out=``: torch.func's wrapper of ``out`` cannot be resized), 8202766 (``cov`` of a bfloat16 ``std`` of one
    element: torch's tangent of that std is float32, docs/differences-from-torch.md, and cov's formula then
    multiplies it with bfloat16). Eager torch runs each; jitorch's tangent is that of ``x.pow(mask.double())``
    (torch.func's), the empty one, 0, ``t`` times the sum, and NaN (the std's) (central differences). The
    fuzzer reads the errors as torch's limits (`transforms.TORCH_LIMITS`) and judges such programs by finite
    differences."""
    x, t = [1.5, -2.0, 0.5], [1.0, 2.0, -3.0]
    with pytest.raises((RuntimeError, IndexError)) as raised:
        _jvp(torch, build, x, t)
    assert any(limit in str(raised.value) for limit in transforms.TORCH_LIMITS)
    got = _jvp(jitorch, build, x, t)
    assert _same(got[0], build(torch)(torch.tensor(x, dtype=torch.float64)).tolist())
    want = _jvp(torch, oracle, x, t)[1] if oracle else pytest.approx(_differences(build, x, t), nan_ok=True)
    assert got[1] == want
    for seed in (7990257, 7993021, 7990074, 8200271, 8202766):
        assert not _check(seed)[1].mismatches
