"""Random chains of reductions, each over the previous one's centred values (the dependent row reductions of
`fusion.DEPENDENT_ROW_REDUCTIONS`, session 50), compiled against torch: ``python -m tests.fuzz.reductions --start S
--seeds N [--threads T]``.

A case (`generate_chain`) draws a shape of one to four dims whose sizes are often 1 (a reduced dim of one element
is where fusion's row rule and the kernel builder's loops disagreed), a dim, a pattern (a layer norm written out,
a softmax, log-sum-exp, max minus min, three reductions deep, ...), a dtype, and for float64 a gradient run.
`check_chain` compiles it and compares the result (and the input's gradient) with torch's on the same values; the
tolerance grows with the row's length and the values' size, so a sum of centred values (zero up to rounding) is
judged by the rounding it can hold. The program fuzzer (`tests.fuzz.generator`) draws such chains rarely: its
op table gives each reduction one statement over a random operand.
"""

from __future__ import annotations

import argparse
import warnings
from dataclasses import dataclass

import numpy as np
import torch

import jitorch as jt


def _centred(x, d):
    return x - x.mean(d, keepdim=True)


def _softmax(x, d):
    e = (x - x.amax(d, keepdim=True)).exp()
    return e / e.sum(d, keepdim=True)


def _log_sum_exp(x, d):
    m = x.amax(d, keepdim=True)
    return m + (x - m).exp().sum(d, keepdim=True).log()


def _normalised(x, d):
    c = _centred(x, d)
    return c / c.pow(2).mean(d, keepdim=True).add(1e-5).sqrt()


def _three_deep(x, d):
    a = _centred(x, d)
    b = a - a.amax(d, keepdim=True)
    return (b - b.mean(d, keepdim=True)).sum(d)


PATTERNS = {
    "variance written out": lambda x, d: _centred(x, d).pow(2).mean(d),
    "layer norm written out": _normalised,
    "softmax": _softmax,
    "log-sum-exp": _log_sum_exp,
    "max minus min": lambda x, d: (x - x.amin(d, keepdim=True)).amax(d),
    "product of normalised": lambda x, d: (x / x.abs().sum(d, keepdim=True).add(1)).prod(d),
    "three deep": _three_deep,
}
SIZES = (1, 1, 2, 3, 7, 16, 33)
TOLERANCE = {"float16": 2e-2, "float32": 1e-5, "float64": 1e-12}


@dataclass
class Chain:
    """One case: ``PATTERNS[pattern](x, dim)`` of standard normal values of ``shape`` (seeded) in ``dtype``."""
    seed: int
    pattern: str
    shape: tuple
    dim: int
    dtype: str
    grad: bool

    def values(self):
        """The input's values, in float64."""
        return np.random.default_rng([self.seed, 1]).standard_normal(self.shape) * 2


def generate_chain(seed):
    """The case of ``seed``."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(rng.choice(SIZES)) for _ in range(int(rng.integers(1, 5))))
    dim = int(rng.integers(-len(shape), len(shape)))
    pattern = list(PATTERNS)[rng.integers(len(PATTERNS))]
    dtype = str(rng.choice(list(TOLERANCE)))
    return Chain(seed, pattern, shape, dim, dtype, dtype == "float64" and bool(rng.random() < 0.5))


def check_chain(case):
    """The differences between ``case`` compiled and torch: a list of strings (empty where they agree)."""
    fn = PATTERNS[case.pattern]
    values = case.values().astype(case.dtype)
    t = torch.tensor(values, requires_grad=case.grad)
    want = fn(t, case.dim)
    x = jt.tensor(values, requires_grad=case.grad)
    try:
        got = jt.compile(lambda a: fn(a, case.dim))(x)
    except Exception as e:  # (every error is a finding: torch ran the case)
        return [f"compiled raises {type(e).__name__}: {e}"]
    a, b = got.detach().double().numpy(), want.detach().double().numpy()
    if a.shape != b.shape or str(got.dtype).split(".")[-1] != str(want.dtype).split(".")[-1]:
        return [f"result {got.dtype}{list(a.shape)}, torch's {want.dtype}{list(b.shape)}"]
    # (a sum of a row's centred values is zero up to the rounding of the row's terms)
    scale = 1 + np.abs(values.astype(np.float64)).max(initial=0) * case.shape[case.dim]
    atol = TOLERANCE[case.dtype] * scale
    if not np.allclose(a, b, rtol=TOLERANCE[case.dtype], atol=atol, equal_nan=True):
        return [f"values differ by up to {np.nanmax(np.abs(a - b))} (atol {atol:.3g})"]
    if case.grad:
        weights = np.random.default_rng([case.seed, 2]).standard_normal(b.shape)
        (gt,) = torch.autograd.grad((want * torch.tensor(weights)).sum(), t)
        (gj,) = jt.autograd.grad((got * jt.tensor(weights)).sum(), x)
        if not np.allclose(gj.numpy(), gt.numpy(), rtol=1e-8, atol=1e-8 * scale, equal_nan=True):
            return [f"gradients differ by up to {np.nanmax(np.abs(gj.numpy() - gt.numpy()))}"]
    return []


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.reductions", description=__doc__.split("\n")[0])
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=300)
    parser.add_argument("--threads", type=int, default=0, help="jitorch's thread count (0: as set)")
    args = parser.parse_args(argv)
    if args.threads:
        jt.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    failing = 0
    for seed in range(args.start, args.start + args.seeds):
        case = generate_chain(seed)
        found = check_chain(case)
        if found:
            failing += 1
            print(f"{case}: {found[0]}", flush=True)
    print(f"seeds {args.start}..{args.start + args.seeds - 1}: {failing} failing", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
