"""A row reduction has its bits whether its summand is read from memory, computed in the kernel, or computed and
written by the kernel too: the input side's outputs are written in the row's second pass, so each reduction's loop
is the one it has without them (a layer norm of ``a + b`` that also wrote ``a + b`` summed its rows in another
order: jitorch.compile(model) with an eager backward then gave other gradients than the whole compiled step)."""

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F


def _operands(dtype, cols, seed=0):
    rng = np.random.default_rng(seed)
    return [jt.tensor(rng.standard_normal(shape).astype(dtype)) for shape in ((64, cols), (64, cols), (cols,), (cols,))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cols", [32, 128, 48])
def test_a_layer_norm_has_its_bits_whether_its_input_is_read_computed_or_computed_and_written(dtype, cols):
    a, b, w, bias = _operands(dtype, cols)
    computed = jt.compile(lambda a, b, w, bias: F.layer_norm(a + b, (cols,), w, bias))(a, b, w, bias)
    written, x = jt.compile(lambda a, b, w, bias: (F.layer_norm(a + b, (cols,), w, bias), a + b))(a, b, w, bias)
    read = jt.compile(lambda x, w, bias: F.layer_norm(x, (cols,), w, bias))(x, w, bias)
    assert computed.numpy().tobytes() == read.numpy().tobytes() == written.numpy().tobytes()
    np.testing.assert_array_equal(x.numpy(), (a + b).numpy())
    expected = torch.nn.functional.layer_norm(torch.from_numpy(x.numpy()), (cols,), torch.from_numpy(w.numpy()),
                                              torch.from_numpy(bias.numpy()))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(written.numpy(), expected.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cols", [32, 100, 1024])
def test_a_row_sum_has_its_bits_whether_its_summand_is_computed_or_also_written(dtype, cols):
    a, b, _, _ = _operands(dtype, cols, seed=1)
    computed = jt.compile(lambda a, b: (a * b).sum(-1))(a, b)
    total, product = jt.compile(lambda a, b: ((a * b).sum(-1), a * b))(a, b)
    read = jt.compile(lambda p: p.sum(-1))(product)
    assert computed.numpy().tobytes() == total.numpy().tobytes() == read.numpy().tobytes()
    np.testing.assert_array_equal(product.numpy(), a.numpy() * b.numpy())
    np.testing.assert_allclose(total.numpy(), (a.numpy() * b.numpy()).sum(-1), rtol=1e-5 if dtype == np.float32
                               else 1e-12, atol=1e-4 if dtype == np.float32 else 1e-10)
