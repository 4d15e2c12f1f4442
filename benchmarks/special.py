"""torch.special's Cephes functions (and erfinv, polygamma of orders 2 and 3), eager: jitorch against torch, process CPU
time per call.

    PYTHONPATH=$PWD python benchmarks/special.py [--sizes 100000 1000000] [--dtypes float32 float64]
                                                 [--only NAME ...] [--repeat N] [--threads N] [--before]

Per function, dtype and size: the median process CPU time (``time.process_time``: all threads) of a call of
torch's function and of jitorch's, interleaved in one process, and their ratio. ``--ctypes`` adds jitorch with
the C library's functions called through ctypes (`special_cephes.libm`'s fallback, the path before the
generated loop of `codegen.c_calls`), so before and after come from the same run. Operands: each function's
interesting range (a spread of the Bessel functions' oscillations, ndtri's (0, 1), ...), reproducible.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import jitorch as jt
from jitorch.ops import special_cephes

from timing import median_time

# name -> (low, high) of the uniform operands
RANGES = {
    "erfcx": (-8, 30), "log_ndtr": (-30, 8), "ndtri": (0, 1),
    "bessel_j0": (0, 40), "bessel_j1": (0, 40), "bessel_y0": (0, 40), "bessel_y1": (0, 40),
    "modified_bessel_k0": (0, 20), "modified_bessel_k1": (0, 20),
    "scaled_modified_bessel_k0": (0, 20), "scaled_modified_bessel_k1": (0, 20),
    "spherical_bessel_j0": (-40, 40), "airy_ai": (-20, 20),
    "erfinv": (-1, 1), "polygamma2": (-10, 30), "polygamma3": (-10, 30), "polygamma2_negative": (-100, 0),
}
# the functions called otherwise than ``special.NAME(x)``
CALLS = {"polygamma2": lambda m, x: m.special.polygamma(2, x), "polygamma3": lambda m, x: m.special.polygamma(3, x),
         "polygamma2_negative": lambda m, x: m.special.polygamma(2, x)}


def _without_loops(fn):
    """``fn`` run without the generated loops (`special_cephes.LOOP_KERNEL` unset)."""
    def run():
        kernel, special_cephes.LOOP_KERNEL = special_cephes.LOOP_KERNEL, None
        try:
            fn()
        finally:
            special_cephes.LOOP_KERNEL = kernel
    return run


def main():
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    parser.add_argument("--only", nargs="+", default=list(RANGES))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--before", action="store_true", help="also time the path without generated loops")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    jt.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    print(f"{'function':28} {'dtype':8} {'n':>8} {'torch ms':>9} {'jitorch ms':>10} {'ratio':>6}"
          + (f" {'before ms':>10} {'ratio':>6}" if args.before else ""))
    for name in args.only:
        low, high = RANGES[name]
        for dtype in args.dtypes:
            for n in args.sizes:
                data = rng.uniform(low, high, n).astype(dtype)
                t, j = torch.from_numpy(data), jt.tensor(data)
                call = CALLS.get(name, lambda m, x, name=name: getattr(m.special, name)(x))
                torch_fn = lambda: call(torch, t)  # noqa: E731
                jt_fn = lambda: call(jt, j)  # noqa: E731
                times = [median_time(fn, args.repeat, clock=time.process_time) * 1e3
                         for fn in [torch_fn, jt_fn] + ([_without_loops(jt_fn)] if args.before else [])]
                row = f"{name:28} {dtype:8} {n:>8} {times[0]:9.2f} {times[1]:10.2f} {times[1] / times[0]:6.1f}"
                if args.before:
                    row += f" {times[2]:10.2f} {times[2] / times[0]:6.1f}"
                print(row, flush=True)


if __name__ == "__main__":
    main()
