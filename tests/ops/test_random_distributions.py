"""cauchy_, log_normal_, geometric_, poisson and binomial: torch's errors, dtypes and gradients, and samples of
the right distribution (checked by robust statistics with a fixed seed)."""

import numpy as np
import pytest
import torch

import jitorch as jt

N = 20000


@pytest.fixture(autouse=True)
def _seeded():
    jt.manual_seed(0)


def test_cauchy_samples_have_its_median_and_quartiles():
    x = jt.empty(N).cauchy_(2.0, 3.0).numpy()
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    assert abs(med - 2.0) < 0.15 and abs((q3 - q1) / 2 - 3.0) < 0.2  # the half interquartile range is sigma


def test_log_normal_samples_have_a_normal_log():
    x = jt.empty(N, dtype=jt.float64).log_normal_(1.0, 0.5)
    logs = np.log(x.numpy())
    assert x.dtype is jt.float64 and abs(logs.mean() - 1.0) < 0.02 and abs(logs.std() - 0.5) < 0.02


def test_geometric_counts_trials_to_the_first_success_in_the_tensors_dtype():
    x = jt.empty(N, dtype=jt.int32).geometric_(0.25)
    values = x.numpy()
    assert x.dtype is jt.int32 and values.min() >= 1 and abs(values.mean() - 4.0) < 0.1


def test_poisson_keeps_the_rates_dtype_and_mean():
    rates = jt.full((N,), 3.5, dtype=jt.float16)
    x = jt.poisson(rates)
    assert x.dtype is jt.float16 and abs(x.float().numpy().mean() - 3.5) < 0.05
    assert jt.poisson(jt.tensor([0.0, float("inf")])).tolist() == [0.0, float("inf")]


def test_binomial_counts_successes_clipping_the_probability():
    x = jt.binomial(jt.full((N,), 10.0), jt.tensor(0.3).expand(N))
    assert 0 <= x.numpy().min() and x.numpy().max() <= 10 and abs(x.numpy().mean() - 3.0) < 0.05
    edge = jt.binomial(jt.tensor([5.0, 3.0, 4.0, -2.0]), jt.tensor([float("nan"), 1.5, -0.5, 0.5]))
    want = torch.binomial(torch.tensor([5.0, 3.0, 4.0, -2.0]), torch.tensor([float("nan"), 1.5, -0.5, 0.5]))
    np.testing.assert_array_equal(edge.numpy(), want.numpy())


ERRORS = [
    ("cauchy_ sigma", lambda m: m.zeros(3).cauchy_(0, -1)),
    ("cauchy_ integers", lambda m: m.zeros(3, dtype=m.long).cauchy_()),
    ("log_normal_ std", lambda m: m.zeros(3).log_normal_(1, -2)),
    ("log_normal_ integers", lambda m: m.zeros(3, dtype=m.long).log_normal_()),
    ("geometric_ p", lambda m: m.zeros(3).geometric_(1.5)),
    ("geometric_ p=0", lambda m: m.zeros(3).geometric_(0)),
    ("geometric_ bool", lambda m: m.zeros(3, dtype=m.bool).geometric_(0.5)),
    ("poisson integers", lambda m: m.poisson(m.tensor([1, 2]))),
    ("poisson negative", lambda m: m.poisson(m.tensor([-1.0]))),
    ("poisson nan", lambda m: m.poisson(m.tensor([float("nan")]))),
    ("binomial integer count", lambda m: m.binomial(m.tensor([5]), m.tensor([0.5]))),
    ("binomial dtypes", lambda m: m.binomial(m.tensor([5.0]), m.tensor([0.5], dtype=m.float64))),
]


@pytest.mark.parametrize("name", [name for name, _ in ERRORS])
def test_bad_arguments_raise_torchs_error(name):
    call = dict(ERRORS)[name]
    with pytest.raises(Exception) as want:
        call(torch)
    with pytest.raises(type(want.value)) as got:
        call(jt)
    assert str(got.value) == str(want.value)


def test_samples_carry_a_zero_gradient_to_their_parameters_as_torchs():
    rates = jt.full((4,), 2.0, requires_grad=True)
    jt.poisson(rates).sum().backward()
    assert rates.grad.tolist() == [0.0] * 4
    x = jt.ones(3, requires_grad=True) * 2
    x.cauchy_()
    assert x.requires_grad and x.grad_fn is not None
