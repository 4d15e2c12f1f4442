"""The generated product of few rows and a short sum over long rows (jitorch/codegen/gemm.py): its bits (each
element the sum over k in order of once-rounded products, whatever the tile, the tail, the thread count or the
target: the CI's x86-64-v2 run checks the same equalities there), which products take it, and small
convolutions through it against torch, eager and compiled alike."""

import numpy as np
import pytest

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.codegen import gemm
from jitorch.codegen.lanes import VECTOR_BYTES
from jitorch.ops import linalg
from jitorch.runtime import threads
from tests.blas_reference import chosen_matmul

torch = pytest.importorskip("torch")


def _in_order(a, b):
    """``a @ b`` as the kernel defines it: ``((0 + a0*b0) + a1*b1) + ...``, each product and sum rounded in the
    operands' dtype (NumPy's elementwise ops round each result once)."""
    out = np.zeros((a.shape[0], b.shape[1]), a.dtype)
    for k in range(a.shape[1]):
        out = out + a[:, k:k + 1] * b[k:k + 1, :]
    return out


def _long_sum_in_order(a, bt):
    """``a @ bt.T`` as the long-sum kernel defines it: lane ``l`` of each element sums the terms ``k = l mod w``
    in chunks of ``gemm._CHUNK`` vectors (each chunk from 0, in order, then added to the lane's sum), the lanes
    added by halves, then the last ``k mod w`` terms in order."""
    w = VECTOR_BYTES // a.itemsize
    whole = a.shape[1] // w
    lanes = np.zeros((a.shape[0], bt.shape[0], w), a.dtype)
    for c0 in range(0, whole, gemm._CHUNK):
        part = np.zeros_like(lanes)
        for v in range(c0, min(c0 + gemm._CHUNK, whole)):
            part = part + a[:, None, v * w:(v + 1) * w] * bt[None, :, v * w:(v + 1) * w]
        lanes = lanes + part
    while lanes.shape[-1] > 1:
        half = lanes.shape[-1] // 2
        lanes = lanes[..., :half] + lanes[..., half:]
    out = lanes[..., 0]
    for k in range(whole * w, a.shape[1]):
        out = out + a[:, None, k] * bt[None, :, k]
    return out


def _arrays(m, k, n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)


@pytest.fixture
def calls():
    """A function giving how many products the kernel computed since the test began."""
    start = gemm.counters["calls"]
    return lambda: gemm.counters["calls"] - start


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m, k, n", [(16, 72, 1088), (7, 9, 1024 + 64 + 17), (1, 3, 1030), (13, 1, 2049),
                                     (6, 17, 1024 + 15)])
def test_each_element_is_the_sum_in_k_order_over_tiles_and_tails(calls, dtype, m, k, n):
    # (column counts with a partial tile: single vectors, then single columns; row counts of whole and partial
    # register blocks; sums shorter than, and not a multiple of, a vector)
    a, b = _arrays(m, k, n, dtype)
    kernel = gemm.skinny_kernel(dtype, m, k, n, (k, 1), n, n)
    out = np.full((m, n), np.nan, dtype)
    kernel.run(a, b, out, 1)
    assert np.array_equal(out, _in_order(a, b))
    assert calls() == 1
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-5 if dtype == "float32" else 1e-13, atol=1e-5 if dtype == "float32" else 1e-13)


def test_operands_at_other_strides_a_transposed_and_rows_apart(calls):
    # (a convolution's window gradient reads its weight transposed; an output row may lie in a wider buffer)
    a_t, b_wide = _arrays(20, 12, 1300, "float32", seed=1)
    a = a_t.T  # (12, 20) at strides (1, 12) elements
    b = np.random.default_rng(2).standard_normal((20, 1400)).astype(np.float32)[:, :1100]
    out_buffer = np.zeros((12, 1200), np.float32)
    out = out_buffer[:, :1100]
    kernel = gemm.skinny_kernel("float32", 12, 20, 1100, (1, 12), 1400, 1200)
    kernel.run(a, b, out, 1)
    assert np.array_equal(out, _in_order(np.ascontiguousarray(a), np.ascontiguousarray(b)))
    assert not out_buffer[:, 1100:].any()  # nothing written past a row's end


def test_two_threads_give_one_threads_bits(monkeypatch, calls):
    a, b = _arrays(16, 72, 1024 * 2 + 40, "float32", seed=3)
    kernel = gemm.skinny_kernel("float32", 16, 72, b.shape[1], (72, 1), b.shape[1], b.shape[1])
    one, two = np.empty((16, b.shape[1]), np.float32), np.empty((16, b.shape[1]), np.float32)
    forks = threads.counters["forks"]
    monkeypatch.setitem(threads._settings, "threads", 2)
    kernel.run(a, b, one, 1)
    assert threads.counters["forks"] == forks
    kernel.run(a, b, two, 2)
    assert threads.counters["forks"] > forks
    assert np.array_equal(one, two) and np.array_equal(one, _in_order(a, b))


@pytest.mark.parametrize("dtype, m, k, n", [("float32", 5, 4096 + 7, 3), ("float64", 9, 2500, 6),
                                             ("float32", 4, 15, 8), ("float32", 8, 2048, 4)])
def test_long_sums_lanes_chunks_and_tail_in_their_defined_order(calls, dtype, m, k, n):
    # (two chunks and part of a third, a tail of 7; float64's narrower vectors; a sum shorter than one chunk;
    # row blocks whole and partial, column blocks whole and partial)
    a, b = _arrays(m, k, n, dtype, seed=7)
    bt = np.ascontiguousarray(b.T)
    out = np.full((m, n), np.nan, dtype)
    gemm.long_sum_kernel(dtype, m, k, n, k, k, (n, 1)).run(a, bt.T, out, 1)
    assert np.array_equal(out, _long_sum_in_order(a, bt))
    assert calls() == 1
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_long_sums_on_two_threads_give_one_threads_bits_into_a_transposed_result(monkeypatch):
    a, b = _arrays(9, 3000, 5, "float32", seed=8)
    bt = np.ascontiguousarray(b.T)
    one, two = np.empty((5, 9), np.float32).T, np.empty((5, 9), np.float32).T  # (element strides (1, 9))
    kernel = gemm.long_sum_kernel("float32", 9, 3000, 5, 3000, 3000, (1, 9))
    monkeypatch.setitem(threads._settings, "threads", 2)
    forks = threads.counters["forks"]
    kernel.run(a, bt.T, one, 1)
    kernel.run(a, bt.T, two, 2)
    assert threads.counters["forks"] > forks
    assert np.array_equal(one, two) and np.array_equal(one, _long_sum_in_order(a, bt))


@pytest.mark.parametrize("m, k, n, takes", [
    (16, 72, 8192, True), (72, 16, 8192, True), (128, 64, 1024 * 8, True), (8, 9, 16384, True),
    (256, 128, 2048, False),  # OpenBLAS's blocking wins once both dims are large
    (64, 256, 1024 * 4, False),  # rows times sum past the rule's area
    (16, 72, 4096, False), (64, 64, 2304, False),  # too few columns
    (8, 9, 8192, False),  # too little work for a call
    (16, 8192, 9, True), (64, 16384, 48, True),  # long sums (the right operand read transposed)
    (16, 4096, 72, False),  # too short a sum
    (128, 8192, 16, False),  # too many rows
])
def test_the_rule_decides_which_products_take_the_kernel(calls, m, k, n, takes):
    a, b = _arrays(m, k, n, "float32", seed=4)
    if k > n:  # (a long sum's right operand is a transposed view, as a convolution's weight gradient reads it)
        b = np.ascontiguousarray(b.T).T
    got = linalg.array_product(a, b)
    assert calls() == int(takes and gemm.for_products())
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_layouts_the_kernel_does_not_read_take_blas(calls):
    a, b = _arrays(16, 72, 8192, "float32", seed=5)
    bt = np.ascontiguousarray(b.T).T  # unit stride down the columns
    assert np.array_equal(linalg.array_product(a, bt), a @ bt)
    long_a, long_b = _arrays(16, 8192, 9, "float32", seed=9)  # a long sum whose right operand lies in rows
    assert np.array_equal(linalg.array_product(long_a, long_b), long_a @ long_b)
    assert np.array_equal(linalg.array_product(a, b.astype(np.float64)), a @ b.astype(np.float64))  # mixed
    raw = np.empty(b.nbytes + 1, np.uint8)  # an operand off its elements' alignment
    unaligned = np.frombuffer(raw.data, np.float32, b.size, 1).reshape(b.shape)
    unaligned[...] = b
    assert np.array_equal(linalg.array_product(a, unaligned), a @ b)
    batch = np.stack([b, b])  # a batch of two: BLAS per matrix
    assert np.array_equal(linalg.array_product(a, batch), a @ batch)
    assert calls() == 0
    assert linalg.array_product(a[None], b[None]).shape == (1, 16, 8192)  # a batch of one takes it
    assert calls() == int(gemm.for_products())


def test_a_machine_without_avx512_keeps_blas_for_every_product(monkeypatch, calls):
    # (the kernels' register blocks spill there: 1.7-3x OpenBLAS's time, measured on x86-64-v2 and v3)
    monkeypatch.setenv("JITORCH_CPU", "x86-64-v3")
    assert not gemm.for_products()
    a, b = _arrays(16, 72, 8192, "float32", seed=7)
    long_a, long_b = _arrays(16, 8192, 72, "float32", seed=8)
    long_b = np.ascontiguousarray(long_b.T).T
    assert linalg.skinny_shape(a.dtype, 16, 72, 8192) == "columns"
    assert linalg.skinny_shape(a.dtype, 16, 8192, 72) == "long sum"
    assert np.array_equal(linalg.array_product(a, b), chosen_matmul(a, b))
    assert np.array_equal(linalg.array_product(long_a, long_b), chosen_matmul(long_a, long_b))
    assert calls() == 0


@pytest.mark.parametrize("x_shape, w_shape, stride, padding, kernels", [
    # 16 x 72 by 72 x 9248 forward and the windows' gradient 72 x 16 by 16 x 9248 take the columns kernel, the
    # weight's gradient 16 x 9248 by 9248 x 72 the long-sum one
    ((32, 8, 34, 34), (16, 8, 3, 3), 2, 1, 3),
    # 4 x 18 by 18 x 16384 and 18 x 4 by 4 x 16384, and the weight's gradient 4 x 16384 by 16384 x 18
    ((16, 2, 32, 32), (4, 2, 3, 3), 1, 1, 3),
])
def test_convolution_through_the_kernels_matches_torch_and_compiled_gives_eagers_bits(
        calls, x_shape, w_shape, stride, padding, kernels):
    rng = np.random.default_rng(6)
    xa = rng.standard_normal(x_shape).astype(np.float32)
    wa = (rng.standard_normal(w_shape) * 0.2).astype(np.float32)
    x, w = jt.tensor(xa, requires_grad=True), jt.tensor(wa, requires_grad=True)
    y = F.conv2d(x, w, stride=stride, padding=padding)
    y.square().sum().backward()
    eager_calls = calls()
    assert eager_calls == (kernels if gemm.for_products() else 0)
    tx, tw = torch.tensor(xa, requires_grad=True), torch.tensor(wa, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=padding)
    ty.square().sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-2)

    def step(x, w):
        out = F.conv2d(x, w, stride=stride, padding=padding)
        return out, *jt.autograd.grad(out.square().sum(), [x, w])
    got = jt.compile(step)(x.detach().requires_grad_(), w.detach().requires_grad_())
    assert calls() == 2 * eager_calls
    for g, e in zip(got, (y, x.grad, w.grad)):
        assert np.array_equal(g.detach().numpy(), e.detach().numpy())
