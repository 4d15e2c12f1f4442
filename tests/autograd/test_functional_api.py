"""torch.autograd.functional (vjp, jvp, jacobian, hessian, vhp, hvp), anomaly detection and Variable,
against torch."""

import warnings

import numpy as np
import pytest
import torch
import torch.autograd.functional as TF

import jitorch as jt
import jitorch.autograd.functional as JF

RNG = np.random.default_rng(0)
A, B = RNG.standard_normal(3), RNG.standard_normal((2, 3))


def _pair(m):
    return m.tensor(A), m.tensor(B)


def _mixed(m):
    return lambda x, y: (m.sin(x) * y).sum(1) + x.exp().sum()


def _cubic(m):
    return lambda x: (x ** 3).sum() + x.prod()


def _same(got, want):
    if isinstance(want, (tuple, list)):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    assert not got.requires_grad
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)


CASES = {
    "vjp": lambda m: getattr(TF if m is torch else JF, "vjp")(_mixed(m), _pair(m), m.ones(2, dtype=m.float64)),
    "jvp": lambda m: (TF if m is torch else JF).jvp(_mixed(m), _pair(m), _pair(m)),
    "jacobian tuple": lambda m: (TF if m is torch else JF).jacobian(_mixed(m), _pair(m)),
    "jacobian tensor": lambda m: (TF if m is torch else JF).jacobian(_cubic(m), _pair(m)[0]),
    "hessian tensor": lambda m: (TF if m is torch else JF).hessian(_cubic(m), _pair(m)[0]),
    "hessian tuple": lambda m: (TF if m is torch else JF).hessian(lambda x, y: (x * y).sum() ** 2,
                                                                  (_pair(m)[0], _pair(m)[1][0])),
    "vhp": lambda m: (TF if m is torch else JF).vhp(_cubic(m), _pair(m)[0], _pair(m)[1][1]),
    "hvp": lambda m: (TF if m is torch else JF).hvp(_cubic(m), _pair(m)[0], _pair(m)[1][1]),
    "vjp unused input": lambda m: (TF if m is torch else JF).vjp(lambda x, y: x.sum(), _pair(m)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_functional_matches_torch(name):
    _same(CASES[name](jt), CASES[name](torch))


def test_create_graph_keeps_the_result_differentiable():
    x = jt.tensor(A, requires_grad=True)
    _, g = JF.vjp(_cubic(jt), x, create_graph=True)
    assert g.requires_grad
    xt = torch.tensor(A, requires_grad=True)
    _, gt = TF.vjp(_cubic(torch), xt, create_graph=True)
    (g ** 2).sum().backward()
    (gt ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-10)


def test_strict_mode_and_bad_v_raise_torchs_errors():
    for m, F in ((jt, JF), (torch, TF)):
        with pytest.raises(RuntimeError, match="independent of input 1"):
            F.vjp(lambda x, y: x.sum(), (m.ones(2), m.ones(2)), strict=True)
        with pytest.raises(RuntimeError, match="v can only be None"):
            F.vjp(lambda x: x * 2, m.ones(2))
        with pytest.raises(RuntimeError, match="should return a single Tensor"):
            F.hessian(lambda x: (x, x), m.ones(2))


def test_anomaly_detection_names_the_node_that_returned_nan_and_warns_with_its_forward_stack():
    x = jt.tensor([0.0, 1.0], requires_grad=True)
    assert not jt.is_anomaly_enabled()
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        with jt.autograd.detect_anomaly():
            y = x.sqrt() * 0  # sqrt's gradient at 0 is inf; times 0 is nan
            with pytest.warns(UserWarning, match="Error detected in SqrtBackward0. Traceback of forward call"):
                with pytest.raises(RuntimeError, match="Function 'SqrtBackward0' returned nan values in its 0th "
                                                       "output."):
                    y.sum().backward()
            assert jt.is_anomaly_enabled()
    assert not jt.is_anomaly_enabled()
    xt = torch.tensor([0.0, 1.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.detect_anomaly(), pytest.raises(RuntimeError, match="'SqrtBackward0' returned nan"):
            (xt.sqrt() * 0).sum().backward()


def test_set_detect_anomaly_as_call_and_context():
    with jt.autograd.set_detect_anomaly(True, check_nan=False):
        assert jt.is_anomaly_enabled() and not jt.is_anomaly_check_nan_enabled()
    assert not jt.is_anomaly_enabled() and jt.is_anomaly_check_nan_enabled()


def test_variable_shares_data_and_every_tensor_is_one():
    from jitorch.autograd import Variable
    t = jt.ones(2, requires_grad=True) * 2
    v = Variable(t)
    assert not v.requires_grad and v.data_ptr() == t.data_ptr() and v is not t
    assert Variable(jt.ones(2), requires_grad=True).is_leaf and isinstance(jt.ones(1), Variable)
    with pytest.raises(TypeError, match="Variable data has to be a tensor, but got list"):
        Variable([1.0])
