"""Breadth functions against torch: antialiased interpolate, grid_sample, ctc_loss, fractional max pooling,
igamma. Process CPU time per call, jitorch and torch interleaved in one process, one thread each.

    PYTHONPATH=$PWD python benchmarks/breadth_ops.py [--repeat N] [--only SUBSTRING ...]

Each row: the median CPU time (``time.process_time``) of torch's call and of jitorch's, timed in turns
(torch, jitorch, torch, ...) so that other load on the machine affects both alike, and their ratio
(jitorch / torch, lower is better). "fwd+bwd" rows time the forward, a ``sum`` of the output weighted by a
fixed random tensor and the backward to every input requiring grad; "compiled" rows run the same step under
``jitorch.compile`` (torch eager against it).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as TF

import jitorch as jt
import jitorch.nn.functional as F


def _pair(lib, arrays, grad):
    """``arrays`` as tensors of ``lib`` (jitorch or torch), those at the positions in ``grad`` requiring grad."""
    convert = jt.tensor if lib is jt else torch.tensor
    return [convert(a, requires_grad=i in grad) for i, a in enumerate(arrays)]


def _step(fn, tensors, weight, backward):
    """A call of ``fn(*tensors)``, with ``backward`` its weighted sum's backward (gradients reset first)."""
    def run():
        for t in tensors:
            t.grad = None
        out = fn(*tensors)
        if backward:
            (out * weight).sum().backward()
        return out
    return run


def _compiled_step(fn, tensors, weight, backward):
    """`_step` under ``jitorch.compile``: the forward and the backward in one compiled function."""
    def step(*args):
        out = fn(*args)
        if backward:
            (out * weight).sum().backward()
        return out

    compiled = jt.compile(step)

    def run():
        for t in tensors:
            t.grad = None
        return compiled(*tensors)
    return run


def cases():
    """(label, jitorch function, torch function, input arrays, indices of inputs requiring grad, backward,
    compiled too)."""
    rng = np.random.default_rng(0)
    img = rng.standard_normal((4, 3, 128, 128)).astype(np.float32)
    for mode in ("bilinear", "bicubic"):
        for size in ((40, 40), (300, 300)):
            fn = (lambda lib, m=mode, s=size: lambda x: lib.interpolate(x, size=s, mode=m, antialias=True))
            yield (f"interpolate {mode} aa 4x3x128x128->{size[0]} f32", fn(F), fn(TF), [img], (), False, False)
        fn = (lambda lib, m=mode: lambda x: lib.interpolate(x, size=(40, 40), mode=m, antialias=True))
        yield (f"interpolate {mode} aa ->40 f32 fwd+bwd", fn(F), fn(TF), [img], (0,), True, False)
        yield (f"interpolate {mode} aa 4x3x128x128->40 f64", fn(F), fn(TF), [img.astype(np.float64)], (), False,
               False)
        byte = rng.integers(0, 256, (4, 3, 128, 128)).astype(np.uint8)
        yield (f"interpolate {mode} aa 4x3x128x128->40 u8", fn(F), fn(TF), [byte], (), False, False)
    x = rng.standard_normal((8, 3, 64, 64)).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, (8, 48, 48, 2)).astype(np.float32)
    for mode in ("bilinear", "nearest", "bicubic"):
        fn = (lambda lib, m=mode: lambda a, g: lib.grid_sample(a, g, mode=m, align_corners=False))
        yield f"grid_sample {mode} 8x3x64x64 grid 48 fwd", fn(F), fn(TF), [x, grid], (), False, False
        yield f"grid_sample {mode} fwd+bwd", fn(F), fn(TF), [x, grid], (0, 1), True, True
    steps, batch, classes, length = 50, 16, 20, 10
    logits = rng.standard_normal((steps, batch, classes)).astype(np.float32)
    targets = rng.integers(1, classes, (batch, length))
    il = np.full(batch, steps)
    tl = rng.integers(5, length + 1, batch)

    def ctc(lib):
        def run(z, t, i, n):
            return lib.ctc_loss(z.log_softmax(2), t, i, n, reduction="none")
        return run
    yield "ctc_loss T50 N16 C20 S10 fwd", ctc(F), ctc(TF), [logits, targets, il, tl], (), False, False
    yield "ctc_loss T50 N16 C20 S10 fwd+bwd", ctc(F), ctc(TF), [logits, targets, il, tl], (0,), True, False
    pool_in = rng.standard_normal((8, 16, 32, 32)).astype(np.float32)
    samples = rng.uniform(0, 1, (8, 16, 2)).astype(np.float32)

    def pool(lib):
        return lambda a, u: lib.fractional_max_pool2d(a, 2, output_size=(16, 16), _random_samples=u)
    yield "fractional_max_pool2d 8x16x32x32 k2 fwd", pool(F), pool(TF), [pool_in, samples], (), False, False
    yield "fractional_max_pool2d fwd+bwd", pool(F), pool(TF), [pool_in, samples], (0,), True, True
    for dtype in (np.float32, np.float64):
        a = rng.uniform(0.5, 20, 100_000).astype(dtype)
        b = rng.uniform(0.1, 30, 100_000).astype(dtype)
        name = np.dtype(dtype).name
        yield f"igamma 100k {name}", jt.special.gammainc, torch.special.gammainc, [a, b], (), False, False
        yield f"igammac 100k {name}", jt.special.gammaincc, torch.special.gammaincc, [a, b], (), False, False


def interleaved(fns, repeat):
    """Median CPU seconds per call of each of ``fns``, called in turns after one untimed call each."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(repeat):
        for fn, ts in zip(fns, times):
            t0 = time.process_time()
            fn()
            ts.append(time.process_time() - t0)
    return [statistics.median(ts) for ts in times]


def main():
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--only", nargs="*", default=[])
    args = parser.parse_args()
    torch.set_num_threads(1)
    jt.set_num_threads(1)
    print(f"{'case':48} {'torch ms':>9} {'jitorch ms':>10} {'ratio':>6} {'compiled ms':>11} {'ratio':>6}")
    for label, jfn, tfn, arrays, grad, backward, compiled in cases():
        if args.only and not any(s in label for s in args.only):
            continue
        rng = np.random.default_rng(1)
        jts, tts = _pair(jt, arrays, grad), _pair(torch, arrays, grad)
        weight = None
        if backward:
            shape = tuple(tfn(*tts).shape)
            w = rng.standard_normal(shape).astype(arrays[0].dtype)
            weight = (jt.tensor(w), torch.tensor(w))
        fns = [_step(tfn, tts, weight and weight[1], backward), _step(jfn, jts, weight and weight[0], backward)]
        if compiled:
            fns.append(_compiled_step(jfn, jts, weight and weight[0], backward))
        times = [t * 1e3 for t in interleaved(fns, args.repeat)]
        row = f"{label:48} {times[0]:9.3f} {times[1]:10.3f} {times[1] / times[0]:6.1f}"
        if compiled:
            row += f" {times[2]:11.3f} {times[2] / times[0]:6.1f}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
