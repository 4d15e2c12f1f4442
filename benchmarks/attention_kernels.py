"""jitorch's fused attention kernels (jitorch/codegen/attention.py) against torch's CPU flash attention
(``F.scaled_dot_product_attention``'s kernels, forward and backward) at the shapes of benchmarks/models.py's
GPT steps: causal float32, one thread.

    python benchmarks/attention_kernels.py [--rounds 40] [--reps 20]

Each round times ``reps`` calls of each of the four kernels in turn, on the same thread (thread CPU time, so
other processes' load counts little), and takes each round's ratio jitorch / torch; the table prints the
medians over the rounds. Read the ratios: the systems are interleaved in one process, the absolute times
move with the machine's load. Both sides run their kernels alone: no tensor allocation or dispatch of the
step around them (torch's are its ATen ops called directly, jitorch's the compiled tile loop over
preallocated arrays).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import torch

import jitorch
from jitorch.codegen.attention import attention_kernel

# (name, batch, heads, block, head dim): models.py's gpt_size
SHAPES = (("gpt-4x128", 12, 4, 64, 32), ("gpt-6x384", 4, 6, 64, 64))


def _per_call(fn, reps):
    t0 = time.thread_time()
    for _ in range(reps):
        fn()
    return (time.thread_time() - t0) / reps


def cases(B, H, T, D):
    """(jitorch forward, jitorch backward, torch forward, torch backward): calls on one set of inputs."""
    rng = np.random.default_rng(0)
    q, k, v, go = (rng.standard_normal((B, H, T, D), dtype=np.float32) for _ in range(4))
    scale = 1 / math.sqrt(D)
    fwd = attention_kernel("forward", np.float32, T, T, D, True, scale, batch=(B, H))
    bwd = attention_kernel("backward", np.float32, T, T, D, True, scale, batch=(B, H))
    out, p = np.empty_like(q), np.empty((B, H, T, T), np.float32)
    gq, gk, gv = (np.empty_like(q) for _ in range(3))
    fwd.run_tiles([q, k, v, out, p], B * H)
    tq, tk, tv, tgo = (torch.from_numpy(a) for a in (q, k, v, go))
    aten = torch.ops.aten
    tout, lse = aten._scaled_dot_product_flash_attention_for_cpu(tq, tk, tv, 0.0, True, scale=scale)
    return (lambda: fwd.run_tiles([q, k, v, out, p], B * H),
            lambda: bwd.run_tiles([q, k, v, p, go, gq, gk, gv], B * H),
            lambda: aten._scaled_dot_product_flash_attention_for_cpu(tq, tk, tv, 0.0, True, scale=scale),
            lambda: aten._scaled_dot_product_flash_attention_for_cpu_backward(
                tgo, tq, tk, tv, tout, lse, 0.0, True, scale=scale))


def main(argv=None):
    """Prints the table; returns {(shape name, direction): (jitorch s, torch s, median ratio)}."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    results = {}
    torch.set_num_threads(1)
    jitorch.set_num_threads(1)
    print(f"{'shape':10s} {'direction':9s} {'jitorch us':>10s} {'torch us':>9s} {'jitorch/torch':>13s}  (quartiles)")
    for name, B, H, T, D in SHAPES:
        fns = cases(B, H, T, D)
        for fn in fns:  # (warm: first calls, caches)
            _per_call(fn, 3)
        times = [[] for _ in fns]
        for _ in range(args.rounds):
            for i, fn in enumerate(fns):
                times[i].append(_per_call(fn, args.reps))
        for d, direction in enumerate(("forward", "backward")):
            ours, theirs = times[d], times[d + 2]
            ratios = sorted(a / b for a, b in zip(ours, theirs))
            n = len(ratios)
            results[name, direction] = (statistics.median(ours), statistics.median(theirs), statistics.median(ratios))
            print(f"{name:10s} {direction:9s} {statistics.median(ours) * 1e6:10.1f} "
                  f"{statistics.median(theirs) * 1e6:9.1f} {statistics.median(ratios):13.3f}  "
                  f"({ratios[n // 4]:.3f} {ratios[3 * n // 4]:.3f})")
    return results


if __name__ == "__main__":
    main()
