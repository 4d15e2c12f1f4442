"""Error of float32 math over every float32 input: compiled jitorch kernels, eager jitorch, torch.

    python tools/float32_exhaustive.py log exp tanh sigmoid expm1 [--against eager,torch] [--step 1]

Each function runs over all 2**32 bit patterns (every finite float of both signs, both zeros, the
denormals, the infinities and the NaNs), 2**20 at a time, through a compiled ``jitorch.compile`` call
(so the CPU backend's real kernel: ``JITORCH_CPU=x86-64-v2`` checks the baseline target), and is
compared with NumPy's float64 function. Per function it prints the largest error in float32 ulps (at
the exact value; the denormal spacing below the normal range), where it happens, the mean (over every
16th chunk: summing every error is the slow part), and how many results differ from the correctly
rounded one. The erf reference is SciPy's (not a jitorch dependency; only erf needs it). Where the exact result is zero, rounds to an
infinity or a NaN, or the result is not finite, the result must be that value with its sign: any
other result counts as an infinite error and is reported. ``--against`` measures eager jitorch
(NumPy's float32 loops) and torch's CPU functions on the same inputs. ``--step k`` takes every k-th
chunk only (a quicker look; the figures in the docs are from ``--step 1``).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

CHUNK = 1 << 20
MEAN_EVERY = 16  # the mean error is summed over every 16th chunk checked

# name -> (float64 reference, jitorch method)
_REFERENCES = {
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "tanh": np.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "erf": lambda x: __import__("scipy.special").special.erf(x),  # SciPy (not a jitorch dependency) for erf only
}


class Tally:
    """Largest error (and its input), count of results off the correctly rounded one, the inputs whose
    special result (zero, infinity, NaN, sign) is wrong, and the mean error over the chunks asked to keep it."""

    def __init__(self):
        self.worst, self.worst_at, self.count, self.inexact = 0.0, None, 0, 0
        self.mean_total, self.mean_count = 0.0, 0
        self.wrong_specials, self.wrong_count = [], 0

    def add(self, x, got, exact, mean=False):
        """Tally one chunk. Only results that differ from the correctly rounded one can hold the largest
        error; ``mean`` also sums every result's error (the slow part, so done on some chunks only)."""
        with np.errstate(all="ignore"):
            rounded = exact.astype(np.float32)
            special = ~np.isfinite(rounded) | (exact == 0) | ~np.isfinite(got)
        ordinary = ~special
        self.count += int(np.count_nonzero(ordinary))
        if mean:
            errors = self._errors(got[ordinary], exact[ordinary])
            self.mean_total += float(errors.sum())
            self.mean_count += errors.size
        look = np.flatnonzero(got.view(np.uint32) != rounded.view(np.uint32))
        x, got, exact, rounded, special = x[look], got[look], exact[look], rounded[look], special[look]
        same = (np.isnan(got) & np.isnan(rounded)) | ((got == rounded) & (np.signbit(got) == np.signbit(rounded)))
        bad = np.flatnonzero(special & ~same)
        self.wrong_count += bad.size
        self.wrong_specials += [(float(x[k]), float(got[k]), float(rounded[k])) for k in bad[:10 - len(self.wrong_specials)]]
        ordinary = ~special
        self.inexact += int(np.count_nonzero(ordinary))
        errors = self._errors(got[ordinary], exact[ordinary])
        if errors.size:
            k = int(np.argmax(errors))
            if errors[k] > self.worst:
                self.worst, self.worst_at = float(errors[k]), float(x[ordinary][k])

    @staticmethod
    def _errors(got, exact):
        """|got - exact| in float32 ulps at the exact value (the denormal spacing below the normal range)."""
        _, exponent = np.frexp(exact)
        return np.abs(got.astype(np.float64) - exact) / np.ldexp(1.0, np.maximum(exponent - 1, -126) - 23)

    def line(self, label):
        at = f" at {np.float32(self.worst_at)!r}" if self.worst_at is not None else " (every result correctly rounded)"
        mean = f", mean {self.mean_total / self.mean_count:.4f} (sampled chunks)" if self.mean_count else ""
        specials = (f"; {self.wrong_count} WRONG special results, first (x, got, want): {self.wrong_specials}"
                    if self.wrong_count else "")
        return (f"{label:>8}: max {self.worst:.4f} ulp{at}{mean}, "
                f"{self.inexact} of {self.count} not correctly rounded{specials}")


def check(name, against, step):
    """Tallies for ``name`` over every ``step``-th chunk of the float32 bit patterns."""
    import jitorch
    compiled = jitorch.compile(lambda t: getattr(t, name)())
    others = {}
    if "eager" in against:
        others["eager"] = lambda x: getattr(jitorch.from_numpy(x), name)().numpy()
    if "torch" in against:
        import torch
        torch.set_num_threads(1)
        others["torch"] = lambda x: getattr(torch.from_numpy(x), name)().numpy()
    tallies = {"compiled": Tally(), **{k: Tally() for k in others}}
    for chunk, start in enumerate(range(0, 1 << 32, CHUNK * step)):
        x = np.arange(start, start + CHUNK, dtype=np.uint32).view(np.float32)
        with np.errstate(all="ignore"):
            exact = _REFERENCES[name](x.astype(np.float64))
        mean = chunk % MEAN_EVERY == 0
        tallies["compiled"].add(x, compiled(jitorch.from_numpy(x)).numpy(), exact, mean)
        for label, fn in others.items():
            with np.errstate(all="ignore"):
                tallies[label].add(x, fn(x), exact, mean)
    return tallies


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", choices=sorted(_REFERENCES))
    parser.add_argument("--against", default="", help="comma-separated: eager, torch")
    parser.add_argument("--step", type=int, default=1, help="check every STEP-th chunk of 2**20 inputs")
    args = parser.parse_args(argv)
    import jitorch
    jitorch.set_num_threads(1)
    failed = False
    for name in args.names:
        t0 = time.time()
        tallies = check(name, args.against.split(","), args.step)
        print(f"{name} ({time.time() - t0:.0f} s, every {args.step} chunk(s) of 2**20 float32 inputs):")
        for label, tally in tallies.items():
            print(tally.line(label))
            failed |= label == "compiled" and tally.wrong_count > 0
        sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
