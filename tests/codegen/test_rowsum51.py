"""Long runs of reduced elements (`kernel.streamed_run`) of float sums (full and wide row sums) in kernels that
read more than the caches hold, in vectors of at most 256 bits (`kernel.RUN_VECTOR_BITS`; session 51).

On this AMD EPYC (znver4) LLVM vectorised the runs' loops in 512-bit vectors, which streamed a sum from memory
8-14% slower than 256-bit ones (a 16M float32 sum 1.09-1.15x torch's time at one thread, 1.01-1.03 after), while
from the caches they were the faster, and a max's were even from memory. The kernels are checked for their
vector width on either side of `kernel.STREAMING_BYTES`, and the narrower loops' values against torch's and
eager jitorch's, with the same bits at one and two threads.
"""

import collections
import re

import numpy as np
import pytest
import torch
from llvmlite import ir

import jitorch as jt
from jitorch.codegen import kernel as kernel_module
from jitorch.codegen.loops import loop_metadata
from jitorch.codegen.machine import selected
from jitorch.codegen.target import vector_bits
from tests.codegen.test_reduce50 import vector_bodies

BITS = {"float": 32, "double": 64}
SUMS = {"full sum": lambda t: t.sum(), "row sum": lambda t: t.sum(1), "row mean": lambda t: t.mean(1)}
FNS = {**SUMS, "row max": lambda t: t.amax(1)}
# (the width measured best on the AMD EPYC: a test of the kernels, not of the constant that asks for it)
STREAMING_VECTOR_BITS = 256
COLS = 4099


def shape(case, itemsize, nbytes):
    """A shape of ``case`` (a key of `FNS`) over at least ``nbytes`` of ``itemsize``-byte elements."""
    n = -(-nbytes // itemsize)
    return (n + 5,) if case == "full sum" else (-(-n // COLS), COLS)


def loaded_lanes(case, dtype, name, nbytes):
    """The lanes of each vector load in the vectorised loops of ``case``'s kernel over ``nbytes`` or more."""
    x = jt.zeros(*shape(case, dtype.itemsize, nbytes), dtype=dtype)
    (k,) = jt.compile(FNS[case]).lower(x).kernels
    lanes = [int(n) for blk in vector_bodies(k.llvm_ir) for n in re.findall(rf"load <(\d+) x {name}>", blk)]
    assert lanes, k.llvm_ir
    return lanes


@pytest.mark.parametrize("dtype, name", [(jt.float32, "float"), (jt.float64, "double")], ids=str)
@pytest.mark.parametrize("case", list(SUMS))
def test_sums_of_a_kernel_reading_more_than_the_caches_take_256_bit_vectors_not_the_512_of_avx512(case, dtype, name):
    """Regression (session 51): a 16M float32 sum's and a 4096x4096 row sum's loops took 512-bit vectors on an
    AVX-512 host, 1.09-1.15x torch's time at one thread (256-bit ones: 1.01). Now each vectorised loop of the
    run loads vectors of 256 bits (or of the machine's narrower registers, as LLVM chooses them)."""
    lanes = loaded_lanes(case, dtype, name, kernel_module.STREAMING_BYTES + 1)
    assert max(lanes) * BITS[name] <= min(vector_bits(selected()), STREAMING_VECTOR_BITS), lanes
    if vector_bits(selected()) > STREAMING_VECTOR_BITS:
        assert set(lanes) == {STREAMING_VECTOR_BITS // BITS[name]}, lanes


@pytest.mark.parametrize("case, nbytes", [(case, 1 << 20) for case in FNS] + [("row max", (32 << 20) + 1)],
                         ids=str)
def test_sums_from_the_caches_and_maxima_keep_llvms_width(case, nbytes):
    """From the caches 512-bit vectors were the faster (2M-element sum 0.109 against 0.113 ms, a 2048x1024 row
    max 0.113 against 0.136) and from memory a max's were even: a sum whose kernel reads less than
    `kernel.STREAMING_BYTES`, and a max of any size, asks for no width, and on an AVX-512 host takes 16 floats."""
    lanes = loaded_lanes(case, jt.float32, "float", nbytes)
    if vector_bits(selected()) == 512:
        assert set(lanes) == {16}, lanes


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=str)
@pytest.mark.parametrize("case", list(SUMS))
def test_streaming_sums_match_torch_and_eager_with_the_same_bits_at_one_and_two_threads(case, dtype, monkeypatch):
    """The narrower vectors change which lanes add which elements: the results stay within float rounding of
    torch's and eager jitorch's, bit for bit the same at one and two threads.
    (Small inputs, taken for a kernel's that streams: `kernel.STREAMING_BYTES` 0, in a kernel cache of its own.)"""
    monkeypatch.setattr(kernel_module, "STREAMING_BYTES", 0)
    monkeypatch.setattr(kernel_module, "_built", collections.OrderedDict())
    values = np.random.default_rng(51).standard_normal(shape(case, 4, 1 << 21)[:1] if case == "full sum"
                                                         else (6, COLS)).astype(dtype)
    x, fn = jt.from_numpy(values), FNS[case]
    before = jt.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            jt.set_num_threads(threads)
            results.append(jt.compile(fn)(x).numpy())
    finally:
        jt.set_num_threads(before)
    assert results[0].tobytes() == results[1].tobytes()
    if vector_bits(selected()) == 512:
        name = "float" if dtype == np.float32 else "double"
        (k,) = jt.compile(fn).lower(x).kernels
        lanes = {int(n) for blk in vector_bodies(k.llvm_ir) for n in re.findall(rf"load <(\d+) x {name}>", blk)}
        assert lanes == {STREAMING_VECTOR_BITS // BITS[name]}, lanes
    want, eager = fn(torch.from_numpy(values)).numpy(), fn(x).numpy()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(results[0], want, rtol=tol, atol=tol * 100)
    np.testing.assert_allclose(results[0], eager, rtol=tol, atol=tol * 100)


def test_two_loops_metadata_in_one_module_keep_their_own_entries():
    """Regression (session 51): `kernel._loop_metadata` (now `loops.loop_metadata`) built each loop's node from llvmlite's
    ``add_metadata([])``, one node per module, and overwrote its operands, so every loop of a kernel took the
    last call's entries: the staged transposing copy's loop across the written dim lost its
    ``llvm.loop.vectorize.width`` 1 (`kernel.staged_tiles`), and a long run's loop would have lost its width
    to the three leftover indices' loop after it."""
    module = ir.Module()
    kept = loop_metadata(module, ("llvm.loop.unroll.disable",), ("llvm.loop.vectorize.width", 1))
    along = loop_metadata(module, ("llvm.loop.unroll.disable",))
    assert kept is not along and kept.operands[0] is kept and along.operands[0] is along
    assert len(kept.operands) == 3 and len(along.operands) == 2
    src = jt.randn(16, 24, 24, 64)
    (k,) = jt.compile(lambda t: t.permute(3, 0, 1, 2).contiguous()).lower(src).kernels
    text = k._kernel.source.llvm_ir
    nodes = dict(re.findall(r"^!(\d+) = (.*)$", text, re.M))
    width_one = {n for n, body in nodes.items() if '"llvm.loop.vectorize.width", i32 1' in body}
    loops = {n for n in re.findall(r"!llvm\.loop !(\d+)", text)}
    assert len(loops) == 2, nodes
    assert sum(1 for n in loops if width_one & set(re.findall(r"!(\d+)", nodes[n]))) == 1, nodes


@pytest.mark.parametrize("width", [16, 31])
def test_short_rows_of_a_kernel_reading_more_than_the_caches_keep_llvms_width(width):
    """Regression (session 51): rows of 16 float32 elements, under one turn of the run loop's four 256-bit
    vectors, were added one by one in a kernel reading over `kernel.STREAMING_BYTES` (a 1048576x16 row sum 2.74
    -> 5.53 ms); runs shorter than `kernel.RUN_NARROW_TURNS` turns keep LLVM's width, which vectorised them."""
    x = jt.zeros(kernel_module.STREAMING_BYTES // (4 * width) + 1, width)
    (k,) = jt.compile(lambda t: t.sum(1)).lower(x).kernels
    assert '"llvm.loop.vectorize.width"' not in k._kernel.source.llvm_ir
    assert re.search(r"load <\d+ x float>", k.llvm_ir), k.llvm_ir  # (vectorised, not added one by one)


LAYOUTS = {
    "offset": lambda a: a[1:, 3:],
    "stepped": lambda a: a[:, ::2],
    "transposed": lambda a: a.T,
    "expanded": lambda a: a[:1].expand(5, -1),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", list(SUMS))
def test_streaming_sums_of_views_match_torch_and_eager(case, layout, monkeypatch):
    """The narrower-vector runs over inputs that are views (an offset into storage, a step, a transpose, a
    broadcast row): values within float rounding of torch's and eager jitorch's (float64)."""
    monkeypatch.setattr(kernel_module, "STREAMING_BYTES", 0)
    monkeypatch.setattr(kernel_module, "_built", collections.OrderedDict())
    values = np.random.default_rng(7).standard_normal((7, COLS))
    x, t = LAYOUTS[layout](jt.from_numpy(values)), LAYOUTS[layout](torch.from_numpy(values))
    fn = FNS[case]
    got = jt.compile(fn)(x).numpy()
    np.testing.assert_allclose(got, fn(t).numpy(), rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(got, fn(x).numpy(), rtol=1e-12, atol=1e-10)
