"""Fused, compiled kernels against the systems a user would otherwise reach for.

    python benchmarks/fusion.py [--quick]
    python benchmarks/fusion.py --tracked [--threads 1,2] [--rounds N]

One table, every system timed in the same run (median of several repeats),
float32 throughout: a tanh-approximation GELU (written with ``x * x * x`` and
with ``x ** 3``), ``|x| ** 1.5`` and a 10-op chain over three inputs (16M
elements each), `sum` of 16M, a row softmax of 4096x4096, and an
MLP forward (batch 256, 784-256-128-10). Systems: jitorch compiled, jitorch
eager, NumPy, numexpr with 1 and all threads, torch eager and torch.compile
(the last three when installed: `pip install -e ".[bench]"`). The memory
bandwidth ceiling (a large copy) is measured in the same run and each
streaming case is shown as a fraction of it. Then the per-call overhead of a
compiled one-op function and of one reading 50 captured tensors, and compile
times: the first call in a fresh process, cold and with a warm disk cache.

``--tracked`` times only the rows issue 19 holds to torch eager (the full sum, the row max, the MLP forward), at
each thread count of ``--threads``: jitorch compiled and torch eager taking turns in blocks in one process
(`row_reductions.timed`: each block begun once the other system's threads went quiet), medians of ``--rounds``
calls each, torch's time over jitorch's (at least 1: the target met), and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import jitorch as jt  # noqa: E402
from row_reductions import timed  # noqa: E402
from timing import median_time, settle  # noqa: E402

try:
    import numexpr
except ImportError:
    numexpr = None
try:
    import torch
except ImportError:
    torch = None


def gelu(x):
    return 0.5 * x * (1 + (0.7978845608 * (x + 0.044715 * x * x * x)).tanh())


def gelu_pow(x):
    """`gelu` as users often write it, with ``x ** 3``: it must run as fast (powers by small numbers are
    strength-reduced)."""
    return 0.5 * x * (1 + (0.7978845608 * (x + 0.044715 * x ** 3)).tanh())


def pow_1_5(x):
    return x.abs() ** 1.5


def chain(a, b, c):
    return ((a * b + c) * 0.5 - a / (b * b + 1) + (c - a) * (b + 2)).abs() * 0.25


def mlp(x, w1, b1, w2, b2, w3, b3):
    h = (x @ w1 + b1).relu()
    h = (h @ w2 + b2).relu()
    return h @ w3 + b3


def softmax_rows(x):
    return x.softmax(dim=-1)


def np_gelu(x):
    return 0.5 * x * (1 + np.tanh(np.float32(0.7978845608) * (x + np.float32(0.044715) * x * x * x)))


def np_chain(a, b, c):
    return np.abs((a * b + c) * np.float32(0.5) - a / (b * b + 1) + (c - a) * (b + 2)) * np.float32(0.25)


def np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def np_mlp(x, w1, b1, w2, b2, w3, b3):
    h = np.maximum(x @ w1 + b1, 0)
    h = np.maximum(h @ w2 + b2, 0)
    return h @ w3 + b3


NE_GELU = "0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x * x * x)))"
NE_GELU_POW = "0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * x ** 3)))"
NE_CHAIN = "abs((a * b + c) * 0.5 - a / (b * b + 1) + (c - a) * (b + 2)) * 0.25"


def cases(quick):
    rng = np.random.default_rng(0)
    n = 1 << (22 if quick else 24)
    x = rng.standard_normal(n, dtype=np.float32)
    a, b, c = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    m = 1024 if quick else 4096
    s = rng.standard_normal((m, m), dtype=np.float32)
    mlp_args = [rng.standard_normal(shape, dtype=np.float32) * 0.05 for shape in
                ((256, 784), (784, 256), (256,), (256, 128), (128,), (128, 10), (10,))]
    label = f"{n >> 20}M"
    return [
        (f"GELU, {label}", (x,), gelu, np_gelu, ("numexpr", NE_GELU, {"x": x}), 2 * x.nbytes),
        (f"GELU with x ** 3, {label}", (x,), gelu_pow, np_gelu, ("numexpr", NE_GELU_POW, {"x": x}),
         2 * x.nbytes),
        (f"|x| ** 1.5, {label}", (x,), pow_1_5, lambda a: np.abs(a) ** np.float32(1.5),
         ("numexpr", "abs(x) ** 1.5", {"x": x}), 2 * x.nbytes),
        (f"10-op chain, 3x{label}", (a, b, c), chain, np_chain, ("numexpr", NE_CHAIN, {"a": a, "b": b, "c": c}),
         4 * a.nbytes),
        (f"sum, {label}", (x,), lambda t: t.sum(), lambda t: t.sum(), ("numexpr", "sum(x)", {"x": x}), x.nbytes),
        (f"softmax rows {m}x{m}", (s,), softmax_rows, np_softmax, None, 2 * s.nbytes),
        (f"row max {m}x{m}", (s,), lambda t: t.amax(1), lambda t: t.max(axis=1), None, s.nbytes),
        (f"column sum * 2 {m}x{m}", (s,), lambda t: t.sum(0) * 2, lambda t: t.sum(axis=0) * 2, None, s.nbytes),
        ("MLP fwd 256x784", tuple(mlp_args), mlp, np_mlp, None, None),
    ]


# The rows issue 19 holds to torch eager (jitorch compiled at least as fast), by the start of their labels
TRACKED = ("sum, ", "row max ", "MLP fwd ")


def tracked(quick, thread_counts, rounds):
    """{(label, threads): (jitorch compiled's median, torch eager's)} of the `TRACKED` cases, the two taking turns
    (see the module docstring)."""
    prepared = []
    for label, arrays, fn, *_ in cases(quick):
        if label.startswith(TRACKED):
            tensors, compiled = [jt.from_numpy(a) for a in arrays], jt.compile(fn)
            tt = [torch.from_numpy(a) for a in arrays]
            np.testing.assert_allclose(compiled(*tensors).numpy(), fn(*tt).numpy(), rtol=1e-4, atol=1e-3)
            prepared.append((label, {"jitorch": lambda c=compiled, t=tensors: c(*t),
                                     "torch": lambda f=fn, t=tt: f(*t)}))
    out = {}
    for threads in thread_counts:
        jt.set_num_threads(threads)
        torch.set_num_threads(threads)
        for label, calls in prepared:
            times = timed(calls, rounds)
            out[label, threads] = times["jitorch"][0], times["torch"][0]
    return out


def print_tracked(quick, thread_counts, rounds):
    load = os.getloadavg()[0]
    rows = tracked(quick, thread_counts, rounds)
    print(f"medians of {rounds} calls each, jitorch compiled and torch eager taking turns; "
          f"load {load:.1f} -> {os.getloadavg()[0]:.1f}")
    print(f"{'case':<24}{'threads':>8}{'jitorch compiled':>18}{'torch eager':>14}{'torch / jitorch':>17}")
    for (label, threads), (mine, theirs) in rows.items():
        print(f"{label:<24}{threads:>8}{fmt(mine):>18}{fmt(theirs):>14}{theirs / mine:>17.2f}")


def copy_ceiling(quick):
    """Bytes per second of a large copy (read + write), the streaming ceiling."""
    src = np.ones(1 << (24 if quick else 26), dtype=np.float32)
    dst = np.empty_like(src)
    t = median_time(lambda: np.copyto(dst, src), 5)
    return 2 * src.nbytes / t


def settled_time(fn, repeat):
    """`median_time` of ``fn`` over ``repeat`` calls, begun once the threads of whatever ran before went quiet
    (`timing.settle`: torch's OpenMP workers spin for milliseconds after a call at 2 threads, holding one of this
    machine's two cores, and each case's jitorch calls came right after the last case's torch calls)."""
    settle()
    return median_time(fn, repeat)


def run_systems(case, repeat):
    label, arrays, fn, np_fn, ne, nbytes = case
    tensors = [jt.from_numpy(a) for a in arrays]
    compiled = jt.compile(fn)
    times = {
        "jitorch compiled": settled_time(lambda: compiled(*tensors), repeat),
        "jitorch eager": settled_time(lambda: fn(*tensors), repeat),
        "numpy": settled_time(lambda: np_fn(*arrays), repeat),
    }
    if numexpr is not None and ne is not None:
        _, expr, env = ne
        for threads in (1, os.cpu_count() or 1):
            numexpr.set_num_threads(threads)
            times[f"numexpr {threads}t"] = settled_time(lambda: numexpr.evaluate(expr, local_dict=env), repeat)
    if torch is not None:
        tt = [torch.from_numpy(a) for a in arrays]
        times["torch eager"] = settled_time(lambda: fn(*tt), repeat)
        try:
            tc = torch.compile(fn)
            times["torch.compile"] = settled_time(lambda: tc(*tt), repeat)
        except Exception as e:  # noqa: BLE001 - torch.compile needs a C++ toolchain; report and go on
            print(f"  (torch.compile failed on {label}: {type(e).__name__})")
    return times


def call_overhead(repeat):
    x = jt.ones(1)
    f = jt.compile(lambda t: t + 1)
    f(x)
    n = 2000
    out = {"jitorch compiled": median_time(lambda: [f(x) for _ in range(n)], repeat) / n}
    if torch is not None:
        tx = torch.ones(1)
        try:
            g = torch.compile(lambda t: t + 1)
            g(tx)
            out["torch.compile"] = median_time(lambda: [g(tx) for _ in range(n)], repeat) / n
        except Exception:  # noqa: BLE001
            pass
    return out


def captured_call_time(repeat, n=2000):
    """Per call of a compiled function that reads 50 captured tensors of 4 elements (a small model's
    parameters): the guards on the captured state (identity, requires_grad, geometry) and reading the
    constants dominate."""
    params = [jt.full((4,), float(i)) for i in range(50)]

    def fn(x):
        for p in params:
            x = x + p
        return x
    x = jt.ones(4)
    f = jt.compile(fn)
    f(x)
    return median_time(lambda: [f(x) for _ in range(n)], repeat) / n


COMPILE_SNIPPET = """
import time, numpy as np, jitorch as jt
x = jt.from_numpy(np.ones(1 << 20, dtype=np.float32))
def gelu(x):
    return 0.5 * x * (1 + (0.7978845608 * (x + 0.044715 * x * x * x)).tanh())
t0 = time.perf_counter(); f = jt.compile(gelu); t1 = time.perf_counter(); f(x); t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def compile_times():
    """In a fresh process: (jt.compile(gelu) itself, which loads the code generator once per process;
    the first call, cold) and the same with the disk cache warm."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, JITORCH_CACHE_DIR=cache, PYTHONPATH=os.path.join(os.path.dirname(__file__), ".."))
        return [tuple(map(float, subprocess.run([sys.executable, "-c", COMPILE_SNIPPET], env=env,
                                                capture_output=True, text=True, check=True).stdout.split()))
                for _ in range(2)]


def fmt(s):
    if s is None:
        return "-"
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


SYSTEMS = ("jitorch compiled", "jitorch eager", "numpy", "numexpr 1t", f"numexpr {os.cpu_count() or 1}t",
           "torch eager", "torch.compile")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    parser.add_argument("--tracked", action="store_true",
                        help="only the sum, row max and MLP rows, jitorch compiled against torch eager in turns")
    parser.add_argument("--threads", default="1,2", help="with --tracked: thread counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=21, help="with --tracked: timed calls of each system")
    args = parser.parse_args(argv)
    if args.tracked:
        if torch is None:
            sys.exit("torch is not installed: pip install -e '.[bench]'")
        print_tracked(args.quick, [int(t) for t in args.threads.split(",")], args.rounds)
        return
    repeat = 3 if args.quick else 7
    ceiling = copy_ceiling(args.quick)
    rows = [(case[0], case[5], run_systems(case, repeat)) for case in cases(args.quick)]
    systems = [s for s in SYSTEMS if any(s in times for _, _, times in rows)]
    print(f"median times; (Nx) = that system's time / jitorch compiled's; copy ceiling {ceiling / 1e9:.1f} GB/s")
    header = f"{'case':<24}" + "".join(f"{s:>22}" for s in systems) + f"{'jt of ceiling':>15}"
    print(header)
    print("-" * len(header))
    for label, nbytes, times in rows:
        jc = times["jitorch compiled"]
        cells = "".join(f"{(fmt(times[s]) + f' ({times[s] / jc:.2f}x)') if s in times else '-':>22}" for s in systems)
        frac = f"{nbytes / jc / ceiling:.0%}" if nbytes else "-"
        print(f"{label:<24}{cells}{frac:>15}")
    overhead = call_overhead(repeat)
    print("\nper-call overhead of a compiled one-op function (1 element): " +
          ", ".join(f"{s} {fmt(t)}" for s, t in overhead.items()))
    print(f"per call of a compiled function reading 50 captured tensors: {fmt(captured_call_time(repeat))}")
    (load_cold, cold), (load_warm, warm) = compile_times()
    print(f"first call of a compiled GELU in a fresh process: cold {fmt(cold)}, with the disk cache warm "
          f"{fmt(warm)} (jitorch.compile itself, loading llvmlite and the code generator once per process: "
          f"{fmt(load_cold)} / {fmt(load_warm)})")


if __name__ == "__main__":
    main()
