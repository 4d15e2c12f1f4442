"""Error of float32 GELU forward and backward over every float in a range: jitorch's compiled kernels, torch.

    PYTHONPATH=. python tools/gelu_ulp.py [--lo 2**-20] [--hi 16] [--step 1]

Every float32 x with lo <= |x| < hi (both signs; ``--step k`` takes every k-th) runs through the kernels
`F.gelu` runs from 4096 elements (`jitorch.nn.functional._gelu_kernel`: ``x * Phi(x)`` and its gradient
at g = 1, ``Phi(x) + x phi(x)``) and through torch's ``F.gelu`` and its backward, and is compared with
float64 (SciPy's ndtr, relative to its value in the tails; not a jitorch dependency). Errors are in float32
ulps of the exact value (the denormal spacing below the normal range). Printed per band of x: the largest
error of each, where it happens, and the mean. The backward's bands leave out |x + 0.7518| < 2**-6, around
the derivative's zero at -0.75179, where any float formula's relative error grows without bound (the
result is a difference of two terms near 0.2); that band is printed on its own in absolute terms.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from scipy.special import ndtr

import jitorch as jt
import jitorch.nn.functional as F

CHUNK = 1 << 22
ROOT = -0.7517915756
BANDS = (("x < -13 (denormal results)", -np.inf, -13.0), ("-13 <= x < -5", -13.0, -5.0), ("-5 <= x < -1", -5.0, -1.0),
         ("-1 <= x < 0", -1.0, 0.0), ("0 <= x < 1", 0.0, 1.0), ("1 <= x < 5", 1.0, 5.0), ("x >= 5", 5.0, np.inf))


def floats(lo, hi, step):
    """Every ``step``-th float32 in [lo, hi) (0 < lo < hi), both signs, in chunks."""
    first, last = (int(np.float32(v).view(np.int32)) for v in (lo, hi))
    for start in range(first, last, CHUNK * step):
        bits = np.arange(start, min(last, start + CHUNK * step), step, dtype=np.int32)
        pos = bits.view(np.float32)
        yield np.concatenate([-pos, pos])


def ulps(got, exact):
    """|got - exact| in float32 ulps of ``exact``."""
    spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - exact) / np.maximum(spacing, 2.0 ** -149)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lo", type=float, default=2.0 ** -20)
    parser.add_argument("--hi", type=float, default=16.0)
    parser.add_argument("--step", type=int, default=1)
    args = parser.parse_args()
    form = F._GELU_FORMS["none"]
    forward, backward = F._gelu_kernel(form, jt.float32), F._gelu_kernel(form, jt.float32, backward=True)
    stats = {}  # (kind, band) -> [max, x at max, sum, count]

    def record(kind, band, err, x):
        s = stats.setdefault((kind, band), [0.0, np.nan, 0.0, 0])
        if err.size:
            i = int(np.argmax(err))
            if err[i] > s[0]:
                s[0], s[1] = float(err[i]), float(x[i])
            s[2] += float(err.sum())
            s[3] += err.size

    for x in floats(args.lo, args.hi, args.step):
        x64 = x.astype(np.float64)
        cdf = ndtr(x64)
        exact_fwd = x64 * cdf
        exact_bwd = cdf + x64 * np.exp(-0.5 * x64 * x64) / np.sqrt(2 * np.pi)
        t = torch.from_numpy(x).requires_grad_()
        y = torch.nn.functional.gelu(t)
        y.backward(torch.ones_like(y))
        got = {"jitorch forward": (forward(x)[0], exact_fwd), "torch forward": (y.detach().numpy(), exact_fwd),
               "jitorch backward": (backward(x, np.ones_like(x))[0], exact_bwd),
               "torch backward": (t.grad.numpy(), exact_bwd)}
        near_root = np.abs(x64 - ROOT) < 2.0 ** -6
        for kind, (value, exact) in got.items():
            err = ulps(value, exact)
            for band, lo, hi in BANDS:
                inside = (x64 >= lo) & (x64 < hi)
                if "backward" in kind:
                    record(kind + " (absolute, near the zero)", "-0.77 < x < -0.73",
                           np.abs(value.astype(np.float64) - exact)[inside & near_root] / 2.0 ** -24,
                           x[inside & near_root])
                    inside &= ~near_root
                record(kind, band, err[inside], x[inside])
    print(f"every {args.step}th float32 with {args.lo:g} <= |x| < {args.hi:g}; float32 ulps of the exact value "
          f"(the near-zero band: absolute error in units of 2**-24)")
    for (kind, band), (worst, where, total, count) in stats.items():
        if count:
            print(f"{kind:48s} {band:28s} max {worst:12.3f} at {where:+.8g}  mean {total / count:.4f}")


if __name__ == "__main__":
    main()
