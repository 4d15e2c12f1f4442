"""Eager optimizer steps on a model's parameter list: the group's generated kernel (`jitorch.optim.foreach`)
against the per-parameter NumPy step it replaces and torch's steps, in one process: its default (on CPU
tensors the for-loop of ops per parameter) and ``foreach=True``.

    python benchmarks/optimizer_steps.py [--models gpt-4x128,cnn] [--optimizers RMSprop,Adagrad,...]
                                         [--rounds 9] [--steps 5]

Each system's step is timed in thread CPU (`time.thread_time`) at one thread (jitorch's and torch's), over
``--steps`` steps per round; rounds interleave the systems and the figures are medians over rounds, with the
ratios of the medians. The parameters have the shapes of the model's (the `models.py` workloads), random
values and gradients.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import jitorch

import models

OPTIMIZERS = {
    "RMSprop": dict(lr=0.01, momentum=0.9, weight_decay=0.01),
    "Adagrad": dict(lr=0.01, lr_decay=0.01, weight_decay=0.01),
    "Adamax": dict(lr=0.002, weight_decay=0.01),
    "NAdam": dict(lr=0.002, weight_decay=0.01),
    "RAdam": dict(lr=0.001, weight_decay=0.01),
    "Adam": dict(lr=0.001),
}


def _system(lib, shapes, name, kernel=True, **options):
    rng = np.random.default_rng(0)
    params = [lib.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True) for s in shapes]
    for p in params:
        p.grad = lib.tensor(rng.standard_normal(p.shape).astype(np.float32) * 0.01)
    opt = getattr(lib.optim, name)(params, **OPTIMIZERS[name], **options)
    if not kernel:  # (every parameter left to the per-parameter NumPy step)
        opt._foreach_update = lambda group, params, *rest: params
    for _ in range(8):  # past RAdam's unrectified steps, kernels built
        opt.step()
    return opt.step


def measure(model, name, rounds, steps):
    import torch
    shapes = [tuple(p.shape) for net in models.workload(jitorch, model, False).nets for p in net.parameters()]
    systems = {"kernel": _system(jitorch, shapes, name), "per-parameter": _system(jitorch, shapes, name, False),
               "torch": _system(torch, shapes, name), "torch foreach": _system(torch, shapes, name, foreach=True)}
    times = {label: [] for label in systems}
    for _ in range(rounds):
        for label, step in systems.items():
            start = time.thread_time()
            for _ in range(steps):
                step()
            times[label].append((time.thread_time() - start) / steps)
    return len(shapes), sum(int(np.prod(s)) for s in shapes), {k: statistics.median(v) for k, v in times.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="gpt-4x128,cnn")
    p.add_argument("--optimizers", default=",".join(OPTIMIZERS))
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--steps", type=int, default=5)
    args = p.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    jitorch.set_num_threads(1)
    print("model       optimizer  tensors  elements   kernel ms  per-param ms  torch ms  torch foreach ms  "
          "per-param/kernel  kernel/torch  kernel/foreach")
    for model in args.models.split(","):
        for name in args.optimizers.split(","):
            count, size, t = measure(model, name, args.rounds, args.steps)
            print(f"{model:11s} {name:9s} {count:7d} {size:9d} {t['kernel'] * 1e3:10.3f} "
                  f"{t['per-parameter'] * 1e3:13.3f} {t['torch'] * 1e3:9.3f} {t['torch foreach'] * 1e3:17.3f} "
                  f"{t['per-parameter'] / t['kernel']:17.2f} {t['kernel'] / t['torch']:13.2f} "
                  f"{t['kernel'] / t['torch foreach']:15.2f}", flush=True)


if __name__ == "__main__":
    main()
