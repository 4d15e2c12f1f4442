"""clip_grad_norm_ on the gradients' NumPy arrays (`clip_grad._numpy_arrays`): the same total norm and
clipped gradients bit for bit as through jitorch's ops (which test_module_clip_grad compares with NumPy),
but the 2-norm, whose sums of squares a generated kernel takes in float64 (compared with the ops' within
float tolerance, and with torch's), the same version counts, and the ops' path while a profiler or a trace
is on, or for other tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import jitorch as jt
from jitorch.nn.utils import clip_grad
from jitorch.nn.utils import clip_grad_norm_

SHAPES = [(30, 40), (50,), (2, 3, 2), (), (0, 3)]


def _params(dtype, transposed=False):
    rng = np.random.default_rng(1)
    params = [jt.zeros(s, dtype=dtype, requires_grad=True) for s in SHAPES]
    for p in params:
        p.grad = jt.tensor(rng.standard_normal(p.shape) * 3, dtype=dtype)
    if transposed:
        params[0].grad = jt.tensor(rng.standard_normal((40, 30)), dtype=dtype).t()
    return params


def _clip(params, allow, monkeypatch, *args):
    """clip_grad_norm_ with the calls of `_numpy_arrays` counted (and refused unless ``allow``)."""
    calls = []
    numpy_arrays = clip_grad._numpy_arrays

    def spy(tensors, written=False):
        arrays = numpy_arrays(tensors, written) if allow else None
        calls.append(arrays is not None)
        return arrays
    with monkeypatch.context() as m:
        m.setattr(clip_grad, "_numpy_arrays", spy)
        total = clip_grad_norm_(params, *args)
    return total, calls


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.5, 0.5])
@pytest.mark.parametrize("max_norm", [1.0, 1e9])
@pytest.mark.parametrize("transposed", [False, True])
def test_numpy_clip_equals_ops_bit_for_bit(monkeypatch, dtype, norm_type, max_norm, transposed):
    fast, slow = _params(dtype, transposed), _params(dtype, transposed)
    fast_total, fast_calls = _clip(fast, True, monkeypatch, max_norm, norm_type)
    slow_total, slow_calls = _clip(slow, False, monkeypatch, max_norm, norm_type)
    # the norms on the arrays; the scaling too unless a gradient is not contiguous
    assert fast_calls == [True, not transposed] and slow_calls == [False, False]
    assert fast_total.dtype == slow_total.dtype == dtype and fast_total.shape == ()
    if norm_type == 2.0:  # (float64 sums of squares in the kernel: within a rounding or two of the op's)
        tolerance = dict(rtol=1e-6 if dtype is jt.float32 else 1e-14)
        np.testing.assert_allclose(fast_total.numpy(), slow_total.numpy(), **tolerance)
    else:
        assert fast_total.numpy().tobytes() == slow_total.numpy().tobytes()
    for p, q in zip(fast, slow):
        if norm_type == 2.0:
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), **tolerance)
        else:
            assert p.grad.numpy().tobytes() == q.grad.numpy().tobytes()
        assert p.grad._version == q.grad._version == 1


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_two_norm_by_the_kernel_matches_torch(dtype):
    """All gradients' squares in one kernel call (a gradient of more than one block, a transposed one, an
    empty one): torch's total norm and clipped gradients within float tolerance; a sum of squares past
    float32's range an infinite float32 norm, as torch's, and a NaN a NaN."""
    import torch
    from jitorch.codegen import foreach
    assert foreach.BLOCK < 150000
    rng = np.random.default_rng(3)
    shapes = [(150000,), (30, 40), (), (0, 3), (7, 9)]
    values = [np.asarray(rng.standard_normal(s) * 3, dtype) for s in shapes]  # (0-d too: NumPy 1.26 promotes)
    values[-1] = np.ascontiguousarray(values[-1].T).T  # (read as laid out)
    tolerance = dict(rtol=2e-6, atol=1e-7) if dtype == "float32" else dict(rtol=1e-13, atol=1e-15)
    for scale in (1.0, 1e20, math.nan):
        values[1][0, 0] = scale
        ours = [jt.zeros(v.shape, dtype=getattr(jt, dtype), requires_grad=True) for v in values]
        theirs = [torch.zeros(v.shape, dtype=getattr(torch, dtype), requires_grad=True) for v in values]
        for p, q, v in zip(ours, theirs, values):
            p.grad, q.grad = jt.tensor(v), torch.tensor(v)
        total, expected = clip_grad_norm_(ours, 1.0), torch.nn.utils.clip_grad_norm_(theirs, 1.0)
        np.testing.assert_allclose(total.numpy(), expected.numpy(), **tolerance)
        assert (scale == 1e20 and dtype == "float32") == bool(jt.isinf(total))
        for p, q in zip(ours, theirs):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), **tolerance)


@pytest.mark.parametrize("norm_type", [math.inf, 0.0, -1.0])
def test_other_orders_take_the_ops(monkeypatch, norm_type):
    params = _params(jt.float32)[:4]
    total, calls = _clip(params, True, monkeypatch, 1.0, norm_type)
    norms = np.array([np.linalg.norm(p.grad.numpy().ravel(), norm_type) for p in _params(jt.float32)[:4]])
    expected = np.linalg.norm(norms, norm_type)  # (the norm of the gradients' norms, as torch's)
    np.testing.assert_allclose(float(total), expected, rtol=1e-5)
    assert calls == [True]  # (the scaling's: the norms never asked)


def test_ops_under_profiler_trace_and_mixed_dtypes(monkeypatch):
    params = _params(jt.float32)
    with jt.profiler.profile():
        _, calls = _clip(params, True, monkeypatch, 1.0)
    assert calls == [False, False]
    mixed = _params(jt.float32)
    mixed[1].grad_dtype = None  # (torch's way to let a parameter take a gradient of another dtype)
    mixed[1].grad = mixed[1].grad.double()
    _, calls = _clip(mixed, True, monkeypatch, 1.0)
    assert calls == [False, False]

    def step(g):
        w = jt.zeros(3, requires_grad=True)
        w.grad = g
        return clip_grad_norm_([w], 1.0)
    with monkeypatch.context() as m:
        traced = []
        numpy_arrays = clip_grad._numpy_arrays
        m.setattr(clip_grad, "_numpy_arrays", lambda t, written=False: traced.append(numpy_arrays(t, written)))
        total = jt.compile(step, fullgraph=True)(jt.tensor([3.0, 4.0, 0.0]))
    assert traced == [None, None]
    assert float(total) == pytest.approx(5.0)


def test_ops_for_cuda_gradients(monkeypatch):
    """On CUDA gradients (the fake device in host memory) the ops clip, as on the CPU."""
    from jitorch.backends.cuda.fake import FakeBackend
    from jitorch.runtime.cuda_backend import use_backend
    cpu = _params(jt.float32)[:3]
    want, _ = _clip(cpu, True, monkeypatch, 1.0)
    with use_backend(FakeBackend()):
        params = [p.detach().to("cuda").requires_grad_() for p in _params(jt.float32)[:3]]
        for p, q in zip(params, _params(jt.float32)[:3]):
            p.grad = q.grad.to("cuda")
        total, calls = _clip(params, True, monkeypatch, 1.0)
        assert calls == [False, False] and total.device.type == "cuda"
        np.testing.assert_allclose(float(total), float(want), rtol=1e-6)
        for p, q in zip(params, cpu):
            np.testing.assert_allclose(p.grad.cpu().numpy(), q.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("bad", [math.nan, -math.nan, math.inf])
def test_numpy_clip_of_nonfinite_gradients_equals_ops(monkeypatch, bad):
    fast, slow = _params(jt.float32), _params(jt.float32)
    for params in (fast, slow):
        params[0].grad[1, 2] = bad
    fast_total, fast_calls = _clip(fast, True, monkeypatch, 1.0)
    slow_total, _ = _clip(slow, False, monkeypatch, 1.0)
    assert fast_calls == [True, True]
    assert fast_total.numpy().tobytes() == slow_total.numpy().tobytes()
    for p, q in zip(fast, slow):
        assert p.grad.numpy().tobytes() == q.grad.numpy().tobytes()
