"""Session 45's trust findings in autograd: derivatives jitorch gave where torch has none, and composites whose
gradient by their decomposition differed from torch's at special points."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import jitorch


def _histogram_cases(T):
    x = T.tensor([0.5, -1.0, 2.0, 0.25, 1.0], dtype=T.float64, requires_grad=True)
    w = T.tensor([0.5, 1.0, 2.0, 0.25, 1.0], dtype=T.float64, requires_grad=True)
    i = T.tensor([0, 1, 1, 2, 0])
    edges = T.tensor([-1.0, 0.0, 1.0], dtype=T.float64)
    return {
        "histogram's edges": lambda: T.histogram(x, 3)[1],
        "histogram's counts of weights": lambda: T.histogram(x.detach(), 3, weight=w)[0],
        "histogram of given edges": lambda: T.histogram(x, edges)[0],
        "histc": lambda: T.histc(x, 3),
        "bincount of weights": lambda: T.bincount(i, w),
        "bincount": lambda: T.bincount(i),
        "histogramdd's counts": lambda: T.histogramdd(x.reshape(5, 1), 3)[0],
        "histogramdd's edges": lambda: T.histogramdd(x.reshape(5, 1), 3)[1][0],
        "histogramdd of given edges": lambda: T.histogramdd(x.reshape(5, 1), [edges])[0],
    }


def _outcome(fn):
    r = fn()
    node = r.grad_fn.name() if r.grad_fn is not None else None
    try:
        r.sum().backward()
        raised = None
    except Exception as e:  # (torch's type and message are the oracle)
        raised = (type(e).__name__, str(e))
    return r.requires_grad, node, raised


@pytest.mark.parametrize("case", list(_histogram_cases(torch)))
def test_histogram_results_require_grad_and_their_backward_raises_as_torchs(case):
    """A histogram's edges move with the data's range, and its counts of weights with the weights: torch has no
    derivative for them (its autograd fallback: results that require grad, a backward that raises), and jitorch
    declared them non-differentiable, so their gradients and tangents were silently 0 (transform-fuzz seed
    8470600 of ``--out-views 0.5``: the tangent of ``histogram(v).bin_edges`` 0 where central differences gave
    -2.45). histc is non-differentiable in both."""
    assert _outcome(_histogram_cases(jitorch)[case]) == _outcome(_histogram_cases(torch)[case])


@pytest.mark.parametrize("case", ["histogram's edges", "histogramdd's counts", "bincount of weights", "histc"])
def test_histogram_tangents_raise_as_torchs(case):
    """torch.func.jvp through a histogram raises "Trying to use forward AD with aten::histogram that does not support
    it."; jitorch's gave a zero tangent (seed 8470600), and a tangent through any op torch's autograd fallback serves
    raised the backward's RuntimeError ("derivative for aten::scatter is not implemented")."""
    def outcome(T):
        x = T.tensor([0.5, -1.0, 2.0, 0.25, 1.0], dtype=T.float64)
        i = T.tensor([0, 1, 1, 2, 0])
        fns = {"histogram's edges": lambda x: T.histogram(x, 3)[1],
               "histogramdd's counts": lambda x: T.histogramdd(x.reshape(5, 1), 3)[0],
               "bincount of weights": lambda x: T.bincount(i, x), "histc": lambda x: T.histc(x, 3)}
        try:
            return "ran", T.func.jvp(fns[case], (x,), (T.ones_like(x),))[1].tolist()
        except Exception as e:
            return type(e).__name__, str(e)
    assert outcome(jitorch) == outcome(torch)


def test_a_tangent_through_torchs_autograd_fallback_raises_its_forward_ad_error():
    """``scatter(..., reduce='add')``, which torch's autograd fallback serves: torch.func.jvp raises
    NotImplementedError "Trying to use forward AD with aten::scatter that does not support it."; jitorch raised its
    backward's RuntimeError."""
    def outcome(T):
        index = T.tensor([0, 1, 1, 2, 0])
        try:
            T.func.jvp(lambda x: T.zeros(3, dtype=T.float64).scatter(0, index, x, reduce="add"),
                       (T.ones(5, dtype=T.float64),), (T.ones(5, dtype=T.float64),))
        except Exception as e:
            return type(e).__name__, str(e)
        return "ran"
    assert outcome(jitorch) == outcome(torch)


# Special points of the composites' gradients: signed zeros, infinities, NaN, ties and ordinary values, every pair
SPECIAL = (0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 2.5, -2.5, 0.5, 3.0, 1e-300)
_X, _Y = (np.array(v) for v in zip(*itertools.product(SPECIAL, SPECIAL)))


def _gradients(T, fn, arrays, dtype, inplace):
    """The gradients of ``fn(T, *inputs).sum()`` (of each input, NaN where none reaches it), or the error."""
    xs = [T.tensor(a, dtype=getattr(T, dtype)).requires_grad_() for a in arrays]
    try:
        out = fn(T, *(x.clone() if inplace else x for x in xs))
        grads = T.autograd.grad(out, xs, T.ones_like(out), allow_unused=True)
    except Exception as e:  # (torch's type is the oracle)
        return type(e).__name__
    return [None if g is None else g.double().numpy() for g in grads], out.detach().double().numpy()


def _assert_gradients_are_torchs(fn, arrays, inplace=False):
    for dtype in ("float64", "float32"):
        got, want = (_gradients(T, fn, arrays, dtype, inplace) for T in (jitorch, torch))
        assert type(got) is type(want), (dtype, got, want)
        if isinstance(want, str):
            assert got == want, dtype
            continue
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-300, err_msg=f"{dtype} values")
        for i, (g, w) in enumerate(zip(got[0], want[0])):
            assert (g is None) == (w is None), (dtype, i)
            if w is not None:
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-300, err_msg=f"{dtype} gradient {i}")


COMPOSITES_WITH_RULES = {
    "div": lambda T, x, y: T.div(x, y),
    "div trunc": lambda T, x, y: T.div(x, y, rounding_mode="trunc"),
    "div floor": lambda T, x, y: T.divide(x, y, rounding_mode="floor"),
    "div_": lambda T, x, y: x.div_(y),
    "div_ trunc": lambda T, x, y: x.div_(y, rounding_mode="trunc"),
    "div_ floor": lambda T, x, y: x.divide_(y, rounding_mode="floor"),
    "div by a number": lambda T, x, y: T.div(x, 2.5, rounding_mode="floor") + T.div(y, -0.0),
    "square": lambda T, x, y: T.square(x) * y,
    "square_": lambda T, x, y: x.square_() * y,
    "float_power": lambda T, x, y: T.float_power(x, y),
    "float_power_": lambda T, x, y: x.float_power_(y),
    "float_power of numbers": lambda T, x, y: (T.float_power(x, 2) + T.float_power(2.5, y) + T.float_power(x, 0.0)
                                               + T.float_power(x, -1.0) + T.float_power(x, 0.5)),
    "mvlgamma": lambda T, x, y: T.mvlgamma(x, 1) + y,
    "mvlgamma_": lambda T, x, y: x.mvlgamma_(1) * y,
    "fill_diagonal_": lambda T, x, y: (x.reshape(12, 12) * y.reshape(12, 12)).fill_diagonal_(2.0),
    "fill_diagonal_ wrapped": lambda T, x, y: (x.reshape(36, 4) * y.reshape(36, 4)).fill_diagonal_(-1.5, wrap=True),
}


@pytest.mark.parametrize("name", list(COMPOSITES_WITH_RULES))
def test_composites_with_their_own_rules_have_torchs_gradient_at_special_points(name):
    """div (each rounding mode), square, float_power, mvlgamma and fill_diagonal_ are composites whose in-place forms
    record their own rule and whose other forms are differentiated through their bodies: both give torch's gradient
    at zeros of either sign, infinities, NaN and ties, in float64 and float32 (session 44 checked renorm alone)."""
    fn = COMPOSITES_WITH_RULES[name]
    _assert_gradients_are_torchs(fn, [_X, _Y], inplace="_" in name.split()[0][-1:])


@pytest.mark.parametrize("p", [2.0, 3.0])
def test_mvlgamma_of_each_order_has_torchs_gradient_at_its_domains_edge(p):
    """mvlgamma(x, p) at and past the edge of its domain ((p - 1) / 2), infinities and NaN: torch's gradient (torch
    refuses a value at or below the edge; jitorch refuses it too)."""
    x = np.array([1.5, 2.0, 2.5, math.inf, 3.0, 10.0, 1.25, 1.0001])
    _assert_gradients_are_torchs(lambda T, x: T.mvlgamma(x, int(p)), [x])


def test_the_composites_own_rules_pass_gradcheck():
    """The rules the in-place forms record, against central differences at ordinary points."""
    rng = np.random.default_rng(45)
    x = jitorch.tensor(rng.uniform(0.5, 2.0, (3, 4)), requires_grad=True)
    y = jitorch.tensor(rng.uniform(0.5, 2.0, (3, 4)), requires_grad=True)
    for fn in (lambda x, y: x.clone().div_(y), lambda x, y: x.clone().square_() * y,
               lambda x, y: x.clone().float_power_(y), lambda x, y: (x + 1).mvlgamma_(2) * y,
               lambda x, y: (x * y).fill_diagonal_(0.5)):
        assert jitorch.autograd.gradcheck(fn, (x, y))


CDIST_ORDERS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, math.inf)


@pytest.mark.parametrize("p", CDIST_ORDERS)
def test_cdist_has_torchs_distances_and_gradient_at_ties_zeros_infinities_and_nan(p):
    """cdist's gradient was its body's (``norm`` of the differences): at an infinity norm's tie it split ``g`` among
    the tied elements where torch's _cdist_backward gives each all of it (2 against torch's 4), a NaN difference's
    sign was 0 (torch's NaN), and the order 0 gave no gradient (torch's zeros). Its values: torch's kernel takes the
    infinity norm as a max from 0 that passes over NaN ([nan, 1, 2]: 2, jitorch NaN) and counts min(ceil(|d|), 1) for
    p = 0 (NaN, jitorch 3). cdist now has torch's rule (``own_derivative``) and values."""
    def fn(T, x, y):
        return T.cdist(x[:36].reshape(3, 4, 3), y[:12].reshape(1, 4, 3), p=p)
    _assert_gradients_are_torchs(fn, [np.concatenate([np.zeros(12), _Y[:24]]), _Y[12:24][::-1].copy()])
    ties = np.array([0.0, 2.5, -2.5, 1.0, 1.0, 1.0, 0.5, -0.5, 0.0, 3.0, 3.0, -3.0])
    _assert_gradients_are_torchs(lambda T, x, y: T.cdist(x.reshape(4, 3), y.reshape(4, 3), p=p), [ties, ties[::-1].copy()])


@pytest.mark.parametrize("p", [0.5, 1.0, 1.5, 2.0, 3.0, math.inf])
def test_cdists_rule_passes_gradcheck(p):
    rng = np.random.default_rng(45)
    x = jitorch.tensor(rng.standard_normal((2, 3, 4)), requires_grad=True)
    y = jitorch.tensor(rng.standard_normal((5, 4)), requires_grad=True)
    assert jitorch.autograd.gradcheck(lambda x, y: jitorch.cdist(x, y, p=p), (x, y))


@pytest.mark.parametrize("p", [1.0, math.inf])
def test_compiled_cdist_takes_its_rule_too(p):
    """A compiled cdist records cdist's node (the body runs without history in the trace too): its gradient at an
    infinity norm's ties and a NaN difference is eager's, torch's."""
    ties = np.array([[0.0, 2.5, -2.5], [1.0, 1.0, 1.0], [0.5, math.nan, 0.0]])
    grads = []
    for run in ("torch", "eager", "compiled"):
        T = torch if run == "torch" else jitorch
        x, y = T.tensor(ties, requires_grad=True), T.tensor(ties[::-1].copy() * 2, requires_grad=True)
        fn = (lambda x, y: T.cdist(x, y, p=p) * 3)
        (jitorch.compile(fn) if run == "compiled" else fn)(x, y).sum().backward()
        grads.append([x.grad.numpy(), y.grad.numpy()])
    for got in grads[1:]:
        for g, w in zip(got, grads[0]):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("name", ["fmin", "fmax"])
def test_fmin_and_fmax_of_two_nans_give_self_alone_the_gradient_as_torch(name):
    """Transform-fuzz seed 8487236 (``--out-views 0.5``): ``v.fmin(v)`` of a ``v`` holding NaN (``log10_`` of a
    negative): torch's backward gives ``g`` to ``self`` where it was taken or ``other`` is NaN and to ``other``
    elsewhere, so two NaNs give ``self`` alone; jitorch's gave both, and the tangent of ``v.fmin(v)`` there was twice
    torch's (-3.84 against -1.92). Gradients of both arguments at ties, NaNs and order, and the tangent."""
    values = ([1.0, math.nan, 2.0, math.nan, 3.0, -0.0], [1.0, math.nan, math.nan, 2.0, 1.0, 0.0])

    def outcome(T):
        a, b = (T.tensor(v, dtype=T.float64, requires_grad=True) for v in values)
        getattr(T, name)(a, b).sum().backward()
        x = T.tensor(values[0], dtype=T.float64, requires_grad=True)
        getattr(T, name)(x, x).sum().backward()
        tangent = T.func.jvp(lambda x: getattr(T, name)(x, x), (x.detach(),), (T.ones_like(x.detach()),))[1]
        return a.grad.tolist(), b.grad.tolist(), x.grad.tolist(), tangent.tolist()
    assert outcome(jitorch) == outcome(torch)
