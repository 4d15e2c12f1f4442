"""jitorch's fused attention kernels (jitorch/codegen/attention.py) against torch's CPU flash attention
(``F.scaled_dot_product_attention``'s kernels, forward and backward) at the shapes of benchmarks/models.py's
GPT steps: causal float32, one thread.

    python benchmarks/attention_kernels.py [--rounds 40] [--reps 20] [--threads 1] [--baseline OLD.py]

Each round times ``reps`` calls of each of the four kernels in turn, on the same thread (thread CPU time, so
other processes' load counts little), and takes each round's ratio jitorch / torch; the table prints the
medians over the rounds. Read the ratios: the systems are interleaved in one process, the absolute times
move with the machine's load. Both sides run their kernels alone: no tensor allocation or dispatch of the
step around them (torch's are its ATen ops called directly, jitorch's the compiled tile loop over
preallocated arrays).

``--layout gpt`` lays q, k, v and the gradients out as a compiled GPT step does (views of one product's
rows, the output in [B, T, H, D] order); ``--cold MIB`` writes that much memory before each call, untimed
(each call then finds its data in L3, as in a step, not in L2). ``--threads N`` runs both at N threads
(torch's intra-op pool, jitorch's team) and times the process's CPU (``time.process_time``: the team's
threads count) instead of the calling thread's; torch's idle pool threads spin, so its figures then count
their waiting too. ``--baseline OLD.py``
also times the kernels of another version of jitorch/codegen/attention.py (say ``git show
main:jitorch/codegen/attention.py > /tmp/old.py``), loaded beside this one in the same process, interleaved
with the others: the table then adds its time and the median ratio new / old per round.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import math
import statistics
import time

import numpy as np
import torch

import jitorch
from jitorch.codegen.attention import attention_kernel
from jitorch.codegen.kernel import generator_fingerprint as module_fingerprint

# (name, batch, heads, block, head dim): models.py's gpt_size
SHAPES = (("gpt-4x128", 12, 4, 64, 32), ("gpt-6x384", 4, 6, 64, 64))


def _per_call(fn, reps, clock=time.thread_time, evict=None):
    if evict is None:
        t0 = clock()
        for _ in range(reps):
            fn()
        return (clock() - t0) / reps
    total = 0.0
    for _ in range(reps):
        evict()
        t0 = clock()
        fn()
        total += clock() - t0
    return total / reps


def _evictor(nbytes):
    """A call that writes ``nbytes`` of memory (pushing the kernels' data out of L1 and L2 to L3), or None."""
    if not nbytes:
        return None
    buffer = np.zeros(nbytes // 8)
    return lambda: buffer.__iadd__(1.0)


def baseline_kernels(path):
    """The ``attention_kernel`` of the attention.py at ``path``, loaded as a module of jitorch.codegen beside
    the current one (which stays registered in ``ops.attention``)."""
    from jitorch.ops import attention as op
    registered = op.ATTENTION_KERNEL
    spec = importlib.util.spec_from_file_location("jitorch.codegen._attention_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    op.ATTENTION_KERNEL = registered
    # (the kernel cache names an IR by the tile's parameters and jitorch's sources: the baseline's must not
    # be handed this version's IR, nor hand it its own)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    module.generator_fingerprint = lambda: f"{module_fingerprint()} baseline {digest}"
    return module.attention_kernel


def _heads(B, H, T, D, parts, rng):
    """``parts`` arrays (B, H, T, D) as a GPT's step lays them out: views of one (B, T, parts, H, D) array
    (its heads a row of ``parts * H * D`` elements apart), filled with normal numbers."""
    whole = rng.standard_normal((B, T, parts, H, D), dtype=np.float32)
    return [whole[:, :, n].transpose(0, 2, 1, 3) for n in range(parts)]


def cases(B, H, T, D, kernel=attention_kernel, layout="contiguous"):
    """(jitorch forward, jitorch backward, torch forward, torch backward): calls on one set of inputs;
    jitorch's kernels are ``kernel``'s. ``layout`` "gpt": q, k and v (and their gradients) are views of one
    (B, T, 3, H, D) array, the output and its gradient of (B, T, H, D) ones, as in a compiled GPT step."""
    rng = np.random.default_rng(0)
    if layout == "gpt":
        (q, k, v), (go,) = _heads(B, H, T, D, 3, rng), _heads(B, H, T, D, 1, rng)
        (out,), (gq, gk, gv) = _heads(B, H, T, D, 1, rng), _heads(B, H, T, D, 3, rng)
    else:
        q, k, v, go, out, gq, gk, gv = (rng.standard_normal((B, H, T, D), dtype=np.float32) for _ in range(8))
    p = np.empty((B, H, T, T), np.float32)
    scale = 1 / math.sqrt(D)
    layouts = {direction: tuple(tuple(n // 4 for n in a.strides[:-1]) for a in arrays) for direction, arrays in (
        ("forward", (q, k, v, out, p)), ("backward", (q, k, v, p, go, gq, gk, gv)))}
    fwd = kernel("forward", np.float32, T, T, D, True, scale, batch=(B, H), layouts=layouts["forward"])
    bwd = kernel("backward", np.float32, T, T, D, True, scale, batch=(B, H), layouts=layouts["backward"])
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
    """Prints the table; returns {(shape name, direction): (jitorch s, torch s, median ratio jitorch / torch,
    and with --baseline: old jitorch s, median ratio new / old)}."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--baseline", help="another attention.py whose kernels are timed beside these")
    parser.add_argument("--layout", choices=("contiguous", "gpt"), default="contiguous")
    parser.add_argument("--cold", type=int, default=0, metavar="MIB",
                        help="write this many MiB of memory before each call (untimed), as a step's other "
                             "kernels push the attention's data out of L2")
    args = parser.parse_args(argv)
    results = {}
    torch.set_num_threads(args.threads)
    jitorch.set_num_threads(args.threads)
    clock = time.thread_time if args.threads == 1 else time.process_time
    old = baseline_kernels(args.baseline) if args.baseline else None
    evict = _evictor(args.cold << 20)
    print(f"{'shape':10s} {'direction':9s} {'jitorch us':>10s} {'torch us':>9s} {'jitorch/torch':>13s}  (quartiles)"
          + (f" {'old us':>8s} {'new/old':>8s}  (quartiles)" if old else ""))
    for name, B, H, T, D in SHAPES:
        fns = cases(B, H, T, D, layout=args.layout)
        if old:
            fns += cases(B, H, T, D, old, args.layout)[:2]
        for fn in fns:  # (warm: first calls, caches)
            _per_call(fn, 3, clock)
        times = [[] for _ in fns]
        for _ in range(args.rounds):
            for i, fn in enumerate(fns):
                times[i].append(_per_call(fn, args.reps, clock, evict))
        for d, direction in enumerate(("forward", "backward")):
            ours, theirs = times[d], times[d + 2]
            ratios = _quartiles(a / b for a, b in zip(ours, theirs))
            results[name, direction] = (statistics.median(ours), statistics.median(theirs), ratios[1])
            line = (f"{name:10s} {direction:9s} {statistics.median(ours) * 1e6:10.1f} "
                    f"{statistics.median(theirs) * 1e6:9.1f} {ratios[1]:13.3f}  ({ratios[0]:.3f} {ratios[2]:.3f})")
            if old:
                before = times[d + 4]
                gains = _quartiles(a / b for a, b in zip(ours, before))
                results[name, direction] += (statistics.median(before), gains[1])
                line += f" {statistics.median(before) * 1e6:8.1f} {gains[1]:8.3f}  ({gains[0]:.3f} {gains[2]:.3f})"
            print(line)
    return results


def _quartiles(values):
    values = sorted(values)
    n = len(values)
    return values[n // 4], statistics.median(values), values[3 * n // 4]


if __name__ == "__main__":
    main()
