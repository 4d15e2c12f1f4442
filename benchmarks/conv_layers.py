"""The convolutions of benchmarks/models.py's cnn and dcgan, layer by layer: jitorch's im2col + GEMM against torch's
convolution on the same shapes, in one process, the two taking turns.

    python benchmarks/conv_layers.py [--layers cnn,dcgan] [--repeat 20] [--quick]
    python benchmarks/conv_layers.py --directions [--threads 1,2] [--layers dcgan] [--repeat 9]

Per layer, the calling thread's CPU ms per call (median) at one thread:

    torch fwd / jt fwd        the layer's forward (F.conv2d or F.conv_transpose2d), eager
    torch f+b / jt f+b        forward and backward of ``(y * g).sum()`` with respect to input and weight
    jc f+b                    the same forward and backward as one jitorch.compile'd call (its layout changes
                              between the batch-innermost products and NCHW are generated kernels)
    windows                   jitorch's im2col copy alone (a convolution's window view merged; none for a
                              transposed one, whose col2im is the accumulation below)
    gemm                      jitorch's product alone, on compact operands of the layer's shapes (a generated kernel
                              where ``ops.linalg.skinny_shape`` gives it one)
    blas                      the same product through NumPy's matmul (OpenBLAS), as before the generated kernels
    col2im                    a transposed convolution's accumulation of its windows (``_as_strided_add``)
    pad %                     the share of the layer's product multiply-adds that an im2col product spends on
                              padding: window taps on the zero border of a convolution's input, or a transposed
                              one's contributions to the border that its padding crops (`padded_share`); the
                              same share of its forward, input-gradient and weight-gradient products, which a
                              direct convolution would not compute

``--directions`` prints, per layer and direction instead (forward; input gradient ``dx``; weight gradient ``dw``),
at each of ``--threads``, the ms per call (median; the process's CPU time at one thread, wall time at more) of

    torch                     the direction alone: ``F.conv2d`` / ``F.conv_transpose2d``, or
                              ``aten.convolution_backward`` asked for that one gradient (oneDNN's kernels)
    jc                        the direction alone as one jitorch.compile'd call (``autograd.grad`` of the layer
                              with respect to one operand: layout changes, padding, im2col or col2im, product)
    gemm                      jitorch's product of that direction alone, on compact operands (`direction_products`)

with ``jc/torch``, the share of the zen4 peak (`PEAK_MACS` multiply-adds per second per thread) that the layer's
im2col multiply-adds take in ``jc`` and in ``gemm`` (``jc pk%``, ``gemm pk%``), and the padded share (`padded_share`).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jitorch as jt  # noqa: E402
import jitorch.nn.functional as F  # noqa: E402
from timing import settle  # noqa: E402

# (name, transposed, input shape, weight shape, stride, padding)
LAYERS = {
    "cnn": [("cnn conv1", False, (64, 1, 28, 28), (8, 1, 3, 3), 1, 0),
            ("cnn conv2", False, (64, 8, 26, 26), (16, 8, 3, 3), 1, 0)],
    "dcgan": [("G convT1", True, (64, 100, 1, 1), (100, 256, 4, 4), 1, 0),
              ("G convT2", True, (64, 256, 4, 4), (256, 128, 4, 4), 2, 1),
              ("G convT3", True, (64, 128, 8, 8), (128, 64, 4, 4), 2, 1),
              ("G convT4", True, (64, 64, 16, 16), (64, 3, 4, 4), 2, 1),
              ("D conv1", False, (64, 3, 32, 32), (64, 3, 4, 4), 2, 1),
              ("D conv2", False, (64, 64, 16, 16), (128, 64, 4, 4), 2, 1),
              ("D conv3", False, (64, 128, 8, 8), (256, 128, 4, 4), 2, 1),
              ("D conv4", False, (64, 256, 4, 4), (1, 256, 4, 4), 1, 0)],
}


def padded_share(transposed, xshape, wshape, stride, padding):
    """The share of an im2col convolution's multiply-adds whose window tap lies on the padding (a convolution) or
    whose contribution the padding crops (a transposed one), for square stride and padding, dilation 1: per
    spatial dim, the (window, tap) pairs outside the input (or the kept output), then one minus the product of the
    dims' kept shares."""
    kept = 1.0
    for size, k in zip(xshape[2:], wshape[2:]):
        if transposed:  # input position i's tap t lands at i * stride + t of the uncropped output
            out = (size - 1) * stride - 2 * padding + k
            pairs = [(i * stride + t, padding, padding + out) for i in range(size) for t in range(k)]
        else:  # window o's tap t reads input o * stride - padding + t
            windows = (size + 2 * padding - k) // stride + 1
            pairs = [(o * stride - padding + t, 0, size) for o in range(windows) for t in range(k)]
        kept *= sum(lo <= at < hi for at, lo, hi in pairs) / len(pairs)
    return 1.0 - kept


def cpu_ms(fn, repeat):
    """Median calling-thread CPU ms per call of ``fn`` (one untimed call first)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return statistics.median(times) * 1e3


def layer_calls(torch, transposed, xshape, wshape, stride, padding):
    """{column: callable} for one layer."""
    g = jt.Generator().manual_seed(0)
    x, w = jt.randn(*xshape, generator=g), jt.randn(*wshape, generator=g) * 0.1
    conv = F.conv_transpose2d if transposed else F.conv2d
    tconv = torch.nn.functional.conv_transpose2d if transposed else torch.nn.functional.conv2d
    tx, tw = torch.from_numpy(x.numpy().copy()), torch.from_numpy(w.numpy().copy())
    y = conv(x, w, stride=stride, padding=padding)
    gy = jt.randn(*y.shape, generator=g)
    tgy = torch.from_numpy(gy.numpy().copy())
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    txg, twg = tx.clone().requires_grad_(), tw.clone().requires_grad_()

    def jt_fb():
        xg.grad = wg.grad = None
        (conv(xg, wg, stride=stride, padding=padding) * gy).sum().backward()

    def torch_fb():
        txg.grad = twg.grad = None
        (tconv(txg, twg, stride=stride, padding=padding) * tgy).sum().backward()

    def step(x, w, gy):
        (conv(x, w, stride=stride, padding=padding) * gy).sum().backward()
        return x.grad, w.grad
    compiled = jt.compile(step)

    def jc_fb():
        return compiled(x.clone().requires_grad_(), w.clone().requires_grad_(), gy)

    calls = {"torch fwd": lambda: tconv(tx, tw, stride=stride, padding=padding),
             "jt fwd": lambda: conv(x, w, stride=stride, padding=padding),
             "torch f+b": torch_fb, "jt f+b": jt_fb, "jc f+b": jc_fb}
    n, c = xshape[:2]
    kernel = wshape[2:]
    if transposed:
        # (C_out * K, C_in) @ (C_in, L * N), then col2im into the (C_out, *full, N) output
        c_out = wshape[1]
        full = [(s - 1) * stride + k for s, k in zip(xshape[2:], kernel)]
        a = jt.randn(c_out * math.prod(kernel), c, generator=g)
        b = jt.randn(c, math.prod(xshape[2:]) * n, generator=g)
        calls["gemm"] = lambda: jt.matmul(a, b)
        calls["blas"] = lambda: np.matmul(a.numpy(), b.numpy())
        shape = (c_out, *full, n)
        size, steps = F._grouped_windows(shape, 1, kernel, (stride,) * 2, (1, 1), tuple(xshape[2:]))
        cols = jt.matmul(a, b).reshape(size)
        calls["col2im"] = lambda: F._OPS["_as_strided_add"](jt.zeros(math.prod(shape)), cols, size, steps, 0)
    else:
        pads = [(padding, padding)] * 2
        xt = F._batch_last(x, pads)
        out = [(p - k) // stride + 1 for p, k in zip(xt.shape[1:-1], kernel)]
        size, steps = F._grouped_windows(tuple(xt.shape), 1, kernel, (stride,) * 2, (1, 1), out)
        calls["windows"] = lambda: xt.as_strided(size, steps, 0).reshape(c * math.prod(kernel), -1)
        a = jt.randn(wshape[0], c * math.prod(kernel), generator=g)
        b = jt.randn(c * math.prod(kernel), math.prod(out) * n, generator=g)
        calls["gemm"] = lambda: jt.matmul(a, b)
        calls["blas"] = lambda: np.matmul(a.numpy(), b.numpy())
    return calls


PEAK_MACS = 58e9  # float32 multiply-adds per second of one Zen 4 core: one 512-bit FMA a cycle near 3.6 GHz
DIRECTIONS = ("fwd", "dx", "dw")


def layer_macs(transposed, xshape, wshape, stride, padding):
    """The multiply-adds of the layer's im2col product (each direction's product has as many), for dilation 1 and
    one group: (C_in * K) * C_out per input position (transposed) or per output position."""
    n, c = xshape[:2]
    kernel = math.prod(wshape[2:])
    if transposed:
        return n * math.prod(xshape[2:]) * c * kernel * wshape[1]
    out = [(s + 2 * padding - k) // stride + 1 for s, k in zip(xshape[2:], wshape[2:])]
    return n * math.prod(out) * c * kernel * wshape[0]


def direction_products(transposed, xshape, wshape, stride, padding, generator):
    """{direction: (callable, expected)}: jitorch's product of each direction of the layer on compact operands of
    its shapes (``(rows, sum) @ (sum, columns)``; the weight gradient's second operand a transposed view, as the
    backward reads its windows), and the NumPy product it must equal."""
    n, c = xshape[:2]
    kernel = math.prod(wshape[2:])
    out = [(s + 2 * padding - k) // stride + 1 for s, k in zip(xshape[2:], wshape[2:])]
    # (sum over channels * K, channels of the other side, columns = positions * batch): a convolution's
    # forward is (O, C*K) @ (C*K, L*N); a transposed one's is its input gradient, (O*K, C) @ (C, L*N)
    if transposed:
        rows, inner, cols = wshape[1] * kernel, c, n * math.prod(xshape[2:])
        shapes = {"fwd": (rows, inner, cols), "dx": (inner, rows, cols), "dw": (rows, cols, inner)}
    else:
        rows, inner, cols = wshape[0], c * kernel, n * math.prod(out)
        shapes = {"fwd": (rows, inner, cols), "dx": (inner, rows, cols), "dw": (rows, cols, inner)}
    calls = {}
    for d, (m, k, p) in shapes.items():
        a = jt.randn(m, k, generator=generator)
        b = jt.randn(p, k, generator=generator).t() if d == "dw" else jt.randn(k, p, generator=generator)
        calls[d] = ((lambda a=a, b=b: jt.matmul(a, b)), (lambda a=a, b=b: a.numpy() @ b.numpy()))
    return calls


def direction_calls(torch, transposed, xshape, wshape, stride, padding):
    """{direction: {"torch": callable, "jc": callable, "gemm": callable}} for one layer (`--directions`)."""
    g = jt.Generator().manual_seed(0)
    x, w = jt.randn(*xshape, generator=g), jt.randn(*wshape, generator=g) * 0.1
    conv = F.conv_transpose2d if transposed else F.conv2d
    tconv = torch.nn.functional.conv_transpose2d if transposed else torch.nn.functional.conv2d
    gy = jt.randn(*conv(x, w, stride=stride, padding=padding).shape, generator=g)
    tx, tw, tgy = (torch.from_numpy(t.numpy().copy()) for t in (x, w, gy))

    def grad_of(which):
        def fn(x, w, gy):
            operands = [x, w]
            operands[which] = operands[which].detach().requires_grad_()
            y = conv(*operands, stride=stride, padding=padding)
            return jt.autograd.grad(y, operands[which], gy)[0]
        return jt.compile(fn)
    forward = jt.compile(lambda x, w: conv(x, w, stride=stride, padding=padding))
    dx, dw = grad_of(0), grad_of(1)

    def torch_grad(mask):
        return lambda: torch.ops.aten.convolution_backward(tgy, tx, tw, None, [stride] * 2, [padding] * 2, [1, 1],
                                                           transposed, [0, 0], 1, mask)
    products = direction_products(transposed, xshape, wshape, stride, padding, g)
    return {"fwd": {"torch": lambda: tconv(tx, tw, stride=stride, padding=padding), "jc": lambda: forward(x, w),
                    "gemm": products["fwd"][0]},
            "dx": {"torch": torch_grad([True, False, False]), "jc": lambda: dx(x, w, gy), "gemm": products["dx"][0]},
            "dw": {"torch": torch_grad([False, True, False]), "jc": lambda: dw(x, w, gy), "gemm": products["dw"][0]}}


def clock_ms(fn, repeat, threads):
    """Median ms per call of ``fn`` (one untimed call first): the process's CPU time at one thread (a shared
    machine's other load does not count), wall time at more (the team's waits are the cost), after `settle`."""
    clock = time.process_time if threads == 1 else time.perf_counter
    fn()
    if threads > 1:
        settle()  # (the other system's spinning workers off the cores)
    times = []
    for _ in range(repeat):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times) * 1e3


def print_directions(torch, layers, thread_counts, repeat):
    """The ``--directions`` table (see the module's docstring)."""
    print(f"{'layer':10s}{'dir':>4s}{'thr':>4s}{'torch':>9s}{'jc':>9s}{'gemm':>9s}{'jc/torch':>9s}{'jc pk%':>8s}"
          f"{'gemm pk%':>9s}{'pad %':>7s}")
    for name, *shape in layers:
        calls = direction_calls(torch, *shape)
        macs = layer_macs(*shape)
        for threads in thread_counts:
            torch.set_num_threads(threads)
            jt.set_num_threads(threads)
            for d in DIRECTIONS:
                times = {c: [] for c in calls[d]}
                for _ in range(3):  # (the systems take turns)
                    for c, fn in calls[d].items():
                        times[c].append(clock_ms(fn, max(1, repeat // 3), threads))
                ms = {c: statistics.median(t) for c, t in times.items()}
                peak = PEAK_MACS * threads / 1e3  # multiply-adds per ms

                def share(t):
                    return 100 * macs / (peak * t)
                print(f"{name:10s}{d:>4s}{threads:4d}{ms['torch']:9.3f}{ms['jc']:9.3f}{ms['gemm']:9.3f}"
                      f"{ms['jc'] / ms['torch']:9.2f}{share(ms['jc']):8.1f}{share(ms['gemm']):9.1f}"
                      f"{100 * padded_share(*shape):7.1f}", flush=True)


COLUMNS = ("torch fwd", "jt fwd", "torch f+b", "jt f+b", "jc f+b", "windows", "gemm", "blas", "col2im")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", default="cnn,dcgan")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="the first layer of each set, 3 calls (for tests)")
    p.add_argument("--directions", action="store_true", help="forward, input and weight gradients apart")
    p.add_argument("--threads", default="1", help="thread counts of --directions, comma-separated")
    args = p.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    jt.set_num_threads(1)
    repeat = 3 if args.quick else args.repeat
    if args.directions:
        layers = [layer for key in args.layers.split(",") for layer in LAYERS[key][:1 if args.quick else None]]
        print_directions(torch, layers, [int(t) for t in args.threads.split(",")], repeat)
        return
    print(f"{'layer':10s}" + "".join(f"{c:>11s}" for c in COLUMNS) + f"{'jt/torch f+b':>14s}{'pad %':>7s}")
    for key in args.layers.split(","):
        for name, *shape in LAYERS[key][:1 if args.quick else None]:
            calls = layer_calls(torch, *shape)
            times = {c: [] for c in calls}
            for _ in range(3):  # (the systems take turns: a shared machine's load falls on both)
                for c, fn in calls.items():
                    times[c].append(cpu_ms(fn, max(1, repeat // 3)))
            ms = {c: statistics.median(t) for c, t in times.items()}
            cells = "".join(f"{ms[c]:11.3f}" if c in ms else f"{'-':>11s}" for c in COLUMNS)
            print(f"{name:10s}{cells}{ms['jt f+b'] / ms['torch f+b']:14.2f}{100 * padded_share(*shape):7.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
