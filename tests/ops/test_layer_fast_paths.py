"""The eager shortcuts of ``F.linear`` (`ops.linear._linear_fast`) and ``F.layer_norm``
(`ops.normalization._layer_norm_fast`): values, layout and history as torch's, and the general path taken
wherever a shortcut does not apply."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops.registry import OPS


@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 3, 5), (0, 5)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_values_and_layout_match_torch(shape, dtype, with_bias):
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in (shape, (4, 5), (4,)))
    bias = (jt.from_numpy(b), torch.from_numpy(b)) if with_bias else (None, None)
    got = OPS["linear"].fast((jt.from_numpy(x), jt.from_numpy(w), bias[0]))
    want = torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(w), bias[1])
    assert got is not None and got.dtype is getattr(jt, dtype)
    assert tuple(got.shape) == tuple(want.shape) and got.stride() == want.stride() and got.is_contiguous()
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


def test_a_transposed_input_is_read_through_its_strides():
    x = jt.arange(12.0).reshape(4, 3).t()
    w = jt.ones(2, 4)
    assert jt.nn.functional.linear(x, w).tolist() == (torch.arange(12.0).reshape(4, 3).t() @ torch.ones(4, 2)).tolist()


def test_under_no_grad_parameters_that_require_grad_give_no_history():
    layer = jt.nn.Linear(5, 4)
    with jt.no_grad():
        y = layer(jt.ones(2, 5))
    assert y.grad_fn is None and not y.requires_grad


def test_in_grad_mode_the_fast_path_records_the_node():
    """(Since session 54: before, tensors that require grad took the general path, which records the same node.)
    An in-place caller's ``record=False`` still gets None."""
    x, w = jt.ones(2, 5, requires_grad=True), jt.ones(4, 5)
    assert OPS["linear"].fast((x, w, None), record=False) is None
    y = OPS["linear"].fast((x, w, None))
    assert y.grad_fn.name() == "LinearBackward0"
    y.sum().backward()
    assert x.grad.tolist() == [[4.0] * 5] * 2


@pytest.mark.parametrize("args", [
    lambda: (jt.ones(2, 5), jt.ones(4, 6), None),                      # shapes disagree
    lambda: (jt.ones(2, 5), jt.ones(4, 5, dtype=jt.float64), None),    # dtypes disagree
    lambda: (jt.ones(2, 5, dtype=jt.int64), jt.ones(4, 5, dtype=jt.int64), None),
    lambda: (jt.ones(2, 5), jt.ones(4, 5), jt.ones(3)),                # bias of another length
    lambda: (jt.ones(2, 5), jt.ones(4, 5), jt.ones(())),               # a 0-d bias: the general path serves it
    lambda: (jt.ones(2, 5), jt.ones(2, 4, 5), None),                   # not a 2-d weight
])
def test_other_calls_take_the_general_path(args):
    assert OPS["linear"].fast(args()) is None


def test_the_general_path_raises_torchs_error_for_shapes_that_disagree():
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x5 and 6x4\)"):
        jt.nn.functional.linear(jt.ones(2, 5), jt.ones(4, 6))


def test_a_profile_sees_the_linear_op():
    from jitorch.profiler import profile
    with profile() as prof:
        jt.nn.functional.linear(jt.ones(2, 5), jt.ones(4, 5))
    assert "aten::linear" in prof.key_averages().table()


@pytest.mark.parametrize("shape,normalized", [((3, 8), (8,)), ((2, 3, 4), (3, 4)), ((2, 3, 4), 4)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_values_match_torch(shape, normalized, dtype, affine):
    rng = np.random.default_rng(1)
    k = (normalized,) if isinstance(normalized, int) else normalized
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in (shape, k, k))
    params = ((jt.from_numpy(w), jt.from_numpy(b)), (torch.from_numpy(w), torch.from_numpy(b))) if affine else (
        (None, None), (None, None))
    got = OPS["layer_norm"].fast((jt.from_numpy(x), normalized, *params[0], 1e-5))
    want = torch.nn.functional.layer_norm(torch.from_numpy(x), k, *params[1])
    assert got is not None and got.dtype is getattr(jt, dtype) and got.stride() == want.stride()
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("args", [
    lambda: (jt.ones(2, 4), (3,), None, None, 1e-5),                    # a shape the input does not end with
    lambda: (jt.ones(2, 4), (True,), None, None, 1e-5),                 # bools: the converter's TypeError
    lambda: (jt.ones(2, 4), (4,), jt.ones(3), None, 1e-5),              # a weight of another shape
    lambda: (jt.ones(2, 4), (4,), jt.ones(4, dtype=jt.float64), None, 1e-5),
    lambda: (jt.ones(2, 4, dtype=jt.float16), (4,), None, None, 1e-5),  # half types: computed in float32
    lambda: (jt.ones(0, 4), (4,), None, None, 1e-5),
    lambda: (jt.ones(2, 4, requires_grad=True), (4,), None, None, 1e-5),
])
def test_other_layer_norms_take_the_general_path(args):
    assert OPS["layer_norm"].fast(args()) is None


def test_a_layer_norm_in_grad_mode_records_its_node_and_under_no_grad_none():
    layer = jt.nn.LayerNorm(4)
    assert layer(jt.ones(2, 4)).grad_fn is not None
    with jt.no_grad():
        assert layer(jt.ones(2, 4)).grad_fn is None
