"""jitorch's fused attention kernels (jitorch/codegen/attention.py) against torch's CPU flash attention
(``F.scaled_dot_product_attention``'s kernels, forward and backward) at the shapes of benchmarks/models.py's
GPT steps: causal float32, one thread.

    python benchmarks/attention_kernels.py [--rounds 40] [--reps 20] [--threads 1] [--baseline OLD.py]
    python benchmarks/attention_kernels.py --in-step [--steps 10] [--threads 1] [--baseline OLD.py]

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
with the others: the table then adds its time and the median ratio new / old per round. ``--offset BYTES``
places every array that many bytes past a 64-byte boundary (0: each tile row of a GPT's heads starts a cache
line), where by default they lie wherever NumPy's allocations put them; a compiled step's buffers lie 16, 32 or
48 bytes past one in most calls.

``--in-step`` times the kernels where benchmarks/models.py's compiled GPT training steps call them instead
(`in_step`): per step, the step's CPU, the attention kernels' and their share of it, and the same calls each
made again at once on the same arrays (inputs in the cache, outputs written): their ratio is what the step's
memory costs the kernels, whose inputs other kernels have just pushed out of the cache and whose outputs are
not in it. With ``--baseline OLD.py`` the steps take turns between these kernels and OLD.py's, built for the
same calls, and the table gives the median ratio new / old over the pairs of turns: an A/B of two versions
where a step calls them, in one process.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

import jitorch
from jitorch.codegen.attention import AttentionKernel, attention_kernel
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


def _normal(shape, rng, offset=None):
    """A float32 array of ``shape`` filled with normal numbers: where NumPy allocates it, or ``offset`` bytes past a
    64-byte boundary."""
    if offset is None:
        return rng.standard_normal(shape, dtype=np.float32)
    nbytes = math.prod(shape) * 4
    raw = np.empty(nbytes + 64 + offset, np.uint8)
    start = -raw.ctypes.data % 64 + offset
    array = raw[start:start + nbytes].view(np.float32).reshape(shape)
    array[...] = rng.standard_normal(shape, dtype=np.float32)
    return array


def _heads(B, H, T, D, parts, rng, offset=None):
    """``parts`` arrays (B, H, T, D) as a GPT's step lays them out: views of one (B, T, parts, H, D) array
    (its heads a row of ``parts * H * D`` elements apart), filled with normal numbers (`_normal`'s ``offset``)."""
    whole = _normal((B, T, parts, H, D), rng, offset)
    return [whole[:, :, n].transpose(0, 2, 1, 3) for n in range(parts)]


def cases(B, H, T, D, kernel=attention_kernel, layout="contiguous", offset=None):
    """(jitorch forward, jitorch backward, torch forward, torch backward): calls on one set of inputs;
    jitorch's kernels are ``kernel``'s. ``layout`` "gpt": q, k and v (and their gradients) are views of one
    (B, T, 3, H, D) array, the output and its gradient of (B, T, H, D) ones, as in a compiled GPT step.
    ``offset``: every array starts that many bytes past a 64-byte boundary (None: where NumPy puts it)."""
    rng = np.random.default_rng(0)
    if layout == "gpt":
        (q, k, v), (go,) = _heads(B, H, T, D, 3, rng, offset), _heads(B, H, T, D, 1, rng, offset)
        (out,), (gq, gk, gv) = _heads(B, H, T, D, 1, rng, offset), _heads(B, H, T, D, 3, rng, offset)
    else:
        q, k, v, go, out, gq, gk, gv = (_normal((B, H, T, D), rng, offset) for _ in range(8))
    p = _normal((B, H, T, T), rng, offset)
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


def in_step(name, steps=10, threads=1, quick=False, old=None):
    """{direction: (attention kernels s, the same calls made again s)} and the step's s, CPU per step of
    benchmarks/models.py's compiled training step of ``name`` (a GPT's): the step's, unpatched; each direction's
    kernel calls as the step makes them; and each call made again at once on the same arrays (its outputs
    written again, the same values), in further steps, whose time it leaves out of the step's. With ``old``
    (another version's ``attention_kernel``, as `baseline_kernels` gives it), further steps take turns between
    this version's kernels and ``old``'s built for the same calls instead: {direction: (this version's s, old's
    s, median ratio this / old over the turns' pairs)}."""
    here = str(Path(__file__).parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import models
    from jitorch.ops import attention as op
    jitorch.set_num_threads(threads)
    clock = time.thread_time if threads == 1 else time.process_time
    registered, run = op.ATTENTION_KERNEL, AttentionKernel.run_tiles
    olds = {}  # this version's kernel -> old's for the same call

    def recording(*args):
        kernel = registered(*args)
        if kernel is not None:
            olds[kernel] = old(*args)
        return kernel
    # (turn: 0 runs this version's kernels, 1 old's, 2 this version's twice; spent[direction]: CPU of this
    # version's, or in turn 2 of the first calls, then of old's or of the calls made again)
    turn, spent = [0], {"forward": [0.0, 0.0], "backward": [0.0, 0.0]}

    def timed(kernel, arrays, tiles):
        into = spent["backward" if len(arrays) == 8 else "forward"]
        start = clock()
        if turn[0] == 1:
            olds[kernel].run_tiles(arrays, tiles)
        else:
            run(kernel, arrays, tiles)
        middle = clock()
        into[1 if turn[0] == 1 else 0] += middle - start
        if turn[0] == 2:
            run(kernel, arrays, tiles)
            into[1] += clock() - middle
    try:
        if old is not None:  # (the plans, keyed by the registered function, are then made anew)
            op.ATTENTION_KERNEL = recording
        call = models.system_call("jitorch compiled", name, quick)
        for _ in range(4):  # (compiles; Adam's first compiled call traces again)
            call()
        step = _per_call(call, steps, clock)
        AttentionKernel.run_tiles = timed
        if old is None:
            turn[0] = 2
            for _ in range(steps):
                call()
            return {d: (first / steps, again / steps) for d, (first, again) in spent.items()}, step
        pairs = {d: [] for d in spent}
        for n in range(steps + 1):  # (the first pair runs old's kernels once untimed)
            before = {d: list(times) for d, times in spent.items()}
            for side in (0, 1):
                turn[0] = side
                call()
            if n:
                for d, times in spent.items():
                    pairs[d].append([times[side] - before[d][side] for side in (0, 1)])
        return {d: (statistics.median(a for a, _ in p), statistics.median(b for _, b in p),
                    statistics.median(a / b for a, b in p)) for d, p in pairs.items()}, step
    finally:
        op.ATTENTION_KERNEL, AttentionKernel.run_tiles = registered, run


def print_in_step(args, old=None):
    """``--in-step``'s table; returns {(model, direction): `in_step`'s figures, with the step's s last}."""
    results = {}
    print(f"{'model':10s} {'direction':9s} {'step ms':>8s} {'attention ms':>12s} {'share':>6s} "
          + (f"{'old ms':>9s} {'new/old':>8s}" if old else f"{'again ms':>9s} {'called/again':>12s}")
          + f"  ({args.threads} thread{'s' if args.threads > 1 else ''})")
    for name, *_ in SHAPES:
        figures, step = in_step(name, args.steps, args.threads, args.quick, old)
        for direction, (kernels, other, *ratio) in figures.items():
            results[name, direction] = (kernels, other, *ratio, step)
            print(f"{name:10s} {direction:9s} {step * 1e3:8.2f} {kernels * 1e3:12.3f} {kernels / step:6.1%} "
                  f"{other * 1e3:9.3f} " + (f"{ratio[0]:8.3f}" if old else f"{kernels / other:12.2f}"))
    return results


def main(argv=None):
    """Prints the table; returns {(shape name, direction): (jitorch s, torch s, median ratio jitorch / torch,
    and with --baseline: old jitorch s, median ratio new / old)}; with --in-step, `print_in_step`'s."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--baseline", help="another attention.py whose kernels are timed beside these")
    parser.add_argument("--layout", choices=("contiguous", "gpt"), default="contiguous")
    parser.add_argument("--cold", type=int, default=0, metavar="MIB",
                        help="write this many MiB of memory before each call (untimed), as a step's other "
                             "kernels push the attention's data out of L2")
    parser.add_argument("--offset", type=int, metavar="BYTES",
                        help="place every array this many bytes past a 64-byte boundary (a multiple of 4 below 64)")
    parser.add_argument("--in-step", action="store_true",
                        help="time the kernels in models.py's compiled GPT steps instead (see the docstring)")
    parser.add_argument("--steps", type=int, default=10, help="--in-step's steps")
    parser.add_argument("--quick", action="store_true", help="--in-step at tiny sizes (for tests)")
    args = parser.parse_args(argv)
    if args.offset is not None and (args.offset % 4 or not 0 <= args.offset < 64):
        parser.error(f"--offset must be a multiple of 4 in [0, 64), got {args.offset}")
    if args.in_step:
        return print_in_step(args, baseline_kernels(args.baseline) if args.baseline else None)
    results = {}
    torch.set_num_threads(args.threads)
    jitorch.set_num_threads(args.threads)
    clock = time.thread_time if args.threads == 1 else time.process_time
    old = baseline_kernels(args.baseline) if args.baseline else None
    evict = _evictor(args.cold << 20)
    print(f"{'shape':10s} {'direction':9s} {'jitorch us':>10s} {'torch us':>9s} {'jitorch/torch':>13s}  (quartiles)"
          + (f" {'old us':>8s} {'new/old':>8s}  (quartiles)" if old else ""))
    for name, B, H, T, D in SHAPES:
        fns = cases(B, H, T, D, layout=args.layout, offset=args.offset)
        if old:
            fns += cases(B, H, T, D, old, args.layout, args.offset)[:2]
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
