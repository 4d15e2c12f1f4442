"""The per-step product kernel's packing of its weight (jitorch/codegen/recurrence.py `ProductKernel.pack`): whole
panels as one copy of a (panels, k, width) view, the last panel apart, laid out as a copy per panel lays them, from
any strides of the weight (an LSTM's W_hh^T is read through the transpose of W_hh); and the selected machine's
features (`Machine.required`), kept per feature string."""

from __future__ import annotations

import numpy as np
import pytest

from jitorch.codegen import machine, recurrence


def _panel_by_panel(kernel, w):
    """The packed layout, one panel at a time: each panel's (k, width) columns in turn, zero past column n."""
    packed = np.zeros(kernel.k * kernel.ld, w.dtype)
    start = 0
    for width in kernel.widths:
        columns = w[:, start:start + width]
        packed[kernel.k * start:kernel.k * (start + width)].reshape(kernel.k, width)[:, :columns.shape[1]] = columns
        start += width
    return packed


def _weights(rng, dtype, k, n):
    """The weight in rows, as a transposed view, and as every other column of a wider array."""
    return {"rows": rng.normal(size=(k, n)).astype(dtype),
            "transposed": rng.normal(size=(n, k)).astype(dtype).T,
            "column step 2": rng.normal(size=(k, 2 * n)).astype(dtype)[:, ::2]}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
# (whole panels only; a narrow last panel; a padded whole last panel; fewer columns than a vector; one column)
@pytest.mark.parametrize("k,n", [(200, 800), (800, 200), (7, 40), (5, 50), (3, 5), (4, 1)])
def test_packing_in_one_copy_lays_out_the_panels_as_a_copy_per_panel(dtype, k, n):
    kernel = recurrence._products(dtype, k, n)
    rng = np.random.default_rng(52)
    for layout, w in _weights(rng, dtype, k, n).items():
        packed = kernel.pack(w)
        assert packed.shape == (k * kernel.ld,) and packed.dtype == np.dtype(dtype), layout
        np.testing.assert_array_equal(packed, _panel_by_panel(kernel, w), err_msg=layout)


def test_packing_writes_the_padding_zeros_whatever_the_memory_held():
    """The packed buffer starts uninitialised: the columns past n of the last panel must be written as zeros
    (the kernel's padding columns of ``out`` are sums over them)."""
    kernel = recurrence._products("float32", 6, 20)
    assert kernel.ld > 20
    for _ in range(20):  # (fresh buffers, some of them reusing freed memory of non-zero values)
        garbage = np.full(6 * kernel.ld, np.nan, np.float32)
        del garbage
        packed = kernel.pack(np.ones((6, 20), np.float32)).reshape(-1)
        last = packed[6 * (kernel.ld - kernel.widths[-1]):].reshape(6, kernel.widths[-1])
        done = 20 - (kernel.ld - kernel.widths[-1])
        assert (last[:, :done] == 1).all() and (last[:, done:] == 0).all()


def test_required_features_are_the_strings_plus_features_per_machine():
    a = machine.Machine("x86_64-unknown-linux-gnu", "x", "+avx2,-avx512f,+fma")
    b = machine.Machine("x86_64-unknown-linux-gnu", "x", "+avx2,+avx512f,-fma")
    assert a.required() == frozenset({"avx2", "fma"}) and b.required() == frozenset({"avx2", "avx512f"})
    assert a.required() == frozenset({"avx2", "fma"})  # (asked again: the kept set of its own string)
    assert machine.Machine("t", "c", "").required() == frozenset()
