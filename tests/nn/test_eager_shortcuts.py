"""nn.functional's eager shortcuts where no history is recorded (no grad mode, or tensors that do not require
grad): ``F.embedding`` as one gather and ``F.gelu`` as the composition's kernels, torch's values and errors."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.nn import functional as F
from jitorch.ops import registry


@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_rows_match_torch(index_dtype, padding_idx):
    w = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    i = np.array([[1, 2, 9], [0, 0, 3]], index_dtype)
    got = F.embedding(jt.from_numpy(i), jt.from_numpy(w), padding_idx)
    want = torch.nn.functional.embedding(torch.from_numpy(i), torch.from_numpy(w), padding_idx)
    assert got.tolist() == want.tolist() and got.stride() == want.stride() and got.grad_fn is None
    assert got.data_ptr() != jt.from_numpy(w).data_ptr()


def test_under_no_grad_a_parameter_gives_no_history_and_in_grad_mode_its_node():
    layer = jt.nn.Embedding(5, 3)
    with jt.no_grad():
        assert layer(jt.tensor([1, 4])).grad_fn is None
    out = layer(jt.tensor([1, 4]))
    out.sum().backward()
    assert out.grad_fn is not None and layer.weight.grad[1].tolist() == [1.0] * 3


@pytest.mark.parametrize("index", [[5], [-1]])
def test_an_index_out_of_range_raises_torchs_index_error(index):
    with pytest.raises(IndexError, match="index out of range in self"):
        F.embedding(jt.tensor(index), jt.ones(5, 3))


class _PassingHook:
    """A dispatch hook that takes no call: while it is installed, nn.functional composes its ops."""
    passes_on = True

    def call(self, op, args, out):
        return NotImplemented


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gelu_gives_the_compositions_bits_and_torchs_values(dtype):
    a = (np.random.default_rng(0).standard_normal((3, 50)) * 4).astype(dtype)
    a[0, :3] = [np.inf, -np.inf, np.nan]
    fast = F.gelu(jt.from_numpy(a))
    registry.DISPATCH_HOOKS.append(_PassingHook())
    try:
        composed = F.gelu(jt.from_numpy(a))
    finally:
        registry.DISPATCH_HOOKS.pop()
    assert np.array_equal(fast.numpy(), composed.numpy(), equal_nan=True) and fast.is_contiguous()
    # (torch's vectorised float32 gelu gives NaN at +inf, where the composition gives inf)
    np.testing.assert_allclose(fast.numpy()[:, 3:], torch.nn.functional.gelu(torch.from_numpy(a[:, 3:])).numpy(),
                               rtol=1e-5, atol=1e-6)


def test_gelu_keeps_a_transposed_layout_and_records_history_in_grad_mode():
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    assert F.gelu(jt.from_numpy(a).t()).stride() == torch.nn.functional.gelu(torch.from_numpy(a).t()).stride()
    assert F.gelu(jt.from_numpy(a).requires_grad_()).grad_fn is not None
