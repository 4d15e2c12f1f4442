"""CUDA benchmark: device copy bandwidth as the ceiling; fused GELU, the 10-op chain, row softmax and
sum as fractions of it; tiled matmul 4096 in TFLOP/s; and, where torch with CUDA is installed, torch (eager)
on the same cases and GPU. Prints "no CUDA device" and exits 0 without one.

Kernels are timed with CUDA events (median of 20 launches) on device buffers of 64M float32 elements. The
sum's row times its first pass (partial results per block); the pass that combines them reads 512 values.
"""

import statistics
import sys

import numpy as np

import jitorch as jt

N = 1 << 26
MATMUL = 4096


def cases(n):
    """name -> (function, input shape, passes over the ``n`` float32 elements) for buffers of ``n`` elements."""
    return {
        "gelu": (lambda t: 0.5 * t * (1 + (0.7978845608 * (t + 0.044715 * t ** 3)).tanh()), (n,), 2),
        "ten_ops": (lambda t: ((t * t + t) * 0.5 - t / (t * t + 1) + (t - 1) * (t + 2)).abs() * 0.25, (n,), 2),
        "softmax": (lambda t: t.softmax(-1), (n // 4096, 4096), 2),
        "sum": (lambda t: t.sum(), (n,), 1),
    }


def _time(launch, repeat=20, event=None):
    """Median seconds of ``launch`` between two CUDA events (``event``: the event class, jitorch's by
    default; torch's for the comparison)."""
    event = event or jt.cuda.Event
    times = []
    for _ in range(repeat):
        start, end = event(enable_timing=True), event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main(n=N, m=MATMUL, repeat=20):
    """Print the table for buffers of ``n`` float32 elements (a multiple of 4096) and an ``m`` x ``m`` matmul
    (``m * m <= n``); the tests run it at small sizes on a fake driver."""
    if not jt.cuda.is_available():
        print("no CUDA device")
        return 0
    from jitorch.codegen.nvptx.matmul import matmul_kernel
    from jitorch.runtime import cuda_driver as d
    nbytes = n * 4
    src, dst = d.malloc(nbytes), d.malloc(nbytes)
    d.copy_to_device(src, np.random.default_rng(0).standard_normal(n).astype(np.float32))
    stream = jt.cuda.current_stream().handle
    copy = 2 * nbytes / _time(lambda: d.copy_on_device(dst, src, nbytes, stream), repeat)
    rows = [("d2d copy", f"{copy / 1e9:.0f} GB/s", "1.00")]
    sms = d.attribute("MULTIPROCESSOR_COUNT")
    partials = []
    for name, (fn, shape, passes) in cases(n).items():
        (k,) = jt.compile(fn).lower(jt.empty(*shape), device="cuda").executable.kernels
        f, (blocks, threads) = d.function(k.asm, k.name), k.grid(sms)
        out = dst if k.source.split is None else d.malloc(k.source.split[0] * 4)
        if out != dst:
            partials.append(out)
        seconds = _time(lambda: d.launch(f, blocks, threads, [src, out], stream), repeat)
        bw = passes * nbytes / seconds
        rows.append((name, f"{bw / 1e9:.0f} GB/s", f"{bw / copy:.2f}"))
    k = matmul_kernel((m, m), (m, m), jt.float32)
    f, (blocks, threads) = d.function(k.asm, k.name), k.grid()
    seconds = _time(lambda: d.launch(f, blocks, threads, [src, src, dst], stream), max(1, repeat // 4))
    rows.append((f"matmul {m} f32", f"{2 * m ** 3 / seconds / 1e12:.1f} TFLOP/s", "-"))
    d.synchronize()
    for address in [src, dst] + partials:
        d.free(address)
    try:
        theirs = _torch_throughput(n, m, repeat)
    except Exception as e:  # the comparison failing must not lose jitorch's own figures
        print(f"torch comparison failed: {type(e).__name__}: {e}")
        theirs = {}
    print(f"{'case':<18}{'throughput':>16}{'of copy':>10}{'torch eager':>16}   ({d.device_name()})")
    for name, *r in rows:
        key = name.split()[0]
        other = "-" if key not in theirs else (f"{theirs[key] / 1e12:.1f} TFLOP/s" if key == "matmul" else
                                              f"{theirs[key] / 1e9:.0f} GB/s")
        print(f"{name:<18}{r[0]:>16}{r[1]:>10}{other:>16}")
    return 0


def _torch_throughput(n, m, repeat):
    """torch's (eager) bytes per second on the same cases and GPU, and its matmul FLOP/s; empty when torch
    or its CUDA is not installed."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}

    def seconds(launch):
        launch()  # torch's first call of an op loads its kernel
        return _time(launch, repeat, torch.cuda.Event)

    x = torch.randn(n, device="cuda")
    out = {name: passes * n * 4 / seconds(lambda: fn(x.reshape(shape))) for name, (fn, shape, passes) in
           cases(n).items()}
    a = torch.randn(m, m, device="cuda")
    out["matmul"] = 2 * m ** 3 / seconds(lambda: a @ a)
    return out


if __name__ == "__main__":
    sys.exit(main())
