"""Eager op speed: jitorch against NumPy and (when installed) torch, in one run.

    python benchmarks/eager.py [--quick] [--overhead]

Rows: latency of ``x + y`` on 1 and 1,000 float32 elements (the per-op
overhead), throughput of add / exp / sum on 16M float32 elements, and a
1024x1024 float32 matmul. Every system runs the same operation on its own
tensors; the table shows the best time of several repeats and the ratios
jitorch/NumPy and jitorch/torch (lower is better for jitorch).

``--overhead`` prints instead the per-call cost of common ops on one-element
(1x1) tensors, where the time is all dispatch: each system's calls are timed in
turns within one process, in CPU time (torch on one thread), so other load on
the machine affects them little and alike.

``--autograd`` prints, timed so too, the cost of calls in grad mode on a small
batch (64 rows): recording the backward node, ``backward()`` through it, and the
README demo's training step (`AUTOGRAD_CASES`), where the time is dispatch,
autograd's graph and engine, and little arithmetic (no NumPy column).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
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


# label: (a call of jitorch or torch as ``lib`` on x, y, the same call in NumPy)
OVERHEAD_OPS = {
    "x + y": (lambda lib, x, y: x + y, lambda x, y: x + y),
    "x * y": (lambda lib, x, y: x * y, lambda x, y: x * y),
    "x @ y": (lambda lib, x, y: x @ y, lambda x, y: x @ y),
    "relu(x)": (lambda lib, x, y: lib.relu(x), lambda x, y: np.maximum(x, 0)),
    "x.sum()": (lambda lib, x, y: x.sum(), lambda x, y: x.sum()),
    "x.view(1)": (lambda lib, x, y: x.view(1), lambda x, y: x.reshape(1)),
    "x.reshape(1)": (lambda lib, x, y: x.reshape(1), lambda x, y: x.reshape(1)),
    "x[0]": (lambda lib, x, y: x[0], lambda x, y: x[0]),
    "x.unsqueeze(0)": (lambda lib, x, y: x.unsqueeze(0), lambda x, y: x[None]),
    "x.transpose(0, 1)": (lambda lib, x, y: x.transpose(0, 1), lambda x, y: x.swapaxes(0, 1)),
    "cat([x, y])": (lambda lib, x, y: lib.cat([x, y]), lambda x, y: np.concatenate([x, y])),
    "x[:, 0]": (lambda lib, x, y: x[:, 0], lambda x, y: x[:, 0]),
    "x.permute(1, 0)": (lambda lib, x, y: x.permute(1, 0), lambda x, y: x.transpose(1, 0)),
    "x.expand(3, 1)": (lambda lib, x, y: x.expand(3, 1), lambda x, y: np.broadcast_to(x, (3, 1))),
    "x.flatten()": (lambda lib, x, y: x.flatten(), lambda x, y: x.reshape(-1)),
    "-x": (lambda lib, x, y: -x, lambda x, y: -x),
    "x.exp()": (lambda lib, x, y: x.exp(), lambda x, y: np.exp(x)),
    "x < y": (lambda lib, x, y: x < y, lambda x, y: x < y),
    "x.mean()": (lambda lib, x, y: x.mean(), lambda x, y: x.mean()),
    "softmax(x, -1)": (lambda lib, x, y: lib.softmax(x, -1),
                       lambda x, y: np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(
                           -1, keepdims=True)),
    "x.item()": (lambda lib, x, y: x.item(), lambda x, y: x.item()),
    "x.add_(y)": (lambda lib, x, y: x.add_(y), lambda x, y: np.add(x, y, out=x)),
    "x.add_(y, alpha=2)": (lambda lib, x, y: x.add_(y, alpha=2), lambda x, y: np.add(x, 2 * y, out=x)),  # (SGD's)
    "add(x, y, out=x)": (lambda lib, x, y: lib.add(x, y, out=x), lambda x, y: np.add(x, y, out=x)),
    # reductions into an out= tensor of the result's dtype and shape (here y)
    "sum(x, 1, True, out=y)": (lambda lib, x, y: lib.sum(x, 1, True, out=y),
                               lambda x, y: np.add.reduce(x, 1, None, y, True)),
    "mean(x, 1, True, out=y)": (lambda lib, x, y: lib.mean(x, 1, True, out=y),
                                lambda x, y: np.mean(x, 1, None, y, True)),
    "nansum(x, 1, True, out=y)": (lambda lib, x, y: lib.nansum(x, 1, True, out=y),
                                  lambda x, y: np.nansum(x, 1, None, y, True)),
    "amax(x, 1, True, out=y)": (lambda lib, x, y: lib.amax(x, 1, True, out=y),
                                lambda x, y: np.maximum.reduce(x, 1, None, y, True)),
    "amin(x, 1, True, out=y)": (lambda lib, x, y: lib.amin(x, 1, True, out=y),
                                lambda x, y: np.minimum.reduce(x, 1, None, y, True)),
    "prod(x, 1, True, out=y)": (lambda lib, x, y: lib.prod(x, 1, True, out=y),
                                lambda x, y: np.multiply.reduce(x, 1, None, y, True)),
}


def overhead(number, repeat):
    """Rows (label, jitorch, numpy, torch seconds per call) of `OVERHEAD_OPS` on 1x1 float32 tensors; each
    repeat times the systems in turn, so load on the machine weighs on them alike."""
    if torch is not None:
        torch.set_num_threads(1)
    rows = []
    for label, (call, numpy_call) in OVERHEAD_OPS.items():
        a = np.ones((1, 1), np.float32)  # (each row's own: an in-place row writes it)
        b = np.full((1, 1), 2.0, np.float32)
        ja, jb = jt.from_numpy(a), jt.from_numpy(b)
        fns = [lambda: call(jt, ja, jb), lambda: numpy_call(a, b)]
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            fns.append(lambda: call(torch, ta, tb))
        best = [float("inf")] * len(fns)
        for _ in range(repeat):
            best = [min(t, timeit.timeit(f, number=number, timer=time.process_time)) for t, f in zip(best, fns)]
        rows.append((label, *(t / number for t in best), *([None] * (torch is None))))
    return rows


def _autograd_case(lib, label):
    """A call of ``lib`` (jitorch or torch) for the `autograd_rows` row ``label``, on its own tensors."""
    gen = np.random.default_rng(0)
    x = lib.tensor(gen.standard_normal((64, 10)).astype(np.float32), requires_grad=True)
    y = lib.tensor(gen.standard_normal((64, 10)).astype(np.float32))
    h = lib.tensor(gen.standard_normal((64, 64)).astype(np.float32), requires_grad=True)
    target = lib.tensor(gen.integers(0, 10, 64))
    F = lib.nn.functional
    layer = lib.nn.Linear(64, 256)
    if label == "mlp step":  # (benchmarks/contention.py's: the README demo's step)
        nn = lib.nn
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
        opt = lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        data = lib.tensor(gen.random((64, 64)).astype(np.float32))

        def step():
            opt.zero_grad()
            F.cross_entropy(model(data), target).backward()
            opt.step()
        return step
    return {"x * y": lambda: x * y,
            "x + y": lambda: x + y,
            "relu(x)": lambda: lib.relu(x),
            "(x * y).sum().backward()": lambda: (x * y).sum().backward(),
            "linear(h)": lambda: layer(h),
            "linear(h).sum().backward()": lambda: layer(h).sum().backward(),
            "relu(h).sum().backward()": lambda: lib.relu(h).sum().backward(),
            "cross_entropy(x, t)": lambda: F.cross_entropy(x, target),
            "cross_entropy.backward()": lambda: F.cross_entropy(x, target).backward()}[label]


AUTOGRAD_CASES = ("x * y", "x + y", "relu(x)", "(x * y).sum().backward()", "linear(h)", "linear(h).sum().backward()",
                  "relu(h).sum().backward()", "cross_entropy(x, t)", "cross_entropy.backward()", "mlp step")


def autograd_rows(number, repeat):
    """Rows (label, jitorch, None, torch seconds per call) of `AUTOGRAD_CASES`, timed as `overhead` times its
    rows (process CPU time, the systems in turns, torch on one thread; jitorch at one thread too)."""
    jt.set_num_threads(1)
    if torch is not None:
        torch.set_num_threads(1)
    rows = []
    for label in AUTOGRAD_CASES:
        fns = [_autograd_case(jt, label)] + ([_autograd_case(torch, label)] if torch is not None else [])
        calls = number // 10 if label == "mlp step" else number
        best = [float("inf")] * len(fns)
        for _ in range(repeat):
            best = [min(t, timeit.timeit(f, number=calls, timer=time.process_time)) for t, f in zip(best, fns)]
        times = [t / calls for t in best]
        rows.append((label, times[0], None, times[1] if torch is not None else None))
    return rows


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
    parser.add_argument("--overhead", action="store_true", help="per-call cost of common ops on 1x1 tensors")
    parser.add_argument("--autograd", action="store_true", help="per-call cost in grad mode, backward, a training step")
    args = parser.parse_args(argv)
    repeat = 3 if args.quick else 5
    if args.autograd:
        rows = autograd_rows(50 if args.quick else 1000, repeat)
    elif args.overhead:
        rows = overhead(2000 if args.quick else 20000, repeat)
    else:
        rows = []
        for label, kind, a, b, number in cases(args.quick):
            j, n, t = runners(kind, a, b)
            tj = best_time(j, number, repeat)
            tn = best_time(n, number, repeat)
            tt = best_time(t, number, repeat) if t else None
            rows.append((label, tj, tn, tt))
    width = max(20, *(len(row[0]) for row in rows))
    head = f"{'case':<{width}} {'jitorch':>10} {'numpy':>10} {'torch':>10} {'jt/numpy':>9} {'jt/torch':>9}"
    print(head)
    print("-" * len(head))
    for label, tj, tn, tt in rows:
        rt = f"{tj / tt:.2f}x" if tt else "-"
        rn = f"{tj / tn:.2f}x" if tn else "-"
        print(f"{label:<{width}} {fmt(tj):>10} {fmt(tn):>10} {fmt(tt):>10} {rn:>9} {rt:>9}")
    return rows


if __name__ == "__main__":
    main()
