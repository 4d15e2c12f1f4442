"""MKL against OpenBLAS per matrix product shape of the models' compiled steps, at 1 thread.

    python benchmarks/blas_shapes.py [--models ...] [--quick] [--rounds N] [--layouts]

Each distinct product that `benchmarks/products.py` collects from a step (a matrix, or batch folded into rows, that
jitorch runs as one cblas gemm call) is timed as the gemm call `runtime.blas_calls.gemm_call` makes for it (the same
transposes, leading dimensions and pointers), its function swapped between libraries:

    openblas   NumPy's OpenBLAS, whole
    mkl        MKL, whole
    mkl parts  MKL in the fixed parts `ops.linalg.mkl_parts` gives (one after another: one thread), where it splits
    torch      ``torch.matmul`` on tensors over the same memory (its MKL, one thread)

taking turns in one process (thread CPU time, median of rounds). ``--layouts`` also times each shape with its operands
laid out the four ways (A and B each in rows, N, or transposed, T; the output in rows). Needs MKL installed.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time

import numpy as np

import products  # noqa: E402  (benchmarks/products.py: sys.path and the collection of a step's products)
import models  # noqa: E402
import jitorch  # noqa: E402
from jitorch.ops import linalg  # noqa: E402
from jitorch.runtime import blas_calls, blas_library, threads  # noqa: E402


def _words(a, b, out, function):
    words = blas_calls.gemm_call(a, b, out)
    return None if words is None else [function] + words[1:]


def _runner(a, b, out, function, parts):
    """A function making the gemm call(s) of ``out = a @ b`` with ``function``, in ``parts`` row (or column) parts."""
    whole = _words(a, b, out, function)
    if whole is None:
        return None
    rows = whole[4] >= whole[5]
    size, dim, operand = (whole[4], 7, a.strides[0]) if rows else (whole[5], 9, b.strides[1])
    step = out.strides[0] if rows else out.strides[1]
    arrays = []
    for lo, hi in threads.bounds(size, parts):
        part = list(whole)
        part[4 if rows else 5] = hi - lo
        part[dim] += lo * operand
        part[11] += lo * step
        arrays.append(np.array(part, np.int64))
    entry = threads.KERNEL_ENTRY(threads.gemm_entry())
    addresses = [x.ctypes.data for x in arrays]

    def run():
        for address in addresses:
            entry(address, 0, 0)
    run.keep = arrays
    return run


def _functions(dtype):
    o, m = blas_library._functions()[np.dtype(dtype)]
    return o, m


def time_shape(dtype, a, b, out, torch, rounds):
    """{system: seconds per call} of ``out = a @ b`` (matrices), or None where it is no gemm call."""
    o, m = _functions(dtype)
    (mm, k), n = a.shape, b.shape[1]
    parts = linalg.mkl_parts(mm, n, mm * k * n) if mm * k * n >= linalg.SPLIT_MIN_WORK else None
    calls = {"openblas": _runner(a, b, out, o, 1), "mkl": _runner(a, b, out, m, 1)}
    if calls["openblas"] is None:
        return None
    if parts:
        calls["mkl parts"] = _runner(a, b, out, m, parts)
    if torch is not None:
        x, y = torch.from_numpy(a), torch.from_numpy(b)
        calls["torch"] = lambda: torch.matmul(x, y)
    reps = max(1, int(2e7 / (2 * mm * k * n)))
    for fn in calls.values():
        fn()
    times = {s: [] for s in calls}
    for i in range(rounds):
        for s, fn in list(calls.items())[::1 if i % 2 else -1]:
            t0 = time.thread_time()
            for _ in range(reps):
                fn()
            times[s].append((time.thread_time() - t0) / reps)
    result = {s: statistics.median(t) for s, t in times.items()}
    result["parts"] = parts or 1
    return result


def matrices(key, rng):
    """(a, b, out) matrices of a collected case, batches folded into rows, or None where it is no one gemm call."""
    dtype, sa, ta, sb, tb, to, caller = key
    a, b = products.strided(sa, ta, dtype, rng), products.strided(sb, tb, dtype, rng)
    shape = products.product_shape(sa, sb)
    out = np.empty(shape, dtype) if to is None else products.strided(shape, to, dtype, rng)
    if a.ndim >= 3 and b.ndim <= 2 and a.flags.c_contiguous and out.flags.c_contiguous:
        a, out = a.reshape(-1, a.shape[-1]), out.reshape(-1, out.shape[-1])
    a, b, out = blas_calls.one_matrix(a), blas_calls.one_matrix(b), blas_calls.one_matrix(out)
    if a.ndim != 2 or b.ndim != 2 or a.dtype not in (np.float32, np.float64):
        return None
    return a, b, out


def laid_out(x, transposed):
    return np.asfortranarray(x) if transposed else np.ascontiguousarray(x)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(products.DEFAULT_MODELS))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--layouts", action="store_true")
    args = parser.parse_args(argv)
    if blas_library.chosen() != blas_library.MKL:
        sys.exit("MKL is not chosen in this process (install the mkl wheel, or JITORCH_BLAS=mkl)")
    torch = models.real_torch()
    jitorch.set_num_threads(1)
    if torch is not None:
        torch.set_num_threads(1)
    per_model = {name: products.collect(name, args.quick) for name in args.models.split(",")}
    cases = list(dict.fromkeys(k for c in per_model.values() for k in c))
    rng = np.random.default_rng(0)
    seen = set()
    print("GFLOP/s, 1 thread, thread CPU; ratios of times (>1: the first slower)")
    print(f"{'models':<10} {'m':>6} {'k':>6} {'n':>6} {'lay':>4} {'dt':>3} {'parts':>5} {'openblas':>8} {'mkl':>8}"
          f" {'mklparts':>8} {'torch':>8} {'mkl/ob':>7} {'prt/mkl':>7} {'mkl/t':>6}")
    for key in sorted(cases, key=lambda k: -products.flops(k[1], k[3])):
        found = matrices(key, rng)
        if found is None:
            continue
        a, b, out = found
        (m, k), n = a.shape, b.shape[1]
        layouts = [(None, None)] + ([(ta, tb) for ta in (False, True) for tb in (False, True)] if args.layouts else [])
        names = "+".join(name[:4] for name, c in per_model.items() if key in c)
        for ta, tb in layouts:
            x, y = (a, b) if ta is None else (laid_out(a, ta), laid_out(b, tb))
            words = blas_calls.gemm_call(x, y, out)
            if words is None:
                continue
            lay = ("N" if words[2] == blas_calls.NO_TRANS else "T") + ("N" if words[3] == blas_calls.NO_TRANS else "T")
            if (m, k, n, lay, a.dtype) in seen:
                continue
            seen.add((m, k, n, lay, a.dtype))
            if linalg.skinny_shape(a.dtype, m, k, n) is not None:
                continue
            t = time_shape(a.dtype, x, y, out, torch, args.rounds)
            g = lambda s: 2 * m * k * n / t[s] / 1e9 if s in t else float("nan")  # noqa: E731
            print(f"{names:<10} {m:6d} {k:6d} {n:6d} {lay:>4} {a.dtype.itemsize * 8:3d} {t['parts']:5d} "
                  f"{g('openblas'):8.1f} {g('mkl'):8.1f} {g('mkl parts'):8.1f} {g('torch'):8.1f} "
                  f"{t['mkl'] / t['openblas']:7.2f} {t.get('mkl parts', t['mkl']) / t['mkl']:7.2f} "
                  f"{t['mkl'] / t['torch'] if 'torch' in t else float('nan'):6.2f}", flush=True)


if __name__ == "__main__":
    main()
