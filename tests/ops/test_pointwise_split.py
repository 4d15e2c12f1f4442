"""Large eager pointwise ops split across two threads (`pointwise_base.split_ufunc`, `runtime.ufunc_parts`):
the one-thread bits, torch's values, and NumPy's own call wherever operands overlap or broadcast."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.runtime import threads, ufunc_parts

SHAPE = (12, 64, 172)  # 132,096 elements: just over the threshold


@pytest.fixture
def threads_to(monkeypatch):
    monkeypatch.setattr(ufunc_parts, "BACKOFF", 0)  # every large call asks the team, even on a loaded machine
    monkeypatch.setitem(ufunc_parts._backoff, "calls", 0)

    def to(n):
        monkeypatch.setitem(threads._settings, "threads", n)
    return to


def _calls(x, y):
    z = x.clone()
    z.mul_(y)
    z.add_(1.5)
    w = x.clone()
    w -= y
    return [x + y, x * y, x - 2, 2.5 * x, x / y, x > y, -x, x.abs(), x.exp(), x.tanh(), x.sqrt(), z, w]


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
def test_split_ops_give_one_threads_bits_and_torchs_values(threads_to, dtype):
    assert np.prod(SHAPE) >= ufunc_parts.SPLIT_MIN
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(SHAPE) * 3, rng.standard_normal(SHAPE)
    x, y = jt.tensor(a, dtype=dtype), jt.tensor(b, dtype=dtype)
    threads_to(2)
    forks = threads.counters["forks"]
    two = _calls(x, y)
    assert threads.counters["forks"] - forks == len(two) + 1  # every op split (z: two in-place ops)
    threads_to(1)
    forks = threads.counters["forks"]
    one = _calls(x, y)
    assert threads.counters["forks"] == forks
    torch_dtype = torch.float32 if dtype is jt.float32 else torch.float64
    tx, ty = torch.tensor(a, dtype=torch_dtype), torch.tensor(b, dtype=torch_dtype)
    want = _calls(tx, ty)
    for got, same, expected in zip(two, one, want):
        assert got.dtype == same.dtype and got.shape == same.shape == tuple(expected.shape)
        assert got.numpy().tobytes() == same.numpy().tobytes()
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6, equal_nan=True)


def test_in_place_ops_on_overlapping_operands(threads_to):
    threads_to(2)
    a = np.random.default_rng(1).standard_normal(ufunc_parts.SPLIT_MIN * 2 + 1).astype(np.float32)
    x, t = jt.tensor(a), torch.tensor(a)
    with pytest.raises(RuntimeError, match="refer to a single memory location"):  # partly: refused, as torch
        x[1:] += x[:-1]
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        t[1:] += t[:-1]
    assert x.numpy().tobytes() == a.tobytes()  # nothing written
    forks = threads.counters["forks"]
    x.mul_(x)  # element for element: splits
    t.mul_(t)
    assert threads.counters["forks"] == forks + 1
    assert x.numpy().tobytes() == t.numpy().tobytes()


def test_broadcast_and_strided_operands_take_numpys_call(threads_to):
    """Broadcast operands and ones that do not fill their memory densely take NumPy's call; a transposed (dense)
    operand splits over its memory order (`pointwise_base._split_in_order`)."""
    threads_to(2)
    a = np.random.default_rng(2).standard_normal((256, 512)).astype(np.float32)
    x = jt.tensor(a)
    row = jt.tensor(a[0])
    forks = threads.counters["forks"]
    sums = [x + row, x[:, ::2] + x[:, 1::2]]
    assert threads.counters["forks"] == forks
    sums.append(x.t() * 2.0)
    assert threads.counters["forks"] == forks + 1
    for got, want in zip(sums, [a + a[0], a[:, ::2] + a[:, 1::2], a.T * np.float32(2.0)]):
        assert got.numpy().tobytes() == np.ascontiguousarray(want).tobytes()


def test_a_split_result_records_its_backward(threads_to):
    threads_to(2)
    x = jt.tensor(np.linspace(-2, 2, ufunc_parts.SPLIT_MIN, dtype=np.float32), requires_grad=True)
    y = (x * x).exp()
    assert y.grad_fn is not None
    y.sum().backward()
    t = torch.tensor(x.detach().numpy(), requires_grad=True)
    (t * t).exp().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", [jt.float32, jt.int32])
def test_the_general_paths_kernels_split_too(threads_to, dtype):
    """The ops' CPU kernels (autograd rules' ``grad * other``, traced-then-eager calls, any call the shortcuts
    refuse) split their large ufunc calls: the one-thread bits, the dtype NumPy resolves (bool for ``>``)."""
    from tests.support import general_path
    rng = np.random.default_rng(4)
    x, y = (jt.tensor(rng.standard_normal(SHAPE) * 3, dtype=dtype) for _ in range(2))
    results = {}
    for n in (2, 1):
        threads_to(n)
        forks = threads.counters["forks"]
        with general_path():
            got = [x + y, x * y, x * 2, x > y, -x, x.add(y, alpha=2)]
        results[n] = ([t.dtype for t in got], [t.numpy().tobytes() for t in got], threads.counters["forks"] - forks)
    assert results[2][:2] == results[1][:2]
    assert results[1][2] == 0 and results[2][2] == 5  # (add with alpha 2 is two NumPy calls in its formula)
