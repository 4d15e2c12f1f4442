"""What eager generation from a GPT runs: products of a few rows times a transposed weight computed as
``(W @ x.T).T`` (`ops.linalg._swapped`), on the whole product's shape whatever the thread count, and the
``topk`` shortcut (`ops.shape_ops._topk_fast`) giving the general path's values, indices and layout."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops import linalg
from jitorch.ops.registry import OPS

from tests.support import general_path
from tests.blas_reference import chosen_matmul


@pytest.fixture
def swapped_calls(monkeypatch):
    """The (a.shape, b.shape) of each product `array_product` ran as ``(b.T @ a.T).T``."""
    calls = []
    run = linalg._swapped_product

    def spy(a, b, out):
        calls.append((a.shape, b.shape))
        return run(a, b, out)
    monkeypatch.setattr(linalg, "_swapped_product", spy)
    return calls


def _arrays(dtype, *shapes):
    rng = np.random.default_rng(7)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rows", [3, 8, 16, 32])
def test_a_linear_layer_on_few_rows_runs_the_swapped_product(swapped_calls, dtype, rows):
    x, w, b = _arrays(dtype, (1, rows, 128), (512, 128), (512,))
    got = jt.nn.functional.linear(jt.from_numpy(x), jt.from_numpy(w), jt.from_numpy(b))
    with general_path():
        general = jt.nn.functional.linear(jt.from_numpy(x), jt.from_numpy(w), jt.from_numpy(b))
    want = torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b))
    assert swapped_calls == [((rows, 128), (128, 512))] * 2
    expected = np.ascontiguousarray((w @ np.ascontiguousarray(x[0].T)).T) + b  # the swapped product's bits
    np.testing.assert_array_equal(got.numpy()[0], expected)
    np.testing.assert_array_equal(general.numpy(), got.numpy())
    assert got.is_contiguous() and got.stride() == want.stride()
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("x_shape,w_shape", [
    ((2, 128), (512, 128)),    # 2 x 512 results: OpenBLAS's small kernel serves the transposed layout
    ((8, 128), (65, 128)),     # 8 x 65 likewise
    ((33, 128), (512, 128)),   # more rows than SWAPPED_MAX_ROWS
    ((24, 32), (1000, 32)),    # over 16 rows of fewer than 64 columns: the copies cost more
])
def test_other_products_of_a_transposed_weight_run_as_before(swapped_calls, x_shape, w_shape):
    x, w = _arrays("float32", x_shape, w_shape)
    got = jt.nn.functional.linear(jt.from_numpy(x), jt.from_numpy(w))
    assert swapped_calls == []
    np.testing.assert_array_equal(got.numpy(), chosen_matmul(x, w.T))


def test_a_product_of_a_weight_in_rows_is_not_swapped(swapped_calls):
    x, w = _arrays("float32", (8, 128), (128, 512))
    got = jt.matmul(jt.from_numpy(x), jt.from_numpy(w))
    assert swapped_calls == []
    np.testing.assert_array_equal(got.numpy(), chosen_matmul(x, w))


def test_a_swapped_product_writes_into_a_given_output(swapped_calls):
    x, w = _arrays("float32", (8, 128), (512, 128))
    out = np.full((8, 512), np.nan, np.float32)
    assert linalg.array_product(x, w.T, out) is out
    assert len(swapped_calls) == 1
    np.testing.assert_array_equal(out, linalg.array_product(x, w.T))


def test_values_do_not_depend_on_the_number_of_threads(swapped_calls):
    # a swapped product (never split) and a product of few rows large enough to split at two threads (not
    # swapped, so its parts are the whole's dot products)
    small = _arrays("float32", (8, 128), (512, 128))
    large = _arrays("float32", (4, 1024), (1024, 1024))
    assert 4 * 1024 * 1024 >= linalg.SPLIT_MIN_WORK
    before = jt.get_num_threads()
    results = []
    try:
        for n in (1, 2):
            jt.set_num_threads(n)
            results.append([jt.nn.functional.linear(jt.from_numpy(x), jt.from_numpy(w)).numpy()
                            for x, w in (small, large)])
    finally:
        jt.set_num_threads(before)
    assert swapped_calls == [((8, 128), (128, 512))] * 2
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("shape,k,dim", [((1, 65), 65, -1), ((3, 10), 4, 1), ((6, 5), 2, 0), ((7,), 0, 0)])
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_topk_shortcut_gives_the_general_paths_values_indices_and_layout(shape, k, dim, largest, dtype):
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, shape).astype(dtype)  # ties: the order among equal values is the general path's
    a.flat[0] = np.nan
    x = jt.from_numpy(a)
    got = OPS["topk"].fast((x, k, dim, largest, True))
    with general_path():
        want = jt.topk(x, k, dim, largest)
    assert got is not None and type(got) is type(want)
    for g, w in zip(got, want):
        assert g.dtype is w.dtype and tuple(g.shape) == tuple(w.shape) and g.stride() == w.stride()
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    assert jt.topk(x, k, dim, largest).indices.tolist() == want.indices.tolist()


@pytest.mark.parametrize("args", [
    lambda: (jt.ones(3, 4, dtype=jt.int64), 2, -1, True, True),   # not a float tensor
    lambda: (jt.ones(3, 4), 5, -1, True, True),                    # k out of range: the general path's error
    lambda: (jt.ones(3, 4), 2, 2, True, True),                     # dim out of range
    lambda: (jt.ones(()), 1, 0, True, True),                       # 0-d
    lambda: (jt.ones(0, 4), 0, 0, True, True),                     # empty
    lambda: (jt.ones(3, 4), np.int64(2), -1, True, True),          # a NumPy int: the general path converts it
    lambda: (jt.ones(3, 4, requires_grad=True), 2, -1, True, True),  # history to record
])
def test_other_topk_calls_take_the_general_path(args):
    assert OPS["topk"].fast(args()) is None


def test_topk_of_a_tensor_that_requires_grad_records_its_node():
    x = jt.tensor([[1.0, 3.0, 2.0]], requires_grad=True)
    values, indices = jt.topk(x, 2)
    values.sum().backward()
    assert values.grad_fn is not None and indices.tolist() == [[1, 2]] and x.grad.tolist() == [[0.0, 1.0, 1.0]]
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        jt.topk(jt.ones(3, 4), 5)
