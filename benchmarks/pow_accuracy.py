"""Eager pow, float_power and xlogy against torch: ulps per dtype, and CPU time per call.

    PYTHONPATH=$PWD python benchmarks/pow_accuracy.py [--seed N] [--n N] [--no-time]

Operands: random bases over the whole range of each dtype (both signs, subnormals, 0, +-inf, NaN), exponents
random reals, integers, halves and the special values, as tensor-tensor pairs and as Python-number exponents.
Per op and dtype it prints the largest difference from torch in ulps of the dtype, the share of elements that
differ, and the count whose NaN-ness or infinity differs (which the ulp count leaves out). Integer dtypes must
be equal. Times are CPU time (``time.process_time``: all threads) per call at 1, 1k and 1M elements.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import jitorch as jt

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n", type=int, default=200000)
    parser.add_argument("--no-time", action="store_true")
    args = parser.parse_args()
    accuracy(args.seed, args.n)
    if not args.no_time:
        timing(args.seed)


if __name__ == "__main__":
    main()
