"""The matrix products of compiled training steps, timed under jitorch, NumPy and torch at 1 thread.

    python benchmarks/products.py [--models gpt-4x128,gpt-6x384,cnn,dcgan,lstm] [--quick] [--rounds N] [--variants]

First every product a compiled step of ``benchmarks/models.py`` runs is collected (NumPy's ``matmul`` watched
during two steps): its operands' shapes and strides, the output's strides (an arena buffer when the step
writes into one) and the caller, with its count per step. Then each distinct product is rebuilt from a
buffer with the same strides and timed, the three systems taking turns in one process (process CPU time,
median of rounds), as

    jitorch   the call the step makes: ``array_product(a, b, out)``, whose gemm calls the step keeps between
              calls (jit/gemm_words.py), or NumPy's matmul where the step calls it directly
    numpy     ``np.matmul(a, b, out=out)`` on the same operands (NumPy's OpenBLAS: where jitorch's BLAS is MKL,
              `runtime.blas_library`, jitorch/numpy compares the two libraries in one process)
    torch     ``torch.matmul`` on tensors over the same memory and strides (a measuring stick only)

and printed as GFLOP/s with the ratios jitorch/torch and jitorch/numpy of the times, plus per model the
step's product milliseconds under each system. torch is imported here only.

``--variants`` then times each distinct 2-D product's gemm call (OpenBLAS's: `blas_calls.call_words`, one thread)
against the ways of making it that keep its bits, taking turns as above (thread CPU time), as GFLOP/s:

    whole     the one call the step makes
    fold      the result filled first (``fill(0)``), then the call with beta 1 (`blas_calls.adding_words`): what
              `executor.fold_biases_into_products` costs where a bias is written first instead of BLAS clearing the
              result (OpenBLAS's beta 0 clears it, then adds the product: the same bits, checked)
    split     the best of the calls in 2, 3 or 4 parts of the rows or of the columns (64 or more each), one after
              another on one thread (each element the same BLAS sum: the same bits, checked)

and, once, ``peak``: OpenBLAS's rate on a 1536 x 1536 x 1536 product, the most these kernels reach on this core.
Session 55 (Zen 4, load 8-10, where one table's rates move by +-10%): gpt-4x128's and lstm's products ran whole at
67-93 GFLOP/s against a peak of 96-100; in turns of 31 rounds on eight of them, the best split ran at 0.87-1.02x the
whole call's rate and the fold took 0.99-1.04x its time: neither beats the whole call. ``JITORCH_BLAS=mkl`` sets
MKL's gemm beside NumPy's OpenBLAS in the table above (where the ``mkl`` wheel is installed): on Zen 4 it ran
gpt-4x128's and lstm's products 1.18-1.20x slower.

A fused recurrence's per-step products (``h W_hh^T`` forward, ``d_gates W_hh`` backward: `ops.recurrences`) are
collected too, one case per layer loop's (batch, k) by (k, n) product with its count of time steps: where a
generated `ProductKernel` runs them (AVX-512), "jitorch" times that kernel on its packed weight as the loop runs it
(a program of kernel calls, `threads.run_row_program`; the packing, once per layer call, apart), marked "step
kernel" (numpy and torch make one call per product from Python, a few us each: 5-8% of the language model's
60 us products); elsewhere they are NumPy products like the others. The language model's 140 per-step products
are 0.9 of its 11.1 GFLOP (the decoder's three 2.8 each).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(__file__))
import numpy as np  # noqa: E402

import jitorch  # noqa: E402
from jitorch.jit import gemm_words  # noqa: E402
from jitorch.ops import linalg, recurrences  # noqa: E402
from jitorch.runtime import blas_calls, blas_library, threads  # noqa: E402
import models  # noqa: E402

DEFAULT_MODELS = ("gpt-4x128", "gpt-6x384", "cnn", "dcgan", "lstm")


def collect(name, quick):
    """{(dtype, a shape, a strides, b shape, b strides, out strides or None, caller): calls per step} of a
    compiled step of model ``name`` (strides in elements), from its third and fourth calls. The caller is
    'jitorch' for the products of ``linalg.array_product`` (seen as its BLAS call or generated kernel gets them,
    after any fold of a batch into rows) and the recurrences' NumPy products (``linalg._matmul``), 'numpy' for a
    module calling NumPy's matmul itself (none of these models' steps), 'step kernel' for a recurrence's per-step
    products by its generated kernel (out strides None: its own buffer; counted once per time step).
    Collected at one thread: at more, once ``set_num_threads`` has run in the process, products are split into
    parts or run in pairs by native gemm calls (`jit.interop`), which the watch does not see whole."""
    threads = jitorch.get_num_threads()
    jitorch.set_num_threads(1)
    try:
        return _collect(name, quick)
    finally:
        jitorch.set_num_threads(threads)


def _collect(name, quick):
    w = models.workload(jitorch, name, quick)
    call = models.whole_step(jitorch, w)
    for _ in range(2):
        call()
    seen = collections.Counter()
    matmul, product = np.matmul, linalg._matmul
    inside = []

    def record(a, b, out, caller):
        a, b = np.asarray(a), np.asarray(b)
        seen[(a.dtype.name, a.shape, _elements(a), b.shape, _elements(b),
              None if out is None else _elements(out), caller)] += 1

    def watched_product(a, b, out=None, work=None):
        record(a, b, out, "jitorch")
        inside.append(True)
        try:
            return product(a, b, out, work)
        finally:
            inside.pop()

    def watched(a, b, *args, out=None, **kwargs):
        out = args[0] if args else out
        if not inside:
            record(a, b, out, "numpy")
        return matmul(a, b, out=out, **kwargs)
    skinny = linalg._skinny

    def watched_skinny(a, b, out, whole):  # (the products a generated kernel computes: no BLAS call to watch)
        done = skinny(a, b, out, whole)
        if done is not None:
            record(a, b, out, "jitorch")
        return done
    parts = blas_calls.run_gemm_parts

    def watched_parts(a, b, out, *args):  # (MKL's products in fixed parts: `linalg.mkl_parts`)
        done = parts(a, b, out, *args)
        if done:
            record(a, b, out, "jitorch")
        return done
    kept = gemm_words.product
    steps, step_matmul = recurrences._run_steps, recurrences._matmul

    def watched_steps(batch, kernel, *calls):  # (a layer's loop: `kernel`'s product once per step of ``calls``)
        key = (_ITEMS[kernel.itemsize], (batch, kernel.k), (kernel.k, 1), (kernel.k, kernel.n), (kernel.n, 1), None,
               STEP_KERNEL)
        seen[key] += len(calls[0][1])
        return steps(batch, kernel, *calls)

    def unkept(a, b, out):  # (the step's products through `array_product`, not the gemm calls kept for them)
        return linalg.array_product(a, b, out)
    biased = gemm_words.biased_product

    def unkept_biased(a, b, bias, out):  # (a product whose bias add the call folds in: the product as `unkept`'s)
        linalg.array_product(a, b, out)
        np.add(out, bias, out=out)
    np.matmul, linalg._matmul, linalg._skinny = watched, watched_product, watched_skinny
    blas_calls.run_gemm_parts, gemm_words.product, gemm_words.biased_product = watched_parts, unkept, unkept_biased
    recurrences._run_steps, recurrences._matmul = watched_steps, watched_product
    try:
        call()
        call()
    finally:
        np.matmul, linalg._matmul, linalg._skinny = matmul, product, skinny
        blas_calls.run_gemm_parts, gemm_words.product, gemm_words.biased_product = parts, kept, biased
        recurrences._run_steps, recurrences._matmul = steps, step_matmul
    return {k: n / 2 for k, n in seen.items()}


STEP_KERNEL = "step kernel"
_ITEMS = {4: "float32", 8: "float64"}


def _step_kernel(a, b):
    """``a @ b`` by the recurrences' generated product kernel as a layer's loop runs it: ``b`` packed once, then
    a call per product (in a program of calls where the native runner takes one, as `recurrences._run_steps`
    runs it), ``reps`` products per call of the returned function ``run(reps)``; None where no kernel serves."""
    kernel = None if recurrences.PRODUCT_KERNEL is None else recurrences.PRODUCT_KERNEL(a.dtype, *b.shape)
    rows = a.shape[0]
    if kernel is None or not kernel.serves(rows):
        return None
    a = np.ascontiguousarray(a)
    packed = kernel.pack(b)
    out = np.zeros((rows, kernel.ld), a.dtype)
    table = kernel.table({"a": recurrences._address(a), "w": recurrences._address(packed),
                          "out": recurrences._address(out)})
    row = kernel.rows(table)[0]

    def run(reps):
        program = np.empty(1 + 2 * reps, np.uint64)
        program[0], program[1::2], program[2::2] = reps, kernel.address, row
        if not threads.run_row_program(program, rows, 1):
            for _ in range(reps):
                kernel.run(row, rows)
        return out[:, :b.shape[1]]
    run.held = (a, packed, out, table)  # (the kernel reads them by address)
    return run


def _elements(x):
    return tuple(s // x.itemsize for s in x.strides)


def strided(shape, strides, dtype, rng):
    """A random array of ``shape`` and element ``strides`` over a buffer of its own."""
    size = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 0
    base = rng.standard_normal(max(size, 1)).astype(dtype)
    return np.lib.stride_tricks.as_strided(base, shape, tuple(s * base.itemsize for s in strides))


def product_shape(sa, sb):
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    return batch + sa[-2:-1] + sb[-1:]


def flops(sa, sb):
    """2 * multiply-adds of ``a @ b`` (both at least 2-D)."""
    return 2 * int(np.prod(product_shape(sa, sb))) * sa[-1]


def time_case(key, torch, rounds):
    """Seconds per call of the case under each system: {'jitorch', 'numpy', 'torch'}."""
    dtype, sa, ta, sb, tb, to, caller = key
    rng = np.random.default_rng(0)
    a, b = strided(sa, ta, dtype, rng), strided(sb, tb, dtype, rng)
    shape = product_shape(sa, sb)
    out = None if to is None else strided(shape, to, dtype, rng)
    fresh = out is None
    reps = max(1, int(2e7 / max(flops(sa, sb), 1)))  # about 0.2-20 ms per turn
    kernel = _step_kernel(a, b) if caller == STEP_KERNEL else None
    if caller == STEP_KERNEL and kernel is None:
        raise RuntimeError(f"no step kernel serves {sa} @ {sb} {dtype} here: collected on another machine?")

    def jit():
        if kernel is not None:
            return kernel(1)
        if caller == "numpy":
            return np.matmul(a, b) if fresh else np.matmul(a, b, out=out)
        return linalg.array_product(a, b) if fresh else linalg.array_product(a, b, out)

    def numpy():
        return np.matmul(a, b) if fresh else np.matmul(a, b, out=out)
    calls = {"jitorch": jit, "numpy": numpy}
    if torch is not None:
        x, y = torch.from_numpy(a), torch.from_numpy(b)
        calls["torch"] = lambda: torch.matmul(x, y)
        np.testing.assert_allclose(jit(), torch.matmul(x, y).numpy(), rtol=2e-3, atol=2e-3 * np.sqrt(sa[-1]))
    for fn in calls.values():
        fn()
    times = {s: [] for s in calls}
    for i in range(rounds):  # (the order turns round each round: the first turn after a switch runs colder)
        for s, fn in list(calls.items())[::1 if i % 2 else -1]:
            t0 = time.process_time()
            if s == "jitorch" and kernel is not None:
                kernel(reps)
            else:
                for _ in range(reps):
                    fn()
            times[s].append((time.process_time() - t0) / reps)
    return {s: statistics.median(t) for s, t in times.items()}


def split_calls(a, b, out, parts, rows):
    """`blas_calls.call_words` of ``out = a @ b`` (matrices) in ``parts`` near-equal ranges of the rows or columns."""
    size = out.shape[0] if rows else out.shape[1]
    bounds = threads.bounds(size, parts)
    if rows:
        return [blas_calls.call_words(a[lo:hi], b, out[lo:hi], False) for lo, hi in bounds]
    return [blas_calls.call_words(a, b[:, lo:hi], out[:, lo:hi], False) for lo, hi in bounds]


def variant_calls(a, b, out):
    """{variant: a function making ``out = a @ b`` that way} (`--variants`; matrices of one float dtype), or None
    where the product is no single OpenBLAS gemm call. Each variant leaves the whole call's bits in ``out``."""
    whole = blas_calls.call_words(a, b, out, False)
    if whole is None:
        return None
    adding = blas_calls.adding_words([whole], out.dtype)[0]

    def fold():
        out.fill(0)
        blas_calls.run_words([adding])
    calls = {"whole": lambda: blas_calls.run_words([whole]), "fold": fold}
    for rows in (True, False):
        for parts in (2, 3, 4):
            if (out.shape[0] if rows else out.shape[1]) >= 64 * parts:
                words = split_calls(a, b, out, parts, rows)
                if None not in words:
                    calls[f"{'rows' if rows else 'cols'} {parts}"] = lambda words=words: [
                        blas_calls.run_words([w]) for w in words]
    return calls


def time_variants(calls, rounds, reps):
    """{variant: thread CPU seconds per call} of `variant_calls`' ``calls``, taking turns (median of ``rounds``)."""
    times = {v: [] for v in calls}
    for i in range(rounds):
        for v, fn in list(calls.items())[::1 if i % 2 else -1]:
            t0 = time.thread_time()
            for _ in range(reps):
                fn()
            times[v].append((time.thread_time() - t0) / reps)
    return {v: statistics.median(t) for v, t in times.items()}


def run_variants(key, rounds):
    """(GFLOP/s per `variant_calls` variant of case ``key``, the best split's name) or None where it is no 2-D
    product of one gemm call. Raises where a variant leaves other bits than the whole call."""
    dtype, sa, ta, sb, tb, to, caller = key
    if caller == STEP_KERNEL or len(sa) != 2 or len(sb) != 2:
        return None
    rng = np.random.default_rng(0)
    a, b = strided(sa, ta, dtype, rng), strided(sb, tb, dtype, rng)
    out = np.empty(product_shape(sa, sb), dtype) if to is None else strided(product_shape(sa, sb), to, dtype, rng)
    calls = variant_calls(a, b, out)
    if calls is None:
        return None
    bits = {}
    for v, fn in calls.items():
        fn()
        bits[v] = out.copy()
        if not np.array_equal(bits[v].view(np.uint8), bits["whole"].view(np.uint8)):
            raise AssertionError(f"{v} of {sa} @ {sb} left other bits than the whole call")
    f = flops(sa, sb)
    rate = {v: f / t / 1e9 for v, t in time_variants(calls, rounds, max(1, int(2e8 / f))).items()}
    splits = [v for v in rate if v not in ("whole", "fold")]
    best = max(splits, key=rate.get) if splits else None
    return rate, best


PEAK_SIZE = 1536


def peak_rate(rounds):
    """OpenBLAS's GFLOP/s on a float32 `PEAK_SIZE` cube (one thread)."""
    x = np.random.default_rng(0).standard_normal((PEAK_SIZE, PEAK_SIZE)).astype(np.float32)
    out = np.empty_like(x)
    words = blas_calls.call_words(x, x.T.copy(), out, False)
    seconds = time_variants({"whole": lambda: blas_calls.run_words([words])}, rounds, 1)["whole"]
    return flops(x.shape, x.shape) / seconds / 1e9


def print_variants(cases, rounds):
    """``--variants``' table of ``cases`` (`collect`'s keys)."""
    print(f"\nthe gemm call and the ways of making it with its bits, GFLOP/s (thread CPU; peak: OpenBLAS on a "
          f"{PEAK_SIZE}^3 product {peak_rate(rounds):.1f})")
    print(f"{'A':<28} {'B':<28} {'whole':>7} {'fold':>7} {'split':>7}  best split")
    for key in cases:
        found = run_variants(key, rounds)
        if found is None:
            continue
        rate, best = found
        split = f"{rate[best]:7.1f}  {best}" if best else f"{'-':>7}"
        print(f"{describe(key[1], key[2]):<28} {describe(key[3], key[4]):<28} {rate['whole']:7.1f} "
              f"{rate['fold']:7.1f} {split}")


def describe(shape, strides):
    """A shape with its layout: C (contiguous rows), T (a transposed matrix: unit stride on rows),
    or the element strides."""
    if len(shape) >= 2 and strides[-1] == 1 and strides[-2] == shape[-1] and all(
            strides[i] == strides[i + 1] * shape[i + 1] for i in range(len(shape) - 2)):
        return f"{'x'.join(map(str, shape))} C"
    if len(shape) >= 2 and strides[-2] == 1 and strides[-1] == shape[-2] and len(shape) == 2:
        return f"{'x'.join(map(str, shape))} T"
    return f"{'x'.join(map(str, shape))} {strides}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--quick", action="store_true", help="the models' small sizes, 3 rounds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--variants", action="store_true",
                        help="each product's gemm call against its same-bits variants")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 9)
    torch = models.real_torch()
    jitorch.set_num_threads(1)
    if torch is not None:
        torch.set_num_threads(1)
    per_model = {name: collect(name, args.quick) for name in args.models.split(",")}
    cases = list(dict.fromkeys(k for c in per_model.values() for k in c))
    timed = {k: time_case(k, torch, rounds) for k in cases}
    systems = ["jitorch", "numpy"] + (["torch"] if torch is not None else [])
    print(f"1 thread, GFLOP/s per product (jitorch = the step's call, its BLAS {blas_library.chosen()}; "
          "numpy = NumPy's matmul; ratios are of times: >1 means jitorch slower)")
    head = f"{'calls/step':>14}  {'A':<28} {'B':<28} {'out':<8} {'MFLOP':>8}  " + "".join(
        f"{s:>8}" for s in systems) + f"  {'jit/np':>7}" + (f"  {'jit/torch':>9}" if torch else "")
    print(head)
    for key in sorted(cases, key=lambda k: -sum(c.get(k, 0) * flops(k[1], k[3]) for c in per_model.values())):
        dtype, sa, ta, sb, tb, to, caller = key
        counts = "+".join(f"{c[key]:g}" for c in per_model.values() if key in c)
        t = timed[key]
        f = flops(sa, sb)
        where = "step" if caller == STEP_KERNEL else "new" if to is None else "arena"
        line = (f"{counts:>14}  {describe(sa, ta):<28} {describe(sb, tb):<28} {where:<8} "
                f"{f / 1e6:8.2f}  " + "".join(f"{f / t[s] / 1e9:8.1f}" for s in systems)
                + f"  {t['jitorch'] / t['numpy']:7.2f}" + (f"  {t['jitorch'] / t['torch']:9.2f}" if torch else ""))
        print(line + ("  (NumPy directly)" if caller == "numpy" else "  (per-step kernel)" if caller == STEP_KERNEL
                      else ""))
    print("\nms of products per step")
    print(f"{'model':<12} {'products':>8} {'GFLOP':>7}  " + "".join(f"{s:>8}" for s in systems)
          + f"  {'jit/np':>7}" + (f"  {'jit/torch':>9}" if torch else ""))
    for name, counts in per_model.items():
        ms = {s: 1e3 * sum(n * timed[k][s] for k, n in counts.items()) for s in systems}
        gf = sum(n * flops(k[1], k[3]) for k, n in counts.items()) / 1e9
        print(f"{name:<12} {sum(counts.values()):8g} {gf:7.2f}  " + "".join(f"{ms[s]:8.2f}" for s in systems)
              + f"  {ms['jitorch'] / ms['numpy']:7.2f}" + (f"  {ms['jitorch'] / ms['torch']:9.2f}" if torch else ""))
    if args.variants:
        print_variants(cases, rounds)


if __name__ == "__main__":
    main()
