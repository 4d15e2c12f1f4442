"""jitorch.fft's real-valued helpers against torch.fft."""

import numpy as np
import pytest
import torch

import jitorch as jt

CALLS = [
    lambda m: m.fft.fftfreq(5), lambda m: m.fft.fftfreq(4, d=0.5, dtype=m.float64), lambda m: m.fft.fftfreq(1),
    lambda m: m.fft.rfftfreq(5), lambda m: m.fft.rfftfreq(6, 0.1),
    lambda m: m.fft.fftshift(m.arange(10).reshape(2, 5)), lambda m: m.fft.ifftshift(m.arange(10).reshape(2, 5)),
    lambda m: m.fft.fftshift(m.arange(10.0).reshape(2, 5), dim=1), lambda m: m.fft.ifftshift(m.arange(5), dim=(0,)),
]


@pytest.mark.parametrize("k", range(len(CALLS)))
def test_matches_torch(k):
    got, want = CALLS[k](jt), CALLS[k](torch)
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1] and tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy())


def test_ifftshift_undoes_fftshift_and_the_shift_differentiates():
    x = jt.arange(7.0, requires_grad=True)
    y = jt.fft.ifftshift(jt.fft.fftshift(x))
    assert y.tolist() == x.tolist()
    (jt.fft.fftshift(x) * jt.arange(7.0)).sum().backward()
    assert x.grad.tolist() == torch.fft.ifftshift(torch.arange(7.0)).tolist()


def test_a_0d_shift_is_torchs_error():
    with pytest.raises(RuntimeError, match="`shifts` required"):
        jt.fft.fftshift(jt.tensor(3.0))


@pytest.mark.parametrize("name", ["fftfreq", "rfftfreq"])
def test_frequencies_of_an_integer_dtype_are_torchs_error(name):
    """torch refuses an integer or bool ``dtype``; jitorch divided integers into floats of another dtype."""
    for dtype in (jt.int64, jt.bool):
        with pytest.raises(RuntimeError, match=f"^{name} requires a floating point or complex dtype$"):
            getattr(jt.fft, name)(4, dtype=dtype)
    assert getattr(jt.fft, name)(4, dtype=jt.float16).dtype is jt.float16
