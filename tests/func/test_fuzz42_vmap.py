"""vmap, vmap(grad) and jvp failures the transform fuzzer (tests/fuzz/transforms.py) found in session 42, each
against torch.func and a second oracle: the per-sample loop, torch.autograd, float64 values."""

import warnings

import pytest
import torch

import jitorch
from jitorch.func import batching
from tests.fuzz.generator import generate, op_table
from tests.fuzz.transforms import _layout_dependent, _torch_autograd, check, float_split

ROWS = [[0.5, -1.25, 2.0, 0.75], [3.0, 1.5, -0.5, -2.0], [-0.25, 4.0, 1.0, 2.5]]


def _swapped_loss(T, swap):
    weights = T.arange(4.0, dtype=T.float64).reshape(1, 4)

    def loss(x):
        v = T.cumsum(x, -1)
        swap(v)
        return (v * weights).sum()
    return loss


@pytest.mark.parametrize("swap", [lambda v: v.swapdims_(-1, -2), lambda v: v.t_(), lambda v: v.transpose_(0, 1)])
def test_an_in_place_view_op_under_vmap_records_its_history_seed_7874509(swap):
    """Seed 7874509: ``v = cumsum(x, -1); v.swapdims_(-1, -2)`` under vmap(grad) raised "shape '[4, 1]' is invalid
    for input of size 1": vmap's hook changed the batched tensor's geometry but recorded no backward node, so the
    swapped [1, 4] gradient reached cumsum's node, whose output is [4, 1]. The in-place view op now records its
    node as the registry's own path does; cumsum still runs batched."""
    x = torch.tensor(ROWS, dtype=torch.float64).unsqueeze(-1)
    want = torch.func.vmap(torch.func.grad(_swapped_loss(torch, swap)))(x)
    before = batching.STATS["batched"]["cumsum"]
    got = jitorch.func.vmap(jitorch.func.grad(_swapped_loss(jitorch, swap)))(jitorch.tensor(x.numpy()))
    assert batching.STATS["batched"]["cumsum"] > before
    loop = [jitorch.func.grad(_swapped_loss(jitorch, swap))(jitorch.tensor(row.numpy())).tolist() for row in x]
    assert got.tolist() == want.tolist() == loop


def _quantiles(T):
    return lambda x: (x + 1).nanquantile(T.sign(x).abs() * 0.5, keepdim=False)


def test_a_tensor_q_of_quantile_is_checked_per_sample_under_vmap_seed_7875511():
    """Seed 7875511: ``v.nanquantile(q)`` with a batched ``q`` raised vmap's "reading the values of a batched
    Tensor": quantile's check that q is in [0, 1] read q with ``bool()``. It is now a value check
    (`value_checks.check`, rule "quantiles"), which vmap runs per sample and a compiled graph at each call."""
    x = torch.tensor([[0.5, 2.0, -1.0], [0.0, 3.0, 1.0], [-2.0, -0.5, 4.0]])
    want = torch.func.vmap(_quantiles(torch))(x)
    before = batching.STATS["per_sample"]["_check_values"]
    got = jitorch.func.vmap(_quantiles(jitorch))(jitorch.tensor(x.numpy()))
    assert batching.STATS["per_sample"]["_check_values"] == before + 1
    loop = [_quantiles(jitorch)(jitorch.tensor(row.numpy())).tolist() for row in x]
    assert got.tolist() == want.tolist() == loop
    with pytest.raises(RuntimeError, match=r"quantile\(\) q values must be in the range \[0, 1\]"):
        jitorch.func.vmap(lambda v: v.quantile(v))(jitorch.tensor(x.numpy()))


@pytest.mark.parametrize("q", [[0.5, 1.5], [float("nan")], [-0.25]])
def test_quantile_refuses_a_q_outside_0_1_or_nan_as_torch(q):
    """The check as a value rule, eagerly and compiled: torch's RuntimeError for q outside [0, 1] and for a NaN q
    (the ``bool()`` check it replaced let a NaN q through)."""
    with pytest.raises(RuntimeError, match=r"q values must be in the range"):
        torch.tensor([1.0, 2.0, 3.0]).quantile(torch.tensor(q))
    compiled = jitorch.compile(lambda x, q: x.quantile(q))
    for f in (lambda x, q: x.quantile(q), compiled):
        with pytest.raises(RuntimeError, match=r"quantile\(\) q values must be in the range \[0, 1\]"):
            f(jitorch.tensor([1.0, 2.0, 3.0]), jitorch.tensor(q))
    assert compiled(jitorch.tensor([1.0, 2.0, 3.0]), jitorch.tensor([0.25])).tolist() == [1.5]


def _write_through(T, make):
    def f(x):
        make(x)[::2] = 1
        return x * 1
    return f


@pytest.mark.parametrize("make", [lambda x: x.contiguous(), lambda x: x.ravel()])
def test_a_write_through_contiguous_of_a_sample_mapped_at_dim_1_reaches_the_input_seeds_7875053_7875220(make):
    """Seeds 7875053 (``x.ravel()[::2] = 1``), 7875220 (``as_strided(x.contiguous(), ...)`` written): with
    ``in_dims=1`` jitorch's sample is compact, so ``contiguous``/``ravel`` give the sample itself and
    the write reaches the input, as in the per-sample loop over compact samples. torch's sample is a strided
    view of the input, so they give a copy, and its vmap is the loop over ``x.select(1, b)`` (the second
    oracle): the program means two things, by the layout (docs/differences-from-torch.md)."""
    values = torch.tensor(ROWS).t().contiguous()  # [4, 3]: samples along dim 1
    ours = jitorch.tensor(values.numpy().copy())
    got = jitorch.func.vmap(_write_through(jitorch, make), in_dims=1, out_dims=1)(ours)
    compact = [jitorch.tensor(values[:, b].numpy().copy()) for b in range(3)]
    loop = [_write_through(jitorch, make)(s) for s in compact]
    assert got.tolist() == jitorch.stack(loop, 1).tolist()
    assert ours.tolist() == jitorch.stack(compact, 1).tolist() != values.tolist()  # the writes reached the input

    theirs = values.clone()
    want = torch.func.vmap(_write_through(torch, make), in_dims=1, out_dims=1)(theirs)
    strided = values.clone()
    loop = [_write_through(torch, make)(strided.select(1, b)) for b in range(3)]
    assert want.tolist() == torch.stack(loop, 1).tolist()
    assert theirs.tolist() == strided.tolist() == values.tolist()


def test_the_fuzzer_finds_seed_7875053_layout_dependent_and_seed_7840800_not(monkeypatch):
    """`transforms._layout_dependent`, which the vmap check asks where an input is mapped at a dim other than 0:
    seed 7875053's program (written through ``ravel``) gives other inputs on strided samples than on compact
    ones, and passes against the loop alone; seed 7840800's does not, so torch's vmap stays its oracle."""
    import random

    from tests.fuzz import transforms

    answers = []

    def recorded(*args):
        answers.append(_layout_dependent(*args))
        return answers[-1]
    monkeypatch.setattr(transforms, "_layout_dependent", recorded)
    table = op_table()
    for seed in (7875053, 7840800):
        program, _ = generate(seed, table=table)
        outcome = transforms.Outcome()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            transforms.check_vmap(program, random.Random(program.seed * 7 + 1), outcome)
        assert not outcome.mismatches
    assert answers == [True, False]


@pytest.mark.parametrize("build", [
    lambda T: lambda x: T.copysign(T.square(x), T.fix(x)),
    lambda T: lambda x: x.pow(T.tensor([0.0, 0.0, 2.0, 0.0], dtype=T.float64)),
    lambda T: lambda x: T.sinc(x),
])
def test_tangents_of_copysign_pow_sinc_are_finite_where_their_gradient_is_masked_seed_7872750(build):
    """Seed 7872750: jvp of ``copysign(square(x), fix(x))`` at x = 0 gave NaN (torch: 0). The reverse rules
    masked ``g * (out / self)`` with ``where``; forward mode differentiates the rule in ``g``, and where's
    derivative in its unused branch is 0 times that branch's NaN. The rules now multiply ``g`` by the masked
    factor (copysign; pow's tensor exponent at 0 ** 0 and sinc at 0 had the same form). Against torch.func.jvp
    and reverse mode (a row of the Jacobian: the function is elementwise)."""
    x, t = [0.0, -0.0, 1.5, -2.0], [1.0, 1.0, 1.0, 1.0]
    got = jitorch.func.jvp(build(jitorch), (jitorch.tensor(x, dtype=jitorch.float64),),
                           (jitorch.tensor(t, dtype=jitorch.float64),))[1]
    want = torch.func.jvp(build(torch), (torch.tensor(x, dtype=torch.float64),), (torch.tensor(t, dtype=torch.float64),))[1]
    leaf = jitorch.tensor(x, dtype=jitorch.float64, requires_grad=True)
    reverse, = jitorch.autograd.grad(build(jitorch)(leaf).sum(), leaf)
    assert got.tolist() == want.tolist() == reverse.tolist()


def _median_loss(T):
    return lambda x: T.std_mean(x.nanmedian(), [], keepdim=True)[0].sum()


def test_vmap_grad_of_a_full_median_with_a_nan_gradient_is_torch_autograds_seed_7873440():
    """Seed 7873440: ``std_mean(x.nanmedian(), [])`` (the std of one value: NaN) under vmap(grad). jitorch's
    per-sample gradient is NaN at the median's elements and 0 elsewhere, as torch.autograd.grad's and the loop's;
    torch.func's is NaN everywhere: its ``grad`` (as torch.autograd's under any dispatch mode) takes the
    backward formula ``mask * g`` for full median/max (docs/differences-from-torch.md). The fuzzer judges
    torch.func's gradients against torch.autograd's where they differ (`transforms._torch_autograd`)."""
    x = torch.tensor([[2.75, 0.875, 2.375, 0.875], [-0.375, -0.75, -1.5, 2.75]], dtype=torch.float64)
    got = jitorch.func.vmap(jitorch.func.grad(_median_loss(jitorch)))(jitorch.tensor(x.numpy()))
    eager = []
    for row in x:
        leaf = row.clone().requires_grad_()
        eager.append(torch.autograd.grad(_median_loss(torch)(leaf), leaf)[0].tolist())
    nan = float("nan")
    want = torch.tensor([[0.0, nan, 0.0, nan], [0.0, nan, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(torch.tensor(eager, dtype=torch.float64), want, equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(torch.tensor(got.tolist(), dtype=torch.float64), want, equal_nan=True, rtol=0, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.func.vmap(torch.func.grad(_median_loss(torch)))(x)
    assert theirs.isnan().all()

    program, _ = generate(7873440, table=op_table())
    floats, _ = float_split(program)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        oracle = _torch_autograd(program, floats)
        assert not check(program).mismatches
    assert oracle is not None and not torch.tensor(oracle.outputs[0].values).isnan().all()


def _vmap_and_loops(build, x, **kw):
    """(jitorch's vmap, jitorch's loop, torch's vmap or its error, torch's loop) of ``build(T)`` over ``x``'s rows."""
    found = []
    for T in (jitorch, torch):
        f = build(T)
        batch = T.tensor(x.numpy().copy())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                mapped = T.func.vmap(f, **kw)(batch)
            except RuntimeError as e:
                mapped = e
        found += [mapped, T.stack([f(row) for row in T.tensor(x.numpy().copy())])]
    return found


@pytest.mark.parametrize("build", [lambda T: lambda x: T.clip(x, T.tensor(0.25, dtype=T.float64)),
                                   lambda T: lambda x: T.clamp(x, max=T.tensor(0.25, dtype=T.float64)),
                                   lambda T: lambda x: T.where(x > 0, x, T.tensor(0.25, dtype=T.float64))])
def test_a_batched_0d_operand_promotes_as_a_0d_tensor_under_vmap_seed_7880456(build):
    """Seed 7880456: ``clip(x, c)`` of float32 0-d samples and a float64 0-d ``c``. Each sample's result is
    float64 (two 0-d tensors: the wider dtype); jitorch's vmap runs it per sample, as its broadcasting rule
    declines a batched 0-d operand among dtypes. torch's vmap gives float32 (its rule promotes the batched operand
    as one with a dimension) though its own loop gives float64: the fuzzer takes torch's loop as the oracle where
    torch's vmap differs from jitorch's (`transforms._torch_loop_agrees`)."""
    ours, our_loop, theirs, their_loop = _vmap_and_loops(build, torch.tensor([0.5, -1.0, 2.0]))
    assert ours.dtype is our_loop.dtype is jitorch.float64 and their_loop.dtype is torch.float64
    assert ours.tolist() == our_loop.tolist() == their_loop.tolist()
    assert theirs.dtype is torch.float32


def test_aminmax_without_dim_keeps_each_samples_dims_under_vmap_seed_7880116():
    """Seed 7880116: ``aminmax(x, keepdim=True)`` of [4, 2] samples is [1, 1] per sample; jitorch's vmap gives
    [3, 1, 1] (the loop's, stacked). torch's vmap gives [3, 1] (its rule drops a dimension; the fuzzer's
    ``out_dims`` of 2 then raised IndexError)."""
    x = torch.arange(24.0).reshape(3, 4, 2)
    for k in (0, 1):
        ours, our_loop, theirs, their_loop = _vmap_and_loops(lambda T: lambda v: T.aminmax(v, keepdim=True)[k], x)
        assert tuple(ours.shape) == tuple(our_loop.shape) == tuple(their_loop.shape) == (3, 1, 1)
        assert ours.tolist() == our_loop.tolist() == their_loop.tolist()
        assert tuple(theirs.shape) == (3, 1)


def test_a_sample_written_with_its_own_element_runs_under_vmap_seed_7880755():
    """Seed 7880755: ``x[0:3][::2] = x[0]`` of one-element samples: each sample writes an element into itself,
    which torch's loop runs; jitorch's vmap gives the loop's result. torch's vmap raises "some elements of the
    input tensor and the written-to tensor refer to a single memory location" (its batched copy sees the [B]
    source overlap the [B, 1] target partially)."""
    def build(T):
        def f(x):
            x[0:3][::2] = x[0]
            return x * 1
        return f
    ours, our_loop, theirs, their_loop = _vmap_and_loops(build, torch.tensor([[3], [-2], [5]], dtype=torch.int16))
    assert ours.tolist() == our_loop.tolist() == their_loop.tolist() == [[3], [-2], [5]]
    assert isinstance(theirs, RuntimeError) and "refer to a single memory location" in str(theirs)


def test_vmap_grad_of_select_scatter_with_a_source_of_another_dtype_runs_seed_7881001():
    """Seed 7881001: ``x.select_scatter(src, -1, 0)`` with a float32 ``x`` and a source of another dtype (bool
    there, float64 here) under vmap(grad). jitorch gives each sample's gradient, torch.autograd's; torch's
    vmap(grad) raises "scatter(): Expected self.dtype to be equal to src.dtype" (its backward's batched scatter),
    though its grad and torch.autograd run: the fuzzer takes torch.autograd on each sample as the oracle."""
    def loss(x, src):
        return (x.select_scatter(src, -1, 0).double() * 1.5).sum()
    x = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[-1.0, 0.5], [2.5, 1.0]]])
    src = torch.tensor([[5.0, 6.0], [7.0, 8.0]], dtype=torch.float64)
    got = jitorch.func.vmap(jitorch.func.grad(loss, (0, 1)))(jitorch.tensor(x.numpy()), jitorch.tensor(src.numpy()))
    eager = []
    for b in range(2):
        leaves = (x[b].clone().requires_grad_(), src[b].clone().requires_grad_())
        eager.append(torch.autograd.grad(loss(*leaves), leaves))
    for k in range(2):
        assert got[k].tolist() == [e[k].tolist() for e in eager]
    assert got[0].dtype is jitorch.float32 and got[1].dtype is jitorch.float64
    with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
        torch.func.vmap(torch.func.grad(loss, (0, 1)))(x, src)


def _central(f, x, t, eps=1e-6):
    return (f(x + eps * t) - f(x - eps * t)) / (2 * eps)


def test_the_tangent_of_frac_is_not_its_operands_after_a_write_into_it_seeds_7880016_7880503():
    """Seeds 7880016 (``v = frac(x); x[idx] = -1``), 7880503 (``v = x.frac(); x.mvlgamma_(3)``): jitorch's tangent
    of ``v`` is ``x``'s tangent when ``v`` was made, as central differences say; torch's is ``x``'s tangent
    itself, so the later write changes it (2 t after ``x.mul_(2)``). The fuzzer compares such programs' tangents
    with finite differences (`transforms.TORCH_WRONG_TANGENT`)."""
    def build(T):
        def f(x):
            v = T.frac(x)
            x.mul_(2)
            return v
        return f
    x, t = [0.5, 1.25, -2.375], [1.0, 2.0, 3.0]
    got = jitorch.func.jvp(build(jitorch), (jitorch.tensor(x, dtype=jitorch.float64),),
                           (jitorch.tensor(t, dtype=jitorch.float64),))[1]
    want = _central(lambda v: build(torch)(v.clone()), torch.tensor(x, dtype=torch.float64),
                    torch.tensor(t, dtype=torch.float64))
    torch.testing.assert_close(torch.tensor(got.tolist(), dtype=torch.float64), want, rtol=1e-8, atol=1e-8)
    theirs = torch.func.jvp(build(torch), (torch.tensor(x, dtype=torch.float64),), (torch.tensor(t, dtype=torch.float64),))[1]
    assert theirs.tolist() == [2 * v for v in t]


def test_atan2_of_a_bool_operand_has_a_tangent_seed_7881044():
    """Seed 7881044: ``atan2(mask, v)`` with a bool ``mask``: torch.func.jvp raises "Negation, the `-` operator, on
    a bool tensor is not supported" (its forward formula negates ``mask``), though eager atan2 takes it. jitorch's
    tangent is that of ``atan2(mask.double(), v)`` in both libraries and central differences'; the fuzzer reads
    torch's error as a limit (`transforms.TORCH_LIMITS`) and compares with finite differences."""
    x, t = [0.5, 1.25, -2.5], [1.0, 2.0, 3.0]

    def build(T, dtype=None):
        return lambda v: T.arctan2(T.tensor([True, False, True], dtype=dtype), v)
    primals, tangents = (torch.tensor(x, dtype=torch.float64),), (torch.tensor(t, dtype=torch.float64),)
    got = jitorch.func.jvp(build(jitorch), (jitorch.tensor(x, dtype=jitorch.float64),),
                           (jitorch.tensor(t, dtype=jitorch.float64),))[1]
    as_double = torch.func.jvp(build(torch, torch.float64), primals, tangents)[1]
    central = _central(build(torch), primals[0], tangents[0])
    torch.testing.assert_close(torch.tensor(got.tolist(), dtype=torch.float64), as_double, rtol=1e-15, atol=0)
    torch.testing.assert_close(as_double, central, rtol=1e-8, atol=1e-8)
    with pytest.raises(RuntimeError, match="Negation, the `-` operator, on a bool tensor is not supported"):
        torch.func.jvp(build(torch), primals, tangents)


def test_the_tangent_of_fmax_at_a_tie_follows_the_reverse_rule_seed_7883129():
    """Seed 7883129: ``fmax(x, 0)`` at ``x = 0``. jitorch's tangent is ``x``'s, the direction its gradient (and
    torch's reverse rule, by ``torch.autograd.functional.jvp``'s double-vjp) takes; torch.func.jvp's forward formula
    takes the other operand's (0) at a tie. The fuzzer takes torch's reverse-mode jvp as the oracle where
    torch.func.jvp's tangents differ (`transforms._torch_reverse_jvp`)."""
    x, t = [0.0, 1.5, -2.0], [0.125, 1.0, 1.0]
    zero = 0.0

    def build(T):
        return lambda v: T.fmax(v, T.tensor(zero, dtype=T.float64))
    primals, tangents = (torch.tensor(x, dtype=torch.float64),), (torch.tensor(t, dtype=torch.float64),)
    got = jitorch.func.jvp(build(jitorch), (jitorch.tensor(x, dtype=jitorch.float64),),
                           (jitorch.tensor(t, dtype=jitorch.float64),))[1]
    reverse = torch.autograd.functional.jvp(build(torch), primals, tangents)[1]
    forward = torch.func.jvp(build(torch), primals, tangents)[1]
    assert got.tolist() == reverse.tolist()
    assert got.tolist()[0] == 0.125 and forward.tolist()[0] == 0.0


def test_the_fuzzer_judges_tangents_of_topk_among_ties_by_finite_differences_seed_7881654():
    """Seed 7881654: ``topk`` of values with ties: each library's tangent is that of the tied element it picks
    (jitorch 2.75, torch -2.375 at one place), as its gradients are (`generator.AMONG_TIES`). The fuzzer's jvp
    check reads such a program's torch tangents as no oracle (`transforms._torch_tangent_wrong`)."""
    from tests.fuzz.transforms import _torch_tangent_wrong, jvp_run, tensor_outputs

    program, _ = generate(7881654, table=op_table())
    assert program.body[0].tag.endswith(" among ties")
    floats, _ = float_split(program)
    keep = tensor_outputs(jitorch, program)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = jvp_run(torch, program, keep, floats)
        assert _torch_tangent_wrong(program, want)
        assert not check(program).mismatches


def test_a_tangent_has_its_primals_dtype_where_torchs_is_bfloat16_seed_7883356():
    """Seed 7883356: ``x1.nextafter(x0)`` of a bfloat16 ``x1`` and a float32 ``x0``, both with tangents: the result
    is float32; jitorch's tangent too (docs/func.md: a tangent has its primal's dtype), torch's is bfloat16 (``x1``'s
    tangent's dtype). The fuzzer's comparison reads torch's tangent in the primal's dtype
    for bfloat16 as for float32 (`transforms._primal_dtype_tangents`)."""
    primals = {T: (T.tensor([0.5, 1.0]), T.tensor([0.25, 2.0], dtype=T.bfloat16)) for T in (torch, jitorch)}
    tangents = {T: (T.ones(2), T.ones(2, dtype=T.bfloat16)) for T in (torch, jitorch)}
    (out, got), (_, want) = (T.func.jvp(lambda a, b: b.nextafter(a), primals[T], tangents[T]) for T in (jitorch, torch))
    assert out.dtype is got.dtype is jitorch.float32 and want.dtype is torch.bfloat16
    assert got.tolist() == want.tolist()
    program, _ = generate(7883356, table=op_table())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not check(program).mismatches


@pytest.mark.parametrize("build", [
    lambda T: lambda x: T.std_mean(x[1:1], [0])[1],  # the mean of no elements (seed 7883272)
    lambda T: lambda x: T.std_mean(x[0].angle(), [])[0],  # the std of one element, which has no tangent (7881670)
])
def test_a_nan_result_of_no_elements_or_a_zero_tangent_has_torch_func_jvps_nan_tangent_seeds_7883272_7881670(build):
    """Seeds 7883272 (``std_mean(x[1:1], [0])[1]``: NaN, the mean of nothing), 7881670 (``std(x.angle())`` of one
    element: NaN, of an operand with a zero tangent). jitorch's tangent is NaN, as torch.func.jvp's forward
    formulas give (0 / 0, NaN times a zero tangent: the mean rule divides before broadcasting and a zero-derivative
    op gives a zero tangent, seeds 7871815, 7875465); torch's reverse-mode jvp (``torch.autograd.functional.jvp``)
    gives 0 (the Jacobian has no column, or the tangent reaching it is none). The fuzzer takes torch's reverse-mode
    jvp as a second oracle where torch.func.jvp differs (`transforms._torch_reverse_jvp`)."""
    x, t = [0.5, -1.25, 2.0], [1.0, 2.0, 3.0]
    primals, tangents = (torch.tensor(x, dtype=torch.float64),), (torch.tensor(t, dtype=torch.float64),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value, got = jitorch.func.jvp(build(jitorch), (jitorch.tensor(x, dtype=jitorch.float64),),
                                      (jitorch.tensor(t, dtype=jitorch.float64),))
        reverse = torch.autograd.functional.jvp(build(torch), primals, tangents)[1]
        forward = torch.func.jvp(build(torch), primals, tangents)[1]
    assert value.isnan().all() and got.isnan().all() and forward.isnan().all()
    assert reverse.tolist() == 0.0


def _outer_then(T, reshape):
    weights = T.tensor([0.25, -1.5, 2.0, 0.75], dtype=T.float64)

    def loss(x):
        v = x.outer(T.tensor([-0.875, 1.125, -1.25, 0.5], dtype=T.float64))
        reshape(v)
        return (v * v).reshape(-1).mul(weights).sum() + v[..., 0].sum()
    return loss


@pytest.mark.parametrize("reshape", [
    lambda v: v.t_(), lambda v: v.transpose_(0, 1), lambda v: v.swapdims_(0, 1), lambda v: v.squeeze_(),
    lambda v: v.squeeze_(0), lambda v: v.unsqueeze_(1), lambda v: v.as_strided_((4, 1), (1, 1)),
], ids=["t_", "transpose_", "swapdims_", "squeeze_", "squeeze_dim", "unsqueeze_", "as_strided_"])
def test_every_in_place_view_op_under_vmap_grad_gives_the_per_sample_gradient_seed_7894873(reshape):
    """Seed 7894873: ``v = x.outer(c); v.t_()`` under vmap(grad) gave per-sample gradients unlike the loop's and
    torch's on builds before vmapseeds' fix (seed 7874509: vmap's hook for an in-place view op changed the
    geometry but recorded no backward node, so the gradient reached ``outer`` in the swapped shape); ``squeeze_``
    raised "dim 0 appears multiple times". Every in-place view op takes that fixed path
    (`batching.BatchingHook.call_inplace`); each is checked here against torch's per-sample gradients and jitorch's
    loop (torch.func.vmap's fallback for ``as_strided_`` gives other values: `transforms.TORCH_VMAP_WRONG`)."""
    rows = [[1.5], [-0.5], [2.0]]
    want = torch.stack([torch.func.grad(_outer_then(torch, reshape))(torch.tensor(r, dtype=torch.float64))
                        for r in rows])
    got = jitorch.func.vmap(jitorch.func.grad(_outer_then(jitorch, reshape)))(jitorch.tensor(rows, dtype=jitorch.float64))
    loop = [jitorch.func.grad(_outer_then(jitorch, reshape))(jitorch.tensor(r, dtype=jitorch.float64)).tolist()
            for r in rows]
    assert got.tolist() == want.tolist() == loop
    program, _ = generate(7894873, table=op_table())
    assert "v0.t_()" in [line for stmt in program.body for line in stmt.lines]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not check(program).mismatches
