"""Eager op speed: jitorch against NumPy and (when installed) torch, in one run.

    python benchmarks/eager.py [--quick]

Rows: latency of ``x + y`` on 1 and 1,000 float32 elements (the per-op
overhead), throughput of add / exp / sum on 16M float32 elements, and a
1024x1024 float32 matmul. Every system runs the same operation on its own
tensors; the table shows the best time of several repeats and the ratios
jitorch/NumPy and jitorch/torch (lower is better for jitorch).
"""

from __future__ import annotations

import argparse
import os
import sys
import timeit

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import jitorch as jt  # noqa: E402

try:
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
except ImportError:
    torch = None


def best_time(fn, number, repeat):
    """Seconds per call: the minimum over ``repeat`` runs of ``number`` calls."""
    fn()
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def cases(quick):
    big = 1 << 22 if quick else 1 << 24
    rng = np.random.default_rng(0)
    for label, n, kind in (("x + y, 1 elem", 1, "add"), ("x + y, 1k elems", 1000, "add"),
                           (f"add, {big >> 20}M elems", big, "add"), (f"exp, {big >> 20}M elems", big, "exp"),
                           (f"sum, {big >> 20}M elems", big, "sum")):
        a = rng.standard_normal(n).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        yield label, kind, a, b, (20000 if n <= 1000 else 3)
    m = 512 if quick else 1024
    a = rng.standard_normal((m, m)).astype(np.float32)
    b = rng.standard_normal((m, m)).astype(np.float32)
    yield f"matmul {m}x{m}", "matmul", a, b, 3


def runners(kind, a, b):
    ja, jb = jt.from_numpy(a), jt.from_numpy(b)
    fns = {
        "add": (lambda: ja + jb, lambda: a + b),
        "exp": (lambda: ja.exp(), lambda: np.exp(a)),
        "sum": (lambda: ja.sum(), lambda: a.sum()),
        "matmul": (lambda: ja @ jb, lambda: a @ b),
    }
    j, n = fns[kind]
    t = None
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        t = {"add": lambda: ta + tb, "exp": lambda: ta.exp(), "sum": lambda: ta.sum(),
             "matmul": lambda: ta @ tb}[kind]
    return j, n, t


def fmt(seconds):
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.2f} {unit}"
    return f"{seconds / 1e-9:.0f} ns"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    args = parser.parse_args(argv)
    repeat = 3 if args.quick else 5
    rows = []
    for label, kind, a, b, number in cases(args.quick):
        j, n, t = runners(kind, a, b)
        tj = best_time(j, number, repeat)
        tn = best_time(n, number, repeat)
        tt = best_time(t, number, repeat) if t else None
        rows.append((label, tj, tn, tt))
    head = f"{'case':<20} {'jitorch':>10} {'numpy':>10} {'torch':>10} {'jt/numpy':>9} {'jt/torch':>9}"
    print(head)
    print("-" * len(head))
    for label, tj, tn, tt in rows:
        rt = f"{tj / tt:.2f}x" if tt else "-"
        print(f"{label:<20} {fmt(tj):>10} {fmt(tn):>10} {fmt(tt):>10} {tj / tn:>8.2f}x {rt:>9}")
    return rows


if __name__ == "__main__":
    main()
