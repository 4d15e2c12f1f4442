"""Matrix products run at once on the team as native BLAS calls, without the GIL.

A product's parts (`ops.linalg.array_product`) and a pair of products (`jit.interop`) used to reach the team's
worker as Python parts: the worker took the GIL to call NumPy's matmul, and gave it back when the part ended. On
this project's 2-core virtual machine each hand-over of the GIL put a thread to sleep on a condition variable and
woke it again (tens to hundreds of µs: the idle core must be woken too), twice per fork: in the compiled
gpt-4x128 step at two threads, its 34 forks of products took 26-29 ms of wall time where their larger parts, run
one after the other, took 19 (benchmarks/two_threads.py, the machine otherwise idle).

`gemm_call` gives the cblas gemm call that NumPy's matmul makes for a 2-D product of float32 or float64 (the same
library, function, transposes, leading dimensions and pointers; NumPy's rules in ``matmul.c.src``: each operand
laid out in rows or in columns with unit stride, the result in rows, no dim of 1), and `run_gemm_calls` runs such
calls at once on the team through `threads.run_native_parts`, the calling thread's one included: the same BLAS
call on one thread (``set_num_threads`` gives BLAS one), so the same bits as NumPy's matmul. A product that NumPy
would compute otherwise (a vector product, syrk, its own loop, a copy first) is left to the Python parts.

The function called is the chosen BLAS's (`blas_library.gemm_function`): where that is MKL, a product that
`runs_mkl` gives it (its shape, dtype and operands' transposes: `blas_library.mkl_shape`; for a part, the whole
product's) calls MKL's gemm, with the same transposes, leading dimensions and pointers; `run_gemm_parts` runs a
product in fixed parts whatever the thread count (`ops.linalg.mkl_parts`) and `run_gemm` one call on the calling
thread (`ops.linalg._product`).
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from . import blas_library, threads
from .array_address import data_address

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
_INT_MAX = (1 << 31) - 1  # (NumPy's BLAS_MAXSIZE for a 64-bit-integer BLAS is larger; the dims stay below both)
# What ran natively (tests and benchmarks read it): products whose parts ran as gemm calls on the team
# (`run_gemm_calls`), the calls of products in fixed parts (`run_gemm_parts`), products run as one call on the
# calling thread (`run_gemm`) and calls made from words made earlier (`run_words`)
counters = {"gemm forks": 0, "gemm calls": 0, "part calls": 0, "direct calls": 0, "words calls": 0}


def _blasable(outer, inner, cols, item):
    """NumPy's ``is_blasable2d``: unit stride ``inner``, and ``outer`` a whole number of elements, at least
    ``cols``."""
    return inner == item and outer % item == 0 and cols <= outer // item <= _INT_MAX


def _operand(strides, rows, cols, item):
    """(transpose, leading dimension) NumPy's matmul passes for an operand, or None where it is in neither layout."""
    if _blasable(strides[0], strides[1], cols, item):
        return NO_TRANS, strides[0] // item
    if _blasable(strides[1], strides[0], rows, item):
        return TRANS, strides[1] // item
    return None


def one_matrix(x):
    """``x`` as a 2-D array where its dims before the last two are all 1 (NumPy's matmul loops once over such a
    batch: the one gemm call of that matrix), else ``x``."""
    return x.reshape(x.shape[-2:]) if x.ndim > 2 and x.size and x.size == x.shape[-2] * x.shape[-1] else x


def transposed(x):
    """Whether NumPy's matmul passes the matrix ``x`` (its last two dims) to gemm transposed: laid out in columns
    and not in rows."""
    layout = _operand(x.strides[-2:], x.shape[-2], x.shape[-1], x.itemsize)
    return layout is not None and layout[0] == TRANS


def runs_mkl(a, b):
    """Whether ``a @ b`` (float arrays of at least 2 dims) is MKL's gemm where NumPy would make it one gemm call
    (`blas_library.runs_mkl` of its shape; never a batch of several matrices, which NumPy's matmul loops over)."""
    if a.ndim < 2 or b.ndim < 2 or a.dtype != b.dtype:
        return False
    (m, k), n = a.shape[-2:], b.shape[-1]
    if m * k * n < blas_library.MKL_MIN_WORK or a.size != m * k or b.size != k * n:
        return False
    return blas_library.runs_mkl(a.dtype, m, k, n, transposed(a), transposed(b))


def gemm_call(a, b, out, mkl=None):
    """The 13 words of `threads.gemm_entry`'s argument array for the gemm call NumPy's matmul makes computing
    ``out = a @ b`` (matrices, or batches of one, of one float dtype), or None where it computes it otherwise or
    ``out`` overlaps an operand (NumPy would copy it first). The call is MKL's where ``mkl`` (`runs_mkl` of the
    whole product, where this call is a part of one; by default, None, of this call's), else OpenBLAS's
    (`blas_library.gemm_function`)."""
    if out is None:
        return None
    a, b, out = one_matrix(a), one_matrix(b), one_matrix(out)
    if a.ndim != 2 or b.ndim != 2 or out.ndim != 2 or not a.dtype == b.dtype == out.dtype:
        return None
    (m, k), n = a.shape, b.shape[1]
    if (b.shape[0] != k or out.shape != (m, n) or min(m, k, n) < 2 or max(m, k, n) > _INT_MAX
            or not (a.flags.aligned and b.flags.aligned and out.flags.aligned)):
        return None
    item = a.itemsize
    ta, tb = _operand(a.strides, m, k, item), _operand(b.strides, k, n, item)
    if mkl is None and ta is not None and tb is not None:
        mkl = blas_library.runs_mkl(a.dtype, m, k, n, ta[0] == TRANS, tb[0] == TRANS)
    function = blas_library.gemm_function(a.dtype, mkl)
    if function is None:
        return None
    if ta is None or tb is None or not _blasable(out.strides[0], out.strides[1], n, item):
        return None
    pa, pb, pc = data_address(a), data_address(b), data_address(out)
    if pa == pb and m == n and a.strides == b.strides[::-1] and ta[0] != tb[0]:
        return None  # a matrix times its own transpose: NumPy calls syrk
    if np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return None
    return [function, int(item == 8), ta[0], tb[0], m, n, k, pa, ta[1], pb, tb[1], pc, out.strides[0] // item]


def run_gemm_calls(products, mkl=None):
    """Compute each ``(a, b, out)`` of ``products`` at once on the team, each as the gemm call NumPy's matmul makes
    (`gemm_call`; ``mkl``: `runs_mkl` of the product they are parts of, by default, None, each call's own), and
    return True; False where one of them is not such a call or there is no native code (nothing has run). ``out``
    is written; the arrays must live until it returns (it does not keep them)."""
    entry = threads.gemm_entry()
    if entry is None:
        return False
    calls = []
    for a, b, out in products:
        words = gemm_call(a, b, out, mkl)
        if words is None:
            return False
        calls.append((ctypes.c_int64 * len(words))(*words))
    threads.run_native_parts(entry, calls)
    counters["gemm forks"] += 1
    counters["gemm calls"] += len(calls)
    return True


def part_calls(words, a, b, out, parts, rows):
    """The `gemm_call` words of ``parts`` near-equal ranges of the rows (``rows``) or columns of ``out = a @ b``
    (matrices), given the whole product's ``words``."""
    size, dim, operand = (words[4], 7, a.strides[0]) if rows else (words[5], 9, b.strides[1])
    step = out.strides[0] if rows else out.strides[1]
    calls = []
    for lo, hi in threads.bounds(size, parts):
        part = list(words)
        part[4 if rows else 5] = hi - lo
        part[dim] += lo * operand
        part[11] += lo * step
        calls.append(part)
    return calls


def run_gemm_parts(a, b, out, parts, rows):
    """Compute ``out = a @ b`` (matrices) as ``parts`` MKL gemm calls, each of a near-equal range of the rows
    (``rows``) or columns of ``out`` (`threads.bounds`): the calls `gemm_call` makes for each part, whatever the
    thread count; at once in at most ``get_num_threads()`` runs of calls in
    order on the team (one native call each, `threads.calls_entry`), or one after another here where the team is
    busy. True, or False where the whole is no gemm call or there is no native code (nothing has run)."""
    entry, program = threads.gemm_entry(), threads.calls_entry()
    a, b, out = one_matrix(a), one_matrix(b), one_matrix(out)
    words = None if entry is None else gemm_call(a, b, out, True)
    if words is None:
        return False
    calls = [(ctypes.c_int64 * len(part))(*part) for part in part_calls(words, a, b, out, parts, rows)]
    runs = []
    for lo, hi in threads.bounds(len(calls), threads.get_num_threads()):
        run = [hi - lo]
        for call in calls[lo:hi]:
            run += [entry, ctypes.addressof(call)]
        runs.append((ctypes.c_int64 * len(run))(*run))
    threads.run_native_parts(program, runs)
    counters["gemm forks"] += len(runs) > 1
    counters["part calls"] += len(calls)
    return True


@functools.cache
def _entry_function():
    entry = threads.gemm_entry()
    return None if entry is None else threads.KERNEL_ENTRY(entry)


def run_gemm(a, b, out, mkl):
    """Compute ``out = a @ b`` on this thread as `gemm_call`'s call (``mkl``: MKL's or not, as there), without the
    GIL, and return True, or False where it is no such call or no native code (nothing has run)."""
    entry = _entry_function()
    words = None if entry is None else gemm_call(a, b, out, mkl)
    if words is None:
        return False
    args = np.array(words, np.int64)  # (0.9 µs, where a ctypes array of them took 3)
    entry(data_address(args), 0, 0)
    counters["direct calls"] += 1
    return True


def call_words(a, b, out, mkl=None):
    """`gemm_call`'s words for ``out = a @ b`` (``mkl`` as there) as a ctypes array that `run_words` takes (made
    once, run many times: the words hold the arrays' addresses, so they serve while arrays of the same addresses,
    shapes, strides and dtypes are the operands), or None where `gemm_call` gives none or there is no native code."""
    words = None if _entry_function() is None else gemm_call(a, b, out, mkl)
    return None if words is None else (ctypes.c_int64 * len(words))(*words)


# The positions of the operands' pointers (a, b, out) among `gemm_call`'s words.
POINTER_WORDS = (7, 9, 11)


def moved_words(calls, deltas):
    """Copies of ``calls`` (`call_words`' arrays) whose pointers to a, b and out are moved by ``deltas`` bytes (one
    per operand): the same calls on operands of the same layouts at other addresses."""
    moved = []
    for words in calls:
        copy = (ctypes.c_int64 * len(words))(*words)
        for i, delta in zip(POINTER_WORDS, deltas):
            copy[i] += delta
        moved.append(copy)
    return moved


# The longest inner dim whose sums OpenBLAS (NumPy's) makes in one block, per dtype: up to it, a gemm call with beta 1
# onto ``c`` gives the bits of ``c + (a @ b)`` (the product rounded, then the add), beyond it the partial sums are
# rounded onto ``c`` one block at a time. The block is a parameter of the kernel OpenBLAS picks for the CPU (its
# GEMM_Q), undocumented and not the same on every x86-64 core: on Zen 4 (NumPy 2.4's wheel) it was measured at 448
# float32 and 384 float64 terms, and the AVX2 cores' kernels block shorter. 128 keeps a wide margin under any of them
# (gpt-4x128's c_attn still folds; gpt-6x384's K = 384 no longer does); tests/jit/test_bias_products54.py checks the
# bits at the bound on the machine it runs on.
ADDS_EXACT_MAX_K = {np.dtype(np.float32): 128, np.dtype(np.float64): 128}


def adding_words(calls, dtype):
    """Copies of ``calls`` (`call_words`' arrays, of ``dtype``) that add the product to what the result holds (beta
    1, `threads.GEMM_ADDS`) rather than write it over (beta 0): ``out += a @ b``, where each element's sum is rounded
    onto what ``out`` held at the end of each of BLAS's blocks of the inner dim; None where a call is MKL's (whose
    blocking `ADDS_EXACT_MAX_K` does not describe)."""
    if any(words[0] != blas_library.gemm_function(dtype, False) for words in calls):
        return None
    added = []
    for words in calls:
        copy = (ctypes.c_int64 * len(words))(*words)
        copy[1] |= threads.GEMM_ADDS
        added.append(copy)
    return added


def run_words(calls):
    """Make the gemm calls of ``calls`` (`call_words`' arrays): one on this thread, several at once on the team
    (`threads.run_native_parts`, as `run_gemm_calls` runs a split product's), each without the GIL."""
    if len(calls) == 1:
        _entry_function()(calls[0], 0, 0)
    else:
        threads.run_native_parts(threads.gemm_entry(), calls)
        counters["gemm forks"] += 1
    counters["words calls"] += len(calls)
