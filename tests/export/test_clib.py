"""The AOT C library: a C program built with the system compiler runs it and matches jitorch."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import jitorch as jt
from jitorch.export import Dim, ExportError

CC = shutil.which("cc") or shutil.which("gcc")

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include "mlp.h"

int main(void) {
    float x[6 * 4], y[3], h[6 * 3], s;
    int64_t xs[] = {6, 4}, ys[] = {3}, bad[] = {7, 4}, hshape[2];
    FILE *f = fopen("in.bin", "rb");
    if (fread(x, 4, 24, f) != 24 || fread(y, 4, 3, f) != 3) return 10;
    fclose(f);
    void *in[] = {x, y}, *out[] = {h, &s};
    const int64_t *shapes[] = {xs, ys}, *bad_shapes[] = {bad, ys};
    if (mlp_num_inputs() != 2 || mlp_num_outputs() != 2 || mlp_output_ndim(0) != 2) return 11;
    if (mlp_output_shape(0, hshape) != MLP_OK || hshape[0] != 6 || hshape[1] != 3) return 12;
    if (mlp_run(in, bad_shapes, NULL, out, NULL) != MLP_BAD_SHAPE) return 13;
    printf("%s\n", mlp_status_string(MLP_BAD_SHAPE));
    int status = mlp_run(in, shapes, NULL, out, NULL);
    if (status != MLP_OK) return 20 + status;
    f = fopen("out.bin", "wb");
    fwrite(h, 4, 18, f); fwrite(&s, 4, 1, f);
    fclose(f);
    return 0;
}
"""


def _mlp():
    rng = np.random.default_rng(0)
    w = jt.tensor(rng.standard_normal((4, 3)).astype(np.float32))

    def f(x, y):
        h = (x @ w).relu() + y
        return h, x.t().exp().sum()
    return f


def test_c_compiler_is_present():
    assert CC is not None, "no system C compiler (cc/gcc): the C library cannot be built on this machine"


def test_c_program_matches_jitorch(tmp_path):
    f = _mlp()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    y = rng.standard_normal(3).astype(np.float32)
    ep = jt.export(f, (jt.tensor(x), jt.tensor(y)))
    lib = ep.to_c_library(tmp_path / "build", "mlp")
    (tmp_path / "main.c").write_text(PROGRAM)
    (tmp_path / "in.bin").write_bytes(x.tobytes() + y.tobytes())
    subprocess.run([CC, "main.c", "-I", "build", "-L", "build", "-lmlp", "-Wl,-rpath,$ORIGIN/build", "-o", "main"],
                   cwd=tmp_path, check=True, capture_output=True)
    done = subprocess.run(["./main"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout.strip() == "an input's shape does not match the program"
    out = np.frombuffer((tmp_path / "out.bin").read_bytes(), np.float32)
    h, s = f(jt.tensor(x), jt.tensor(y))
    np.testing.assert_allclose(out[:18].reshape(6, 3), h.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[18], s.numpy(), rtol=1e-5)
    assert lib.endswith("libmlp.so")


def test_strided_inputs_and_in_place_updates_through_ctypes(tmp_path):
    import ctypes

    def step(w, x):
        w.mul_(0.5)
        return (w + x).sum(dim=0)
    w0 = np.arange(6, dtype=np.float64).reshape(2, 3)
    ep = jt.export(step, (jt.tensor(w0), jt.zeros(2, 3, dtype=jt.float64)))
    lib = ctypes.CDLL(ep.to_c_library(tmp_path, "step"))
    w = w0.copy()
    xt = np.ones((3, 2)).T  # a transposed, non-contiguous input
    out = np.zeros(3)
    P = ctypes.c_void_p
    I64 = ctypes.POINTER(ctypes.c_int64)
    shape = (ctypes.c_int64 * 2)(2, 3)
    xstrides = (ctypes.c_int64 * 2)(1, 2)
    status = lib.step_run((P * 2)(w.ctypes.data, xt.ctypes.data), (I64 * 2)(shape, shape),
                          (I64 * 2)(None, xstrides), (P * 1)(out.ctypes.data), None)
    assert status == 0
    np.testing.assert_allclose(w, w0 * 0.5)
    np.testing.assert_allclose(out, (w0 * 0.5 + 1).sum(axis=0))


def test_eager_op_without_c_code_is_refused(tmp_path):
    ep = jt.export(lambda x: x.sort(dim=0).values, (jt.randn(4, 3),))
    with pytest.raises(ExportError, match="the C library cannot run sort"):
        ep.to_c_library(tmp_path, "s")


def test_a_kernel_gathering_by_indices_it_cannot_check_is_refused(tmp_path):
    """A gather's indices are checked in Python before its kernel reads through them (a bad one raises torch's
    error, never reads out of bounds): the C library, which has no such check, refuses the program."""
    ep = jt.export(lambda w, i: w.index_select(0, i) * 2, (jt.randn(5, 3), jt.tensor([0, 4])))
    with pytest.raises(ExportError, match="the C library cannot check the indices of index_select in a kernel"):
        ep.to_c_library(tmp_path, "g")


def test_symbolic_dims_are_refused(tmp_path):
    ep = jt.export(lambda x: x + 1, (jt.randn(4),), dynamic_shapes={"x": {0: Dim("n")}})
    with pytest.raises(ExportError, match=r"dims \['n'\] are symbolic"):
        ep.to_c_library(tmp_path, "d")


def test_library_name_must_be_an_identifier(tmp_path):
    ep = jt.export(lambda x: x + 1, (jt.randn(4),))
    with pytest.raises(ValueError, match="must be a C identifier, got 'a-b'"):
        ep.to_c_library(tmp_path, "a-b")


def test_kernels_reading_an_eager_view_through_its_strides_read_its_root_buffer(tmp_path):
    """A product permuted (an eager view) that kernels read where it lies, through its strides: the C library
    hands them its root's buffer, as the Python executor does, and matches jitorch."""
    import ctypes
    from jitorch.jit.executor import KernelStep

    rng = np.random.default_rng(2)
    w = jt.tensor(rng.standard_normal((4, 6)).astype(np.float32))

    def f(x):
        y = (x @ w).view(2, 3, 2, 3).permute(3, 0, 1, 2)
        return y.mean((1, 2, 3)), (y - y.mean((1, 2, 3), keepdim=True)).relu()
    x = rng.standard_normal((6, 4)).astype(np.float32)
    ex = jt.compile(f).lower(jt.tensor(x)).executable
    assert any(s.views for s in ex.steps if isinstance(s, KernelStep)), "no kernel reads the view in place"
    ep = jt.export(f, (jt.tensor(x),))
    lib = ctypes.CDLL(ep.to_c_library(tmp_path, "perm"))
    mean, centred = np.zeros(3, np.float32), np.zeros((3, 2, 3, 2), np.float32)
    P, I64 = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)
    shape = (ctypes.c_int64 * 2)(6, 4)
    status = lib.perm_run((P * 1)(x.ctypes.data), (I64 * 1)(shape), None,
                          (P * 2)(mean.ctypes.data, centred.ctypes.data), None)
    assert status == 0
    expected = f(jt.tensor(x))
    np.testing.assert_allclose(mean, expected[0].numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(centred, expected[1].numpy(), rtol=1e-5, atol=1e-6)
