"""Eager GELU through the compiled path's kernels of its composition (jitorch/codegen/flat.py,
jitorch/jit/eager_kernels.py): which calls take them, values and gradients against torch and against the NumPy
passes, the compiled function's bits, thread-count independence, and the code generator loaded only then."""

import numpy as np
import pytest

import jitorch as jt
from jitorch.codegen import flat
from jitorch.nn import functional as F
from tests.test_import import run_fresh

torch = pytest.importorskip("torch")

# relative to the largest magnitude, as the differential fuzzer compares (half types: their ops round each
# result, as eager's composition does, where torch's kernel rounds once)
TOL = {"float32": 1e-5, "float64": 1e-12, "float16": 1e-2, "bfloat16": 6e-2}
SHAPE = (8, 520)  # from GELU_KERNEL_MIN elements


@pytest.fixture
def calls(monkeypatch):
    """[kernel name] of the flat kernels run while the test runs."""
    seen = []
    call = flat.FlatKernel.__call__

    def counting(self, *arrays):
        seen.append(self.name.removeprefix("jitorch_eager_"))
        return call(self, *arrays)
    monkeypatch.setattr(flat.FlatKernel, "__call__", counting)
    return seen


def _array(shape, dtype, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 4).astype(dtype)


def _close(got, want, dtype):
    """``got`` (a jitorch tensor) within ``dtype``'s tolerance of ``want`` (a torch tensor)."""
    got, want = got.detach().float().numpy(), want.detach().float().numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL[dtype] * np.abs(want).max())


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_large_gelu_runs_the_kernels_forward_and_backward_within_tolerance_of_torch(calls, approximate, dtype):
    assert np.prod(SHAPE) >= F.GELU_KERNEL_MIN
    a, g = _array(SHAPE, "float32"), _array(SHAPE, "float32", seed=1)
    name = "gelu" if approximate == "none" else "gelu_tanh"
    x = jt.from_numpy(a).to(getattr(jt, dtype)).requires_grad_()
    y = F.gelu(x, approximate=approximate)
    y.backward(jt.from_numpy(g).to(x.dtype))
    assert calls == [f"{name}_{dtype}", f"{name}_backward_{dtype}"]
    assert y.grad_fn.name() == "_GeluBackward" and y.dtype is x.dtype and x.grad.dtype is x.dtype
    t = torch.from_numpy(a).to(getattr(torch, dtype)).requires_grad_()
    want = torch.nn.functional.gelu(t, approximate=approximate)
    want.backward(torch.from_numpy(g).to(t.dtype))
    _close(y, want, dtype)
    _close(x.grad, t.grad, dtype)
    with jt.no_grad():
        assert F.gelu(x, approximate=approximate).float().numpy().tobytes() == y.detach().float().numpy().tobytes()
    assert calls[2:] == [f"{name}_{dtype}"]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_kernels_give_the_compiled_functions_bits(calls, approximate, dtype):
    a, g = _array(SHAPE, dtype, seed=2), _array(SHAPE, dtype, seed=3)
    a.flat[:4] = [np.inf, -np.inf, np.nan, -0.0]

    def grad(x, g):
        x = x.detach().requires_grad_()
        return jt.autograd.grad(F.gelu(x, approximate=approximate), x, g)[0]
    y = F.gelu(jt.from_numpy(a), approximate=approximate)
    x = jt.from_numpy(a).requires_grad_()
    (gx,) = jt.autograd.grad(F.gelu(x, approximate=approximate), x, jt.from_numpy(g))
    assert len(calls) == 3
    compiled_y = jt.compile(lambda x: F.gelu(x, approximate=approximate))(jt.from_numpy(a))
    compiled_gx = jt.compile(grad)(jt.from_numpy(a), jt.from_numpy(g))
    assert len(calls) == 3  # (the compiled functions run their own kernels)
    assert y.numpy().tobytes() == compiled_y.numpy().tobytes()
    assert gx.numpy().tobytes() == compiled_gx.numpy().tobytes()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_kernels_are_within_a_few_ulps_of_the_numpy_passes(calls, monkeypatch, approximate, dtype):
    a, g = _array(SHAPE, dtype, seed=4), _array(SHAPE, dtype, seed=5)
    x = jt.from_numpy(a).requires_grad_()
    y = F.gelu(x, approximate=approximate)
    (gx,) = jt.autograd.grad(y, x, jt.from_numpy(g))
    monkeypatch.setattr(F, "GELU_KERNEL_MIN", a.size + 1)  # the NumPy passes (exact) or the composition's ops
    y0 = F.gelu(x, approximate=approximate)
    (gx0,) = jt.autograd.grad(y0, x, jt.from_numpy(g))
    assert len(calls) == 2
    eps = np.finfo(dtype).eps  # (values of magnitude 1 to 20)
    np.testing.assert_allclose(y.detach().numpy(), y0.detach().numpy(), rtol=4 * eps, atol=4 * eps)
    # (the tanh form's gradient has 1 - tanh(u) ** 2, which scales tanh's last bits up where tanh is near 1)
    np.testing.assert_allclose(gx.numpy(), gx0.numpy(), rtol=0, atol=TOL[dtype] * np.abs(gx0.numpy()).max())


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_values_do_not_depend_on_the_number_of_threads(calls, approximate):
    from jitorch.codegen import cpu
    from jitorch.runtime import threads
    a = _array(2 * cpu.PARALLEL_MIN_WORK + 37, "float32")
    g = _array(a.shape, "float32", seed=1)
    before = jt.get_num_threads()
    outs = []
    try:
        for n in (1, 2):
            jt.set_num_threads(n)
            forks = threads.counters["forks"]
            x = jt.from_numpy(a).requires_grad_()
            y = F.gelu(x, approximate=approximate)
            (gx,) = jt.autograd.grad(y, x, jt.from_numpy(g))
            outs.append((y.detach().numpy().tobytes(), gx.numpy().tobytes(), threads.counters["forks"] - forks))
    finally:
        jt.set_num_threads(before)
    assert len(calls) == 4
    assert outs[0][:2] == outs[1][:2]
    assert outs[0][2] == 0 and outs[1][2] == 2  # at two threads, forward and backward split


def test_below_the_threshold_and_other_calls_take_no_kernel(calls):
    n = F.GELU_KERNEL_MIN
    a = _array((2, n // 2), "float32")
    cases = [
        jt.from_numpy(a[:, :-1].copy()),  # one element short
        jt.from_numpy(a).t(),  # not contiguous
        jt.from_numpy(a[:, :-1].astype(np.float16)),  # a half type below the threshold: the composition
        jt.from_numpy(a.astype(np.float16)).t(),
    ]
    for x in cases:
        for approximate in ("none", "tanh"):
            want = torch.nn.functional.gelu(torch.from_numpy(x.numpy()).float(), approximate=approximate)
            _close(F.gelu(x, approximate=approximate), want, "float16" if x.dtype is jt.float16 else "float32")
    assert calls == []
    F.gelu(jt.from_numpy(a))  # exactly GELU_KERNEL_MIN elements
    assert calls == ["gelu_float32"]


def test_exact_gelu_below_the_threshold_keeps_the_compositions_bits(calls):
    a = _array((1, F.GELU_KERNEL_MIN - 1), "float32")
    x = jt.from_numpy(a).requires_grad_()
    y = F.gelu(x)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(F, "_gelu_shortcut", lambda input, unhooked: False)
        y0 = F.gelu(x)
    assert calls == [] and y.grad_fn.name() == "_GeluBackward" and y0.grad_fn.name() == "MulBackward0"
    assert y.detach().numpy().tobytes() == y0.detach().numpy().tobytes()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gradcheck_through_the_kernels(calls, monkeypatch, approximate):
    monkeypatch.setattr(F, "GELU_KERNEL_MIN", 8)
    x = jt.tensor(np.linspace(-6, 6, 24), dtype=jt.float64, requires_grad=True)
    assert jt.autograd.gradcheck(lambda x: F.gelu(x, approximate=approximate), (x,))
    assert f"gelu{'_tanh' * (approximate == 'tanh')}_backward_float64" in calls


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_double_backward_runs_the_compositions_rules_and_a_profiled_backward_the_kernel(calls, monkeypatch, approximate):
    monkeypatch.setattr(F, "GELU_KERNEL_MIN", 8)
    rng = np.random.default_rng(6)
    a, g = rng.standard_normal((4, 7)) * 3, rng.standard_normal((4, 7))
    x = jt.tensor(a, requires_grad=True)
    (gx,) = jt.autograd.grad(F.gelu(x, approximate=approximate), x, jt.tensor(g), create_graph=True)
    (second,) = jt.autograd.grad((gx * jt.tensor(g)).sum(), x)
    assert gx.grad_fn is not None and len(calls) == 1  # the forward's kernel; the backward records ops
    t = torch.tensor(a, requires_grad=True)
    (tgx,) = torch.autograd.grad(torch.nn.functional.gelu(t, approximate=approximate), t, torch.tensor(g),
                                 create_graph=True)
    (tsecond,) = torch.autograd.grad((tgx * torch.tensor(g)).sum(), t)
    _close(gx, tgx, "float64")
    np.testing.assert_allclose(second.numpy(), tsecond.numpy(), rtol=1e-10, atol=1e-12)
    F.gelu(x, approximate=approximate).backward(jt.tensor(g))
    unprofiled, x.grad = x.grad, None
    y = F.gelu(x, approximate=approximate)
    with jt.profiler.profile() as prof:
        y.backward(jt.tensor(g))
    # a profiled backward computes as an unprofiled one (session 47): the node's span, its kernel, no rules as ops
    keys = {e.key for e in prof.key_averages()}
    assert "autograd::engine::evaluate_function: _GeluBackward" in keys and "aten::mul" not in keys
    assert x.grad.numpy().tobytes() == unprofiled.numpy().tobytes() and calls[-2:] == calls[1:3]
    np.testing.assert_allclose(x.grad.numpy(), gx.detach().numpy(), rtol=1e-12, atol=1e-15)


def test_an_input_written_in_place_since_fails_the_kernels_backward_as_torchs(calls):
    for lib in (jt, torch):
        x = lib.ones(F.GELU_KERNEL_MIN, requires_grad=True) * 2
        y = lib.nn.functional.gelu(x)
        x.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
    assert calls == ["gelu_float32"]


def test_import_does_not_load_the_code_generator_until_a_large_gelu():
    out = run_fresh("""
        import sys
        import jitorch as jt
        F = jt.nn.functional
        loaded = lambda: sorted(m for m in ("llvmlite", "jitorch.codegen.cpu", "jitorch.jit.eager_kernels")
                                if m in sys.modules)
        print(loaded())
        F.gelu(jt.ones(F.GELU_KERNEL_MIN - 1))
        print(loaded())
        F.gelu(jt.ones(F.GELU_KERNEL_MIN))
        print(loaded())
    """)
    assert out.splitlines() == ["[]", "[]", "['jitorch.codegen.cpu', 'jitorch.jit.eager_kernels', 'llvmlite']"]
