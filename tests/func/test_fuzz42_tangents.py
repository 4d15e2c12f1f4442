"""Forward-mode (jvp) failures the transform fuzzer found (tests/fuzz/transforms.py, session 42's tangent seeds),
each against torch.func.jvp or, where torch is the wrong side, finite differences; and two vmap seeds where
torch's vmap is the wrong side, against the per-sample loop."""

import dataclasses
import math
import re
import warnings

import pytest
import torch

import jitorch
from jitorch.autograd import forward_ad as fwd
from tests.fuzz import transforms
from tests.fuzz.generator import generate, op_table
from tests.fuzz.program import Stmt

TABLE = op_table()


def _jvp(T, f, x, t):
    """``jvp`` of ``f`` at ``x`` along ``t`` (float64 lists) in library ``T``: primal and tangent as lists."""
    primal, tangent = T.func.jvp(f, (T.tensor(x, dtype=T.float64),), (T.tensor(t, dtype=T.float64),))
    return primal.tolist(), tangent.tolist()


def _same(a, b):
    """Equal nested lists of floats, NaN equal to NaN."""
    return torch.equal(torch.tensor(a, dtype=torch.float64).nan_to_num(7.5),
                       torch.tensor(b, dtype=torch.float64).nan_to_num(7.5))


def _statements(seed):
    program, _ = generate(seed, table=TABLE)
    return program


# A view made before its base had a tangent -------------------------------------------------------------------

def test_a_view_made_before_its_base_gets_a_tangent_sees_it_seed_7871961():
    """Seeds 7871961, 7875987: ``v3 = v2[1:2]`` of a tensor without a tangent, then ``v3[0] = v0`` with ``v0``
    dual. The write gave the base ``v2`` a tangent, and ``v3``'s stayed none (jvp's tangent 0 where torch's is
    -6.77): torch's view takes the same view of its base's tangent when it has none of its own, however late the
    base got it; jitorch's does now (`forward_ad._tangent`)."""
    def build(T):
        def f(x):
            v2 = x.new_full((4,), -1.5)
            v3 = v2[1:3]
            w = v3[:1]            # a view of a view, made before too
            v3[0] = x.sum()       # (a view of v3: its base is v2)
            return v3, w, v2
        return f
    got, want = ([[v.tolist() for v in part] for part in T.func.jvp(
        build(T), (T.tensor([0.5, 2.0], dtype=T.float64),), (T.tensor([1.0, -3.0], dtype=T.float64),))]
        for T in (jitorch, torch))
    assert got == want
    assert want[1] == [[-2.0, 0.0], [-2.0], [0.0, -2.0, 0.0, 0.0]]


def test_a_view_takes_its_bases_later_tangent_through_make_dual_level_api():
    """The same through forward_ad: a view made first, then a dual written into the base through another view;
    the first view's tangent is read by ``unpack_dual`` and by an op (a composite one, ``std_mean``, whose body
    makes more views of it while its tangent is set aside, and must not take the base's then)."""
    found = []
    for T, fa in ((torch, torch.autograd.forward_ad), (jitorch, fwd)):
        base = T.zeros(2, 3, dtype=T.float64)
        early = base[:, 1:]
        with fa.dual_level():
            dual = fa.make_dual(T.tensor([1.0, 2.0, 3.0], dtype=T.float64), T.tensor([0.5, -1.0, 2.0],
                                                                                      dtype=T.float64))
            base[1].copy_(dual * 2)
            tangent = fa.unpack_dual(early).tangent
            spread, mean = T.std_mean(early, 1)
            found.append([tangent.tolist(), fa.unpack_dual(spread).tangent.tolist(),
                          fa.unpack_dual(mean).tangent.tolist(), fa.unpack_dual(base).tangent.tolist()])
    assert found[1] == found[0]
    assert found[0][0] == [[0.0, 0.0], [-2.0, 4.0]]


def test_a_view_of_a_base_whose_tangent_is_expanded_reads_it_laid_out_as_the_base():
    """A base whose tangent is not laid out as the base (``expand``'s, broadcast) gives an earlier view the
    values of its tangent at the view's elements (the tangent is laid out as the base first)."""
    found = []
    for T, fa in ((torch, torch.autograd.forward_ad), (jitorch, fwd)):
        with fa.dual_level():
            x = fa.make_dual(T.tensor([[1.0, 2.0]], dtype=T.float64), T.tensor([[3.0, -4.0]], dtype=T.float64))
            base = T.zeros(3, 2, dtype=T.float64)
            early = base.t()[1]
            base.copy_(x.expand(3, 2))
            found.append(fa.unpack_dual(early).tangent.tolist())
    assert found[1] == found[0] == [-4.0, -4.0, -4.0]


# Means over no elements ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("reduce", ["mean", "nanmean", "std_mean", "var_mean"])
def test_the_tangent_of_a_mean_over_no_elements_is_nan_seed_7871815(reduce):
    """Seeds 7871815, 7874133 (``std_mean`` of an empty selection), 7875067 (``nanmean`` of an empty split): the
    tangent was 0, torch's NaN. The mean of no elements is 0 / 0 = NaN, and torch's forward formula, the mean of
    the tangents, is too; jitorch's mean rules now divide the gradient before broadcasting it back, so that the
    transposed rule sums the tangents (0) and then divides by the count (0). Over some elements and in reverse
    mode the values are as before, torch's."""
    def build(T, dim):
        def f(x):
            result = getattr(T, reduce)(x, dim)
            return result[1] if isinstance(result, tuple) else result
        return f
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (std_mean's degrees of freedom)
        for shape, dim in (((0,), None), ((2, 0), 1), ((0, 3), 0), ((2, 3), 1)):
            x = torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape).tolist() if 0 not in shape else \
                torch.zeros(shape).tolist()
            t = torch.full(shape, 0.5).tolist() if 0 not in shape else x
            x = torch.tensor(x, dtype=torch.float64).reshape(shape)
            t = torch.tensor(t, dtype=torch.float64).reshape(shape)
            got = [v.tolist() for v in jitorch.func.jvp(build(jitorch, dim), (jitorch.tensor(x.numpy()),),
                                                        (jitorch.tensor(t.numpy()),))]
            want = [v.tolist() for v in torch.func.jvp(build(torch, dim), (x,), (t,))]
            assert _same(got, want), (shape, dim, got, want)
            if 0 in shape:
                assert all(math.isnan(v) for v in torch.tensor(got[1]).flatten().tolist())
            else:
                xs = [jitorch.tensor(x.numpy()).requires_grad_(), x.clone().requires_grad_()]
                grads = [T.autograd.grad(build(T, dim)(v).sum(), v)[0].tolist() for T, v in zip((jitorch, torch), xs)]
                assert grads[0] == grads[1]


def test_nanmean_of_a_row_of_nans_has_a_nan_tangent_and_gradient():
    """The reordered nanmean rule keeps torch's NaN where a row has nothing to count (the count 0 divides)."""
    x = [[math.nan, math.nan], [1.0, math.nan]]
    t = [[1.0, 1.0], [2.0, 3.0]]
    got, want = (_jvp(T, lambda v, T=T: T.nanmean(v, 1), x, t) for T in (jitorch, torch))
    assert _same(got, want) and math.isnan(got[1][0]) and got[1][1] == 2.0
    grads = []
    for T in (jitorch, torch):
        v = T.tensor(x, dtype=T.float64, requires_grad=True)
        grads.append(T.autograd.grad(T.nanmean(v, 1).sum(), v)[0].tolist())
    assert _same(grads[0], grads[1])


# Ops whose derivative is zero ----------------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["floor", "ceil", "round", "trunc", "fix", "sign"])
def test_an_op_whose_derivative_is_zero_gives_a_zero_tangent_seed_7875465(op):
    """Seed 7875465: ``v = fix(x); v.logit_()`` with ``fix(x)`` 0: torch's tangent is 0 * logit'(0) = 0 * inf =
    NaN, jitorch's was 0. torch's ops of a zero derivative give a zero tangent, jitorch's gave none (so logit_
    had nothing to scale); they give zeros now (`forward_ad._jvp`), and what follows sees them."""
    found = []
    for T, fa in ((torch, torch.autograd.forward_ad), (jitorch, fwd)):
        with fa.dual_level():
            x = fa.make_dual(T.tensor([0.25, 1.5, -2.5], dtype=T.float64), T.ones(3, dtype=T.float64))
            y = getattr(T, op)(x)
            plain = fa.unpack_dual(y).tangent.tolist()
            y.logit_()
            found.append([plain, fa.unpack_dual(y).tangent.tolist()])
    assert _same(found[1], found[0])
    assert found[1][0] == [0.0, 0.0, 0.0]


def test_the_zero_tangent_of_fix_then_logit_is_nan_under_jvp_seed_7875465():
    """The seed's program reduced: ``jvp`` of ``fix(x).logit_()`` at 0.5 (fix gives 0, logit -inf)."""
    def build(T):
        return lambda x: T.fix(x).logit_()
    got, want = (_jvp(T, build(T), [[0.5]], [[1.0]]) for T in (jitorch, torch))
    assert _same(got, want) and math.isnan(got[1][0][0])


# torch's tangent is no oracle ------------------------------------------------------------------------------------

def test_topk_among_ties_takes_the_tangent_of_the_element_its_index_names_seed_7875047():
    """Seed 7875047: ``x.topk(2, 0, False)`` of a column holding -0.125 twice: torch's picks index 4 first, jitorch's
    index 0 (each library's choice, docs/differences-from-torch.md), so their tangents differ (-0.875 vs -0.25).
    Each library's tangent is that of the element its index names; the fuzzer compares a program whose topk
    selects among ties (`generator.AMONG_TIES`) with finite differences rather than torch under jvp too."""
    x = [[-0.125, 1.0], [1.125, 0.0], [-0.125, 2.0]]
    t = [[1.0, 0.5], [2.0, 3.0], [-4.0, 1.0]]
    for T in (jitorch, torch):
        values, indices = T.tensor(x, dtype=T.float64).topk(2, 0, False)
        _, tangent = _jvp(T, lambda v, T=T: v.topk(2, 0, False)[0], x, t)
        assert tangent == T.tensor(t, dtype=T.float64).gather(0, indices).tolist()
    program = _statements(7875047)
    assert any(s.tag == "topk among ties" for s in program.body)
    assert transforms._torch_tangent_wrong(program, transforms.Run())


def test_scatter_reduce_prod_has_a_tangent_where_torchs_forward_ad_gives_none_seed_7875998():
    """Seed 7875998: ``scatter_reduce(x, 0, [0], [-0.125], 'prod', include_self=True)``: jitorch's tangent is
    -0.125 t, torch 2.13's result has no tangent at all (its jvp reads 0). The derivative is -0.125, as central
    differences in float64 show, so torch is wrong (docs/differences-from-torch.md); the fuzzer compares programs
    with such a statement with finite differences (`transforms.TORCH_WRONG_TANGENT`), and still with torch where
    the reduction is another ('sum')."""
    def build(T, reduce):
        index, src = T.tensor([0, 0, 1]), T.tensor([-0.125, 2.0, 3.0], dtype=T.float64)
        return lambda x: T.scatter_reduce(x, 0, index, src, reduce, include_self=True)
    x, t, eps = [0.3, -0.7], [0.5, 2.0], 1e-6
    f = build(jitorch, "prod")
    at = [f(jitorch.tensor([a + s * b for a, b in zip(x, t)], dtype=jitorch.float64)).tolist() for s in (eps, -eps)]
    differences = [(p - m) / (2 * eps) for p, m in zip(*at)]
    _, tangent = _jvp(jitorch, f, x, t)
    assert tangent == pytest.approx(differences, rel=1e-8) and tangent == pytest.approx([-0.125, 6.0])
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(torch.tensor(x, dtype=torch.float64), torch.tensor(t))
        assert torch.autograd.forward_ad.unpack_dual(build(torch, "prod")(dual)).tangent is None
    assert _jvp(jitorch, build(jitorch, "sum"), x, t) == _jvp(torch, build(torch, "sum"), x, t)
    program = _statements(7875998)
    assert transforms._torch_tangent_wrong(program, transforms.Run())
    summed = program.with_body([s if s.tag != "scatter_reduce" else dataclasses.replace(
        s, lines=tuple(line.replace("'prod'", "'sum'") for line in s.lines)) for s in program.body])
    assert not transforms._torch_tangent_wrong(summed, transforms.Run())


def test_atan2_of_a_bool_has_a_tangent_where_torchs_jvp_negates_the_bool_seed_7875982():
    """Seed 7875982: ``x0.atan2(x2)`` with ``x0`` bool and ``x2`` float64 dual: torch's forward formula negates
    ``x0`` in its own dtype and raises its bool-negation error, though the program negates nothing; jitorch
    computes the tangent, which central differences confirm (torch's formula with an integer operand is wrong
    without the error too: uint8 200 squared wraps, docs/differences-from-torch.md). The fuzzer judges a
    program whose atan2 has an integer operand (`generator.INTEGER_OPERAND`) by finite differences under jvp.
    jitorch raises torch's error for a program's own ``-bool_tensor``."""
    flags = [True, False]
    x, t, eps = [0.75, -2.0], [1.0, 0.5], 1e-6

    def f(T):
        return lambda v: T.tensor(flags).atan2(v)
    at = [f(jitorch)(jitorch.tensor([a + s * b for a, b in zip(x, t)], dtype=jitorch.float64)).tolist()
          for s in (eps, -eps)]
    _, tangent = _jvp(jitorch, f(jitorch), x, t)
    assert tangent == pytest.approx([(p - m) / (2 * eps) for p, m in zip(*at)], rel=1e-8)
    with pytest.raises(RuntimeError, match="Negation, the `-` operator, on a bool tensor is not supported"):
        _jvp(torch, f(torch), x, t)
    with pytest.raises(RuntimeError, match="Negation, the `-` operator, on a bool tensor is not supported"):
        -jitorch.tensor(flags)
    assert transforms._torch_tangent_wrong(_statements(7875982), transforms.Run())


# vmap: torch's vmap is the wrong side -------------------------------------------------------------------------

def test_argmax_with_keepdim_and_no_dim_keeps_every_sample_dim_under_vmap_seed_7873003():
    """Seed 7873003: ``T.argmax(x, keepdim=True)`` of samples [5, 4, 1]: each sample's call gives shape [1, 1, 1]
    in both libraries, jitorch's vmap stacks those ([3, 1, 1, 1]); torch's vmap gives [3, 1] (its batching rule
    keeps one dim), so the fuzzer compares such programs with the loop alone (`transforms.TORCH_VMAP_WRONG`)."""
    values = torch.arange(60.0).reshape(3, 5, 4, 1).flip(1)
    for name in ("argmax", "argmin"):
        loop = [getattr(jitorch, name)(jitorch.tensor(values[i].numpy()), keepdim=True).tolist() for i in range(3)]
        got = jitorch.func.vmap(lambda x: getattr(jitorch, name)(x, keepdim=True))(jitorch.tensor(values.numpy()))
        assert got.tolist() == loop and tuple(got.shape) == (3, 1, 1, 1)
        assert tuple(getattr(torch, name)(values[0], keepdim=True).shape) == (1, 1, 1)
        theirs = torch.func.vmap(lambda x: getattr(torch, name)(x, keepdim=True))(values)
        assert tuple(theirs.shape) == (3, 1)
    wrong = transforms._torch_vmap_wrong
    program = _statements(7873003)
    assert any(wrong(s) for s in program.body)
    for tag, line, judged in (("argmin", "v0 = x0.argmin(keepdim=True)", True),
                              ("argmax", "v2 = M.t0.argmax(-2, True)", False),
                              ("argmax", "v0 = T.argmax(x1, keepdim=False)", False),
                              ("argmax", "v1 = T.argmax(x1[0], keepdim=True)", True)):
        assert wrong(Stmt((line,), ("v0",), tag)) == judged, line


def test_a_sample_copied_into_itself_runs_under_vmap_where_torchs_refuses_seed_7873821():
    """Seed 7873821: ``v = x[None, None]; v[:, :, -1] = x``, a copy of each sample into itself (eagerly an exact
    overlap, allowed). With the batch dimension of ``x`` not in front, torch's vmap refuses it as a partial
    overlap; jitorch's gives the loop's result, and the fuzzer reads torch's error as its vmap's limit
    (`transforms.VMAP_LIMITS`)."""
    def f(x):
        v = x[None, None]
        v[:, :, -1] = x
        return v
    samples = torch.arange(6.0).reshape(3, 1, 2)
    physical = torch.stack(list(samples), dim=-2)
    loop = [f(jitorch.tensor(s.numpy().copy())).tolist() for s in samples]
    assert jitorch.func.vmap(f, in_dims=-2)(jitorch.tensor(physical.numpy())).tolist() == loop
    refusal = "some elements of the input tensor and the written-to tensor refer to a single memory location"
    assert refusal in transforms.VMAP_LIMITS
    with pytest.raises(RuntimeError, match=refusal):
        torch.func.vmap(f, in_dims=-2)(physical.clone())
    assert f(samples[0].clone()).tolist() == loop[0]


def test_unpack_duals_primal_and_its_views_take_no_tangent_from_the_base():
    """The other side of the lazy view tangent: `unpack_dual`'s primal is a view of the dual tensor that is not
    forward differentiable in torch, so neither it nor the views made of it take the tangent its base has; an
    in-place op on it with a dual operand gives it its own tangent and leaves the base's. A view of another
    dtype (``view(float32)`` of a float64 base) takes none either."""
    found = []
    for T, fa in ((torch, torch.autograd.forward_ad), (jitorch, fwd)):
        with fa.dual_level():
            x = fa.make_dual(T.tensor([1.0, 2.0]), T.tensor([3.0, 4.0]))
            y = x * 2
            primal = fa.unpack_dual(y).primal
            taken = [fa.unpack_dual(v).tangent for v in (primal, primal[0:], primal.narrow(0, 1, 1), primal * 1)]
            primal.add_(x)
            wide = T.zeros(2, dtype=T.float64)
            narrow = wide.view(T.float32)
            wide.copy_(y)
            found.append([taken, fa.unpack_dual(primal).tangent.tolist(), fa.unpack_dual(y).tangent.tolist(),
                          fa.unpack_dual(narrow).tangent])
    assert found[1] == found[0] == [[None] * 4, [3.0, 4.0], [6.0, 8.0], None]


# Seeds from 7890000 ------------------------------------------------------------------------------------------

def test_an_in_place_op_of_no_derivative_zeroes_its_targets_tangent_seed_7892288():
    """Seed 7892288: ``v = c.pow(x); v.logical_and_(v)``: the target's values become 0s and 1s, constant near x,
    so its tangent is 0 (central differences); jitorch's kept pow's tangent (NaN where c < 0), as torch 2.13's
    does for the in-place logical ops (its comparisons' ``eq_`` give 0). jitorch's nondifferentiable in-place ops
    now zero the target's tangent, through a view into its base's too; the fuzzer judges programs with an
    in-place logical op by finite differences (`transforms.TORCH_WRONG_TANGENT`)."""
    c = [2.0, 0.5, -1.0]
    x, t, eps = [0.5, 1.5, 2.0], [1.0, 1.0, 1.0], 1e-6

    def build(T, name):
        def f(x):
            v = T.tensor(c, dtype=T.float64).pow(x)
            getattr(v, name)(v) if name != "logical_not_" else v.logical_not_()
            return v
        return f
    for name in ("logical_and_", "logical_or_", "logical_xor_", "logical_not_"):
        f = build(jitorch, name)
        at = [f(jitorch.tensor([a + s * b for a, b in zip(x, t)], dtype=jitorch.float64)).tolist() for s in (eps, -eps)]
        _, tangent = _jvp(jitorch, f, x, t)
        assert tangent == [(p - m) / (2 * eps) for p, m in zip(*at)] == [0.0, 0.0, 0.0], name
        _, theirs = _jvp(torch, build(torch, name), x, t)
        assert not _same(theirs, tangent), name  # (torch's keeps pow's: docs/differences-from-torch.md)

    def through_view(T):
        def f(x):
            v = x * 3
            v[1:].logical_and_(T.tensor([True, False]))
            return v
        return f
    got, want = _jvp(jitorch, through_view(jitorch), x, t), _jvp(torch, through_view(torch), x, t)
    assert got[0] == want[0] and got[1] == [3.0, 0.0, 0.0]
    program = _statements(7892288)
    assert transforms._torch_tangent_wrong(program, transforms.Run())


def test_frac_passes_on_a_copy_of_its_tangent_seed_7890199():
    """Seed 7890199: ``v = x.frac(); v.sqrt_()`` (through ``v.to(bfloat16)``, the same tensor), returning ``x``:
    ``x``'s tangent is the one given, whatever is written into ``v``. torch's ``frac`` passes its operand's tangent
    on as its result's, the same tensor, so ``sqrt_`` rewrites ``x``'s (NaN at -1.25); jitorch's tangent of a
    result never is an operand's (`forward_ad._own`). The fuzzer judges programs with ``frac`` by finite
    differences under jvp (`transforms.TORCH_WRONG_TANGENT`)."""
    def build(T):
        def f(x):
            v = x.frac()
            v.sqrt_()
            return x
        return f
    x, t = [0.5, -1.25, 2.25], [1.0, 2.0, 3.0]
    assert _jvp(jitorch, build(jitorch), x, t)[1] == t
    assert not _same(_jvp(torch, build(torch), x, t)[1], t)
    assert transforms._torch_tangent_wrong(_statements(7890199), transforms.Run())


def test_clamp_with_one_tensor_bound_at_a_tie_takes_the_inputs_tangent_seed_7891085():
    """Seed 7891085: ``x1.clip(max=x0)`` with an element of ``x1`` equal to ``x0``: jitorch's tangent there is the
    input's, as torch's gradient and its ``clamp_max``, two-bound and scalar-bound forms give; torch's forward
    formula of ``clamp.Tensor`` with a None bound takes the bound's (0). A kink: the fuzzer judges such calls by
    finite differences (`transforms.TORCH_WRONG_TANGENT`, which skip kinks)."""
    x, t = [0.0, 1.5, -1.0], [1.0, 1.0, 1.0]
    forms = (lambda T: (lambda a: a.clip(max=T.tensor(0.0, dtype=T.float64))),
             lambda T: (lambda a: T.clamp_max(a, T.tensor(0.0, dtype=T.float64))),
             lambda T: (lambda a: a.clip(max=0.0)))
    for form in forms:
        assert _jvp(jitorch, form(jitorch), x, t)[1] == [1.0, 0.0, 1.0]
    assert [_jvp(torch, form(torch), x, t)[1] for form in forms] == [[0.0, 0.0, 1.0], [1.0, 0.0, 1.0],
                                                                      [1.0, 0.0, 1.0]]
    v = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.grad(forms[0](torch)(v).sum(), v)[0].tolist() == [1.0, 0.0, 1.0]
    judged = transforms._one_tensor_bound
    assert [judged(line) for line in ("v1 = x1.clip(max=x0)", "T.clip(v0, v0, None, out=v4)", "x1.clip_(c1)",
                                      "v8 = v5.clip(v4, v4)", "x1.clip_(max=2.0)", "v1 = x0.clip(max=M.a0)",
                                      "T.clip(v2, s0, out=v5)")] == [True, True, True, False, False, False, False]


def test_a_half_types_std_without_degrees_of_freedom_has_a_tangent_of_its_dtype_seed_7890531():
    """Seed 7890531: ``T.fill(T.std(x), 0)`` of a bfloat16 ``x`` of one element: torch's tangent of ``std`` there is
    a float32 NaN (its primal bfloat16), jitorch's of the primal's dtype (docs/func.md); the fuzzer records
    torch's tangents in their primals' dtypes for bfloat16 too, as it did for float16 and float32."""
    for T in (torch, jitorch):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, tangent = T.func.jvp(lambda x: T.std(x), (T.tensor([0.7], dtype=T.bfloat16),),
                                    (T.tensor([1.0], dtype=T.bfloat16),))
        assert tangent.dtype == (T.float32 if T is torch else T.bfloat16) and math.isnan(tangent.item())
    program = _statements(7890531)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = transforms.check(program)
    assert not outcome.mismatches and outcome.ran["jvp"] == 1


def test_torchs_vmap_refusals_of_programs_with_a_meaning_seed_7890743():
    """Seeds 7890743, 7892217: ``t.select_scatter(src, 0, 0)`` with ``src`` of another dtype (eagerly cast); seed
    7891294: ``median`` of an empty sample (eagerly NaN); seed 7893879: ``v.slice_scatter(v, start=-1, step=3)``.
    torch's vmap refuses them (its rules scatter, reduce a dim of size 0, take the start past the batch dim);
    jitorch's gives the loop's values, and the fuzzer reads torch's errors as its vmap's limits
    (`transforms.VMAP_LIMITS`)."""
    x = torch.tensor([[1, 2, 3, 0, 0], [4, 9, 6, 0, 0], [7, 1, 2, 3, 3]], dtype=torch.uint8)

    def scatter(T):
        base = T.arange(5, dtype=T.float32)
        return lambda v: base.select_scatter(T.amax(v), 0, 0)
    loop = [scatter(torch)(row).tolist() for row in x]
    assert jitorch.func.vmap(scatter(jitorch))(jitorch.tensor(x.numpy())).tolist() == loop
    assert [scatter(jitorch)(jitorch.tensor(row.numpy())).tolist() for row in x] == loop
    empty = torch.zeros(3, 1, 0)
    assert math.isnan(torch.median(empty[0]).item())
    assert all(math.isnan(v) for v in jitorch.func.vmap(jitorch.median)(jitorch.zeros(3, 1, 0)).tolist())
    def sliced(T):
        return lambda v: v.slice_scatter(v, start=-1, step=3)
    column = torch.tensor([[1], [2], [3]], dtype=torch.int8)
    assert jitorch.func.vmap(sliced(jitorch))(jitorch.tensor(column.numpy())).tolist() == \
        [sliced(torch)(row).tolist() for row in column] == [[1], [2], [3]]
    for call, message in ((lambda: torch.func.vmap(scatter(torch))(x),
                           "scatter(): Expected self.dtype to be equal to src.dtype"),
                          (lambda: torch.func.vmap(torch.median)(empty), "median(): Expected reduction dim"),
                          (lambda: torch.func.vmap(sliced(torch))(column), "index -1 is out of bounds for dimension")):
        assert message in transforms.VMAP_LIMITS
        with pytest.raises((RuntimeError, IndexError), match=re.escape(message)):
            call()


def test_remainder_by_a_number_passes_on_a_copy_of_its_tangent_seed_7892174():
    """Seed 7892174: ``v = x.remainder(-1); v.unsqueeze_(-2)``, then ``x[1, 1:]``: torch's ``remainder`` (and
    ``fmod``) by a number passes ``x``'s tangent on as ``v``'s, the same tensor, so ``unsqueeze_`` reshapes ``x``'s
    tangent and the next view of ``x`` raises "Trying to set a forward gradient that has a different size" (a
    ``mul_`` would rewrite it silently). jitorch's ``x`` keeps the tangent given; the fuzzer judges such calls by
    finite differences (`transforms.TORCH_WRONG_TANGENT`) and reads that error as torch's limit."""
    def build(T, name, write):
        def f(x):
            v = getattr(x, name)(-1)
            v.unsqueeze_(-2) if write == "unsqueeze_" else v.mul_(2)
            return x[1, 0:] * 1
        return f
    x, t = [[0.5], [1.5]], [[1.0], [2.0]]
    for name in ("remainder", "fmod"):
        for write in ("unsqueeze_", "mul_"):
            assert _jvp(jitorch, build(jitorch, name, write), x, t) == ([1.5], [2.0])
        with pytest.raises(RuntimeError, match="Trying to set a forward gradient that has a different size"):
            _jvp(torch, build(torch, name, "unsqueeze_"), x, t)
        assert _jvp(torch, build(torch, name, "mul_"), x, t) == ([1.5], [4.0])
    assert any(limit in "Trying to set a forward gradient that has a different size than that of the original Tensor"
               for limit in transforms.TORCH_LIMITS)
    assert transforms._torch_tangent_wrong(_statements(7892174), transforms.Run())
    assert [transforms._scalar_other(line) for line in ("v2 = x0.remainder(g1)", "v1 = T.fmod(x0, 1.5, out=v2)",
                                                        "v3 = x0.remainder(v1)", "v4 = T.fmod(c0, x1)")] == \
        [True, True, False, False]


def test_ravel_of_a_sample_is_a_view_that_sees_a_later_write_under_vmap_seed_7890835():
    """Seed 7890835: ``v = x.ravel()`` then an in-place write into ``x``, with ``x`` batched at dim 1: each
    sample (compact in the loop) ravels to a view, which sees the write; jitorch's batched samples are compact,
    so its vmap gives the loop's values. torch's sample there is strided, its ``ravel`` copies and misses the
    write; the fuzzer runs such a program on strided samples too and, where they give other values or writes
    than compact ones, compares jitorch's vmap with the loop alone (`transforms._layout_dependent`)."""
    def f(x):
        v = x.ravel()
        x.mul_(2)
        return v * 1
    samples = torch.tensor([[3.0, -2.5], [0.5, 1.0], [2.0, 2.0]])
    loop = [f(jitorch.tensor(s.numpy().copy())).tolist() for s in samples]
    physical = samples.t().contiguous()
    assert jitorch.func.vmap(f, in_dims=1)(jitorch.tensor(physical.numpy())).tolist() == loop
    assert torch.func.vmap(f, in_dims=1)(physical.clone()).tolist() == samples.tolist() != loop
    program = _statements(7890835)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not transforms.check(program).mismatches


def test_copysign_of_zero_has_a_finite_tangent_seed_7894073():
    """Seed 7894073: ``copysign(v, v)`` with an element 0: jitorch's tangent there was NaN, torch's 0. The rule's
    ``where(self == 0, 0, g * (out / self))`` is right in reverse mode, but its transpose differentiates the
    branch not taken, 0 / 0; it is now torch's ``g * ratio`` with the ratio divided where ``self`` is not 0
    (`common.over_nonzero`), whose every branch is finite."""
    x, t = [0.0, 1.5, -2.0], [1.0, 1.0, 1.0]
    for build in (lambda T: (lambda v: T.copysign(v, v)),
                  lambda T: (lambda v: T.copysign(v, T.tensor(-1.0, dtype=T.float64)))):
        assert _jvp(jitorch, build(jitorch), x, t) == _jvp(torch, build(torch), x, t)
        grads = []
        for T in (jitorch, torch):
            v = T.tensor(x, dtype=T.float64, requires_grad=True)
            grads.append(T.autograd.grad(build(T)(v).sum(), v)[0].tolist())
        assert grads[0] == grads[1]
    assert _jvp(jitorch, lambda v: jitorch.copysign(v, v), x, t)[1] == [0.0, 1.0, 1.0]


def test_fmax_at_a_tie_takes_selfs_tangent_as_its_gradient_seed_7893400():
    """Seed 7893400: ``fmax(y, c)`` with ``y == c`` at one element: jitorch's tangent there is ``y``'s (7), as torch's
    gradient gives ``self`` the tie; torch's forward formula takes ``other``'s (0), and its ``fmin`` agrees with its
    gradient. The fuzzer judges programs with ``fmax`` by finite differences under jvp."""
    x, t, c = [1.0, 2.0, 3.0], [1.0, 1.0, 1.0], [1.0, 1.0, 4.0]
    for name, want in (("fmax", [1.0, 1.0, 0.0]), ("fmin", [1.0, 0.0, 1.0])):
        def build(T):
            return lambda v: getattr(T, name)(v, T.tensor(c, dtype=T.float64))
        assert _jvp(jitorch, build(jitorch), x, t)[1] == want
        v = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.grad(build(torch)(v).sum(), v)[0].tolist() == want
    assert _jvp(torch, lambda v: torch.fmax(v, torch.tensor(c, dtype=torch.float64)), x, t)[1] == [0.0, 1.0, 0.0]
    assert transforms._torch_tangent_wrong(_statements(7893400), transforms.Run())


@pytest.mark.parametrize("name", ["pow", "float_power"])
def test_pow_of_zero_by_a_zero_exponent_has_a_finite_tangent_seed_7894731(name):
    """Seed 7894731: ``x.float_power(e)`` with ``x`` 0 (and its tangent 0, written by ``x[::3] = 0``) where ``e`` is 0:
    jitorch's tangent was NaN, torch's 0. The rule's ``where(e == 0, 0, g * e * x ** (e - 1))`` is torch's, but its
    transpose differentiates the branch not taken, 0 * 0 ** -1; that branch now raises x to 0 there."""
    def build(T):
        e = T.tensor([[0.5, -1.0, 0.0, 2.0]], dtype=T.float64)

        def f(x):
            x[::3] = 0
            return getattr(x, name)(e)
        return f
    x, t = [[1.0, 2.0, 3.0, 4.0]], [[1.0, 1.0, 1.0, 1.0]]
    got, want = _jvp(jitorch, build(jitorch), x, t), _jvp(torch, build(torch), x, t)
    assert _same(got, want) and got[1][0][2:] == [0.0, 0.0]
    grads = []
    for T in (jitorch, torch):
        v = T.tensor([[0.0, 2.0, 0.0, 4.0]], dtype=T.float64, requires_grad=True)
        grads.append(T.autograd.grad(getattr(v, name)(T.tensor([[0.5, -1.0, 0.0, 2.0]], dtype=T.float64)).sum(),
                                     v)[0].tolist())
    assert _same(grads[0], grads[1])


def _raised(run):
    """The type and first line of what ``run()`` raises."""
    with pytest.raises(Exception) as info:
        run()
    return info.type, str(info.value).splitlines()[0]


@pytest.mark.parametrize("build", [
    lambda T: lambda x: T.unique(x, False, return_counts=False),  # the fuzzer's (seed 7895016)
    lambda T: lambda x: x.unique(return_inverse=True)[0], lambda T: lambda x: T.unique(x, dim=0),
    lambda T: lambda x: T.unique_consecutive(x), lambda T: lambda x: x.unique_consecutive(return_counts=True, dim=0)[0],
], ids=["unique", "unique_inverse", "unique_dim", "unique_consecutive", "unique_consecutive_dim"])
def test_a_differentiated_unique_raises_torchs_not_implemented_error_seed_7895016(build):
    """Seed 7895016: ``T.unique(x2, False)`` under jvp gave a zero tangent (jitorch declared unique
    nondifferentiable); torch's values require grad, and its derivative is not implemented: backward raises
    NotImplementedError "the derivative for '_unique2' is not implemented." (``unique_dim`` with ``dim``,
    ``unique_consecutive``), forward AD "Trying to use forward AD with _unique2 that does not support it ...".
    jitorch raises both (`rule.DerivativeNotImplemented`, `forward_ad._jvp`); a tangent-free call still runs."""
    x = [[1.0, 2.0], [1.0, 2.0], [3.0, -1.0]]
    outcomes = []
    for T in (jitorch, torch):
        leaf = T.tensor(x, dtype=T.float64, requires_grad=True)
        primal, tangent = T.tensor(x, dtype=T.float64), T.ones(3, 2, dtype=T.float64)
        values = build(T)(leaf)
        outcomes.append((values.requires_grad, _raised(lambda: values.sum().backward()),
                         _raised(lambda: T.func.grad(lambda x: build(T)(x).sum())(primal)),
                         _raised(lambda: T.func.jvp(build(T), (primal,), (tangent,))),
                         T.func.jvp(lambda x: build(T)(x.detach()), (primal,), (tangent,))[1].tolist()))
    ours, torchs = outcomes
    assert ours[0] is torchs[0] is True
    for (our_type, our_message), (torch_type, torch_message) in zip(ours[1:4], torchs[1:4]):
        assert issubclass(our_type, torch_type)
        assert our_message == torch_message
    assert ours[4] == torchs[4]
    program, _ = generate(7895016, table=TABLE)
    assert program.body[0].tag == "unique"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not transforms.check(program).mismatches


SINGULAR = [[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.5], [1.0, 3.0]], [[0.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]],
            [[1.0, 1.0], [0.0, 0.0]], [[0.0, 0.0], [1.0, 1.0]], [[-1.0, 2.0], [0.5, -1.0]]]


@pytest.mark.parametrize("layout", [lambda a: a, lambda a: a.mT.contiguous().mT], ids=["contiguous", "transposed"])
@pytest.mark.parametrize("build, output", [(lambda T: T.logdet, "logdet"),
                                           (lambda T: lambda a: T.linalg.slogdet(a)[1], "logabsdet"),
                                           (lambda T: lambda a: T.linalg.slogdet(a)[0], "sign")])
def test_the_tangent_of_logdet_at_a_singular_matrix_is_torchs_seed_7882824(build, output, layout):
    """Seed 7882824: jvp of ``x1.logdet()`` at a singular matrix raised LinAlgError (the slogdet rule refused a
    singular matrix whenever its backward recorded a graph, and forward mode's always does); torch.func.jvp gives
    ``trace(A^-1 dA)`` from the forward's LU: -inf, NaN or inf. The rule solves with A's LU as torch's forward
    factors it (A^T where A is contiguous); forward mode runs it under `rule.linearizing`. torch's values (and
    plain backward's gradient, also from the LU) bit for bit, per layout; create_graph still raises torch's error."""
    outcomes = []
    for T in (jitorch, torch):
        a, t = layout(T.tensor(SINGULAR, dtype=T.float64)), T.ones(len(SINGULAR), 2, 2, dtype=T.float64).tril()
        leaf = layout(T.tensor(SINGULAR, dtype=T.float64)).requires_grad_()
        T.linalg.slogdet(leaf)[1].sum().backward()
        outcomes.append((str(T.func.jvp(build(T), (a,), (t,))[1].tolist()), str(leaf.grad.tolist()),
                         _raised(lambda: T.autograd.grad(build(T)(leaf).sum(), leaf, create_graph=True))))
    ours, torchs = outcomes
    assert ours[:2] == torchs[:2]
    if output == "sign":  # (no gradient flows back from the sign: nothing to refuse)
        assert torchs[0] == str([0.0] * len(SINGULAR))
    else:
        assert "inf" in torchs[0] and "nan" in torchs[0]
        assert issubclass(ours[2][0], jitorch.linalg.LinAlgError) and issubclass(torchs[2][0], torch.linalg.LinAlgError)
        assert ours[2][1] == torchs[2][1]
    program, _ = generate(7882824, table=TABLE)
    assert program.body[0].lines == ("v0 = x1.logdet()",)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not transforms.check(program).mismatches
