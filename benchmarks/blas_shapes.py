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

``--steps 1,2`` instead times each collected product as the step calls it (``array_product(a, b, out)``) at each
thread count under three routings, swapped in one process, and torch's matmul, and prints per model the products'
milliseconds per step (median of rounds taking turns; at one thread thread CPU time, and wall; at more, wall,
torch's timed after jitorch's, not in turns):

    mkl        every product of MKL_MIN_WORK or more MKL's, in the fixed parts of the last stop (2, 4, 8 by work alone)
    openblas   every product OpenBLAS's (as ``JITORCH_BLAS=openblas``)
    rule       `runtime.blas_library.mkl_shape` and `ops.linalg.mkl_parts` as they are

``--whole-steps --steps 2`` times each model's whole compiled training step (``models.whole_step``) under the three
routings, taking turns in one process (wall and process CPU ms per step, medians of rounds of 5 steps each).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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
    arrays = [np.array(part, np.int64) for part in blas_calls.part_calls(whole, a, b, out, parts, whole[4] >= whole[5])]
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
    result = products.time_variants(calls, rounds, reps)
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


ROUTINGS = ("mkl", "openblas", "rule")


def routed(routing):
    """Patch the library rule and MKL's part size for ``routing`` (see the module's doc); returns the undo."""
    shape, part_min = blas_library.mkl_shape, linalg.MKL_PART_MIN
    if routing == "mkl":
        blas_library.mkl_shape = lambda dtype, m, k, n, *transposes: m * k * n >= blas_library.MKL_MIN_WORK
        linalg.MKL_PART_MIN = 0
    elif routing == "openblas":
        blas_library.mkl_shape = lambda *args: False

    def undo():
        blas_library.mkl_shape, linalg.MKL_PART_MIN = shape, part_min
    return undo


def _turns(calls, reps, rounds):
    """{name: (median wall s, median thread CPU s) per call} of ``calls`` ({name: (fn, routing or None)}), taking
    turns for ``rounds`` rounds after one that warms each."""
    times = {s: ([], []) for s in calls}
    for i in range(rounds + 1):
        for s, (fn, routing) in list(calls.items())[::1 if i % 2 else -1]:
            undo = routed(routing) if routing else None
            try:
                w0, c0 = time.perf_counter(), time.thread_time()
                for _ in range(reps):
                    fn()
                w, c = time.perf_counter() - w0, time.thread_time() - c0
            finally:
                if undo:
                    undo()
            if i:
                times[s][0].append(w / reps)
                times[s][1].append(c / reps)
    return {s: (statistics.median(w), statistics.median(c)) for s, (w, c) in times.items()}


def step_times(per_model, torch, n_threads, rounds):
    """{model: {system: (wall ms, thread CPU ms) of its products per step}} at ``n_threads``. At more than one
    thread torch's products are timed after all of jitorch's (its OpenMP threads spin for a while after each
    product, and at two threads on two cores took the core from jitorch's team: products 100-1000x slower when the
    two took turns); at one it takes turns with them."""
    jitorch.set_num_threads(n_threads)
    together = torch is not None and n_threads == 1
    if torch is not None:
        torch.set_num_threads(n_threads)
    rng = np.random.default_rng(0)
    timed, operands = {}, {}
    keys = list(dict.fromkeys(k for c in per_model.values() for k in c))
    for key in keys:
        dtype, sa, ta, sb, tb, to, caller = key
        a, b = products.strided(sa, ta, dtype, rng), products.strided(sb, tb, dtype, rng)
        shape = products.product_shape(sa, sb)
        out = None if to is None else products.strided(shape, to, dtype, rng)
        operands[key] = a, b
        call = (lambda: linalg.array_product(a, b)) if out is None else (lambda: linalg.array_product(a, b, out))
        calls = {r: (call, r) for r in ROUTINGS}
        if together:
            x, y = torch.from_numpy(a), torch.from_numpy(b)
            calls["torch"] = (lambda x=x, y=y: torch.matmul(x, y), None)
        timed[key] = _turns(calls, max(1, int(2e7 / max(products.flops(sa, sb), 1))), rounds)
    if torch is not None and not together:
        for key in keys:
            x, y = (torch.from_numpy(v) for v in operands[key])
            reps = max(1, int(2e7 / max(products.flops(key[1], key[3]), 1)))
            timed[key].update(_turns({"torch": (lambda x=x, y=y: torch.matmul(x, y), None)}, reps, rounds))
    return {name: {s: tuple(1e3 * sum(n * timed[k][s][i] for k, n in counts.items()) for i in (0, 1))
                   for s in timed[next(iter(counts))]} for name, counts in per_model.items()}


def print_whole_steps(names, thread_counts, rounds, quick):
    for n in thread_counts:
        jitorch.set_num_threads(n)
        print(f"\n{n} thread{'s' * (n > 1)}: whole compiled step, wall ms (process CPU ms), median of {rounds} rounds of"
              f" 5 steps taking turns, load {os.getloadavg()[0]:.1f}")
        print(f"{'model':<12}" + "".join(f"{s:>18}" for s in ROUTINGS) + f"{'rule/mkl':>10}{'rule/ob':>9}")
        for name in names:
            call = models.whole_step(jitorch, models.workload(jitorch, name, quick))
            for _ in range(3):
                call()
            times = {r: ([], []) for r in ROUTINGS}
            for i in range(rounds + 1):
                for r in ROUTINGS[::1 if i % 2 else -1]:
                    undo = routed(r)
                    try:
                        call()
                        w0, c0 = time.perf_counter(), time.process_time()
                        for _ in range(5):
                            call()
                        w, c = (time.perf_counter() - w0) / 5, (time.process_time() - c0) / 5
                    finally:
                        undo()
                    if i:
                        times[r][0].append(w)
                        times[r][1].append(c)
            med = {r: (1e3 * statistics.median(w), 1e3 * statistics.median(c)) for r, (w, c) in times.items()}
            print(f"{name:<12}" + "".join(f"{f'{med[r][0]:.2f} ({med[r][1]:.2f})':>18}" for r in ROUTINGS)
                  + f"{med['rule'][0] / med['mkl'][0]:10.3f}{med['rule'][0] / med['openblas'][0]:9.3f}", flush=True)


def print_steps(per_model, torch, thread_counts, rounds):
    """The per-step table: at one thread thread CPU ms (wall ms), its ratios of CPU; at more, wall ms and its
    ratios (the workers' time is not the calling thread's)."""
    systems = list(ROUTINGS) + (["torch"] if torch is not None else [])
    for n in thread_counts:
        result = step_times(per_model, torch, n, rounds)
        what = "thread CPU ms (wall ms)" if n == 1 else "wall ms"
        print(f"\n{n} thread{'s' * (n > 1)}: products' {what} per step, median of {rounds} rounds taking turns, "
              f"load {os.getloadavg()[0]:.1f}")
        print(f"{'model':<12}" + "".join(f"{s:>17}" for s in systems) + f"{'rule/mkl':>10}{'rule/ob':>9}"
              + (f"{'rule/torch':>11}" if torch is not None else ""))
        i = 1 if n == 1 else 0
        for name, t in result.items():
            cell = lambda s: f"{t[s][1]:.2f} ({t[s][0]:.2f})" if n == 1 else f"{t[s][0]:.2f}"  # noqa: E731
            print(f"{name:<12}" + "".join(f"{cell(s):>17}" for s in systems)
                  + f"{t['rule'][i] / t['mkl'][i]:10.3f}{t['rule'][i] / t['openblas'][i]:9.3f}"
                  + (f"{t['rule'][i] / t['torch'][i]:11.3f}" if torch is not None else ""), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(products.DEFAULT_MODELS))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--layouts", action="store_true")
    parser.add_argument("--steps", default=None, help="thread counts, e.g. 1,2: the per-step table instead")
    parser.add_argument("--whole-steps", action="store_true", help="with --steps: whole compiled steps")
    args = parser.parse_args(argv)
    if blas_library.chosen() != blas_library.MKL:
        sys.exit("MKL is not chosen in this process (install the mkl wheel, or JITORCH_BLAS=mkl)")
    torch = models.real_torch()
    jitorch.set_num_threads(1)
    if torch is not None:
        torch.set_num_threads(1)
    if args.whole_steps:
        print_whole_steps(args.models.split(","), [int(n) for n in args.steps.split(",")], args.rounds, args.quick)
        return
    per_model = {name: products.collect(name, args.quick) for name in args.models.split(",")}
    if args.steps:
        print_steps(per_model, torch, [int(n) for n in args.steps.split(",")], args.rounds)
        return
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
