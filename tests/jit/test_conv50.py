"""A compiled convolution's forward product reads its windows where they lie (`executor.read_windows_in_place`)
where the copy of them is a kernel's and the columns kernel serves the product: the step's values keep eager's
bits (forward and both gradients; the bias gradient, a reduction compiled otherwise, to rounding), at one and
two threads and on any target (the x86-64-v2 run keeps the copy's product). Since session 51 the weight
gradient's product reads them in place too and the copy is dropped (tests/jit/test_conv51.py)."""

import numpy as np
import pytest

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.codegen import gemm
from jitorch.jit import executor
from jitorch.ops import linalg

torch = pytest.importorskip("torch")

TAKES = gemm.for_products()


def _bits(t):
    a = t.detach().numpy()
    return np.ascontiguousarray(a).view(f"u{a.itemsize}")


def _step(kw):
    def step(x, w, b, gy):
        y = F.conv2d(x, w, b, **kw)
        (y * gy).sum().backward()
        return y, w.grad, b.grad, x.grad
    return step


# cnn's conv2 after conv1 and relu (its input conv1's batch-innermost product, biased and rectified by a kernel:
# one run of whole output rows) and dcgan's discriminator input layer (padded: a buffer of zeros the input is
# written into; stride 2)
CASES = [((16, 1, 28, 28), (16, 8, 3, 3), {}, (8, 1, 3, 3)),
         ((64, 3, 32, 32), (64, 3, 4, 4), {"stride": 2, "padding": 1}, None)]


def _before(x, w0):
    """cnn's first layer (``w0``: its weight), or nothing."""
    return x if w0 is None else F.relu(F.conv2d(x, w0))


@pytest.mark.parametrize("dtype, threads", [("float32", 1), ("float64", 1), ("float32", 2)])
@pytest.mark.parametrize("case", CASES, ids=["cnn_conv2", "dcgan_d1"])
def test_a_compiled_step_reading_windows_in_place_keeps_eagers_bits(dtype, case, threads):
    xshape, wshape, kw, first = case
    w0 = None if first is None else jt.randn(*first, generator=jt.Generator().manual_seed(7),
                                             dtype=getattr(jt, dtype)) * 0.3

    def model_step(x, w, b, gy):
        y = F.conv2d(_before(x, w0), w, b, **kw)
        (y * gy).sum().backward()
        return y, w.grad, b.grad, x.grad
    compiled = jt.compile(model_step)
    saved = jt.get_num_threads()
    jt.set_num_threads(threads)
    try:
        for seed in (0, 1):
            g = jt.Generator().manual_seed(seed)
            dt = getattr(jt, dtype)
            x, w = jt.randn(*xshape, generator=g, dtype=dt), jt.randn(*wshape, generator=g, dtype=dt) * 0.2
            b = jt.randn(wshape[0], generator=g, dtype=dt)
            gy = jt.randn(*F.conv2d(_before(x, w0), w, b, **kw).shape, generator=g, dtype=dt)
            # (the input's gradient where it is the convolution's own: cnn's first layer's would add its own)
            leaves = lambda: [t.clone().requires_grad_(first is None or t is not x) for t in (x, w, b)]  # noqa: E731
            start = gemm.counters["windows"]
            got = compiled(*leaves(), gy)
            assert gemm.counters["windows"] - start == 2 * TAKES  # (the forward and the weight gradient)
            want = model_step(*leaves(), gy)
            for p, q in zip(got[:2] + got[3:], want[:2] + want[3:]):
                assert (p is None) == (q is None) == (first is not None and p is got[3])
                assert p is None or np.array_equal(_bits(p), _bits(q))
            scale = np.abs(want[2].numpy()).max() * (1e-5 if dtype == "float32" else 1e-12)  # (sums over windows)
            np.testing.assert_allclose(got[2].numpy(), want[2].numpy(), rtol=0, atol=scale)
            ty = torch.nn.functional.conv2d(*(torch.from_numpy(t.numpy()) for t in (_before(x, w0), w, b)), **kw)
            tol = 2e-4 if dtype == "float32" else 1e-11
            np.testing.assert_allclose(got[0].numpy(), ty.numpy(), rtol=tol, atol=tol)
    finally:
        jt.set_num_threads(saved)


def test_the_product_reads_the_copy_where_the_kernel_refuses_the_windows(monkeypatch):
    rng = np.random.default_rng(0)
    source = rng.standard_normal(64 * 8 * 26 * 26).astype(np.float32)  # (a batch-innermost (8, 26, 26, 64))
    shape, strides = (1, 8, 3, 3, 24, 24, 64), (0, 26 * 26 * 64, 26 * 64, 64, 26 * 64, 64, 1)
    windows = np.lib.stride_tricks.as_strided(source, shape, [s * 4 for s in strides])
    copied = np.ascontiguousarray(windows).reshape(1, 72, -1)
    a = rng.standard_normal((1, 16, 72)).astype(np.float32)
    want = linalg.array_product(a, copied)
    monkeypatch.setattr(linalg, "WINDOW_KERNEL", None)
    out = np.full((1, 16, copied.shape[-1]), np.nan, np.float32)
    executor._windows_into(a, source, (shape, strides, 0), False, copied, out)
    assert np.array_equal(out, want)


def test_the_windows_copy_is_dropped_where_both_products_read_them_in_place():
    # (cnn's conv2 step: the forward and the weight gradient's products' windows operands noted on their steps,
    # the copy kernel gone)
    w0 = jt.randn(8, 1, 3, 3)
    compiled = jt.compile(lambda x, w, gy: _step({})(_before(x, w0), w, jt.zeros(16), gy)[0])
    x, w = jt.randn(16, 1, 28, 28), jt.randn(16, 8, 3, 3).requires_grad_()
    compiled(x, w, jt.randn(16, 16, 24, 24))
    (entry,) = [e for e in compiled.cache.values() if e.executable is not None]
    steps = entry.executable.steps
    marked = [s for s in steps if isinstance(s, executor.EagerStep) and s.windows]
    assert len(marked) == 2 * TAKES
    for step in marked:
        (operand,) = step.windows
        (source, _, transposed, kept), = step.windows.values()
        assert transposed == (step is marked[-1]) and not kept
        assert source in step.reads() and operand not in step.reads()
        # (neither the copy, the forward's operand, nor its transpose, the weight gradient's, is computed)
        assert not any(operand in (s.outputs if type(s) is executor.KernelStep else s.writes()) for s in steps)
