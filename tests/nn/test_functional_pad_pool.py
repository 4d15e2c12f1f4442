"""F.pad with negative widths in every mode, and the pools' argument checks, against torch."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jitorch as jt
import jitorch.nn.functional as JF
from tests.nn.torch_oracle import check, check_compiled, same_error

_SPATIAL = (4, 3, 5)


def _pad_cases(nd):
    """Every width pair in -3..3 for 1-d and 2-d pads, a fixed sample of them for 3-d."""
    if nd < 3:
        return list(itertools.product(range(-3, 4), repeat=2 * nd))
    rng = np.random.default_rng(0)
    return [tuple(int(v) for v in rng.integers(-3, 4, 6)) for _ in range(200)]


def _torch_pad(x, pad, mode):
    """torch's padded array, or the exception it raises."""
    try:
        return TF.pad(torch.tensor(x), pad, mode=mode).numpy()
    except RuntimeError as error:
        return error


def _trimmed_wrap_too_far(shape, pad):
    """Whether a circular pad wraps further than the elements its dim's negative widths leave (torch reads
    memory it has not written there; jitorch refuses)."""
    for i in range(len(pad) // 2):
        n, left, right = shape[-1 - i], pad[2 * i], pad[2 * i + 1]
        if max(left, right) > n - max(-left, 0) - max(-right, 0):
            return True
    return False


@pytest.mark.parametrize("mode", ["constant", "circular", "reflect", "replicate"])
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_pad_with_negative_widths_matches_torch(mode, nd):
    shape = (2, 3) + _SPATIAL[:nd]
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    for pad in _pad_cases(nd):
        expected = _torch_pad(x, pad, mode)
        refused = isinstance(expected, Exception) or (mode == "circular" and _trimmed_wrap_too_far(shape, pad))
        if refused:
            with pytest.raises(RuntimeError):
                JF.pad(jt.tensor(x), pad, mode=mode)
        else:
            np.testing.assert_array_equal(JF.pad(jt.tensor(x), pad, mode=mode).numpy(), expected, err_msg=str(pad))


@pytest.mark.parametrize("pad", [(0, 0), (-1, 0), (0, 0, -1, 1), (1, 0, -1, 0), (0, -2, 0, 0)])
@pytest.mark.parametrize("layout", ["contiguous", "permuted"])
def test_a_constant_pad_is_a_new_tensor_with_torchs_strides(pad, layout):
    """Found by the fuzzer's pad chains (seed 5150127: ``F.pad(x1, (0, 0)).as_strided([1], [4], 1)``): a constant
    pad of zero or negative widths returned the input or a view of it (a write reached the input, as_strided
    read its storage), and cropping after growing left a view; torch's result is always new memory, a clone
    of the cropped input or the grown result, compact. Eager's and compiled."""
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

    def make(lib):
        x = lib.tensor(base)
        return x.permute(2, 0, 1) if layout == "permuted" else x

    want = TF.pad(make(torch), pad)
    for f in (JF.pad, jt.compile(JF.pad)):
        x = make(jt)
        got = f(x, pad)
        assert got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
        assert got.stride() == want.stride() and got.storage_offset() == 0
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        got.fill_(-1)
        np.testing.assert_array_equal(x.numpy(), make(torch).numpy())


def test_circular_pad_with_one_negative_and_one_positive_width_trims_then_wraps():
    x = np.arange(1.0, 13.0, dtype=np.float32).reshape(1, 1, 3, 4)
    check(lambda F, x: F.pad(x, (-1, 2, 2, -1), mode="circular"), x)
    check(lambda F, x: F.pad(x, (2, -2, -1, 1), mode="circular"), x)


def test_circular_pad_wrapping_past_the_trimmed_elements_is_refused():
    with pytest.raises(RuntimeError, match="wraps around the 1 elements"):
        JF.pad(jt.zeros(2, 3, 4), (-3, 2), mode="circular")


@pytest.mark.parametrize("pad", [(-3, -2), (-2, -3)])
def test_circular_pad_to_a_negative_size_raises_as_torch(pad):
    same_error(lambda F, x: F.pad(x, pad, mode="circular"), np.zeros((1, 2, 4), np.float32))


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape, pad", [((1, 2, 4), (-3, -1)), ((1, 1, 2, 4, 3), (-3, -1, -2, -2, -2, -2)),
                                        ((1, 1, 2, 4, 3), (0, 0, 0, 0, -2, -1))])
def test_edge_pad_to_an_empty_or_negative_size_raises_as_torch(mode, shape, pad):
    same_error(lambda F, x: F.pad(x, pad, mode=mode), np.zeros(shape, np.float32))


def test_negative_edge_pads_compile_with_gradients(rng):
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    for mode in ("circular", "reflect", "replicate"):
        check(lambda F, x: F.pad(x, (-1, 2, 1, -2), mode=mode), x, compiled=True)


# Pool arguments ----------------------------------------------------------------------------------------

_POOLS = ["max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d"]
_WRONG_LENGTHS = [(2, 1), (2, 1, 1), (1, 1, 1, 1), ()]


def _wrong_length_cases():
    for name in _POOLS:
        nd = int(name[-2])
        args = ("kernel_size", "stride", "padding") + (("dilation",) if name.startswith("max") else ())
        for arg in args:
            for value in _WRONG_LENGTHS:
                if len(value) != nd and not (arg == "stride" and value == ()):
                    value = tuple(0 for _ in value) if arg == "padding" else value
                    yield name, arg, value


@pytest.mark.parametrize("name, arg, value", list(_wrong_length_cases()))
def test_pool_refuses_a_wrong_length_tuple_as_torch(name, arg, value):
    nd = int(name[-2])
    x = np.zeros((1, 2) + (5,) * nd, np.float32)
    same_error(lambda F, x: getattr(F, name)(x, **{"kernel_size": 2, arg: value}), x)


def test_pool2d_padding_of_three_values_is_refused():
    """Issue 18: ``padding=(1, 1, 1)`` was accepted by the 2-d pools."""
    for name in ("avg_pool2d", "max_pool2d"):
        with pytest.raises(RuntimeError, match="padding must either be a single int, or a tuple of two ints"):
            getattr(JF, name)(jt.zeros(1, 1, 4, 4), 2, padding=(1, 1, 1))


# 3-d pools -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [dict(kernel_size=2), dict(kernel_size=(2, 3, 2), stride=(1, 2, 1), padding=1),
                                    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
                                    dict(kernel_size=2, dilation=(2, 1, 1))])
def test_max_pool3d_matches_torch(rng, kwargs):
    x = rng.standard_normal((2, 2, 5, 6, 5)).astype(np.float32)
    check(lambda F, x: F.max_pool3d(x, **kwargs, return_indices=True), x)
    check(lambda F, x: F.max_pool3d(x[0], **kwargs), x)


@pytest.mark.parametrize("kwargs", [dict(kernel_size=2), dict(kernel_size=(2, 3, 2), stride=(1, 2, 1), padding=1),
                                    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                         count_include_pad=False),
                                    dict(kernel_size=2, divisor_override=3)])
def test_avg_pool3d_matches_torch(rng, kwargs):
    x = rng.standard_normal((2, 2, 5, 6, 5)).astype(np.float32)
    check(lambda F, x: F.avg_pool3d(x, **kwargs), x)


def test_3d_pools_compile(rng):
    x = rng.standard_normal((2, 2, 4, 5, 4)).astype(np.float32)
    check_compiled(lambda F, x: F.max_pool3d(x, 2, 1, 1) + F.avg_pool3d(x, 2, 1, 1), x)


def test_3d_pools_refuse_a_4d_kernel_on_2d_input():
    for name in ("max_pool3d", "avg_pool3d"):
        with pytest.raises(RuntimeError, match="non-empty 4D or 5D"):
            getattr(JF, name)(jt.zeros(2, 4, 4), 2)


# padding modules ----------------------------------------------------------------------------------------

_PAD_MODULES = [("ConstantPad1d", (2, 3.5)), ("ConstantPad2d", ((1, 0, 2, 1), -1.0)), ("ConstantPad3d", (1, 2.0)),
                ("ZeroPad1d", ((1, 2),)), ("ZeroPad2d", (1,)), ("ZeroPad3d", ((1, 0, 0, 1, 2, 0),)),
                ("ReflectionPad1d", (2,)), ("ReflectionPad2d", ((1, 2, 0, 1),)), ("ReflectionPad3d", (1,)),
                ("ReplicationPad1d", ((3, 1),)), ("ReplicationPad2d", (2,)),
                ("ReplicationPad3d", ((1, 0, 2, 1, 0, 1),)),
                ("CircularPad1d", (2,)), ("CircularPad2d", ((-1, 2, 1, 0),)), ("CircularPad3d", (1,))]


@pytest.mark.parametrize("name, args", _PAD_MODULES)
@pytest.mark.parametrize("batched", [True, False])
def test_padding_module_matches_torch(name, args, batched):
    t_mod, j_mod = getattr(torch.nn, name)(*args), getattr(jt.nn, name)(*args)
    assert repr(j_mod) == repr(t_mod) and j_mod.padding == t_mod.padding
    nd = int(name[-2])
    shape = ((2, 3) if batched else (3,)) + _SPATIAL[:nd]
    check(lambda F, x: (t_mod if F is TF else j_mod)(x), np.arange(np.prod(shape), dtype=np.float32).reshape(shape))


def test_circular_pad_module_refuses_other_dims_as_torch():
    with pytest.raises(ValueError) as expected:
        torch.nn.CircularPad2d(1)(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=re.escape(str(expected.value))):
        jt.nn.CircularPad2d(1)(jt.zeros(2, 3))


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_avg_pool_of_int64_is_int64_rounded_toward_zero_as_torch_not_float(nd):
    """avg_pool of int64 returned float32 means (6.5 where torch gives 6)."""
    values = np.array([-7, 2, -3, 5, 4, 1, -8, 9], dtype=np.int64).reshape((1, 1) + (2,) * (nd - 1) + (-1,))
    fn = f"avg_pool{nd}d"
    kwargs = {"kernel_size": 2, "padding": 1, "count_include_pad": False}
    got = getattr(jt.nn.functional, fn)(jt.tensor(values), **kwargs)
    want = getattr(torch.nn.functional, fn)(torch.tensor(values), **kwargs)
    assert got.dtype is jt.int64 and got.tolist() == want.tolist()


@pytest.mark.parametrize("dtype", ["uint8", "int16", "int32", "bool"])
def test_avg_pool_of_other_integer_types_is_torchs_not_implemented_error(dtype):
    for nd in (1, 2, 3):
        shape = (1, 1) + (2,) * nd
        with pytest.raises(NotImplementedError) as want:
            getattr(torch.nn.functional, f"avg_pool{nd}d")(torch.ones(shape, dtype=getattr(torch, dtype)), 2)
        with pytest.raises(NotImplementedError, match=str(want.value).replace('"', '.')):
            getattr(jt.nn.functional, f"avg_pool{nd}d")(jt.ones(shape, dtype=getattr(jt, dtype)), 2)
