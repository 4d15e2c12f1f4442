"""Full sums, means and 2-norms of 1M, 16M and 64M float32 / float64 elements: jitorch eager and compiled against
torch eager.

    python benchmarks/full_sums.py [--quick] [--threads 1,2] [--ops sum,mean,norm]

Systems, taking turns in blocks as `row_reductions.timed` runs them: torch eager; jitorch eager (``t.sum()``: NumPy's
pairwise block sums computed on the thread team, `jitorch/codegen/pairwise.py`); jitorch eager with NumPy computing
those blocks on the calling thread (``summation.BLOCK_SUMS`` unset: what eager sums and means did before session 54,
the same bits; a norm then squares into one new array, where before session 54 it made two); jitorch compiled.
Medians of wall time per call (thread CPU time), ratios to torch of the wall medians.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import jitorch as jt  # noqa: E402
from jitorch.runtime import summation  # noqa: E402
from row_reductions import timed  # noqa: E402
from timing import patched  # noqa: E402

try:
    import torch
except ImportError:
    torch = None


def numpy_blocks(call):
    """``call`` with `summation.BLOCK_SUMS` unset during it (NumPy sums the blocks on the calling thread)."""
    return patched(call, summation, "BLOCK_SUMS", None)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1M and 16M, fewer rounds")
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    parser.add_argument("--ops", default="sum", help="of sum, mean and norm (the 2-norm), comma-separated")
    args = parser.parse_args(argv)
    if torch is None:
        sys.exit("torch is not installed: pip install -e '.[bench]'")
    rounds = 6 if args.quick else 12
    sizes = (20, 24) if args.quick else (20, 24, 26)
    rng = np.random.default_rng(0)
    prepared = []
    for dtype in (np.float32, np.float64):
        for log in sizes:
            array = rng.standard_normal(1 << log).astype(dtype)
            x, tx = jt.from_numpy(array), torch.from_numpy(array)
            for op in args.ops.split(","):
                fn = {"sum": lambda t: t.sum(), "mean": lambda t: t.mean(), "norm": lambda t: t.norm()}[op]
                compiled = jt.compile(fn)
                want = fn(torch.from_numpy(array.astype(np.float64))).item()
                for got in (fn(x), compiled(x), numpy_blocks(lambda f=fn, x=x: f(x))()):
                    np.testing.assert_allclose(got.item(), want, rtol=1e-4 if dtype == np.float32 else 1e-10,
                                               atol=1e-2 if dtype == np.float32 else 1e-8)
                prepared.append((f"{op} {1 << (log - 20)}M {np.dtype(dtype).name}", {
                    "torch eager": lambda f=fn, t=tx: f(t), "jt eager": lambda f=fn, x=x: f(x),
                    "jt eager (NumPy blocks)": numpy_blocks(lambda f=fn, x=x: f(x)),
                    "jt compiled": lambda c=compiled, x=x: c(x)}))
    print(f"medians of {rounds} calls each, wall (thread CPU) ms; load {os.getloadavg()[0]:.1f}")
    names = list(prepared[0][1])
    for threads in (int(t) for t in args.threads.split(",")):
        jt.set_num_threads(threads)
        torch.set_num_threads(threads)
        print(f"\n{threads} thread{'s' * (threads > 1)}")
        print(f"{'case':<20}" + "".join(f"{n:>26}" for n in names[1:]) + f"{'torch eager':>16}")
        for label, calls in prepared:
            times = timed(calls, rounds)
            tw = times["torch eager"][0]
            cols = "".join(f"{f'{w * 1e3:.2f} ({c * 1e3:.2f}) {w / tw:.2f}x':>26}" for w, c in
                           (times[n] for n in names[1:]))
            print(f"{label:<20}{cols}{f'{tw * 1e3:.2f} ms':>16}")
    print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
