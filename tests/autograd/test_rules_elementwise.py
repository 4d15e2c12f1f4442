"""Derivative rules of the pointwise, reduction, scan and softmax ops.

gradcheck and gradgradcheck over every sample of every differentiable op of
these families (tests/ops/samples.py: broadcasting, transposed, strided and
offset inputs, 0-d and empty ones, Python numbers as operands); torch's
conventions where the derivative is not unique (ties, zeros, bounds) against
values computed with NumPy; and the rule table's coverage of the families.
"""

import math

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.autograd import gradcheck, gradgradcheck
from jitorch.autograd.rule import NONDIFFERENTIABLE, RULES, Args
from jitorch.ops import registry
from tests.autograd.test_rule_coverage import served_by_fallback
from tests.ops.samples import bind, samples

FAMILIES = ("pointwise", "reduction", "scan", "softmax")
PRIMITIVES = sorted(n for n, op in registry.OPS.items() if op.kind in FAMILIES and op.composite is None
                    and not served_by_fallback(op))
# zeta, igamma and igammac have no derivative in their first argument, as in torch (test_registry_gradcheck
# checks zeta's second alone, tests/ops/test_special_cephes.py igamma's)
DIFFERENTIABLE = [n for n in PRIMITIVES if n not in NONDIFFERENTIABLE and n not in ("special_zeta", "igamma", "igammac")]
# torch defines their gradient as zero: a constant, so there is no second derivative to check
ZERO_GRADIENT = ("floor", "ceil", "trunc", "fix", "round", "sign", "sgn", "floor_divide", "_div_trunc")


def leaf(values, dtype=jt.float64):
    return jt.tensor(values, dtype=dtype, requires_grad=True)


def _as_leaf(t):
    """``t`` as a leaf requiring grad, keeping its layout; stride-0 (expanded) tensors are copied, since
    finite differences cannot perturb one of their elements alone."""
    overlapping = any(s == 0 and n > 1 for n, s in zip(t.shape, t.stride()))
    return (t.clone() if overlapping else t.detach()).requires_grad_()


def _cases(name):
    """(function of the sample's floating tensors, those tensors as leaves) for each sample that has some."""
    op = registry.OPS[name]
    for sample in samples(op, dtype=jt.float64):
        args = bind(op, sample)
        if name == "norm" and args[1] == "nuc":
            continue  # no derivative (see test_nuclear_norm_has_no_derivative)
        positions = [i for i, v in enumerate(args) if isinstance(v, jt.Tensor) and v.dtype.is_floating_point]
        if not positions:
            continue

        def fn(*xs, args=args, positions=positions):
            full = list(args)
            for i, x in zip(positions, xs):
                full[i] = x
            return registry.call(op, tuple(full))
        yield fn, [_as_leaf(args[i]) for i in positions]


# The table ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PRIMITIVES)
def test_each_op_has_a_rule_or_is_declared_nondifferentiable(name):
    assert (name in RULES) != (name in NONDIFFERENTIABLE)


@pytest.mark.parametrize("name", sorted(n for n in PRIMITIVES if n in NONDIFFERENTIABLE))
def test_nondifferentiable_ops_give_results_that_do_not_require_grad(name):
    for fn, inputs in _cases(name):
        out = fn(*inputs)
        for o in out if isinstance(out, tuple) else (out,):
            assert not o.requires_grad


def test_a_rule_computes_only_the_gradients_of_arguments_that_require_grad():
    x, y = leaf([1.0, 2.0]), jt.tensor([3.0, 4.0], dtype=jt.float64)
    out = x * y
    op = registry.OPS["mul"]
    grads = RULES["mul"].backward(jt.ones_like(out), Args(op.schema, (x, y)), out)
    assert set(grads) == {"self"} and grads["self"].tolist() == [3.0, 4.0]
    grads = RULES["where.self"].backward(jt.ones_like(out), Args(registry.OPS["where.self"].schema,
                                                                 (x > 1, x, 2.0)), out)
    assert set(grads) == {"self"}  # nothing for the condition or a Python number


# gradcheck over the samples --------------------------------------------------------------------------

@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_gradcheck(name):
    for fn, inputs in _cases(name):
        assert gradcheck(fn, inputs)


@pytest.mark.parametrize("name", [n for n in DIFFERENTIABLE if n not in ZERO_GRADIENT])
def test_gradgradcheck(name):
    for fn, inputs in _cases(name):
        assert gradgradcheck(fn, inputs)


@pytest.mark.parametrize("name", ZERO_GRADIENT)
def test_zero_gradients_are_constants(name):
    for fn, inputs in _cases(name):
        out = fn(*inputs)
        grads = jt.autograd.grad(out, inputs, jt.ones(out.shape, dtype=out.dtype), create_graph=True)
        for x, g in zip(inputs, grads):
            assert g.shape == x.shape and not g.requires_grad and not np.asarray(g).any()


# torch's conventions ----------------------------------------------------------------------------------

ZEROS = np.array([[2.0, 0.0, 3.0, 4.0], [0.0, 0.0, 5.0, 1.0], [1.5, 2.0, -1.0, 0.0], [2.0, 3.0, 0.5, -2.0]])


def _products_of_others(row):
    return np.array([np.prod(np.delete(row, i)) for i in range(len(row))])


def _cumprod_grad(row, g):
    """sum over k >= i of g_k * prod(row[j] for j <= k, j != i)."""
    n = len(row)
    return np.array([sum(g[k] * np.prod(np.delete(row[:k + 1], i)) for k in range(i, n)) for i in range(n)])


def test_prod_gradient_is_exact_at_zeros():
    w = np.array([1.0, -2.0, 0.5, 3.0])
    x = leaf(ZEROS)
    (x.prod(1) * jt.tensor(w)).sum().backward()
    np.testing.assert_allclose(np.asarray(x.grad), w[:, None] * np.stack([_products_of_others(r) for r in ZEROS]))
    row = leaf(ZEROS[2])
    row.prod().backward()
    np.testing.assert_allclose(np.asarray(row.grad), _products_of_others(ZEROS[2]))


def test_cumprod_gradient_is_exact_at_zeros():
    g = np.random.default_rng(0).standard_normal(ZEROS.shape)
    for dim in (0, 1):
        x = leaf(ZEROS)
        (x.cumprod(dim) * jt.tensor(g)).sum().backward()
        expected = np.stack([_cumprod_grad(r, gr) for r, gr in zip(np.moveaxis(ZEROS, dim, 0).T,
                                                                    np.moveaxis(g, dim, 0).T)])
        np.testing.assert_allclose(np.asarray(x.grad), expected if dim == 1 else expected.T)


@pytest.mark.parametrize("fn", [lambda x: x.prod(1), lambda x: x.prod(), lambda x: x.cumprod(1),
                                lambda x: x.cumprod(0)])
def test_products_differentiate_twice_at_zeros(fn):
    assert gradgradcheck(fn, [leaf(ZEROS)])


def _grad(fn, *xs):
    return [np.asarray(g) for g in jt.autograd.grad(fn(*xs).sum(), xs)]


def test_ties_among_extremes_share_the_gradient_evenly():
    x = leaf([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    (g,) = _grad(lambda x: x.amax(1), x)
    np.testing.assert_allclose(g, [[0, 0.5, 0.5], [1 / 3] * 3])
    (g,) = _grad(lambda x: x.amin(), x)
    np.testing.assert_allclose(g, [[1, 0, 0], [0, 0, 0]])
    (g,) = _grad(lambda x: x.max(), x)
    np.testing.assert_allclose(g, [[0, 0.5, 0.5], [0, 0, 0]])
    (g,) = _grad(lambda x: x.max(), leaf([1.0, math.nan, math.nan]))
    np.testing.assert_allclose(g, [0, 0.5, 0.5])  # NaN is the maximum, shared by both NaNs
    (g,) = _grad(lambda x: x.median(), leaf([2.0, 1.0, 2.0, 3.0]))
    np.testing.assert_allclose(g, [0.5, 0, 0.5, 0])


def test_extremes_over_a_dim_give_the_gradient_to_the_chosen_index():
    x = leaf([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]])
    (g,) = _grad(lambda x: x.max(1).values, x)
    np.testing.assert_allclose(g, [[0, 1, 0], [1, 0, 0]])
    (g,) = _grad(lambda x: x.min(0, keepdim=True).values, x)
    np.testing.assert_allclose(g, [[1, 0, 0], [0, 1, 1]])


def test_maximum_and_minimum_split_ties_in_half():
    a, b = leaf([1.0, 2.0, 3.0]), leaf([1.0, 3.0, 2.0])
    ga, gb = _grad(jt.maximum, a, b)
    np.testing.assert_allclose(ga, [0.5, 0, 1])
    np.testing.assert_allclose(gb, [0.5, 1, 0])
    ga, gb = _grad(jt.minimum, a, b)
    np.testing.assert_allclose(ga, [0.5, 1, 0])
    np.testing.assert_allclose(gb, [0.5, 0, 1])


def test_kinks_take_torchs_values():
    x = leaf([-1.0, 0.0, 0.5, 1.0, 2.0])
    np.testing.assert_allclose(_grad(lambda x: x.clamp(0, 1), x)[0], [0, 1, 1, 1, 0])  # bounds included
    np.testing.assert_allclose(_grad(jt.relu, x)[0], [0, 0, 1, 1, 1])
    np.testing.assert_allclose(_grad(jt.abs, x)[0], [-1, 0, 1, 1, 1])
    lo, hi = leaf([0.0, 0.0, 1.0, 0.0, 3.0]), leaf([1.0, 1.0, 2.0, 1.0, 2.5])
    gx, glo, ghi = _grad(lambda x, lo, hi: x.clamp(lo, hi), x, lo, hi)
    np.testing.assert_allclose(gx, [0, 1, 0, 1, 0])
    np.testing.assert_allclose(glo, [1, 0, 1, 0, 0])
    np.testing.assert_allclose(ghi, [0, 0, 0, 0, 1])  # max < min: max wins everywhere


def test_pow_at_a_zero_base_and_a_zero_exponent():
    x, e = leaf([0.0, 0.0, 2.0, 0.0]), leaf([2.0, 0.0, -1.0, -1.0])
    gx, ge = _grad(jt.pow, x, e)
    np.testing.assert_allclose(gx, [0, 0, -0.25, -math.inf])
    np.testing.assert_allclose(ge, [0, 0, 0.5 * math.log(2), -math.inf])
    e = leaf([0.0, 1.5])
    np.testing.assert_allclose(_grad(lambda e: 0 ** e, e)[0], [0, 0])
    np.testing.assert_allclose(_grad(lambda e: 2 ** e, e)[0], np.exp2([0.0, 1.5]) * math.log(2))
    np.testing.assert_allclose(_grad(lambda x: x ** 0, leaf([0.0, 3.0]))[0], [0, 0])


def test_atan2_has_torchs_zero_gradient_at_the_origin():
    torch = pytest.importorskip("torch")
    y, x = [0.0, 1e-30, 0.0, math.inf, 0.0, 2.0], [0.0, 1e-30, 3.0, 1.0, math.nan, -1.0]
    got = _grad(jt.atan2, leaf(y, jt.float32), leaf(x, jt.float32))
    ty, tx = (torch.tensor(v, requires_grad=True) for v in (y, x))
    torch.atan2(ty, tx).sum().backward()
    for g, t in zip(got, (ty, tx)):
        np.testing.assert_array_equal(g, t.grad.numpy())  # 1e-30 squared underflows: 0 too, as torch


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_atan2_gradient_by_an_integer_operand_squares_it_in_float_seed_7805681(compiled):
    """Fuzz seed 7805681: ``atan2`` of a uint8 tensor and a float32 one squared the uint8 operand in uint8 for the
    gradient's ``1 / (self² + other²)`` (200² wrapped to 64: -3.02 for -0.005). torch's squares it so too and
    also negates it in uint8 for ``other``'s gradient (-3 becomes 253), so the oracle is torch in float64."""
    ints, floats = [3, 200, 7, 0, 255], [0.5, -1.5, 2.0, 0.0, 1e-3]
    for int_first in (True, False):
        expected_grad = torch.tensor(floats, dtype=torch.float64, requires_grad=True)
        pair = (torch.tensor(ints, dtype=torch.float64), expected_grad)
        torch.atan2(*(pair if int_first else pair[::-1])).sum().backward()
        x = jt.tensor(floats, dtype=jt.float32, requires_grad=True)
        pair = (jt.tensor(ints, dtype=jt.uint8), x)
        fn = jt.compile(jt.atan2) if compiled else jt.atan2
        out = fn(*(pair if int_first else pair[::-1]))
        assert out.dtype == jt.float32
        out.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), expected_grad.grad.numpy(), rtol=1e-6, atol=0)


def test_norms_and_deviations_of_zero_have_zero_gradients():
    zero = leaf([[0.0, 0.0], [1.0, 1.0]])
    for fn in (lambda x: x.norm(dim=1), lambda x: x.norm(3, dim=1), lambda x: x.std(1)):
        (g,) = _grad(fn, zero)
        assert np.isfinite(g).all() and not g[0].any()


@pytest.mark.parametrize("lib", [torch, jt], ids=["torch", "jitorch"])
def test_erfinv_backward_reads_its_input_so_a_write_into_its_result_is_allowed(lib):
    """Fuzz seed 7100028: erfinv's backward read its result, so writing into the result raised jitorch's version
    error; torch's formula recomputes erfinv from the input (its gradient there: 0 where the write went)."""
    x = lib.tensor([0.3, -0.5], requires_grad=True)
    y = x.erfinv()
    y[0:1][lib.tensor([0])] = -2
    y.sum().backward()
    np.testing.assert_allclose(x.grad.tolist(), [0.0, 1.1126], rtol=1e-4)


@pytest.mark.parametrize("other", [-2.5, 0.0, -1.0, 2.0])
@pytest.mark.parametrize("name", ["xlogy", "special_xlog1py"])
def test_xlogy_backward_by_a_number_outside_logs_domain_as_torch(name, other):
    """Fuzz seed 7102598: ``x.xlogy_(-2.5)``'s backward raised Python's ValueError (math.log of a negative
    number); torch's gradient is NaN there (-inf at the domain's edge)."""
    grads = []
    for lib in (torch, jt):
        x = lib.tensor([0.5, 2.0], requires_grad=True)
        fn = lib.xlogy if name == "xlogy" else lib.special.xlog1py
        fn(x, other).sum().backward()
        grads.append(x.grad.tolist())
    np.testing.assert_array_equal(grads[1], grads[0])


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_nextafter_passes_the_gradient_where_it_steps_as_torch(compiled):
    """Fuzz seed 7100128: nextafter gave ``self`` the whole gradient; torch's passes none where self equals other
    (0 and -0 too; NaN steps), and none to other, summed down over broadcasting."""
    nan = math.nan
    x_values, y_values = [[2.0, 0.0, 1.0, nan], [1.0, nan, 2.0, 3.0]], [[2.0, -0.0, 2.0, 1.0], [nan]]
    weights = [[2.0, 3.0, 5.0, 7.0], [11.0, 13.0, 17.0, 19.0]]
    grads = []
    for lib in (torch, jt):
        x = lib.tensor(x_values, requires_grad=True)
        y0, y1 = (lib.tensor(v, requires_grad=True) for v in y_values)
        def fn(x, y0, y1):
            return lib.nextafter(x[0], y0), lib.nextafter(x[1], y1)
        if lib is jt and compiled:
            fn = jt.compile(fn)
        outs = fn(x, y0, y1)
        lib.autograd.backward(outs, [lib.tensor(w) for w in weights])
        grads.append((x.grad.tolist(), y0.grad.tolist(), y1.grad.tolist()))
    assert grads[1] == grads[0]
    assert grads[0] == ([[0.0, 0.0, 5.0, 7.0], [11.0, 13.0, 17.0, 19.0]], [0.0] * 4, [0.0])


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", ["xlogy", "special_xlog1py"])
def test_xlogy_gradient_for_self_is_torchs_where_self_is_zero_or_the_gradient_is(name, compiled):
    """Fuzz seed 7102598 (a full overwrite after ``x.xlogy_(-2.5)``): torch's gradient is ``xlogy(g, other)``, so a
    zero gradient stays zero outside the log's domain (jitorch's was NaN); and at ``self`` = 0 it is
    ``g * log(other)`` for ``other`` inside the domain (jitorch's was 0: a silently wrong gradient), 0 outside."""
    nan = math.nan
    selves, others, weights = [0.0, 0.0, 0.5, 0.5, 0.0, 2.0], [2.0, -1.0, -2.5, 3.0, 0.0, nan], [1, 1, 0, 0, 1, 0]
    grads = []
    for lib in (torch, jt):
        fn = getattr(lib, name) if name == "xlogy" else lib.special.xlog1py
        call = jt.compile(fn) if compiled and lib is jt else fn
        x = lib.tensor(selves, requires_grad=True)
        y = lib.tensor(others, requires_grad=True)
        call(x, y).backward(lib.tensor(weights, dtype=lib.float32))
        x0 = lib.tensor([0.0, 0.5, 0.5], requires_grad=True)
        grads_by_number = []
        for other in (2.0, -1.0, -2.5, 0.0, nan):
            x0.grad = None
            call(x0, other).backward(lib.tensor([1.0, 0.0, 1.0]))
            grads_by_number.append(x0.grad.tolist())
        grads.append((x.grad.tolist(), y.grad.tolist(), grads_by_number))
    for got, want in zip(grads[1], grads[0]):
        np.testing.assert_array_equal(np.array(got), np.array(want))
    assert grads[1][0][0] == pytest.approx(math.log(2.0) if name == "xlogy" else math.log(3.0))


@pytest.mark.parametrize("lib", [torch, jt], ids=["torch", "jitorch"])
def test_sinc_backward_reads_its_input_so_a_write_into_its_result_is_allowed(lib):
    """Fuzz seed 7201848: sinc's backward read its result, so ``sinc(x).eq_(x)`` broke the backward with jitorch's
    version error; torch's formula reads ``x`` alone (its gradient there: 0, the write took the history)."""
    x = lib.tensor([0.5, 0.0, 1e-30, -1.7], requires_grad=True)
    y = x.sinc()
    y.eq_(x)
    y.sum().backward()
    assert x.grad.tolist() == [0.0] * 4
    x.grad = None
    x.sinc().backward(lib.ones(4))
    np.testing.assert_allclose(x.grad.tolist(), [-1.27323954, 0.0, 0.0, -0.43486273], rtol=1e-6)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("form", ["pow_", "pow", "float16 ** float64"])
def test_pow_exponent_gradient_takes_the_log_in_the_promoted_type_as_torch(form, compiled):
    """Fuzz seed 7300167: ``v = c.to(bfloat16); v.pow_(c)`` gave ``c`` a gradient ~1e-3 relative off torch's: torch's
    ``pow_backward_exponent`` takes the log of ``self`` cast to the operands' promoted type (float32), jitorch's
    took it in bfloat16. Gradients of both operands, against torch's to the last bit of each dtype."""
    low, high = (torch.float16, torch.float64) if form == "float16 ** float64" else (torch.bfloat16, torch.float32)

    def program(T, c, e):
        v = c.to(getattr(T, str(low).split(".")[1]))
        if form == "pow_":
            v = v * 1
            v.pow_(e)
            return v
        return v.pow(e)

    grads = []
    for T in (torch, jt):
        c = T.tensor([[0.5, 1.7, 2.9, 3.3], [0.0, 1.1, 4.25, 7.0]], dtype=getattr(T, str(high).split(".")[1]),
                     requires_grad=True)
        e = (c.detach() * 0.75 - 0.5).requires_grad_()
        fn = jt.compile(lambda c, e: program(jt, c, e)) if compiled and T is jt else lambda c, e: program(T, c, e)
        out = fn(c, e)
        (out.float() * T.arange(1.0, 9.0).view(2, 4)).sum().backward()
        grads.append((str(out.dtype).split(".")[1], out.detach().double().numpy(), c.grad.double().numpy(),
                      e.grad.double().numpy()))
    (got_dtype, *got), (want_dtype, *want) = grads
    assert got_dtype == want_dtype
    # (NumPy's float32 pow and torch's differ by an ulp at most, and a half result by its rounding of that; the
    # bfloat16 log was 1e-3 relative off)
    out_tolerance = 2e-6 if got_dtype in ("float32", "float64") else 1e-2
    for g, w, rtol in zip(got, want, (out_tolerance, 2e-6, 2e-6)):
        np.testing.assert_allclose(g, w, rtol=rtol)


def _half_gradient(fn, x, g, dtype, compiled):
    """(forward result, gradient of ``x``) of ``fn(x)`` backward from ``g``, eager or compiled, as NumPy float64."""
    leaf = jt.tensor(x, dtype=getattr(jt, dtype), requires_grad=True)
    y = (jt.compile(fn) if compiled else fn)(leaf)
    y.backward(jt.tensor(g, dtype=y.dtype))
    return y.detach().to(jt.float64).numpy(), leaf.grad.to(jt.float64).numpy()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("op", ["tanh", "sigmoid"])
def test_tanh_and_sigmoid_gradients_of_half_types_round_once_as_torchs_seed_7902920(op, dtype, compiled):
    """Fuzz seed 7902920: the gradient of ``x.to(bfloat16).tanh_()`` rounded each op of ``g * (1 - y * y)`` to
    bfloat16 (0.68359375 where torch's is 0.6875): torch's ``tanh_backward`` and bfloat16 ``sigmoid_backward``
    compute in float32 and round once (float16 ``sigmoid_backward`` rounds each op), and so does jitorch's rule
    now, bit for bit with torch's kernel on the same result."""
    rng = np.random.default_rng(7902920)
    x, g = rng.uniform(-3, 3, 500), rng.normal(size=500)
    y, grad = _half_gradient(getattr(jt, op), x, g, dtype, compiled)
    t = getattr(torch, dtype)
    want = getattr(torch.ops.aten, f"{op}_backward")(torch.tensor(g).to(t), torch.tensor(y).to(t))
    np.testing.assert_array_equal(grad, want.double().numpy())


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_addcmul_and_addcdiv_gradients_by_an_integer_operand_are_exact_seed_7901612(compiled):
    """Fuzz seed 7901612: torch's gradient of ``addcmul(x0, x1, x2, value=-1)`` with uint8 ``x1`` multiplies
    ``x1`` by ``value`` in uint8 (3 becomes 253), and addcdiv's for ``tensor2`` by an integer ``tensor1`` too;
    jitorch's must not. The oracle is torch in float64."""
    ints, floats = [3, 200, 7, 0, 255], [0.5, -1.5, 2.0, 0.25, 1e-3]
    cases = {"addcmul": lambda T, i, x: T.addcmul(T.ones(5), i, x, value=-1),
             "addcdiv": lambda T, i, x: T.addcdiv(T.ones(5), i, x + 4, value=-1)}
    for name, f in cases.items():
        expected = torch.tensor(floats, dtype=torch.float64, requires_grad=True)
        f(torch, torch.tensor(ints, dtype=torch.float64), expected).sum().backward()
        x = jt.tensor(floats, dtype=jt.float32, requires_grad=True)
        fn = jt.compile(lambda i, v: f(jt, i, v)) if compiled else (lambda i, v: f(jt, i, v))
        out = fn(jt.tensor(ints, dtype=jt.uint8), x)
        assert out.dtype == jt.float32
        out.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), expected.grad.numpy(), rtol=1e-6, atol=0, err_msg=name)
        wrapped = torch.tensor(floats, requires_grad=True)
        f(torch, torch.tensor(ints, dtype=torch.uint8), wrapped).sum().backward()
        assert not np.allclose(wrapped.grad.numpy(), expected.grad.numpy())  # torch's own, wrapped


def test_addcdiv_gradient_by_an_integer_divisor_is_exact_where_torchs_raises():
    """torch's addcdiv gradient for ``tensor1`` over a uint8 ``tensor2`` raises (its formula writes a float into
    the uint8 operand's dtype); jitorch's is ``value / tensor2``, as torch's in float64."""
    ints, floats = [3, 200, 7, 1, 255], [0.5, -1.5, 2.0, 0.25, 1e-3]
    expected = torch.tensor(floats, dtype=torch.float64, requires_grad=True)
    torch.addcdiv(torch.ones(5), expected, torch.tensor(ints, dtype=torch.float64), value=-1).sum().backward()
    x = jt.tensor(floats, requires_grad=True)
    jt.addcdiv(jt.ones(5), x, jt.tensor(ints, dtype=jt.uint8), value=-1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), expected.grad.numpy(), rtol=1e-6, atol=0)
    wrapped = torch.tensor(floats, requires_grad=True)
    out = torch.addcdiv(torch.ones(5), wrapped, torch.tensor(ints, dtype=torch.uint8), value=-1).sum()
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Byte"):
        out.backward()
