"""The strides of new results against torch's: pointwise results follow their operands' memory order
(TensorIterator's rule), copies and ``_like`` factories their input's (preserve_format), reductions, scans,
softmax and products are contiguous; advanced indexing follows its input's and indices' order. NumPy's own
order (order "K") differs where operands disagree."""

import numpy as np
import pytest
import torch

import jitorch as jt
from tests.support import MEMORY_LAYOUTS, laid_out, tensor_geometry

# name -> f(T, x, y): x in the layout under test, y contiguous
RESULTS = {
    "unary": lambda T, x, y: x.exp(),
    "laid out times contiguous": lambda T, x, y: x * y,
    "contiguous minus laid out": lambda T, x, y: y - x,
    "broadcast row": lambda T, x, y: x + y[0],
    "comparison": lambda T, x, y: x < y,
    "where": lambda T, x, y: T.where(x > 0, x, y),
    "lerp": lambda T, x, y: T.lerp(x, y, 0.25),
    "promoted operand": lambda T, x, y: y.double() + x,
    "cast": lambda T, x, y: x.double(),
    "clone": lambda T, x, y: x.clone(),
    "zeros_like": lambda T, x, y: T.zeros_like(x),
    "full_like": lambda T, x, y: T.full_like(x, 2.0),
    "fill": lambda T, x, y: T.fill(x, 2.0),
    "sum over a dim": lambda T, x, y: x.sum(1),
    "amax keepdim": lambda T, x, y: x.amax(-1, keepdim=True),
    "softmax": lambda T, x, y: x.softmax(-1),
    "cumsum": lambda T, x, y: x.cumsum(0),
    "matmul": lambda T, x, y: x @ y.transpose(-1, -2),
    "index a dim": lambda T, x, y: x[T.tensor([1, 0, 1])],
    "index by a 2-d index": lambda T, x, y: x[:, T.tensor([[0], [0]])],
    "index dims apart": lambda T, x, y: x[T.tensor([1, 0]), :, T.tensor([2, 3])],
    "index through a mask": lambda T, x, y: x[:, y[0, :, 0] > -10],
    "index by an int32 and a transposed index": lambda T, x, y: x[:, T.tensor([[0], [0]], dtype=T.int32),
                                                                  T.tensor([[1, 2], [3, 0]]).t()],
    # torch's clone(preserve_format) written in place
    "index_fill": lambda T, x, y: x.index_fill(-1, T.tensor([0, 2], device=x.device), -1.0),
    "index_fill by a 0-d tensor": lambda T, x, y: x.index_fill(0, T.tensor([1], device=x.device), T.tensor(5.0)),
    "index_put": lambda T, x, y: x.index_put((T.tensor([1, 0], device=x.device),), T.tensor(0.0)),
    "put": lambda T, x, y: x.put(T.tensor([1, 5], device=x.device), T.tensor([0.0, 0.0], device=x.device)),
    # sort's results are laid out as a dense self (fuzz seed 7100091)
    "sort values": lambda T, x, y: x.sort(1).values,
    "sort indices": lambda T, x, y: x.sort(-1, descending=True).indices,
    "msort": lambda T, x, y: x.msort(),
    "argsort": lambda T, x, y: x.argsort(0),
    # torch allocates renorm's result contiguous (fuzz seed 7200068: it followed x's layout)
    "renorm": lambda T, x, y: x.renorm(2, 1, 1.0),
}


@pytest.mark.parametrize("shape", [(2, 3, 4), (3, 1, 4)])
@pytest.mark.parametrize("layout", MEMORY_LAYOUTS)
@pytest.mark.parametrize("name", sorted(RESULTS))
def test_new_results_have_torchs_strides(name, layout, shape):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    got = RESULTS[name](jt, laid_out(jt, layout, a), jt.tensor(b))
    want = RESULTS[name](torch, laid_out(torch, layout, a), torch.tensor(b))
    assert tensor_geometry(got) == tensor_geometry(want)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_binary_result_follows_the_first_operand_that_orders_its_dims():
    """A transposed tensor plus a contiguous one is transposed (NumPy's order "K" gives C order)."""
    x = jt.ones(4, 3).t()
    assert (x + jt.ones(3, 4)).stride() == (1, 3)
    assert (jt.ones(3, 4) + x).stride() == (4, 1)


def test_an_expanded_operand_of_another_dtype_is_read_densely_as_torch_does():
    """torch casts an operand of another dtype first (a dense copy), which then orders the result."""
    x = jt.ones(3, 1).expand(3, 4)
    got = x + jt.ones(4, 3, dtype=jt.float64).t()
    want = torch.ones(3, 1).expand(3, 4) + torch.ones(4, 3, dtype=torch.float64).t()
    assert got.stride() == want.stride() == (4, 1)


def test_argwhere_and_nonzero_are_column_major_as_torch():
    values = np.arange(12).reshape(3, 4) % 3
    for name in ("argwhere", "nonzero"):
        assert getattr(jt.tensor(values), name)().stride() == getattr(torch.tensor(values), name)().stride()


def test_index_of_a_comparison_with_an_index_of_a_permuted_tensor_has_torchs_strides():
    """Fuzz seed 3001058: ``x[idx]`` of a permuted ``x`` was contiguous, so the comparison of ``x`` with
    it, and an index of that, took other strides than torch's."""
    def run(T):
        x = T.arange(9.0).reshape(3, 3).t().unsqueeze(0)
        v = x.greater_equal(x[T.tensor([-1, 0, -1, 0])])
        return x[T.tensor([-1, 0])], v[T.tensor([1, -3, -1])]
    got, want = run(jt), run(torch)
    assert [t.stride() for t in got] == [t.stride() for t in want] == [(9, 1, 3), (9, 1, 3)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("layout", ["transposed", "permuted", "expanded"])
def test_compiled_index_fill_keeps_a_dense_inputs_strides_as_torch(layout, device):
    """index_fill of a transposed or permuted tensor keeps its strides (torch's clone(preserve_format)), in
    every mode: it was contiguous in eager, compiled and CUDA runs."""
    from jitorch.backends.cuda.fake import FakeBackend
    from jitorch.runtime.cuda_backend import use_backend
    a = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    want = laid_out(torch, layout, a).index_fill(1, torch.tensor([2, 0]), 7.0)
    with use_backend(FakeBackend()):
        x = laid_out(jt, layout, a).to(device)
        for fn in (lambda t: t.index_fill(1, jt.tensor([2, 0], device=device), 7.0),
                   jt.compile(lambda t: t.index_fill(1, jt.tensor([2, 0], device=device), 7.0))):
            got = fn(x)
            assert got.stride() == want.stride()
            np.testing.assert_array_equal(got.cpu().numpy(), want.numpy())


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("layout", ["transposed", "permuted", "expanded"])
def test_sort_lays_out_its_results_as_torch_in_every_mode(layout, device):
    """Fuzz seed 7100091: ``msort`` of a permuted tensor was contiguous where torch's keeps a dense input's
    strides (a non-dense one's order), for values and indices, eager, compiled and on CUDA."""
    from jitorch.backends.cuda.fake import FakeBackend
    from jitorch.runtime.cuda_backend import use_backend
    a = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    def run(T, x):
        values, indices = x.sort(1)
        return values, indices, x.msort()
    want = run(torch, laid_out(torch, layout, a))
    with use_backend(FakeBackend()):
        x = laid_out(jt, layout, a).to(device)
        for fn in (lambda t: run(jt, t), jt.compile(lambda t: run(jt, t))):
            got = fn(x)
            assert [g.stride() for g in got] == [w.stride() for w in want]
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g.cpu().numpy(), w.numpy())
