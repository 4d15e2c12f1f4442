"""The first ``share_memory_()`` of a tensor, and ``Module.share_memory()`` of a GPT: jitorch against torch.

    python benchmarks/share_memory.py [--rounds N]    # about a minute
    python benchmarks/share_memory.py --quick         # 1 MB and a one-layer GPT, one round (the suite runs this)

Moving a storage into shared memory replaces its buffer, so every tensor on it must drop its cached array of
the old one. Two ways of finding those tensors are timed on the same sizes, in turns within one process:
"search" (``shared_memory.share_storages``: the garbage collector's referrers of the storage, a walk over every
object in the process, which a caller holding only the storage still takes) and "counted"
(``Tensor.share_memory_``: the tensors reachable from the one given, checked against the storage's reference
count). Times are CPU time of the calling thread (page faults of the new memory included), the median over the
rounds; torch's ``share_memory_`` is the reference. The process holds jitorch, torch and the GPT's objects.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

import torch

import jitorch as jt
from jitorch.runtime import shared_memory

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples", "programs"))
import gpt  # noqa: E402  (the example's GPT, built by jitorch)


def cpu_time(fn):
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def tensor_rows(rounds, sizes_mb):
    rows = []
    for mb in sizes_mb:
        n = mb * (1 << 20) // 4
        times = {"search": [], "counted": [], "torch": []}
        for _ in range(rounds):
            for way in times:
                if way == "torch":
                    t = torch.randn(n)
                    times[way].append(cpu_time(t.share_memory_))
                else:
                    t = jt.randn(n)
                    t[:10].numpy()  # a view with a cached array, as a model's code leaves them
                    fn = (lambda: shared_memory.share_storages([t._storage])) if way == "search" else t.share_memory_
                    times[way].append(cpu_time(fn))
                del t
        rows.append((f"share_memory_(), {mb} MB", {k: statistics.median(v) for k, v in times.items()}))
    return rows


def gpt_row(rounds, layers):
    """nanoGPT's Shakespeare-char model (6 heads, 384 wide; with 6 layers, 10.7M parameters) after one backward."""
    times = {"search": [], "counted": [], "torch": []}
    for _ in range(rounds):
        for way in times:
            lib = torch if way == "torch" else jt
            lib.manual_seed(0)
            if way == "torch":
                model = torch.nn.Transformer(384, 6, layers, 0, 1536, 0.0)  # 10.6M parameters at 6 layers
                fn = model.share_memory
            else:
                model = gpt.GPT(65, 256, layers, 6, 384, 0.0)
                model(jt.zeros(1, 8, dtype=jt.int64))[0].sum().backward()
                tensors = [t for p in model.parameters() for t in (p, p.grad) if t is not None]
                fn = ((lambda: shared_memory.share_storages([t._storage for t in tensors])) if way == "search"
                      else model.share_memory)
            times[way].append(cpu_time(fn))
            del model
    return f"Module.share_memory(), GPT {layers} layers", {k: statistics.median(v) for k, v in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="1 MB and a one-layer GPT, one round")
    args = parser.parse_args()
    if args.quick:
        rows = tensor_rows(1, (1,)) + [gpt_row(1, 1)]
    else:
        rows = tensor_rows(args.rounds, (1, 100)) + [gpt_row(max(3, args.rounds // 2), 6)]
    print(f"objects in the process: {len(gc.get_objects()):,}; CPU time of the calling thread, median")
    print(f"{'':34}{'search':>10}{'counted':>10}{'torch':>10}")
    for label, t in rows:
        print(f"{label:34}" + "".join(f"{t[k] * 1e3:>8.2f}ms" for k in ("search", "counted", "torch")))


if __name__ == "__main__":
    main()
