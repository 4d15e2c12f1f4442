"""``F.embedding`` without history (no grad mode, or a weight that does not require grad): one gather,
torch's values and errors."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.nn import functional as F


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
