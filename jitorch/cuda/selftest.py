"""``python -m jitorch.cuda.selftest``: the CUDA checks, with or without a GPU.

Always: every kernel kind the CUDA backend generates (pointwise, fused chains,
reductions over each dim and full, softmax, matmul) is assembled by ptxas for
sm_80 and sm_90. With a GPU also: the allocator on the real driver, streams
and events, compiled kernels run on device buffers against the CPU results,
and a device-to-device copy bandwidth measurement. Prints one summary table;
exits 1 when a check fails, 0 otherwise (also without a GPU).
"""

from __future__ import annotations

import sys
import time

import numpy as np

import jitorch as jt


def _ptx_kernels():
    from ..codegen.nvptx.matmul import matmul_kernel
    x = jt.randn(64, 33)
    fns = [lambda t: 0.5 * t * (1 + (0.7978845608 * (t + 0.044715 * t ** 3)).tanh()), lambda t: t.sum(-1),
           lambda t: t.sum(0), lambda t: t.amax(), lambda t: t.softmax(-1), lambda t: t.log_softmax(-1),
           lambda t: (t.exp() * t.sin()).mean(0, keepdim=True)]
    kernels = [k for fn in fns for k in jt.compile(fn).lower(x, device="cuda").executable.kernels]
    return kernels + [matmul_kernel((128, 64), (64, 96), jt.float32), matmul_kernel((2, 8, 16), (16, 8), jt.float16)]


def check_ptxas():
    from ..codegen.nvptx.ptxas import assemble
    kernels = _ptx_kernels()
    bad = [(arch, k.name) for arch in ("sm_80", "sm_90") for k, err in zip(kernels, assemble([k.asm for k in kernels],
                                                                                           arch)) if err]
    return not bad, f"{len(kernels)} kernels x 2 archs" + (f"; rejected {bad}" if bad else "")


def check_allocator():
    from ..runtime.cuda_allocator import CachingAllocator
    from ..runtime.cuda_driver import DriverMemory, activate
    activate(0)
    a = CachingAllocator(DriverMemory())
    b1 = a.malloc(1000)
    a.free(b1)
    b2 = a.malloc(900)
    reused = b2.address == b1.address
    a.free(b2)
    a.empty_cache()
    return reused and a.memory_reserved() == 0, "reuse on one stream, empty_cache returns every segment"


def _run_kernel(kernel, arrays, out_shapes, dtypes):
    """Run a PtxKernel on host arrays: copy in, launch, copy out."""
    from ..runtime import cuda_driver as d
    fn = d.function(kernel.asm, kernel.name)
    ptrs, outs = [], []
    for a in arrays:
        p = d.malloc(max(a.nbytes, 1))
        d.copy_to_device(p, np.ascontiguousarray(a))
        ptrs.append(p)
    for shape, dt in zip(out_shapes, dtypes):
        outs.append(np.empty(shape, dt))
        ptrs.append(d.malloc(max(outs[-1].nbytes, 1)))
    blocks, threads = kernel.grid(d.attribute("MULTIPROCESSOR_COUNT"))
    d.launch(fn, blocks, threads, ptrs)
    d.synchronize()
    for o, p in zip(outs, ptrs[len(arrays):]):
        d.copy_to_host(o, p)
    for p in ptrs:
        d.free(p)
    return outs


def check_kernels():
    """Compiled kernels on the GPU against the CPU's results."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 257)).astype(np.float32)
    cases = {"gelu": lambda t: 0.5 * t * (1 + (0.7978845608 * (t + 0.044715 * t ** 3)).tanh()),
             "row sum": lambda t: t.sum(-1), "col sum": lambda t: t.sum(0), "amax": lambda t: t.amax(),
             "softmax": lambda t: t.softmax(-1), "exp mean": lambda t: t.exp().mean(0)}
    failed = []
    for name, fn in cases.items():
        (k,) = jt.compile(fn).lower(jt.tensor(x), device="cuda").executable.kernels
        expected = fn(jt.tensor(x)).numpy()
        shape = expected.shape if k.source.split is None else (k.source.split[0],)
        (got,) = _run_kernel(k, [x], [shape], [np.float32])
        if k.source.split is not None:
            got = np.max(got) if name == "amax" else np.sum(got)
        if not np.allclose(got, expected, rtol=1e-4, atol=1e-4):
            failed.append(name)
    from ..codegen.nvptx.matmul import matmul_kernel
    a, b = rng.standard_normal((3, 70, 50)).astype(np.float32), rng.standard_normal((50, 90)).astype(np.float32)
    k = matmul_kernel(a.shape, b.shape, jt.float32)
    (got,) = _run_kernel(k, [a, b], [k.out_shape], [np.float32])
    if not np.allclose(got, a @ b, rtol=1e-4, atol=1e-3):
        failed.append("matmul")
    return not failed, f"{len(cases) + 1} kernels vs CPU" + (f"; wrong: {failed}" if failed else "")


def check_streams_and_bandwidth():
    from ..runtime import cuda_driver as d
    n = 1 << 28
    src, dst = d.malloc(n), d.malloc(n)
    s = jt.cuda.Stream()
    start, end = jt.cuda.Event(enable_timing=True), jt.cuda.Event(enable_timing=True)
    with jt.cuda.stream(s):
        start.record()
        for _ in range(10):
            d.copy_on_device(dst, src, n, s.handle)
        end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    d.free(src)
    d.free(dst)
    return ms > 0, f"device copy {2 * n * 10 / ms / 1e6:.0f} GB/s (read + write)"


def main():
    rows = [("ptxas sm_80/sm_90",) + check_ptxas()]
    gpu = jt.cuda.is_available()
    if gpu:
        for name, check in (("allocator (driver)", check_allocator), ("kernels vs CPU", check_kernels),
                            ("streams, events, bandwidth", check_streams_and_bandwidth)):
            t = time.perf_counter()
            try:
                ok, detail = check()
            except Exception as e:  # a failed check is a row of the table, not the end of the run
                ok, detail = False, f"{type(e).__name__}: {e}"
            rows.append((name, ok, f"{detail} ({time.perf_counter() - t:.1f} s)"))
    else:
        print("no CUDA GPU available: running the checks that need none")
    width = max(len(r[0]) for r in rows)
    for name, ok, detail in rows:
        print(f"{name:<{width}}  {'ok  ' if ok else 'FAIL'}  {detail}")
    return 0 if all(ok for _, ok, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
