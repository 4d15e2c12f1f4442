"""Compiled kernels over uint16, uint32 and uint64 give eager's results: the lowering reads them as unsigned
(``udiv``/``urem``, unsigned compares, ``uitofp``, zero extension, logical shifts), on the CPU and on the
emulated CUDA device."""

import numpy as np
import pytest

import jitorch as jt
from tests.codegen.test_kernels import assert_identical

NEW = (jt.uint16, jt.uint32, jt.uint64)


def operands(dtype):
    """Edge values of ``dtype`` (0, the top bit, the maximum) among ordinary ones, twice."""
    hi = int(np.iinfo(dtype.np).max)
    a = np.resize(np.array([0, 1, 7, hi, hi - 1, hi // 2 + 1, hi // 2, 300, 12345, 5], dtype.np), 64)
    b = np.resize(np.array([3, hi, hi // 2 + 1, 1, 2, hi // 2, 9, 4096, 77, 5], dtype.np), 64)
    return jt.tensor(a), jt.tensor(b)


def pointwise(a, b):
    # divisors are numbers: a tensor divisor could be zero (ZeroDivisionError), so such a division stays eager's
    return (a * b + a - b, a // 7, a % 1000, (a < b) | (a >= 300), a >> 3, -a, jt.maximum(a, b),
            a.to(jt.float32), a.to(jt.float64) / 3, a.to(jt.int64), a.to(jt.float16), (a * 2.5).to(a.dtype))


def reductions(a, b):
    return a.sum(), (a * b).view(8, 8).sum(1), a.max(), a.view(8, 8).amin(0), a.cumsum(0)


@pytest.mark.parametrize("dtype", NEW, ids=str)
def test_unsigned_kernels_match_eager_and_use_unsigned_instructions(dtype):
    a, b = operands(dtype)
    compiled = jt.compile(pointwise)
    kernels = compiled.lower(a, b).kernels
    assert len(kernels) == 1  # every op fused: none fell back to eager
    ir = kernels[0].llvm_ir
    assert "udiv" in ir and "urem" in ir and "uitofp" in ir and "lshr" in ir and "icmp ult" in ir
    assert "sdiv" not in ir and "srem" not in ir and "sitofp" not in ir and "ashr" not in ir
    for got, expected in zip(compiled(a, b), pointwise(a, b)):
        assert_identical(got, expected)
    for got, expected in zip(jt.compile(reductions)(a, b), reductions(a, b)):
        assert_identical(got, expected)


@pytest.mark.parametrize("dtype", NEW, ids=str)
def test_unsigned_kernels_on_the_emulated_cuda_device_match_eager(dtype):
    a, b = operands(dtype)
    with jt.cuda.emulated():
        results = jt.compile(lambda p, q: pointwise(p, q) + reductions(p, q))(a.cuda(), b.cuda())
        results = [r.cpu() for r in results]
    for got, expected in zip(results, pointwise(a, b) + reductions(a, b)):
        assert_identical(got, expected)
