"""A convolution's large strided passes split across two threads (`views._pieces`: col2im's sums, the copy into
a padded buffer, the zeros under them): the one-thread bits, torch's values, and whole passes where no dim
splits into disjoint ranges of memory or a scatter's view overlaps itself."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.jit import executor
from jitorch.ops import views
from jitorch.runtime import copy_parts, threads


@pytest.fixture
def threads_to(monkeypatch):
    # NumPy's passes, as before the code generator loads (its gather kernels split rows themselves:
    # tests/codegen/test_windows.py)
    monkeypatch.setattr(views, "WINDOW_KERNEL", None)

    def to(n):
        monkeypatch.setitem(threads._settings, "threads", n)
    return to


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


def _conv_pair(lib, x, w, v):
    """A transposed convolution (col2im forward) and a strided, padded convolution's input gradient (its
    padded copy forward, col2im backward)."""
    x, w, v = (lib.tensor(a, requires_grad=True) for a in (x, w, v))
    y = lib.nn.functional.conv_transpose2d(x, w, stride=2, padding=1)
    z = lib.nn.functional.conv2d(y, v, stride=2, padding=1)
    z.square().sum().backward()
    return [t.detach().numpy() for t in (y, z, x.grad, w.grad, v.grad)]


def test_convolutions_split_their_strided_passes_and_keep_one_threads_bits(threads_to):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 64, 8, 8)).astype(np.float32)  # its padded copy: 32 x 18 x 18 x 32 elements
    w = rng.standard_normal((64, 32, 4, 4)).astype(np.float32) * 0.1
    v = rng.standard_normal((16, 32, 4, 4)).astype(np.float32) * 0.1
    threads_to(1)
    forks = threads.counters["forks"]
    one = _conv_pair(jt, x, w, v)
    assert threads.counters["forks"] == forks
    threads_to(2)
    parts = []
    real = threads.run_parts

    def counting(fn, args):
        parts.append(fn)
        return real(fn, args)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(threads, "run_parts", counting)
        two = _conv_pair(jt, x, w, v)
    # col2im: the transposed convolution's and the convolution's input gradient; scatters: the padded copy
    # of the convolution's input and the gradient of the transposed convolution's crop
    assert parts.count(views._add_windows) == 2 and parts.count(views._copy) == 2
    want = _conv_pair(torch, x, w, v)
    for a, b, c in zip(one, two, want):
        assert a.shape == b.shape == c.shape and _bits(a) == _bits(b)
        np.testing.assert_allclose(b, c, rtol=1e-4, atol=1e-5 * np.abs(c).max())  # (float32 sums of ~1e3)


def test_compiled_convolution_step_splits_zeros_and_col2im_in_its_arena(threads_to, monkeypatch):
    rng = np.random.default_rng(1)
    x = jt.tensor(rng.standard_normal((16, 64, 8, 8)).astype(np.float32))
    w = jt.tensor(rng.standard_normal((64, 32, 4, 4)).astype(np.float32))
    f = jt.compile(lambda x, w: jt.nn.functional.conv_transpose2d(x, w, stride=2, padding=1).tanh())
    threads_to(1)
    one = f(x, w).numpy()
    fills = []
    monkeypatch.setattr(views, "fill_split", lambda out, value: fills.append(out.size) or out.fill(value) or
                        views._pieces((out.size,), (1,), out.size))
    threads_to(2)
    forks = threads.counters["forks"]
    two = f(x, w).numpy()
    assert fills and threads.counters["forks"] > forks and executor._zeros_into.__module__ == executor.__name__
    assert _bits(one) == _bits(two)
    np.testing.assert_allclose(two, torch.nn.functional.conv_transpose2d(torch.tensor(x.numpy()), torch.tensor(
        w.numpy()), stride=2, padding=1).tanh().numpy(), rtol=1e-4, atol=1e-4)


def test_fill_and_copy_split_by_ranges(threads_to):
    threads_to(2)
    out = np.ones(views.SPLIT_MIN * 2 + 3, np.float32)
    forks = threads.counters["forks"]
    views.fill_split(out, 0)
    assert not out.any() and threads.counters["forks"] == forks + 1
    src = np.arange(out.size, dtype=np.float32)
    copy_parts.copy(out, src)
    assert np.array_equal(out, src) and threads.counters["forks"] == forks + 2
    views.fill_split(out[::2], 7)  # not contiguous: whole
    assert threads.counters["forks"] == forks + 2 and (out[::2] == 7).all() and np.array_equal(out[1::2], src[1::2])


def test_grouped_windows_split_by_group_and_views_without_a_disjoint_dim_run_whole(threads_to):
    rng = np.random.default_rng(2)
    # groups, kernel rows, kernel cols, channels per group, out rows, out cols, batch: windows overlap inside a
    # group; the groups lie apart
    size, stride = (2, 3, 3, 16, 16, 16, 32), (16 * 34 * 34 * 32, 34 * 32, 32, 34 * 34 * 32, 2 * 34 * 32, 2 * 32, 1)
    assert views._disjoint_dim(size, stride) == 0  # groups: the one dim whose stride exceeds the others' span
    assert views._disjoint_dim(size[1:], stride[1:]) == 2  # one group: its channels
    assert views._disjoint_dim((4, 4), (1, 2)) is None  # every dim overlaps the other's span
    src = rng.standard_normal(size).astype(np.float32)
    base = rng.standard_normal(2 * 16 * 34 * 34 * 32).astype(np.float32)
    results = []
    for n in (1, 2):
        threads_to(n)
        out = np.empty_like(base)
        views.as_strided_add_into(out, base, src, size, stride, 0)
        results.append(out)
    assert _bits(results[0]) == _bits(results[1])
    t = torch.tensor(base).as_strided(size, stride)  # torch's sums, through autograd's as_strided backward
    s = torch.zeros(base.size, requires_grad=True)
    s.as_strided(size, stride).backward(torch.tensor(src))
    np.testing.assert_allclose(results[1], base + s.grad.numpy(), rtol=1e-5, atol=1e-5)
    assert t.shape == size
    # an overlapping scatter runs whole, on the calling thread
    x = np.zeros(1 << 19, np.float32)
    forks = threads.counters["forks"]
    out = np.empty_like(x)
    views.as_strided_scatter_into(out, x, rng.standard_normal((1 << 18, 2)).astype(np.float32), (1 << 18, 2),
                                  (1, 1), 0)
    assert threads.counters["forks"] == forks + 1  # the copy of x split; the overlapping scatter did not
