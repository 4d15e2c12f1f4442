"""A compiled convolution's weight-gradient product reads its windows where they lie
(`executor.read_windows_in_place`, `ops.linalg.window_sum_product`), and the windows' copy is dropped where every
reader reads them so: the step keeps eager's bits (the forward and both gradients are in tests/jit/test_conv50.py);
a copy that a product still reads stays, and where a kernel refuses at run time the writer makes the copy itself."""

import numpy as np
import pytest

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.codegen import gemm
from jitorch.jit import executor
from jitorch.ops import linalg

TAKES = gemm.for_products()


def _bits(t):
    a = t.detach().numpy() if isinstance(t, jt.Tensor) else t
    return np.ascontiguousarray(a).view(f"u{a.itemsize}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_copy_the_forward_product_reads_stays_beside_the_weight_gradient_in_place(dtype):
    # batch 16, stride 2: runs of 16 elements, which the columns kernel's 64-column tiles cross (the forward product
    # reads the copy) but whole vectors of either dtype divide (the weight gradient reads the windows)
    def step(x, w):
        y = F.conv2d(x, w, stride=2, padding=1)
        (y * y).sum().backward()
        return y, w.grad
    compiled = jt.compile(step)
    g = jt.Generator().manual_seed(0)
    dt = getattr(jt, dtype)
    x, w = jt.randn(16, 3, 64, 64, generator=g, dtype=dt), jt.randn(16, 3, 4, 4, generator=g, dtype=dt) * 0.2
    start = gemm.counters["windows"]
    got = compiled(x, w.clone().requires_grad_())
    assert gemm.counters["windows"] - start == TAKES
    want = step(x, w.clone().requires_grad_())
    for p, q in zip(got, want):
        assert np.array_equal(_bits(p), _bits(q))
    (entry,) = [e for e in compiled.cache.values() if e.executable is not None]
    steps = entry.executable.steps
    marked = [s for s in steps if isinstance(s, executor.EagerStep) and s.windows]
    assert len(marked) == TAKES
    for s in marked:
        (_, _, transposed, kept), = s.windows.values()
        assert transposed and kept  # (its operand, the copy's transpose, computed: the forward reads the copy)


@pytest.mark.parametrize("transposed", [False, True])
def test_the_writer_makes_the_copy_where_the_kernel_refuses_and_the_step_computes_none(monkeypatch, transposed):
    rng = np.random.default_rng(0)
    source = rng.standard_normal(64 * 8 * 26 * 26).astype(np.float32)  # (a batch-innermost (8, 26, 26, 64))
    shape, strides = (1, 8, 3, 3, 24, 24, 64), (0, 26 * 26 * 64, 26 * 64, 64, 26 * 64, 64, 1)
    windows = np.lib.stride_tricks.as_strided(source, shape, [s * 4 for s in strides])
    copied = np.ascontiguousarray(windows).reshape(1, 72, -1)
    a = rng.standard_normal((1, 16, copied.shape[-1] if transposed else 72)).astype(np.float32)
    operand = copied.transpose(0, 2, 1) if transposed else copied
    want = linalg.array_product(a, operand)
    monkeypatch.setattr(linalg, "WINDOW_SUM_KERNEL" if transposed else "WINDOW_KERNEL", None)
    out = np.full(want.shape, np.nan, np.float32)
    executor._windows_into(a, source, (shape, strides, 0), transposed, None, out)
    assert np.array_equal(_bits(out), _bits(want))
