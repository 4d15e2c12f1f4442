"""Review of the recurrent, normalization, resampling and dropout layers against torch: edge cases the
layers' own tests left out (expected values and messages are torch 2's)."""

from __future__ import annotations

import warnings

import pytest
import torch

import jitorch as jt
from jitorch import nn
from jitorch.nn import functional as F


@pytest.mark.parametrize("cls", [nn.RNN, nn.LSTM, nn.GRU])
@pytest.mark.parametrize("shape", [(0, 2, 3), (0, 3)])
def test_recurrent_layer_rejects_an_empty_sequence(cls, shape):
    # torch's kernels refuse a zero-length sequence (an empty batch is fine)
    with pytest.raises(RuntimeError, match="^Expected sequence length to be larger than 0 in RNN$"):
        cls(3, 4)(jt.ones(*shape))
    assert cls(3, 4)(jt.ones(2, 0, 3))[0].shape == (2, 0, 4)


@pytest.mark.parametrize("shape, mode, message", [
    ((1, 1, 4), "nearest", r"input \(W: 4\) and output \(W: 0\)"),
    ((1, 1, 4), "linear", r"input \(W: 4\) and output \(W: 0\)"),
    ((1, 1, 4, 4), "bilinear", r"input \(H: 4, W: 4\) output \(H: 0, W: 0\)"),
    ((1, 1, 4, 4), "nearest-exact", r"input \(H: 4, W: 4\) output \(H: 0, W: 0\)"),
    ((1, 1, 4, 4, 4), "trilinear", r"input \(D: 4, H: 4, W: 4\) output \(D: 0, H: 0, W: 0\)"),
])
def test_interpolate_to_an_empty_size_raises_as_torch(shape, mode, message):
    with pytest.raises(RuntimeError, match="^Input and output sizes should be greater than 0, but got " + message):
        F.interpolate(jt.ones(*shape), scale_factor=0.2, mode=mode)
    with pytest.raises(RuntimeError, match=r"input \(H: 0, W: 4\) output \(H: 0, W: 4\)"):
        F.interpolate(jt.ones(1, 1, 0, 4), scale_factor=1.0)
    # 'area' is adaptive average pooling, which torch lets produce an empty output
    assert F.interpolate(jt.ones(1, 1, 4, 4), scale_factor=0.2, mode="area").shape == (1, 1, 0, 0)


def test_dropout2d_of_a_1d_input_raises_in_training():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecation warning for a non-3/4-D input
        with pytest.raises(RuntimeError, match="^Feature dropout requires at least 2 dimensions in the input$"):
            F.dropout2d(jt.ones(3), 0.5)
        # torch returns before the check when nothing is dropped, or everything is
        assert F.dropout2d(jt.ones(3), 0.5, training=False).tolist() == [1.0, 1.0, 1.0]
        assert F.dropout2d(jt.ones(3), 1.0).tolist() == [0.0, 0.0, 0.0]
        assert F.dropout2d(jt.ones(0), 0.5).shape == (0,)


@pytest.mark.parametrize("shape, mode, dtype, kernel, name", [
    ((1, 2, 4), "linear", jt.int64, "compute_indices_weights_linear", "Long"),
    ((1, 2, 4), "linear", jt.uint8, "compute_indices_weights_linear", "Byte"),
    ((1, 2, 4, 4), "bilinear", jt.int32, "upsample_bilinear2d_channels_last", "Int"),
    ((1, 2, 4, 4), "bilinear", jt.bool, "upsample_bilinear2d_channels_last", "Bool"),
    ((1, 2, 4, 4, 4), "trilinear", jt.int8, "compute_indices_weights_linear", "Char"),
    ((1, 2, 4), "area", jt.int64, "adaptive_avg_pool2d", "Long"),
    ((1, 2, 4, 4), "area", jt.uint8, "adaptive_avg_pool2d", "Byte"),
    ((1, 2, 4, 4, 4), "area", jt.int32, "adaptive_avg_pool3d_cpu", "Int"),
])
def test_interpolate_that_blends_refuses_integer_input_as_torch(shape, mode, dtype, kernel, name):
    # blending weights cast to an integer dtype were 0 or 1: ones came out as [1, 0, 0, ...]
    with pytest.raises(NotImplementedError, match=f"^\"{kernel}\" not implemented for '{name}'$"):
        F.interpolate(jt.ones(*shape, dtype=dtype), scale_factor=1.5, mode=mode)


def test_interpolate_bilinear_of_uint8_rounds_as_torchs_not_truncated():
    # torch rounds uint8 bilinear in integer kernels of their own (jitorch/nn/antialias.py; before them jitorch
    # refused uint8 rather than truncate blended weights)
    x = jt.tensor([[[[0, 255, 7, 100], [1, 2, 3, 4], [200, 10, 0, 255], [9, 9, 9, 9]]]], dtype=jt.uint8)
    expected = torch.nn.functional.interpolate(torch.tensor(x.tolist(), dtype=torch.uint8), scale_factor=1.5,
                                               mode="bilinear")
    assert F.interpolate(x, scale_factor=1.5, mode="bilinear").tolist() == expected.tolist()
    # picking a source element is exact for every dtype
    assert F.interpolate(jt.ones(1, 2, 4, 4, dtype=jt.uint8), scale_factor=1.5).tolist() == \
        jt.ones(1, 2, 6, 6, dtype=jt.uint8).tolist()
