"""Shared test helpers: tensors in every layout with their NumPy twin, comparisons, the ops torch shares.

`tensor_and_array(arr, layout)` builds a jitorch tensor whose elements equal a
NumPy array but whose memory layout varies: contiguous, transposed, sliced with
steps, expanded with stride 0, or an offset view into a larger storage.
"""

from __future__ import annotations

import contextlib

import numpy as np
from hypothesis import strategies as st

import jitorch as jt

FLOAT_DTYPES = [jt.float16, jt.bfloat16, jt.float32, jt.float64]
INT_DTYPES = [jt.uint8, jt.int8, jt.int16, jt.int32, jt.int64]
ALL_DTYPES = [jt.bool] + INT_DTYPES + FLOAT_DTYPES
LAYOUTS = ["contiguous", "transposed", "strided", "expanded", "offset"]


def shapes(min_dims=0, max_dims=4, min_side=0, max_side=5):
    """Shapes including 0-d, empty dims and size-1 dims."""
    return st.lists(st.integers(min_side, max_side), min_size=min_dims, max_size=max_dims).map(tuple)


def random_array(shape, dtype, rng, low=-10, high=10):
    """A NumPy array of ``shape`` holding values representable in ``dtype``."""
    if dtype is jt.bool:
        return rng.random(shape) < 0.5
    if not dtype.is_floating_point:
        lo, hi = (0, 20) if dtype is jt.uint8 else (low, high)
        return rng.integers(lo, hi, size=shape).astype(dtype.np)
    return rng.uniform(low, high, size=shape).astype(dtype.np)


def tensor_and_array(arr, layout="contiguous"):
    """(tensor, expected values): a jitorch tensor built from ``arr`` in ``layout``.

    "expanded" broadcasts the first slice of ``arr`` along dim 0 (stride 0), so
    its expected values differ from ``arr``; the other layouts keep the values.
    """
    arr = np.asarray(arr)
    dtype = jt.runtime.dtypes.from_numpy_dtype(arr.dtype)
    if layout == "contiguous" or arr.ndim == 0:
        return jt.tensor(arr, dtype=dtype), arr
    if layout == "transposed":
        base = jt.tensor(np.ascontiguousarray(np.swapaxes(arr, 0, -1)), dtype=dtype)
        return base.transpose(0, -1), arr
    if layout == "strided":
        big = np.zeros(tuple(2 * n for n in arr.shape), dtype=arr.dtype)
        big[tuple(slice(None, None, 2) for _ in arr.shape)] = arr
        return jt.tensor(big, dtype=dtype)[tuple(slice(None, None, 2) for _ in arr.shape)], arr
    if layout == "expanded":
        if arr.shape[0] == 0:
            return jt.tensor(arr, dtype=dtype), arr
        first = np.ascontiguousarray(arr[:1])
        return jt.tensor(first, dtype=dtype).expand(*arr.shape), np.broadcast_to(first, arr.shape).copy()
    if layout == "offset":
        flat = np.concatenate([np.zeros(3, arr.dtype), arr.reshape(-1)])
        return jt.tensor(flat, dtype=dtype)[3:].view(*arr.shape), arr
    raise ValueError(layout)


def to_numpy(t):
    """Values of a tensor as a NumPy array (bfloat16 and float16 widened to float32)."""
    a = np.asarray(t._array())
    if t.dtype in (jt.bfloat16, jt.float16):
        a = a.astype(np.float32)
    return a


def assert_close(actual, expected, dtype=None, rtol=None, atol=None, equal_nan=True):
    """Compare a tensor's values with NumPy's, with tolerances by dtype."""
    dtype = dtype or actual.dtype
    tol = {jt.float16: (1e-3, 1e-3), jt.bfloat16: (1e-2, 1e-2), jt.float32: (1.3e-6, 1e-5),
           jt.float64: (1e-7, 1e-7)}.get(dtype, (0, 0))
    rtol = tol[0] if rtol is None else rtol
    atol = tol[1] if atol is None else atol
    got = to_numpy(actual)
    exp = np.asarray(expected)
    assert got.shape == exp.shape, f"shape {got.shape} != {exp.shape}"
    if dtype.is_floating_point:
        np.testing.assert_allclose(got.astype(np.float64), exp.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=equal_nan)
    else:
        np.testing.assert_array_equal(got, exp)


def torch_forms(op):
    """The call forms of registry op ``op`` that torch has too, by the same name: of "function", "method",
    "inplace" (``op_``) and "out" (``out=``, with the function)."""
    # torch imported here, not with the module: subprocesses that import these helpers (the CUDA selftest's
    # samples, the plan cache's fresh processes) never need it, and it is 1.3 s of CPU to import
    import torch
    forms = []
    if "function" in op.variants and hasattr(torch, op.public_name):
        forms.append("function")
    if "method" in op.variants and hasattr(torch.Tensor, op.method_name):
        forms.append("method")
    if "inplace" in op.variants and hasattr(torch.Tensor, op.method_name + "_"):
        forms.append("inplace")
    if "out" in op.variants and "function" in forms:
        forms.append("out")
    return forms


def geometry(shape, strides, offset):
    """Shape, and the strides and offset that address elements: a size-1 dim's stride addresses none, and
    an empty tensor's offset none (so two views equal by this address the same elements)."""
    if 0 in shape:
        return tuple(shape)
    return tuple(shape), tuple(st for n, st in zip(shape, strides) if n != 1), offset


def classifier_step(model, opt):
    """A training step of a classifier: zero the gradients, cross-entropy, backward, the optimizer's step;
    returns the loss."""
    def step(x, y):
        opt.zero_grad()
        loss = jt.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


# Layouts of `laid_out`: the geometries whose memory order a new result may follow.
MEMORY_LAYOUTS = ["contiguous", "transposed", "permuted", "stepped", "expanded", "offset"]


def laid_out(T, layout, values):
    """``values`` (a NumPy array of 2 or more dims) as a tensor of library ``T`` (jitorch or torch) in
    ``layout``: the same geometry in both libraries. "expanded" repeats the first slice along dim 0."""
    if layout == "contiguous":
        return T.tensor(values)
    if layout == "transposed":
        return T.tensor(np.ascontiguousarray(np.swapaxes(values, -1, -2))).transpose(-1, -2)
    if layout == "permuted":  # dim 0 innermost
        return T.tensor(np.ascontiguousarray(np.moveaxis(values, 0, -1))).movedim(-1, 0)
    if layout == "stepped":
        steps = tuple(slice(None, None, 2) for _ in values.shape)
        big = np.zeros(tuple(2 * n for n in values.shape), values.dtype)
        big[steps] = values
        return T.tensor(big)[steps]
    if layout == "expanded":
        return T.tensor(np.ascontiguousarray(values[:1])).expand(*values.shape)
    if layout == "offset":
        return T.tensor(np.concatenate([np.zeros(3, values.dtype), values.reshape(-1)]))[3:].view(*values.shape)
    raise ValueError(layout)


def tensor_geometry(t):
    """`geometry` of a tensor (jitorch's or torch's)."""
    return geometry(tuple(t.shape), t.stride(), t.storage_offset())


class _PassingHook:
    """A dispatch hook that takes no call (``passes_on``): every call runs the general path."""
    passes_on = True

    def call(self, op, args, out):
        return NotImplemented

    def call_inplace(self, op, args):
        return NotImplemented


@contextlib.contextmanager
def general_path():
    """Eager calls take the general path (conversion, meta rule, kernel, wrapping) inside: a dispatch hook
    turns the eager shortcuts off, as a trace or a profile does."""
    from jitorch.ops import registry
    registry.DISPATCH_HOOKS.append(_PassingHook())
    try:
        yield
    finally:
        registry.DISPATCH_HOOKS.pop()


def load_script(path, name):
    """The Python file at ``path`` (a benchmark or example script) imported as module ``name``."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def raises_as_torch(call):
    """``call(torch)`` raises, and ``call(jitorch)`` raises the same exception type with the same message."""
    import pytest
    import torch
    with pytest.raises(Exception) as expected:
        call(torch)
    with pytest.raises(type(expected.value)) as got:
        call(jt)
    assert str(got.value) == str(expected.value)


def flat_results(result):
    """An op's result as a flat list: a tuple, namedtuple or list of tensors, or of such lists (histogramdd's
    ``(hist, bin_edges)``), or one value."""
    if not isinstance(result, (tuple, list)):
        return [result]
    return [t for r in result for t in (flat_results(r) if isinstance(r, (tuple, list)) else [r])]
