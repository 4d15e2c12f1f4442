"""The gather kernels of col2im (`_as_strided_add`) and padded copies (`as_strided_scatter`): jitorch/codegen/windows.py.

Each output element gathers its shares in a stated order (its own value first, then the shares by memory dim,
outermost first, and a convolution's kernel positions row-major). The NumPy passes, which run where no kernel
is registered, add in the same order: the tests hold the two to the same bits, and convolutions to torch's
values and gradients (float32 and float64; eager and compiled), counting the kernel calls."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.codegen import windows
from jitorch.jit.executor import EagerStep
from jitorch.ops import views


DEFAULT_COPY_MIN = views.WINDOW_COPY_MIN_ELEMENTS


@pytest.fixture(autouse=True)
def _small_copies_gather_too(monkeypatch):
    """These tests check the gather kernels on small buffers: copies of every size take them here."""
    monkeypatch.setattr(views, "WINDOW_COPY_MIN_ELEMENTS", 0)


def test_a_copy_below_the_threshold_runs_numpys_copy_and_a_larger_one_the_kernel(kernel_calls, monkeypatch):
    """A padded copy (``as_strided_scatter`` of a transposed input) into fewer than WINDOW_COPY_MIN_ELEMENTS
    builds no kernel and gives the kernel's bits; at the threshold the kernel serves it."""
    monkeypatch.setattr(views, "WINDOW_COPY_MIN_ELEMENTS", DEFAULT_COPY_MIN)
    rng = np.random.default_rng(3)
    for channels in (2, DEFAULT_COPY_MIN // 64):  # (C, 8, 8) buffers: below and at the threshold
        x = np.zeros((channels, 8, 8), np.float32)
        src = rng.standard_normal((6, 6, channels)).astype(np.float32).transpose(2, 0, 1)
        size, stride = (channels, 6, 6), (64, 8, 1)
        out = np.empty_like(x)
        views.as_strided_scatter_into(out, x, src, size, stride, 9)
        expected = x.copy()
        expected[:, 1:7, 1:7] = src
        np.testing.assert_array_equal(out, expected)
    assert kernel_calls == [("assign", "copy", True)]


@pytest.fixture
def kernel_calls(monkeypatch):
    """The registered kernel's requests during a test, as ``(mode, init)``, each with whether a kernel served."""
    calls = []

    def counted(*args):
        kernel = windows.window_kernel(*args)
        calls.append((args[5], args[6], kernel is not None))
        return kernel
    monkeypatch.setattr(views, "WINDOW_KERNEL", counted)
    return calls


def test_a_convolutions_windows_are_read_as_memory_dims_each_moved_by_a_kernel_and_an_output_position():
    # the windows of a (C=6, H=9, W=8, N=4) buffer as (groups 2, kH 3, kW 2, C/G 3, oH 4, oW 3, N): stride
    # (2, 2), dilation (1, 3)
    shape = (6, 9, 8, 4)
    s = (9 * 8 * 4, 8 * 4, 4, 1)
    size = (2, 3, 2, 3, 4, 3, 4)
    stride = (3 * s[0], s[1], 3 * s[2], s[0], 2 * s[1], 2 * s[2], 1)
    plan = views.window_plan(np.prod(shape), size, stride, 0)
    # C: groups then channels, two memory dims; H: kernel row (looped) then output row (solved, the larger);
    # W likewise, in steps of one column (the common divisor of the stride's 2 and the dilation's 3)
    assert plan == ((3 * s[0], ((0, 1, 2),)), (s[0], ((3, 1, 3),)), (s[1], ((1, 1, 3), (4, 2, 4))),
                    (s[2], ((2, 3, 2), (5, 2, 3))), (1, ((6, 1, 4),)))
    # windows that do not overlap (a span of 3 columns, 3 apart) move memory dims of their own
    assert views.window_plan(36, (2, 3, 4), (8, 12, 1), 0) == ((12, ((1, 1, 3),)), (8, ((0, 1, 2),)),
                                                               (1, ((2, 1, 4),)))
    # a stride 0, a view past the end, or a common step that reaches into an inner memory dim: no plan
    assert views.window_plan(40, (3, 5), (0, 4), 0) is None
    assert views.window_plan(16, (4,), (6,), 0) is None
    assert views.window_plan(100, (4, 3, 2), (1, 6, 9), 0) is None  # (6 and 9: steps of 3 over a reach of 3)


def _geometries(rng, count):
    # a convolution's windows of a (4, 10, 10, 2) buffer, stride 2, dilation 3, 2 groups: a column's kernel and
    # output positions move memory dims of their own (6 and 4 elements apart), and rows hold the batch of 2
    yield (2, 3, 3, 2, 2, 2, 2), (400, 60, 6, 200, 40, 4, 1), 0, 800
    for _ in range(count):
        nd = int(rng.integers(1, 5))
        size = tuple(int(v) for v in rng.integers(1, 5, nd))
        stride = tuple(int(v) for v in rng.integers(1, 12, nd))
        offset = int(rng.integers(0, 5))
        numel = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 + int(rng.integers(0, 4))
        yield size, stride, offset, numel


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_kernels_are_numpys_passes_bit_for_bit_and_the_view_sum(dtype, kernel_calls, monkeypatch):
    rng = np.random.default_rng(7)
    counted, planned = views.WINDOW_KERNEL, 0
    for size, stride, offset, numel in _geometries(rng, 12):
        planned += views.window_plan(numel, size, stride, offset) is not None
        x = rng.standard_normal(numel).astype(dtype)
        src = rng.standard_normal(size).astype(dtype)
        src = src if rng.integers(2) else np.asfortranarray(src)  # (read through its strides)
        expected = x.astype(np.float64)
        for index in itertools.product(*map(range, size)):
            expected[offset + sum(i * s for i, s in zip(index, stride))] += src[index]
        results = {}
        for kernel in (True, False):
            monkeypatch.setattr(views, "WINDOW_KERNEL", counted if kernel else None)
            added, from_zeros, scattered = np.empty_like(x), np.full_like(x, 7), np.empty_like(x)
            views.as_strided_add_into(added, x, src, size, stride, offset)
            views.as_strided_add_into(from_zeros, None, src, size, stride, offset)
            views.as_strided_scatter_into(scattered, x, src, size, stride, offset)
            results[kernel] = added, from_zeros, scattered
        for a, b in zip(results[True], results[False]):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(results[True][0], expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(results[True][1], expected - x, rtol=1e-5, atol=1e-5)
    # each geometry with a plan asked for the add and its zero start (and the scatters whose views do not
    # overlap for a copy); those without (a common step reaching into an inner memory dim) ran NumPy alone
    assert planned >= 9
    assert sum(c[:2] == ("add", "copy") and c[2] for c in kernel_calls) == planned
    assert sum(c[:2] == ("add", "zero") and c[2] for c in kernel_calls) == planned
    assert any(c[0] == "assign" for c in kernel_calls)


def test_signed_zeros_are_kept_by_a_copy_and_summed_as_numpy_sums_them(kernel_calls):
    src = -np.zeros((2, 3), np.float32)
    padded = np.full(20, 5, np.float32)
    views.as_strided_scatter_into(padded, None, src, (2, 3), (5, 1), 6)  # a padded copy starting from zeros
    assert np.signbit(padded[[6, 7, 8, 11, 12, 13]]).all() and not np.signbit(padded[[0, 9, 19]]).any()
    assert (padded == 0).all()
    summed = np.full(20, 5, np.float32)
    views.as_strided_add_into(summed, None, src, (2, 3), (5, 1), 6)  # 0.0 + -0.0 is +0.0
    assert not np.signbit(summed).any() and (summed == 0).all()
    assert kernel_calls == [("assign", "zero", True), ("add", "zero", True)]
    # an empty view (a dim of 0, which the plan's dims of one element or more leave out) asks for no kernel
    for into in (views.as_strided_add_into, views.as_strided_scatter_into):
        out = np.full(20, 5, np.float32)
        into(out, None, np.zeros((2, 0, 3), np.float32), (2, 0, 3), (5, 1, 1), 6)
        assert (out == 0).all() and not np.signbit(out).any()
    assert len(kernel_calls) == 2


CASES = [  # (N, C_in, C_out, H, W, kernel, stride, padding, dilation, groups)
    (4, 6, 4, 7, 8, 3, 2, 1, 1, 2),
    (2, 4, 6, 5, 5, 4, 2, 1, 1, 1),
    (3, 4, 4, 9, 7, 3, 1, 2, 2, 4),
    (1, 3, 2, 9, 10, (3, 2), (2, 3), (0, 1), (2, 1), 1),
    (2, 4, 4, 8, 8, 3, 2, 1, 3, 2),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", CASES)
def test_convolutions_and_their_input_gradients_match_torch(case, dtype, kernel_calls):
    n, ci, co, h, w, k, s, p, d, g = case
    k = (k, k) if isinstance(k, int) else k
    torch.manual_seed(0)
    x = torch.randn(n, ci, h, w, dtype=dtype, requires_grad=True)
    weight = torch.randn(co, ci // g, *k, dtype=dtype, requires_grad=True)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype is torch.float32 else dict(rtol=1e-12, atol=1e-12)
    # conv2d: padded copy forward (when padded), col2im backward (input gradient)
    y = torch.nn.functional.conv2d(x, weight, None, s, p, d, g)
    gy = torch.randn_like(y)
    y.backward(gy)
    xj = jt.tensor(x.detach().numpy(), requires_grad=True)
    wj = jt.tensor(weight.detach().numpy(), requires_grad=True)
    yj = F.conv2d(xj, wj, None, s, p, d, g)
    yj.backward(jt.tensor(gy.numpy()))
    np.testing.assert_allclose(yj.detach().numpy(), y.detach().numpy(), **tol)
    np.testing.assert_allclose(xj.grad.numpy(), x.grad.numpy(), **tol)
    padded = p not in (0, (0, 0))
    # (the input gradient: a col2im, or a scatter where the windows do not overlap: stride 2, dilation 3)
    col2im = ("add" if case != CASES[4] else "assign", "copy", True)
    assert kernel_calls == [("assign", "copy", True)] * padded + [col2im]
    # conv_transpose2d (its forward a col2im, its backward a padded crop's scatter where padded), of the same
    # weight (C_in = co), output_padding where a stride allows it
    kernel_calls.clear()
    weight.grad = None
    op = tuple(int(si > 1 and di == 1) for si, di in zip(*(np.broadcast_to(v, 2) for v in (s, d))))
    z = torch.randn(n, co, h // 2 + 1, w // 2 + 1, dtype=dtype, requires_grad=True)
    t = torch.nn.functional.conv_transpose2d(z, weight, None, s, p, op, g, d)
    gt = torch.randn_like(t)
    t.backward(gt)
    zj = jt.tensor(z.detach().numpy(), requires_grad=True)
    wj.grad = None
    tj = F.conv_transpose2d(zj, wj, None, s, p, op, g, d)
    tj.backward(jt.tensor(gt.numpy()))
    np.testing.assert_allclose(tj.detach().numpy(), t.detach().numpy(), **tol)
    np.testing.assert_allclose(zj.grad.numpy(), z.grad.numpy(), **tol)
    np.testing.assert_allclose(wj.grad.numpy(), weight.grad.numpy(), **tol)
    assert ("add", "copy", True) in kernel_calls
    assert all(c[2] for c in kernel_calls)


@pytest.mark.parametrize("nd", [1, 3])
def test_one_and_three_dimensional_convolutions_gather_too(nd, kernel_calls):
    torch.manual_seed(1)
    conv, tconv = (torch.nn.functional.conv1d, torch.nn.functional.conv_transpose1d) if nd == 1 else \
        (torch.nn.functional.conv3d, torch.nn.functional.conv_transpose3d)
    ours = (F.conv1d, F.conv_transpose1d) if nd == 1 else (F.conv3d, F.conv_transpose3d)
    x = torch.randn(2, 4, *([7] * nd), dtype=torch.float64, requires_grad=True)
    weight = torch.randn(4, 2, *([3] * nd), dtype=torch.float64, requires_grad=True)
    for theirs, mine in zip((conv, tconv), ours):
        x.grad = None
        y = theirs(x, weight, None, 2, 1, groups=2)
        y.sum().backward()
        xj = jt.tensor(x.detach().numpy(), requires_grad=True)
        yj = mine(xj, jt.tensor(weight.detach().numpy()), None, 2, 1, groups=2)
        yj.sum().backward()
        np.testing.assert_allclose(yj.detach().numpy(), y.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(xj.grad.numpy(), x.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert ("add", "copy", True) in kernel_calls and ("assign", "copy", True) in kernel_calls


def test_threads_split_rows_and_give_one_threads_bits(kernel_calls):
    rng = np.random.default_rng(3)
    size, stride = (4, 4, 16, 16, 64), (64 * 34, 64, 64 * 34 * 2, 64 * 2, 1)  # (kH, kW, oH, oW, N) over 34x34
    src = rng.standard_normal(size).astype(np.float32)
    results = []
    before = jt.get_num_threads()
    try:
        for threads in (1, 2):
            jt.set_num_threads(threads)
            out = np.empty(34 * 34 * 64, np.float32)
            views.as_strided_add_into(out, None, src, size, stride, 0)
            results.append(out)
    finally:
        jt.set_num_threads(before)
    np.testing.assert_array_equal(results[0], results[1])
    assert kernel_calls == [("add", "zero", True)] * 2


def _step(conv, up, x):
    """A convolution's and a transposed convolution's training step (``conv``, ``up``: jitorch's or torch's)."""
    loss = up(conv(x).relu()).tanh().sum()
    loss.backward()
    return loss


def _conv_pair(conv, up, dtype=torch.float32):
    """(jitorch's, torch's) ``(Conv2d(*conv), ConvTranspose2d(*up))`` of ``dtype``, with torch's parameters."""
    def modules(lib):
        lib.manual_seed(0)
        return lib.nn.Conv2d(*conv), lib.nn.ConvTranspose2d(*up)
    ours, theirs = modules(jt), modules(torch)
    for a, b in zip(ours, theirs):
        b.to(dtype)
        for p, q in zip(a.parameters(), b.parameters()):
            p.data = jt.from_numpy(q.detach().numpy().copy())
    return ours, theirs


def test_a_compiled_step_fills_no_zeros_for_its_col2ims_and_padded_copies(kernel_calls):
    """Zeros whose one reader is a col2im or a padded copy written into the arena are not filled: the kernel
    starts from zeros itself. Values and gradients as torch's, twice (the second call finds the first's
    buffers), float32 and float64."""
    for dtype in (torch.float32, torch.float64):
        ours, theirs = _conv_pair((3, 8, 3, 2, 1), (8, 4, 4, 2, 1), dtype)
        # (buffers of more than 4096 elements: smaller zeros fold into constants, which the add copies)
        x = np.random.default_rng(0).standard_normal((8, 3, 17, 17)).astype(str(dtype).split(".")[1])
        compiled = jt.compile(_step)
        ex = compiled.lower(*ours, jt.from_numpy(x)).executable
        steps = [s for s in ex.steps if isinstance(s, EagerStep)]
        zeros = [n for s in steps for n in s.nodes if n.op.name in ("zeros", "new_zeros")]
        sums = [n for s in steps for n in s.nodes if n.op.name in ("_as_strided_add", "as_strided_scatter")]
        # the conv's padded input; the transposed conv's col2im and its crop's gradient scatter: each from
        # zeros the call leaves unfilled
        assert sorted(n.op.name for n in sums) == ["_as_strided_add"] + ["as_strided_scatter"] * 2
        unfilled = set().union(*(s.unfilled for s in steps))
        assert {n.args[0] for n in sums} == {n.outputs[0] for n in zeros} == unfilled
        assert not {name for name, _ in ex.profiled_steps()} & {"zeros", "new_zeros"}
        tol = dict(rtol=1e-4, atol=1e-5) if dtype is torch.float32 else dict(rtol=1e-11, atol=1e-12)
        for _ in range(2):
            kernel_calls.clear()
            for m in ours + theirs:
                m.zero_grad()
            loss = compiled(*ours, jt.from_numpy(x))
            expected = _step(*theirs, torch.from_numpy(x))
            np.testing.assert_allclose(loss.item(), expected.item(), **tol)
            for a, b in zip(ours, theirs):
                for p, q in zip(a.parameters(), b.parameters()):
                    np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), **tol)
            assert sorted(kernel_calls) == [("add", "zero", True)] + [("assign", "zero", True)] * 2


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_padded_copy_of_a_transposed_input_copies_blocks_of_rows_bit_for_bit(dtype, monkeypatch):
    """A convolution's ``(N, C, H, W)`` input copied into its padded ``(C, H, W, N)`` buffer reads each row (the
    batch) an image apart: the kernel copies blocks of rows. Every init (zeros, another buffer's elements, the
    output's own), image rows of 21 and 9 (runs of 16, 8 and 4 rows, then rows one by one), row counts that do
    not divide into blocks, an offset, 1 and 2 threads: NumPy's copy, bit for bit. A batch-last source (rows
    of adjacent elements) is copied row by row."""
    kernels = []

    def recorded(*args):
        kernels.append(windows.window_kernel(*args))
        return kernels[-1]
    monkeypatch.setattr(views, "WINDOW_KERNEL", recorded)
    rng = np.random.default_rng(5)
    before = jt.get_num_threads()
    try:
        for (n, c, h, w, p), threads in itertools.product([(64, 2, 3, 21, 1), (80, 2, 5, 9, 2)], (1, 2)):
            jt.set_num_threads(threads)
            src = rng.standard_normal((n, c, h, w)).astype(dtype).transpose(1, 2, 3, 0)
            shape = (c, h + 2 * p, w + 2 * p, n)
            strides = (shape[1] * shape[2] * n, shape[2] * n, n, 1)
            offset = p * strides[1] + p * strides[2]
            x = rng.standard_normal(shape).astype(dtype)
            for start in ("zero", "copy", "none"):
                out = x.copy() if start == "none" else np.full(shape, 7, dtype)
                expected = np.zeros(shape, dtype) if start == "zero" else x.copy()
                expected[:, p:p + h, p:p + w, :] = src
                into = None if start == "zero" else out if start == "none" else x
                views.as_strided_scatter_into(out, into, src, src.shape, strides, offset)
                np.testing.assert_array_equal(out, expected)
                assert kernels[-1] is not None and kernels[-1].blocked
            # the batch-last source (rows of adjacent elements) is copied row by row
            views.as_strided_scatter_into(out, None, np.ascontiguousarray(src), src.shape, strides, offset)
            np.testing.assert_array_equal(out[:, p:p + h, p:p + w, :], src)
            assert not kernels[-1].blocked
    finally:
        jt.set_num_threads(before)
    assert len(kernels) == 16


def test_a_compiled_convolution_step_copies_its_transposed_inputs_in_blocks(monkeypatch):
    """A compiled step's padded input copy of the conv's input reads ``(N, C, H, W)`` values as ``(C, H, W, N)``:
    a blocked kernel, at 1 and 2 threads; values and gradients as torch's, the same bits at both thread counts."""
    kernels = []

    def recorded(*args):
        kernels.append((args[5], windows.window_kernel(*args)))
        return kernels[-1][1]
    monkeypatch.setattr(views, "WINDOW_KERNEL", recorded)
    ours, theirs = _conv_pair((3, 4, 3, 1, 1), (4, 2, 4, 2, 1))
    x = np.random.default_rng(1).standard_normal((8, 3, 6, 6)).astype(np.float32)
    expected = _step(*theirs, torch.from_numpy(x))
    compiled = jt.compile(_step)
    grads, before = [], jt.get_num_threads()
    try:
        for threads in (1, 2):
            jt.set_num_threads(threads)
            kernels.clear()
            for m in ours:
                m.zero_grad()
            loss = compiled(*ours, jt.from_numpy(x))
            np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-4, atol=1e-5)
            grads.append([p.grad.numpy().copy() for m in ours for p in m.parameters()])
            for g, q in zip(grads[-1], (q for m in theirs for q in m.parameters())):
                np.testing.assert_allclose(g, q.grad.numpy(), rtol=1e-4, atol=1e-5)
            copies = [kernel for mode, kernel in kernels if mode == "assign"]
            # the conv's input copy transposes in blocks; the transposed conv's cropped gradient lies batch-last
            # (session 48: the sink pass carries the layout through ops that read an expand's source), so its copy
            # reads along memory, no transposition (its source was a batch-first value, read as (C, H, W, N))
            assert len(copies) == 2 and all(k is not None for k in copies)
            assert copies[0].blocked and not copies[1].blocked
    finally:
        jt.set_num_threads(before)
    for one, two in zip(*grads):
        np.testing.assert_array_equal(one, two)
