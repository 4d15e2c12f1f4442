"""Bicubic interpolate, affine_grid and grid_sample (jitorch/nn/sampling.py) against torch: values and gradients
in float32 and float64, odd shapes, every mode and padding, torch's errors, and compiled == eager in one graph."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as JF
from tests.nn.torch_oracle import check, normal, same_error
from tests.support import assert_close


def _arr(shape, dtype=np.float32, scale=1.0):
    return (normal(shape, int(scale * 10)) * scale).astype(dtype)


# Bicubic interpolate -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("shape,kwargs", [
    ((2, 3, 5, 7), {"size": (9, 4)}), ((1, 2, 4, 4), {"scale_factor": 2.5}),
    ((1, 1, 6, 3), {"scale_factor": (0.4, 1.3)}), ((1, 1, 1, 5), {"size": (3, 1)}), ((2, 1, 3, 3), {"size": (1, 1)}),
    ((1, 1, 3, 4), {"scale_factor": 1.7, "recompute_scale_factor": True})])
@pytest.mark.parametrize("align_corners", [False, True])
def test_bicubic_interpolate_matches_torch_with_gradients(dtype, tol, shape, kwargs, align_corners):
    check(lambda F, x: F.interpolate(x, mode="bicubic", align_corners=align_corners, **kwargs), _arr(shape, dtype),
          atol=tol, rtol=tol)


def test_bicubic_interpolate_of_a_transposed_input_matches_torch():
    x = _arr((1, 2, 5, 6)).transpose(0, 1, 3, 2)
    check(lambda F, x: F.interpolate(x, size=(7, 3), mode="bicubic", align_corners=False), x)


def test_bicubic_taps_reach_past_the_edge_and_clamp_there():
    """A one-hot input at the edge: the taps below index 0 read the edge (torch clamps them), so the edge
    element's weight exceeds its interior cubic weight; the weights of each output sum to 1."""
    x = np.zeros((1, 1, 1, 6), np.float32)
    x[..., 0] = 1
    out = check(lambda F, x: F.interpolate(x, size=(1, 11), mode="bicubic", align_corners=False), x, grad=False)[0]
    ones = JF.interpolate(jt.ones(1, 1, 1, 6), size=(1, 11), mode="bicubic", align_corners=False)
    assert_close(ones, np.ones((1, 1, 1, 11), np.float32), atol=1e-6, rtol=0)
    assert out[0, 0, 0, 0].item() > 1.0  # overshoot at the clamped edge, as torch's


@pytest.mark.parametrize("shape", [(1, 1, 4), (1, 1, 2, 2, 2)])
def test_bicubic_of_other_than_4d_raises_as_torch(shape):
    same_error(lambda F, x: F.interpolate(x, scale_factor=2, mode="bicubic"), np.zeros(shape, np.float32))


def test_bicubic_of_integers_raises_as_torch():
    same_error(lambda F, x: F.interpolate(x, scale_factor=2, mode="bicubic"), np.ones((1, 1, 3, 3), np.int64))


def test_bicubic_compiles_to_one_graph_equal_to_eager():
    x = _arr((2, 2, 5, 4))
    check(lambda F, x: F.interpolate(x, scale_factor=(1.5, 0.75), mode="bicubic", align_corners=True), x,
          compiled=True)
    fn = jt.compile(lambda x: JF.interpolate(x, size=(6, 6), mode="bicubic"), fullgraph=True)
    lowered = fn.lower(jt.tensor(x))
    names = [node.op.name for node in lowered.graph.nodes]
    assert names.count("index_select") == 8 and lowered.kernels  # four taps per dim, fused weighting


# affine_grid -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-6), (np.float64, 1e-14)])
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 1, 3), (2, 2, 3, 1, 4)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_matches_torch_with_gradients(dtype, tol, size, align_corners):
    nd = len(size) - 2
    with pytest.warns(UserWarning) if align_corners and min(size[2:]) == 1 else _no_warning():
        check(lambda F, t: F.affine_grid(t, size, align_corners=align_corners), _arr((2, nd, nd + 1), dtype),
              atol=tol, rtol=tol, compiled=True)


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("theta_shape,size", [
    ((2, 2, 3), (2, 1, 0, 3)), ((2, 2, 3), (2, 1, 2, 3, 3)), ((2, 3, 4), (2, 1, 2, 3)), ((2, 2, 3), (2, 1, 2))])
def test_affine_grid_errors_as_torch(theta_shape, size):
    same_error(lambda F, t: F.affine_grid(t, size, align_corners=False), np.zeros(theta_shape, np.float32))


def test_affine_grid_of_integer_theta_raises_as_torch():
    same_error(lambda F, t: F.affine_grid(t, (2, 1, 2, 3), align_corners=False), np.zeros((2, 2, 3), np.int64))


def test_affine_grid_warns_without_align_corners():
    with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior has changed"):
        JF.affine_grid(jt.zeros(1, 2, 3), (1, 1, 2, 2))


# grid_sample -------------------------------------------------------------------------------------------

MODES = [(2, "bilinear"), (2, "nearest"), (2, "bicubic"), (3, "bilinear"), (3, "nearest")]


@pytest.mark.parametrize("nd,mode", MODES)
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners,dtype,tol", [(False, np.float32, 2e-5), (True, np.float32, 2e-5),
                                                     (False, np.float64, 1e-12)])
def test_grid_sample_matches_torch_with_gradients(nd, mode, padding_mode, align_corners, dtype, tol):
    """Grid points spread past [-1, 1] (a normal of scale 1.6), so every padding's reflections and clips run;
    the gradient with respect to the grid as well as the input (nearest's grid gradient: zeros, as torch)."""
    shape, grid = ((2, 3, 4, 5), (2, 3, 4, 2)) if nd == 2 else ((2, 2, 3, 4, 5), (2, 2, 3, 2, 3))
    if mode == "bicubic":
        tol *= 5  # (the grid's gradient sums 16 taps' terms that nearly cancel far outside the border)
    check(lambda F, x, g: F.grid_sample(x, g, mode, padding_mode, align_corners), _arr(shape, dtype),
          _arr(grid, dtype, 1.6), atol=tol, rtol=tol)


def test_grid_sample_with_one_pixel_dims_and_strided_inputs_matches_torch():
    x = _arr((1, 2, 1, 6))[..., ::2]
    g = _arr((1, 5, 2, 2), scale=1.3).transpose(0, 2, 1, 3)
    for padding_mode in ("zeros", "border", "reflection"):
        for align_corners in (False, True):
            check(lambda F, x, g: F.grid_sample(x, g, "bilinear", padding_mode, align_corners), x, g)


def test_grid_sample_far_and_nan_coordinates_follow_torch():
    """Far (1e30) coordinates give 0 with zeros padding and the border with border padding; NaN and infinite ones
    give NaN where weights are computed from them (bilinear and bicubic, unclipped), 0 for nearest with zeros
    padding and the pixel at 0 or the border when clipped (as torch's CPU kernels)."""
    x = np.arange(1.0, 10.0, dtype=np.float32).reshape(1, 1, 3, 3)
    g = np.array([[[[np.nan, 0.0], [0.0, np.nan], [np.inf, 0.0], [-np.inf, 0.0], [1e30, 0.0], [0.0, -1e30]]]],
                 np.float32)
    for mode, padding_mode in itertools.product(("bilinear", "nearest", "bicubic"), ("zeros", "border", "reflection")):
        want = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(g), mode, padding_mode, False).numpy()
        got = JF.grid_sample(jt.tensor(x), jt.tensor(g), mode, padding_mode, False).numpy()
        # (reflecting 1e30 is float noise: jitorch folds it exactly by fmod, torch's kernel by a rounded quotient)
        kept = slice(0, 4) if padding_mode == "reflection" else slice(None)
        np.testing.assert_array_equal(got[..., kept], want[..., kept], err_msg=f"{mode}, {padding_mode}")


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_of_16_bit_floats_computes_in_float32_and_rounds_once(mode):
    """float16 and bfloat16 sampled in float32 and rounded once: torch's float32 result of the same (16-bit)
    values, rounded to the 16-bit type, within one ulp (torch's own 16-bit kernel rounds every step: a few ulps
    off both, documented)."""
    x, g = _arr((1, 2, 5, 6)), _arr((1, 3, 4, 2), scale=1.2)
    for torch_dtype, dtype, ulp in ((torch.float16, jt.float16, 2 ** -10), (torch.bfloat16, jt.bfloat16, 2 ** -7)):
        tx, tg = (torch.tensor(a).to(torch_dtype).float() for a in (x, g))
        want = torch.nn.functional.grid_sample(tx, tg, mode, "border", False).to(torch_dtype).float().numpy()
        got = JF.grid_sample(jt.tensor(x).to(dtype), jt.tensor(g).to(dtype), mode, "border", False)
        assert got.dtype == dtype
        np.testing.assert_allclose(got.float().numpy(), want, rtol=ulp, atol=ulp)


@pytest.mark.parametrize("x_shape,g_shape,kwargs", [
    ((2, 1, 3, 3), (3, 2, 2, 2), {}), ((2, 1, 3, 3), (2, 2, 2, 3), {}), ((2, 1, 3, 3), (2, 2, 2, 2, 3), {}),
    ((2, 1, 0, 3), (2, 2, 2, 2), {}), ((2, 1, 3, 3, 3), (2, 1, 1, 1, 3), {"mode": "bicubic"}),
    ((2, 1, 3), (2, 1, 1), {}), ((1, 1, 2, 2), (1, 1, 1, 2), {"mode": "x"}),
    ((1, 1, 2, 2), (1, 1, 1, 2), {"padding_mode": "x"})])
def test_grid_sample_errors_as_torch(x_shape, g_shape, kwargs):
    same_error(lambda F, x, g: F.grid_sample(x, g, align_corners=False, **kwargs), np.zeros(x_shape, np.float32),
               np.zeros(g_shape, np.float32))


@pytest.mark.parametrize("x_dtype,g_dtype", [(np.float32, np.float64), (np.int64, np.float32), (np.int64, np.int64)])
def test_grid_sample_dtype_errors_as_torch(x_dtype, g_dtype):
    same_error(lambda F, x, g: F.grid_sample(x, g, align_corners=False), np.zeros((1, 1, 2, 2), x_dtype),
               np.zeros((1, 1, 1, 2), g_dtype))


def test_spatial_transformer_step_compiles_to_one_graph_equal_to_eager():
    """affine_grid then grid_sample (bilinear and bicubic): one graph, no graph break, eager's values and
    gradients for the input, the grid's theta and the sampled image; each mode gathers all its taps (4
    corners, 16 taps) at once."""
    x, theta = _arr((2, 3, 5, 4)), _arr((2, 2, 3), scale=0.7)

    def step(F, x, theta):
        grid = F.affine_grid(theta, (2, 3, 4, 6), align_corners=False)
        return (F.grid_sample(x, grid, "bilinear", "reflection", False)
                + F.grid_sample(x, grid, "bicubic", "border", False))

    check(step, x, theta, atol=3e-5, rtol=3e-5, compiled=True)
    fn = jt.compile(lambda x, t: step(JF, x, t), fullgraph=True)
    lowered = fn.lower(jt.tensor(x), jt.tensor(theta))
    names = [node.op.name for node in lowered.graph.nodes]
    assert "bmm" in names and names.count("gather") == 2 and lowered.kernels
