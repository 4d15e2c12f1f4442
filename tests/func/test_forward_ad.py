"""jitorch.autograd.forward_ad against torch.autograd.forward_ad: dual tensors through ops, unpack_dual,
make_dual's checks and errors, in-place ops, nested levels, reverse mode over forward mode."""

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as tfw

import jitorch as jt
import jitorch.autograd.forward_ad as fw

RNG = np.random.default_rng(14900)
P, T = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3))


def _close(a, b, tol=1e-10):
    a, b = a.detach().numpy(), b.detach().numpy()
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def _run(m, ad, fn):
    with ad.dual_level():
        d = ad.make_dual(m.tensor(P), m.tensor(T))
        return ad.unpack_dual(fn(m, d))


FUNCTIONS = {
    "pointwise": lambda m, x: m.tanh(x) * x.exp() - 1 / (1 + x * x),
    "reduction_matmul": lambda m, x: (x @ x.t()).sum(0) + x.max(1).values,
    "views": lambda m, x: x.t()[1:].reshape(-1).unsqueeze(1).expand(4, 2),
    "softmax_norm": lambda m, x: m.nn.functional.softmax(x, -1) * x.norm(),
}


@pytest.mark.parametrize("name", FUNCTIONS)
def test_dual_tensors_match_torch(name):
    got, want = _run(jt, fw, FUNCTIONS[name]), _run(torch, tfw, FUNCTIONS[name])
    _close(got.primal, want.primal)
    _close(got.tangent, want.tangent)


def test_tangents_where_torch_has_none_or_zeros():
    with fw.dual_level():
        d = fw.make_dual(jt.tensor(P), jt.tensor(T))
        assert fw.unpack_dual(d.argmax()).tangent is None
        assert fw.unpack_dual(jt.zeros_like(d)).tangent is None
        assert fw.unpack_dual(jt.tensor(P)).tangent is None
        _close(fw.unpack_dual(d * 0).tangent, torch.zeros(2, 3, dtype=torch.float64))
        _close(fw.unpack_dual(d).tangent, torch.tensor(T))
        assert fw.unpack_dual(d).primal is not d
    assert fw.unpack_dual(d).tangent is None  # (the level closed)


def test_make_dual_errors_as_torch():
    x = jt.tensor(P)
    with pytest.raises(RuntimeError, match="no level exists, make sure to enter_dual_level"):
        fw.make_dual(x, x)
    with fw.dual_level():
        with pytest.raises(RuntimeError, match=r"Tensor is of size \[2, 3\] while the given forward gradient is of "
                                               r"size \[3\]"):
            fw.make_dual(x, jt.ones(3))
        with pytest.raises(ValueError, match="Expected primal to be floating point or complex, but got: "):
            fw.make_dual(jt.arange(3), jt.ones(3))
        with pytest.raises(ValueError, match="Expected tangent to be floating point or complex"):
            fw.make_dual(jt.ones(3), jt.arange(3))
        d = fw.make_dual(x, x)
        with pytest.raises(RuntimeError, match="already has a forward gradient at the same level 0"):
            fw.make_dual(d, x)


def test_inplace_op_takes_the_tangent():
    for m, ad in ((jt, fw), (torch, tfw)):
        with ad.dual_level():
            y = m.tensor(P).clone()
            y.mul_(ad.make_dual(m.tensor(P), m.tensor(T)))
            y.add_(1)
            if m is jt:
                got = ad.unpack_dual(y)
            else:
                want = ad.unpack_dual(y)
    _close(got.primal, want.primal)
    _close(got.tangent, want.tangent)


def test_nested_levels_forward_over_forward():
    """Two levels: the inner tangent's own tangent at the outer level is the second derivative."""
    x = jt.tensor([0.3, -1.2], dtype=jt.float64)
    with fw.dual_level() as outer:
        a = fw.make_dual(x, jt.ones(2, dtype=jt.float64))
        with fw.dual_level() as inner:
            assert (outer, inner) == (0, 1)
            b = fw.make_dual(a, jt.ones(2, dtype=jt.float64))
            first = fw.unpack_dual(jt.sin(b), level=inner).tangent
        second = fw.unpack_dual(first, level=outer).tangent
    _close(first.detach(), torch.cos(torch.tensor([0.3, -1.2], dtype=torch.float64)))
    _close(second, -torch.sin(torch.tensor([0.3, -1.2], dtype=torch.float64)))


def test_reverse_over_forward():
    """A tangent keeps its history: its gradient by backward is torch's."""
    grads = []
    for m, ad in ((jt, fw), (torch, tfw)):
        x = m.tensor(P, requires_grad=True)
        with ad.dual_level():
            y = ad.unpack_dual(m.sin(ad.make_dual(x, m.tensor(T))) * x).tangent
        y.sum().backward()
        grads.append(x.grad)
    _close(grads[0], grads[1])


def test_enter_and_exit_level_functions():
    level = fw.enter_dual_level()
    try:
        d = fw.make_dual(jt.ones(2), jt.ones(2))
        assert fw.unpack_dual(d * 3, level=level).tangent.tolist() == [3.0, 3.0]
    finally:
        fw.exit_dual_level(level=level)
    with pytest.raises(RuntimeError, match="Dual level must be a positive number"):
        fw.exit_dual_level()


def test_logcumsumexp_tangent_is_not_nan():
    """Regression: the tangent, the derivative of the backward rule in its cotangent, was taken at a zero
    cotangent, where logcumsumexp's rule takes the log of its magnitude: NaN (finite-difference sweep)."""
    got, want = (_run(m, ad, lambda m, x: m.logcumsumexp(x, 1)) for m, ad in ((jt, fw), (torch, tfw)))
    _close(got.tangent, want.tangent)


def test_symmetric_input_rules_against_torch():
    """eigh and cholesky read one triangle and take the input as symmetric: with a symmetric tangent, torch's."""
    a = RNG.standard_normal((3, 3))
    a, t = a @ a.T + 3 * np.eye(3), RNG.standard_normal((3, 3))
    t = t + t.T
    for fn in (lambda m, x: m.linalg.eigh(x)[0], lambda m, x: m.linalg.eigh(x)[1].abs(), lambda m, x: m.linalg.cholesky(x)):
        tangents = []
        for m, ad in ((jt, fw), (torch, tfw)):
            with ad.dual_level():
                tangents.append(ad.unpack_dual(fn(m, ad.make_dual(m.tensor(a), m.tensor(t)))).tangent)
        _close(tangents[0], tangents[1], 1e-8)


def test_logit_tangent_outside_its_domain_is_torchs_nan_seed_7871667():
    """Transform-fuzz seed 7871667: ``jvp`` of ``logit`` at 2.0 gave -0.0 where torch's is NaN. A forward
    tangent is the derivative of the reverse rule's result in ``g`` (the transpose trick), and the rule returned
    a constant NaN outside ``[0, 1]``, whose derivative is 0; it now divides ``g`` by a NaN there. The gradient
    stays torch's, bit for bit."""
    x = [2.0, -0.5, 0.5, 1.0, 0.0, 0.3, 0.9]
    seen = []
    for T in (torch, jt):
        F = torch.func if T is torch else jt.func
        tangent = F.jvp(T.logit, (T.tensor(x),), (T.full((7,), 0.75),))[1]
        leaf = T.tensor(x, requires_grad=True)
        T.logit(leaf).backward(T.full((7,), 0.75))
        seen.append((tangent.numpy(), leaf.grad.numpy()))
    for got, want in zip(seen[1], seen[0]):
        np.testing.assert_array_equal(got, want)
    assert np.isnan(seen[1][0][:2]).all() and np.isfinite(seen[1][0][2]) and np.isinf(seen[1][0][3:5]).all()
