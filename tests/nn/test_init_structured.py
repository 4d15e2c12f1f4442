"""nn.init's structured initialisers: orthogonal_ (sign-corrected QR of a normal draw), eye_, dirac_."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
from jitorch.nn import init


def _haar_q(a):
    """torch's recipe in NumPy: QR of the (tall) draw, columns scaled by sign(diag(R))."""
    wide = a.shape[0] < a.shape[1]
    q, r = np.linalg.qr(a.T if wide else a)
    q = q * np.sign(np.diag(r))
    return q.T if wide else q


@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (6, 2), (4, 2, 3)])
def test_orthogonal_is_the_sign_corrected_q_of_the_draw(shape):
    rows, cols = shape[0], int(np.prod(shape[1:]))
    draw = jt.empty(rows, cols, dtype=jt.float64).normal_(0, 1, generator=jt.Generator().manual_seed(7))
    w = jt.empty(*shape, dtype=jt.float64, requires_grad=True)
    out = init.orthogonal_(w, gain=1.5, generator=jt.Generator().manual_seed(7))
    assert out is w and w.requires_grad and w.shape == shape
    flat = w.detach().numpy().reshape(rows, cols)
    np.testing.assert_allclose(flat, 1.5 * _haar_q(draw.numpy()), rtol=1e-10, atol=1e-12)
    gram = flat @ flat.T if rows <= cols else flat.T @ flat
    np.testing.assert_allclose(gram, 2.25 * np.eye(min(rows, cols)), atol=1e-12)


def test_orthogonal_float32_and_empty():
    w = init.orthogonal_(jt.empty(5, 3))
    assert w.dtype is jt.float32
    np.testing.assert_allclose(w.numpy().T @ w.numpy(), np.eye(3), atol=1e-5)
    assert init.orthogonal_(jt.empty(0, 3)).shape == (0, 3)


@pytest.mark.parametrize("shape", [(3, 5), (4, 2)])
def test_eye(shape):
    w = jt.empty(*shape, dtype=jt.float64, requires_grad=True)
    assert init.eye_(w) is w and w.requires_grad
    np.testing.assert_array_equal(w.detach().numpy(), np.eye(*shape))


def test_dirac_with_groups():
    # torch 2.13 prints w[:, :, 1] as two stacked 3x4 identities for dirac_(empty(6, 4, 3), 2).
    w = jt.empty(6, 4, 3, requires_grad=True)
    init.dirac_(w, 2)
    expected = np.zeros((6, 4, 3))
    expected[:, :, 1] = np.vstack([np.eye(3, 4), np.eye(3, 4)])
    np.testing.assert_array_equal(w.detach().numpy(), expected)


def test_dirac_preserves_conv_input():
    rng = np.random.default_rng(0)
    w = init.dirac_(jt.empty(3, 2, 3, 3, dtype=jt.float64))
    x = rng.normal(size=(1, 2, 5, 5))
    out = jt.nn.functional.conv2d(jt.tensor(x), w, padding=1).numpy()
    np.testing.assert_allclose(out[0, :2], x[0], rtol=1e-12)
    np.testing.assert_array_equal(out[0, 2], 0)
    w5 = init.dirac_(jt.empty(2, 2, 3, 1, 2)).numpy()
    assert w5[0, 0, 1, 0, 1] == w5[1, 1, 1, 0, 1] == 1 and w5.sum() == 2


@pytest.mark.parametrize("fn, shape, match", [
    (init.orthogonal_, (3,), "Only tensors with 2 or more dimensions are supported"),
    (init.eye_, (3, 3, 3), "Only tensors with 2 dimensions are supported"),
    (init.dirac_, (3, 3), r"Only tensors with 3, 4, or 5 dimensions are supported"),
    (lambda t: init.dirac_(t, 2), (3, 3, 3), "dim 0 must be divisible by groups"),
])
def test_errors(fn, shape, match):
    with pytest.raises(ValueError, match=match):
        fn(jt.empty(*shape))
