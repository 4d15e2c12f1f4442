"""Fractional max pooling (jitorch/nn/fractional.py) against torch given the same ``_random_samples``: values,
indices and gradients bit for bit, 2-D and 3-D, batched or not, output sizes or ratios, torch's errors, the
modules, jitorch's own draws, and compiled == eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as JF
from tests.nn.torch_oracle import check, normal, uniform, same_error


CASES = [  # (nd, input shape, kernel_size, output_size, output_ratio)
    (2, (2, 3, 9, 11), 3, (4, 5), None), (2, (3, 7, 7), (2, 3), (5, 3), None), (2, (1, 2, 6, 6), 2, (5, 5), None),
    (2, (1, 1, 5, 5), 2, (1, 1), None), (2, (2, 2, 8, 9), 2, None, (0.5, 0.5)),
    (2, (1, 2, 7, 10), (2, 1), None, (0.6, 0.45)),
    (3, (2, 2, 6, 7, 8), 2, (3, 4, 5), None), (3, (2, 5, 6, 7), (2, 1, 3), (3, 5, 3), None),
    (3, (1, 1, 5, 6, 7), 2, None, 0.5)]


def _lib(F):
    return torch if F.__name__.startswith("torch") else jt


def _samples(shape, nd, dtype):
    batch = 1 if len(shape) == nd + 1 else shape[0]
    return uniform((batch, shape[-nd - 1], nd)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nd,shape,kernel,output,ratio", CASES)
def test_fractional_max_pool_matches_torch_bit_for_bit(dtype, nd, shape, kernel, output, ratio):
    """Same windows (torch's steps from the samples, in the input's precision), so the same maxima, indices and
    gradient, exactly."""
    samples = _samples(shape, nd, dtype)

    def fn(F, x):
        pool = getattr(F, f"fractional_max_pool{nd}d")
        return pool(x, kernel, output_size=output, output_ratio=ratio, return_indices=True,
                    _random_samples=_lib(F).tensor(samples))

    out, index = check(fn, normal(shape).astype(dtype), atol=0, rtol=0)
    assert index.dtype == jt.int64


def test_with_indices_forms_and_the_modules_match_torch():
    x = normal((2, 3, 7, 8)).astype(np.float32)
    samples = _samples(x.shape, 2, np.float32)
    want = torch.nn.functional.fractional_max_pool2d_with_indices(torch.tensor(x), 3, (4, 4),
                                                                  _random_samples=torch.tensor(samples))
    got = JF.fractional_max_pool2d_with_indices(jt.tensor(x), 3, (4, 4), _random_samples=jt.tensor(samples))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    module = jt.nn.FractionalMaxPool2d(3, output_ratio=0.5, _random_samples=jt.tensor(samples))
    reference = torch.nn.FractionalMaxPool2d(3, output_ratio=0.5, _random_samples=torch.tensor(samples))
    np.testing.assert_array_equal(module(jt.tensor(x)).numpy(), reference(torch.tensor(x)).numpy())
    assert list(module.state_dict()) == list(reference.state_dict()) == ["_random_samples"]
    x3 = normal((1, 2, 5, 6, 7)).astype(np.float64)
    samples3 = _samples(x3.shape, 3, np.float64)
    got3 = jt.nn.FractionalMaxPool3d(2, output_size=(3, 4, 5), return_indices=True,
                                     _random_samples=jt.tensor(samples3))(jt.tensor(x3))
    want3 = torch.nn.FractionalMaxPool3d(2, output_size=(3, 4, 5), return_indices=True,
                                         _random_samples=torch.tensor(samples3))(torch.tensor(x3))
    for g, w in zip(got3, want3):
        np.testing.assert_array_equal(g.numpy(), w.numpy())


def test_without_samples_jitorchs_generator_draws_them_reproducibly():
    x = jt.tensor(normal((2, 3, 9, 9)).astype(np.float32))
    jt.manual_seed(5)
    first = JF.fractional_max_pool2d(x, 2, output_size=(4, 4))
    jt.manual_seed(5)
    again = JF.fractional_max_pool2d(x, 2, output_size=(4, 4))
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    jt.manual_seed(5)
    samples = jt.rand(2, 3, 2)
    np.testing.assert_array_equal(JF.fractional_max_pool2d(x, 2, output_size=(4, 4), _random_samples=samples).numpy(),
                                  first.numpy())


def test_fractional_max_pool_compiles_to_one_graph_equal_to_eager():
    """Values and gradients as eager's and torch's; the output is one gather of the maxima's places, so its
    backward scatters only the outputs' gradients."""
    x = normal((2, 2, 7, 9)).astype(np.float32)
    samples = _samples(x.shape, 2, np.float32)
    check(lambda F, x: F.fractional_max_pool2d(x, 2, output_size=(4, 5), _random_samples=_lib(F).tensor(samples)), x,
          compiled=True)
    fn = jt.compile(lambda x, s: JF.fractional_max_pool2d(x, 2, output_size=(4, 5), _random_samples=s),
                    fullgraph=True)
    lowered = fn.lower(jt.tensor(x), jt.tensor(samples))
    # the windows' candidates, the maxima's places among them, then the output: a gather of just those places
    assert [node.op.name for node in lowered.graph.nodes].count("gather") == 3 and lowered.kernels


X2, X3 = np.zeros((2, 3, 7, 8), np.float32), np.zeros((2, 3, 5, 6, 7), np.float32)


@pytest.mark.parametrize("fn,x,samples", [
    (lambda F, x, s: F.fractional_max_pool2d(x, 3), X2, None),
    (lambda F, x, s: F.fractional_max_pool2d(x, 3, output_size=6), X2, None),
    (lambda F, x, s: F.fractional_max_pool2d(x, 3, (5, 6), _random_samples=s), X2, np.zeros((2, 3, 2))),
    (lambda F, x, s: F.fractional_max_pool2d(x, 3, (5, 6), _random_samples=s), X2, np.zeros((1, 3, 2), np.float32)),
    (lambda F, x, s: F.fractional_max_pool2d(x, 3, (5, 6), _random_samples=s), X2, np.zeros((2, 2, 2), np.float32)),
    (lambda F, x, s: F.fractional_max_pool2d(x, 3, (5, 6), _random_samples=s), X2, np.zeros((2, 3, 3), np.float32)),
    (lambda F, x, s: F.fractional_max_pool2d(x, 3, (5, 6), _random_samples=s), X2,
     np.zeros((2, 3, 2, 1), np.float32)),
    (lambda F, x, s: F.fractional_max_pool2d(x[:, :0], 3, (5, 6)), X2, None),
    (lambda F, x, s: F.fractional_max_pool2d(x, 3, (5, 6, 7)), X2, None),
    (lambda F, x, s: F.fractional_max_pool2d(x, (3, 3, 3), (5, 6)), X2, None),
    (lambda F, x, s: F.fractional_max_pool2d(x, 2, output_ratio=(0.5, 0.5, 0.5)), X2, None),
    (lambda F, x, s: F.fractional_max_pool2d(x, 2, output_ratio=0.5), X2, None),
    (lambda F, x, s: F.fractional_max_pool3d(x, 2, (3, 5, 5)), X3, None),
    (lambda F, x, s: F.fractional_max_pool2d(x[0, 0], 2, (3, 4), _random_samples=s), X2,
     np.zeros((1, 3, 2), np.float32)),
    (lambda F, x, s: F.fractional_max_pool3d(x, 2, (3, 5, 6)), X3, None),
    (lambda F, x, s: F.fractional_max_pool3d(x, 2, (3, 4, 5), _random_samples=s), X3,
     np.zeros((2, 3, 2), np.float32)),
    (lambda F, x, s: F.fractional_max_pool3d(x[:, :, :0], 2, (3, 4, 5)), X3, None),
    (lambda F, x, s: F.fractional_max_pool3d(x[0, 0], 2, (3, 4, 5), _random_samples=s), X3,
     np.zeros((2, 3, 3), np.float32))])
def test_fractional_max_pool_errors_as_torch(fn, x, samples):
    if samples is None:
        same_error(lambda F, x: fn(F, x, None), x)
    else:
        same_error(fn, x, samples)


def test_module_argument_errors_as_torch():
    for build in (lambda nn: nn.FractionalMaxPool2d(2), lambda nn: nn.FractionalMaxPool2d(2, 3, 0.5),
                  lambda nn: nn.FractionalMaxPool2d(2, output_ratio=1.5), lambda nn: nn.FractionalMaxPool3d(0, 2),
                  lambda nn: nn.FractionalMaxPool3d(2, output_ratio=(0.5, 0.5, 1.0))):
        with pytest.raises(ValueError) as want:
            build(torch.nn)
        with pytest.raises(ValueError) as got:
            build(jt.nn)
        assert str(got.value) == str(want.value)
