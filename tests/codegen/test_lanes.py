"""`lanes.ordered_sum`: a float sum in the order jitorch defines (lane ``l`` of a 64-byte vector adds the terms
``j mod w == l`` in order, the last ``n mod w`` terms go to the last lanes, the lanes add by halves), checked
against a NumPy model of that order, bit for bit, in code compiled for the x86-64-v2 baseline, x86-64-v3 and
this host in one process: LLVM may vectorise the lane loops at any width, and the bits may not change."""

from __future__ import annotations

import ctypes
import functools
import platform

import numpy as np
import pytest
from llvmlite import ir

from jitorch.codegen import cpu, lanes
from jitorch.codegen.linker import Linker
from jitorch.codegen.loops import I64
from jitorch.codegen.machine import host, missing_features, parse

pytestmark = [pytest.mark.cpu_independent,
              pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 CPU names")]

SUM = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
WIDTHS = [1, 5, 15, 16, 17, 19, 31, 32, 33, 100, 1000, 1003]


def _machines():
    """This host and the named x86-64 levels it can run."""
    named = [parse(name) for name in ("x86-64-v2", "x86-64-v3")]
    return [m for m in named if not missing_features(m)] + [host()]


def _module(dtype, lo, n):
    """``sum(x*, out*)``: ``out[0] = ordered_sum of x[lo .. lo + n)``, each lane loop a plain counted loop."""
    t = ir.FloatType() if dtype == np.float32 else ir.DoubleType()
    module = ir.Module(name="lanes")
    module.triple = host().triple
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [t.as_pointer(), t.as_pointer()]), "sum")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x, out = fn.args
    total = lanes.ordered_sum(b, I64(lo), n, t, lambda b, j: b.load(b.gep(x, [j])), lanes.plain_loop)
    b.store(total, out)
    b.ret_void()
    return str(module)


@functools.cache
def _compiled(machine, dtype, lo, n):
    """(the function's address, what keeps its code alive) for ``machine``."""
    mod = cpu.optimise(_module(dtype, lo, n), machine)
    obj = machine.target_machine(opt=3, codemodel="jitdefault").emit_object(mod)
    linker = Linker(machine, opt=3, codemodel="jitdefault")
    library = linker.link(obj, ["sum"])
    return library["sum"], (library, linker)


def _run(machine, x, lo, n):
    out = np.zeros(1, x.dtype)
    SUM(_compiled(machine, x.dtype.type, lo, n)[0])(x.ctypes.data, out.ctypes.data)
    return out[0]


def _model(x, lo, n):
    """The defined order in NumPy's arithmetic: element-wise vector adds round each lane as a scalar add."""
    w = 64 // x.itemsize
    acc = np.zeros(w, x.dtype)
    whole = n - n % w
    for first in range(lo, lo + whole, w):
        acc = acc + x[first:first + w]
    if n % w:
        acc[w - n % w:] = acc[w - n % w:] + x[lo + whole:lo + n]
    while len(acc) > 1:
        acc = acc[:len(acc) // 2] + acc[len(acc) // 2:]
    return acc[0]


def _terms(dtype, size, seed):
    """Terms of magnitudes 1e-3 .. 1e3 and both signs, so that each order of adding them rounds differently."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(size) * 10.0 ** rng.uniform(-3, 3, size)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_ordered_sum_adds_in_the_defined_order_on_every_target(dtype):
    machines = _machines()
    sequential_differs = 0
    for n in WIDTHS:
        x = _terms(dtype, n + 3, n)
        expected = _model(x, 3, n)
        for machine in machines:
            got = _run(machine, x, 3, n)
            assert got.tobytes() == expected.tobytes(), (machine.cpu, n)
        sequential = dtype(0)
        for v in x[3:3 + n]:
            sequential = sequential + v
        sequential_differs += sequential != expected
    assert sequential_differs >= 3  # (the data tell the orders apart)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_ordered_sum_of_negative_zeros_is_zero_and_a_nan_or_inf_term_carries(dtype):
    """The last vector adds 0 in the lanes of terms an earlier vector added: a lane never holds -0.0 (it starts
    at 0.0), so that changes nothing, even where every term is -0.0."""
    for machine in _machines():
        for n in (3, 17, 31, 100):
            zeros = np.full(n, -0.0, dtype)
            assert _run(machine, zeros, 0, n).tobytes() == dtype(0.0).tobytes()
            x = _terms(dtype, n, 1)
            x[n - 1] = np.inf
            assert _run(machine, x, 0, n) == np.inf
            x[0] = np.nan
            assert np.isnan(_run(machine, x, 0, n))
