"""Eager pow, float_power and xlogy against torch: ulps per dtype, and CPU time per call.

    PYTHONPATH=$PWD python benchmarks/pow_accuracy.py [--seed N] [--n N] [--no-time] [--exact N]

Operands: random bases over the whole range of each dtype (both signs, subnormals, 0, +-inf, NaN), exponents
random reals, integers, halves and the special values, as tensor-tensor pairs and as Python-number exponents.
Per op and dtype it prints the largest difference from torch in ulps of the dtype, the share of elements that
differ, and the count whose NaN-ness or infinity differs (which the ulp count leaves out). Integer dtypes must
be equal. Times are CPU time (``time.process_time``: all threads) per call at 1, 1k and 1M elements.

``--exact N``: float32 pow (`powers.pow_single`, plain double), the double-word `powers.pow_double` rounded to
float32 (jitorch's float32 pow before) and torch's, against the correctly rounded float32 power (mpmath, 256
bits, where they differ) on N operands of each kind: random over the whole range; results near float32's range
ends (where the plain double's error is largest); integer and half powers whose exact value is a float32
midpoint; and random ones within 2**-14 ulp of one.
"""

from __future__ import annotations

import argparse
import time

import mpmath
import numpy as np
import torch

import jitorch as jt
from jitorch.ops import powers

FLOATS = ("float16", "bfloat16", "float32", "float64")
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 1e-310, -1e-310])


def _bases(rng, n, dtype):
    info = torch.finfo(getattr(torch, dtype))
    lo, hi = np.log2(info.smallest_normal) - (10 if dtype != "bfloat16" else 7), np.log2(info.max)
    mags = np.exp2(rng.uniform(lo, hi, n))
    near_one = 1 + rng.normal(0, 0.05, n)
    x = np.where(rng.random(n) < 0.3, near_one, mags) * rng.choice([-1.0, 1.0], n)
    x[: len(SPECIAL)] = SPECIAL
    return x


def _exponents(rng, n):
    kinds = rng.integers(0, 4, n)
    y = np.select([kinds == 0, kinds == 1, kinds == 2],
                  [rng.uniform(-40, 40, n), np.round(rng.uniform(-40, 40, n)), np.round(rng.uniform(-20, 20, n)) + 0.5],
                  rng.standard_normal(n))
    y[-len(SPECIAL):] = SPECIAL
    return rng.permutation(y)


def _ulps(a, b, dtype):
    """(max ulps, share differing, NaN/inf mismatches) of torch float tensors ``a``, ``b`` of ``dtype``."""
    bits = {"float16": torch.int16, "bfloat16": torch.int16, "float32": torch.int32, "float64": torch.int64}[dtype]
    an, bn = torch.isnan(a), torch.isnan(b)
    finite = torch.isfinite(a) & torch.isfinite(b)
    odd = int((an != bn).sum() + ((torch.isinf(a) | torch.isinf(b)) & ~an & ~bn & (a != b)).sum())
    ia, ib = a[finite].view(bits).long(), b[finite].view(bits).long()
    top = -(1 << (torch.iinfo(bits).bits - 1))
    ia = torch.where(ia < 0, top - ia, ia)
    ib = torch.where(ib < 0, top - ib, ib)
    d = (ia - ib).abs()
    return (int(d.max()) if d.numel() else 0), float((d != 0).float().mean()) if d.numel() else 0.0, odd


def _pairs(rng, n, dtype):
    x = _bases(rng, n, dtype)
    y = _exponents(rng, n)
    tdt = getattr(torch, dtype)
    tx, ty = torch.from_numpy(x).to(tdt), torch.from_numpy(y).to(tdt)
    return tx, ty


def accuracy(seed, n):
    rng = np.random.default_rng(seed)
    print(f"{'op':<22}{'dtype':<10}{'max ulp':>8}{'differ':>10}{'nan/inf':>9}")
    for dtype in FLOATS:
        tx, ty = _pairs(rng, n, dtype)
        jx, jy = jt.from_numpy(tx.float().numpy() if dtype == "bfloat16" else tx.numpy()), None
        jx = jx.to(getattr(jt, dtype))
        jy = jt.from_numpy(ty.float().numpy() if dtype == "bfloat16" else ty.numpy()).to(getattr(jt, dtype))
        cases = [("pow(t, t)", torch.pow(tx, ty), jt.pow(jx, jy))]
        for e in (2.5, -1.5, 0.5, 3.0, 7.0, -4.0, 1.7, -0.3, 12.25, 100.0):
            cases.append((f"pow(t, {e})", torch.pow(tx, e), jt.pow(jx, e)))
        cases.append(("pow(2.0, t)", torch.pow(2.0, ty.clamp(-30, 30)), jt.pow(2.0, jy.clamp(-30, 30))))
        cases.append(("xlogy(t, t)", torch.xlogy(ty, tx.abs()), jt.xlogy(jy, jx.abs())))
        if dtype == "float64" or dtype == "float32":
            cases.append(("float_power(t, t)", torch.float_power(tx, ty), jt.float_power(jx, jy)))
        for name, want, got in cases:
            got = torch.from_numpy(got.float().numpy() if dtype == "bfloat16" else got.numpy())
            got = got.to(want.dtype)
            worst, share, odd = _ulps(want, got, str(want.dtype).split(".")[1])
            print(f"{name:<22}{dtype:<10}{worst:>8}{share:>10.4%}{odd:>9}")
    for dtype in ("int32", "int64", "uint8"):
        x = rng.integers(-20, 20, n).astype(dtype)
        y = rng.integers(0, 12, n).astype(dtype)
        want = torch.pow(torch.from_numpy(x), torch.from_numpy(y)).numpy()
        got = jt.pow(jt.from_numpy(x), jt.from_numpy(y)).numpy()
        print(f"{'pow(int, int)':<22}{dtype:<10}{'equal' if np.array_equal(want, got) else 'DIFFERENT':>8}")


def _cpu_per_call(fn, budget=0.3):
    fn()
    calls, start = 0, time.process_time()
    while time.process_time() - start < budget or calls < 3:
        fn()
        calls += 1
    return (time.process_time() - start) / calls


def timing(seed):
    rng = np.random.default_rng(seed)
    print(f"{'op':<16}{'dtype':<9}" + "".join(f"{n:>12}" for n in ("1", "1k", "1M")) + "  (us of CPU per call)")
    for dtype in ("float32", "float64"):
        for name, fn in (("pow(t, t)", lambda a, b: a ** b), ("pow(t, 2.7)", lambda a, b: a ** 2.7),
                         ("xlogy(t, t)", jt.xlogy)):
            row = []
            for n in (1, 1000, 1000000):
                a = jt.from_numpy(rng.uniform(0.1, 10, n)).to(getattr(jt, dtype))
                b = jt.from_numpy(rng.uniform(-3, 3, n)).to(getattr(jt, dtype))
                row.append(_cpu_per_call(lambda: fn(a, b)) * 1e6)
            print(f"{name:<16}{dtype:<9}" + "".join(f"{t:>12.1f}" for t in row))


def _correctly_rounded(x, y):
    """The float32 nearest ``x ** y`` (ties to even), from mpmath at 256 bits; None where it is not real."""
    with mpmath.workprec(256):
        v = mpmath.power(mpmath.mpf(x), mpmath.mpf(y))
        if not isinstance(v, mpmath.mpf):
            return None
        near = np.float32(float(v))
        candidates = [np.nextafter(near, np.float32(-np.inf)), near, np.nextafter(near, np.float32(np.inf))]
        errors = [abs(mpmath.mpf(float(c)) - v) if np.isfinite(c) else mpmath.inf for c in candidates]
        best = min(errors)
        ties = [c for c, e in zip(candidates, errors) if e == best]
        return min(ties, key=lambda c: int(np.array(c).view(np.uint32)) & 1)


def _midpoints(rng):
    """(x, y) float32 pairs whose exact power is halfway between two float32s (a number of 25 bits, odd):
    odd integers of 13 bits squared, of 9 bits cubed, 11 to the 7th, squares of odd 9-bit integers to the 1.5th,
    of 29 and 31 to the 2.5th; each scaled by a random power of two."""
    odd13, odd9 = np.arange(4097, 5793, 2.0), np.arange(257, 323, 2.0)
    x = np.concatenate([odd13, odd9, [11.0], odd9 ** 2, [29.0 ** 2, 31.0 ** 2]])
    y = np.concatenate([np.full(odd13.size, 2.0), np.full(odd9.size, 3.0), [7.0], np.full(odd9.size, 1.5), [2.5, 2.5]])
    scale = rng.integers(-8, 8, x.size)
    return x * 2.0 ** (scale * 2), y  # (an even power of two: exact in x ** 1.5 and x ** 2.5 too)


def _near_midpoints(rng, n):
    """(x, y) float32 pairs whose exact power is within 2**-14 ulp of a float32 midpoint, but not on it: random
    floats to the powers 2, 3, -1, -2, 1/2, 3/2, -1/2, kept where NumPy's power in double (within 2**-28 ulp of
    float32) is that close."""
    xs, ys = [], []
    for k in (2.0, 3.0, -1.0, -2.0, 0.5, 1.5, -0.5):
        for _ in range(max(1, n >> 20)):
            x = rng.uniform(1, 4, 1 << 20).astype(np.float32).astype(np.float64) * 2.0 ** rng.integers(-30, 30, 1 << 20)
            ulps = np.frexp(x ** k)[0] * 2.0 ** 24  # (in ulps of float32: midpoints at halves)
            off = np.abs(ulps - np.floor(ulps) - 0.5)
            keep = (off < 2.0 ** -14) & (off > 2.0 ** -26)
            xs.append(x[keep])
            ys.append(np.full(int(keep.sum()), k))
    return np.concatenate(xs), np.concatenate(ys)


def exact(seed, n):
    """How often float32 pow in plain double (`powers.pow_single`, jitorch's), in double words
    (`powers.pow_double`, jitorch's before) and torch's differ from the correctly rounded float32."""
    rng = np.random.default_rng(seed)
    x = np.exp2(rng.uniform(-149, 128, n)) * rng.choice([-1.0, 1.0], n)
    y = np.where(rng.random(n) < 0.5, rng.uniform(-4, 4, n), rng.uniform(-149, 128, n) / np.log2(np.abs(x)))
    y[::4] = np.round(y[::4])
    x_ends = np.exp2(rng.uniform(-20, 20, n))
    kinds = {
        "random": (x, y),
        "range ends": (x_ends, rng.choice([-1.0, 1.0], n) * rng.uniform(110, 149, n) / np.abs(np.log2(x_ends))),
        "midpoints": _midpoints(rng),
        "near midpoints": _near_midpoints(rng, n),
    }
    print(f"{'float32 pow':<16}{'operands':>10}{'plain double':>14}{'double word':>13}{'torch':>8}"
          "  (results not correctly rounded; finite, not 0)")
    for kind, (x, y) in kinds.items():
        x, y = x.astype(np.float32).astype(np.float64), y.astype(np.float32).astype(np.float64)
        with np.errstate(all="ignore"):
            plain = powers.pow_single(powers.Arrays(), x, y).astype(np.float32)
            words = powers.pow_double(powers.Arrays(), x, y).astype(np.float32)
        theirs = torch.pow(torch.from_numpy(x).float(), torch.from_numpy(y).float()).numpy()
        finite = np.isfinite(words) & (words != 0)
        wrong = {"plain": 0, "words": 0, "torch": 0}
        for i in np.flatnonzero(finite & ((plain != words) | (theirs != words))):
            want = _correctly_rounded(x[i], y[i])
            for name, got in (("plain", plain), ("words", words), ("torch", theirs)):
                wrong[name] += want is not None and got[i] != want
        print(f"{kind:<16}{int(finite.sum()):>10}{wrong['plain']:>14}{wrong['words']:>13}{wrong['torch']:>8}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n", type=int, default=200000)
    parser.add_argument("--no-time", action="store_true")
    parser.add_argument("--exact", type=int, default=0, metavar="N")
    args = parser.parse_args()
    if args.exact:
        exact(args.seed, args.exact)
        return
    accuracy(args.seed, args.n)
    if not args.no_time:
        timing(args.seed)


if __name__ == "__main__":
    main()
