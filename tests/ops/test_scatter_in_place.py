"""In-place scatters (``scatter_``, ``scatter_add_``) on plain CPU tensors write into ``self``'s memory: no copy of
``self`` to scatter into and write back. They must give the general path's values bit for bit (and torch's), bump
the version once, raise before writing, and leave to the general path what it alone computes right (a half
self adds in float32; a strided self; a call autograd records)."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops import indexing
from tests.support import general_path


@pytest.fixture
def copies(monkeypatch):
    """The number of copies of ``self`` the scatters made (the general path's `_compute_copy`)."""
    made = [0]
    original = indexing._compute_copy

    def counted(x):
        made[0] += 1
        return original(x)
    monkeypatch.setattr(indexing, "_compute_copy", counted)
    return made


def _operands(dtype, dim, seed):
    """(self, index with repeated positions, src) as NumPy arrays: self 5x7, index 4x3 along ``dim``."""
    rng = np.random.default_rng(seed)
    self = (rng.standard_normal((5, 7)) * 4).astype(dtype)
    index = rng.integers(0, self.shape[dim], (4, 3))
    src = (rng.standard_normal((4, 5)) * 4).astype(dtype)
    return self, index, src


CALLS = {
    "scatter_add_": lambda x, d, i, s: x.scatter_add_(d, i, s),
    "scatter_": lambda x, d, i, s: x.scatter_(d, i, s),
    "scatter_ value": lambda x, d, i, s: x.scatter_(d, i, 2.5),
    "scatter_ add": lambda x, d, i, s: x.scatter_(d, i, s, reduce="add"),
    "scatter_ multiply": lambda x, d, i, s: x.scatter_(d, i, s, reduce="multiply"),
}


@pytest.mark.filterwarnings("ignore:The reduce argument")
@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("dim", [0, 1])
def test_an_in_place_scatter_writes_into_self_with_the_general_paths_bits(call, dtype, dim, copies):
    self, index, src = _operands(dtype, dim, seed=dim)
    x, idx, s = jt.from_numpy(self.copy()), jt.from_numpy(index), jt.from_numpy(src)
    address, version = x.data_ptr(), x._version
    assert CALLS[call](x, dim, idx, s) is x
    assert copies[0] == 0  # (written straight into self)
    assert x.data_ptr() == address and x._version == version + 1
    general = jt.from_numpy(self.copy())
    with general_path():
        CALLS[call](general, dim, idx, s)
    assert copies[0] == 1 and general._version == 1
    np.testing.assert_array_equal(x.numpy(), general.numpy())
    expected = torch.from_numpy(self.copy())
    CALLS[call](expected, dim, torch.from_numpy(index), torch.from_numpy(src))
    # (torch's CPU scatter adds repeated positions in index order too: the same float sums)
    np.testing.assert_array_equal(x.numpy(), expected.numpy())


def test_a_bad_index_raises_torchs_error_before_anything_is_written(copies):
    x = jt.zeros(3, 4)
    with pytest.raises(RuntimeError, match="index 9 is out of bounds for dimension 1 with size 4"):
        x.scatter_add_(1, jt.tensor([[0, 9]]), jt.ones(1, 2))
    with pytest.raises(RuntimeError, match="index 9 is out of bounds for dimension 1 with size 4"):
        torch.zeros(3, 4).scatter_add_(1, torch.tensor([[0, 9]]), torch.ones(1, 2))
    assert not x.numpy().any() and x._version == 0
    with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
        x.scatter_add_(1, jt.tensor([[0, 1]]), jt.ones(1, 2, dtype=jt.float64))
    assert not x.numpy().any() and x._version == 0


def test_what_the_in_place_scatter_leaves_to_the_general_path(copies):
    index = [[0, 1, 1], [2, 0, 2]]
    # a half self: the general path adds in float32 and rounds once (an add per element would round each time)
    x, tx = jt.zeros(3, 3, dtype=jt.float16), torch.zeros(3, 3, dtype=torch.float16)
    src = np.array([[1.0, 1e-3, 1e-3], [3.0, 2e-3, 7.0]], np.float16)
    x.scatter_add_(1, jt.tensor(index), jt.from_numpy(src))
    tx.scatter_add_(1, torch.tensor(index), torch.from_numpy(src))
    np.testing.assert_array_equal(x.numpy(), tx.numpy())
    assert copies[0] == 1
    # a self that is not C-contiguous
    x, tx = jt.zeros(3, 3).t(), torch.zeros(3, 3).t()
    x.scatter_add_(0, jt.tensor(index), jt.ones(2, 3))
    tx.scatter_add_(0, torch.tensor(index), torch.ones(2, 3))
    np.testing.assert_array_equal(x.numpy(), tx.numpy())
    assert copies[0] == 2
    # a src that requires grad in grad mode: autograd records the call
    s, ts = jt.ones(2, 3, requires_grad=True), torch.ones(2, 3, requires_grad=True)
    y = jt.zeros(3, 3).scatter_add_(1, jt.tensor(index), s * 2)
    ty = torch.zeros(3, 3).scatter_add_(1, torch.tensor(index), ts * 2)
    assert copies[0] == 3 and y.grad_fn is not None
    (y * jt.arange(9.0).view(3, 3)).sum().backward()
    (ty * torch.arange(9.0).view(3, 3)).sum().backward()
    np.testing.assert_array_equal(s.grad.numpy(), ts.grad.numpy())


def test_a_gathers_eager_gradient_scatters_into_its_zeros_in_place(copies):
    # (an index of several positions per line: the general gradient, a scatter-add into zeros)
    x = jt.randn(4, 6, requires_grad=True)
    tx = torch.from_numpy(x.detach().numpy()).requires_grad_()
    index = [[0, 5, 5], [1, 1, 2], [3, 0, 4], [2, 2, 2]]
    weights = jt.randn(4, 3)
    (x.gather(1, jt.tensor(index)) * weights).sum().backward()
    (tx.gather(1, torch.tensor(index)) * torch.from_numpy(weights.numpy())).sum().backward()
    assert copies[0] == 0
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
