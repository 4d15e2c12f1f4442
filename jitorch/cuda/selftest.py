"""``python -m jitorch.cuda.selftest``: the CUDA checks, with or without a GPU.

Always: every kernel kind the CUDA backend generates (pointwise, fused chains,
reductions over each dim and full, softmax, matmul) is assembled by ptxas for
sm_80 and sm_90. Without a GPU (or with ``--emulate``), the kernel and tensor
checks below run on a fake device whose launches execute the kernels' own
code on the host (`jitorch.backends.cuda.emulator`), the kernel check on
fewer rows (`EMULATED_ROWS`: the same kernels). With a GPU: the allocator on the real driver, streams
and events, compiled kernels run on device buffers against the CPU results,
CUDA tensors (transfers, writes, memory returned to the pool), every registry
op on CUDA tensors against the CPU (with the sample inputs of the test suite,
when run from a checkout), a compiled graph and autograd on CUDA tensors, and a
device-to-device copy bandwidth measurement, page-locked memory (an asynchronous upload on a
stream, its bandwidth against pageable memory), a CUDA tensor shared with a spawned process through CUDA IPC, and
NCCL's collectives against NumPy (`check_nccl`: one rank on one device, and one rank per device when there are
several) with an all-reduce's bandwidth, where the NCCL library is installed.
Prints one summary table; exits 1
when a check fails, 0 otherwise (also without a GPU).

The tensor checks (`check_tensors`, `check_registry_ops`, `check_graph_and_autograd`)
use only the backend interface, so the test suite also runs them on its fake device.
"""

from __future__ import annotations

import functools
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
    from ..codegen.nvptx.ptxas import assemble, find_ptxas
    if find_ptxas() is None:  # a GPU machine's image may lack it: the driver still checks the PTX it loads
        return True, "skipped: no ptxas (no nvidia-cuda-nvcc wheel, none on the PATH or under /usr/local/cuda)"
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
    """Run a kernel on host arrays through the current backend: copy in, launch, copy out."""
    from ..runtime import cuda_backend
    ins = [jt.tensor(np.ascontiguousarray(a), device="cuda") for a in arrays]
    outs = [jt.empty(shape, dtype=jt.tensor(np.zeros((), dt)).dtype, device="cuda") for shape, dt in
            zip(out_shapes, dtypes)]
    cuda_backend.current().launch(kernel, [t.data_ptr() for t in ins + outs], 0)
    return [t.cpu().numpy() for t in outs]


KERNEL_CASES = {"gelu": lambda t: 0.5 * t * (1 + (0.7978845608 * (t + 0.044715 * t ** 3)).tanh()),
                "row sum": lambda t: t.sum(-1), "col sum": lambda t: t.sum(0), "amax": lambda t: t.amax(),
                "softmax": lambda t: t.softmax(-1), "exp mean": lambda t: t.exp().mean(0)}
# The rows of the kernel check's input: on a GPU, and on the emulator, whose barriers cost an OS thread switch
# per CUDA thread, and whose row kernels run a block per row. 60 rows give the cases the kernels 300 give,
# instruction for instruction (only constants differ; with fewer, LLVM unrolls the column loops differently).
ROWS, EMULATED_ROWS = 300, 60


def check_kernels(rows=ROWS):
    """Compiled kernels, launched directly, against the CPU's results, over ``rows`` rows of 257 floats."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 257)).astype(np.float32)
    failed = []
    for name, fn in KERNEL_CASES.items():
        (k,) = jt.compile(fn).lower(jt.tensor(x), device="cuda").executable.kernels
        expected = fn(jt.tensor(x)).numpy()
        shape = expected.shape if k.source.split is None else (k.source.split.parts,)
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
    return not failed, f"{len(KERNEL_CASES) + 1} kernels vs CPU" + (f"; wrong: {failed}" if failed else "")


def check_tensors():
    """Transfers both ways (blocking or not), strided writes, and memory back in the pool at once."""
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    c = jt.tensor(x).to("cuda", non_blocking=True)
    problems = []
    if not np.array_equal(c.cpu().numpy(), x) or not np.array_equal(c[1:, ::2].t().cpu().numpy(), x[1:, ::2].T):
        problems.append("round trip")
    c[:, 1] = -1.0
    c.t()[0].copy_(jt.arange(4.0))
    expected = x.copy()
    expected[:, 1] = -1
    expected[:, 0] = np.arange(4)
    if c.tolist() != expected.tolist():
        problems.append("strided writes")
    before = jt.cuda.memory_allocated()
    t = jt.empty(1 << 20, device="cuda")
    grown = jt.cuda.memory_allocated() - before
    del t
    if grown != 4 << 20 or jt.cuda.memory_allocated() != before:
        problems.append("memory not returned to the pool")
    return not problems, "transfers, writes, allocator" + (f"; wrong: {problems}" if problems else "")


def _leaves(r):
    if isinstance(r, (list, tuple)):
        return [x for item in r for x in _leaves(item)]
    return [r]


def _outcome(call):
    try:
        return call()
    except Exception as e:  # the same error type on both devices is part of the comparison
        return e


def registry_op_mismatches():
    """Each registry op's first test sample (layout included) on CUDA against the CPU: a list of
    (op, what differs). Needs the test suite's samples (``tests.ops.samples``, a checkout)."""
    import zlib
    from tests.ops.samples import VALUES_UNDEFINED, bind, copy_generator, copy_layout, samples
    from ..ops import registry
    mismatches = []
    for name in sorted(registry.OPS):
        op = registry.OPS[name]
        sample = samples(name, seed=zlib.crc32(name.encode()))[0]
        moved = sample.map(lambda v: copy_generator(v) if isinstance(v, jt.Generator) else copy_layout(v, "cuda"))
        if not moved.tensors() and any(a.name == "device" for a in op.schema.args):
            moved.kwargs["device"] = "cuda"
        want = _outcome(lambda: registry.call(op, bind(op, sample.clone())))
        got = _outcome(lambda: registry.call(op, bind(op, moved)))
        if isinstance(want, Exception) or isinstance(got, Exception):
            if type(want) is not type(got):
                mismatches.append((name, f"{want!r} vs {got!r}"))
            continue
        for w, g in zip(_leaves(want), _leaves(got)):
            if not isinstance(w, jt.Tensor):
                if w != g and w == w:
                    mismatches.append((name, f"{w!r} vs {g!r}"))
            elif g.device.type != "cuda" or g.shape != w.shape or g.dtype != w.dtype:
                mismatches.append((name, f"{g.device} {list(g.shape)} {g.dtype}"))
            elif name not in VALUES_UNDEFINED and not np.allclose(g.cpu().numpy().astype(np.float64),
                                                                   w.numpy().astype(np.float64), rtol=1e-4,
                                                                   atol=1e-5, equal_nan=True):
                mismatches.append((name, "values"))
    return mismatches


def check_registry_ops():
    try:
        bad = registry_op_mismatches()
    except ImportError:
        return True, "skipped: run from a checkout for the test suite's samples"
    from ..ops import registry
    return not bad, f"{len(registry.OPS)} ops vs CPU" + (f"; wrong: {bad[:8]}" if bad else "")


def check_graph_and_autograd():
    """A compiled (fused) graph and a backward pass on CUDA tensors against the CPU."""
    rng = np.random.default_rng(0)
    x_np, w_np = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((48, 32)).astype(np.float32)

    def fn(x, w):
        h = (x @ w).relu()
        return h.sum(0), (h * 0.1 + 1).exp().softmax(-1)

    results = {}
    for device in ("cpu", "cuda"):
        x = jt.tensor(x_np, device=device)
        w = jt.tensor(w_np, device=device, requires_grad=True)
        compiled = jt.compile(fn)(x, w.detach())
        loss = (x @ w).tanh().pow(2).mean()
        loss.backward()
        results[device] = [t.detach().cpu().numpy() for t in (*compiled, loss, w.grad)]
    bad = [name for name, a, b in zip(("sum", "softmax", "loss", "grad"), results["cpu"], results["cuda"])
           if not np.allclose(a, b, rtol=1e-4, atol=1e-5)]
    return not bad, "fused graph, backward" + (f"; wrong: {bad}" if bad else "")


def check_streams_and_bandwidth(n=1 << 28):
    """Ten copies of ``n`` bytes within device memory on a new stream, timed by events on that stream."""
    from ..runtime import cuda_driver as d
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


def check_pinned_memory(n=1 << 24):
    """Page-locked host memory: ``pin_memory()``, a non_blocking upload from it queued on a stream, and the
    upload bandwidth from pinned and from pageable memory (``n`` float32)."""
    x = jt.arange(n, dtype=jt.float32)
    p = x.pin_memory()
    s = jt.cuda.Stream()
    start, end = jt.cuda.Event(enable_timing=True), jt.cuda.Event(enable_timing=True)
    times = {}
    for name, src in (("pageable", x), ("pinned", p)):
        with jt.cuda.stream(s):
            src.to("cuda", non_blocking=True)  # warm-up: the allocator's segment
            start.record()
            y = src.to("cuda", non_blocking=True)
            end.record()
        end.synchronize()
        times[name] = start.elapsed_time(end)
    ok = p.is_pinned() and not x.is_pinned() and bool((y.cpu() == x).all())
    rates = ", ".join(f"{k} {4 * n / ms / 1e6:.1f} GB/s" for k, ms in times.items())
    return ok, f"pin_memory, non_blocking upload on a stream; host to device {rates}"


def _ipc_child(inbox, outbox, setup):
    """The other process of `check_ipc`: adds 1 in place to the tensor it was sent (a kernel on the mapping)."""
    if setup is not None:
        setup()
    try:
        x = inbox.get(timeout=120)
        x.add_(1)
        jt.cuda.synchronize()
        outbox.put(("ok", x.sum().item()))
    except Exception as e:  # reported to the parent's table
        outbox.put(("error", f"{type(e).__name__}: {e}"))


def check_ipc(n=1 << 20, context="spawn", child_setup=None):
    """A CUDA tensor sent to a new process through jitorch.multiprocessing (a CUDA IPC handle): the child's
    in-place add is seen by this process, which keeps the tensor alive meanwhile (torch's rule).
    ``child_setup`` runs first in the child (the test suite's fake driver)."""
    import jitorch.multiprocessing as mp
    ctx = mp.get_context(context)
    x = jt.arange(n, dtype=jt.float32, device="cuda")[1:]  # a view: the storage's offset in the allocation
    inbox, outbox = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_ipc_child, args=(inbox, outbox, child_setup))
    child.start()
    inbox.put(x)
    status, value = outbox.get(timeout=300)
    child.join(60)
    if status != "ok":
        return False, f"child: {value}"
    expected = float(np.arange(2, n + 1, dtype=np.float64).sum())
    ok = child.exitcode == 0 and bool((x.cpu() == jt.arange(2, n + 1, dtype=jt.float32)).all()) and \
        abs(value - expected) <= 1e-6 * expected
    return ok, f"{4 * (n - 1)} bytes shared with a {context}ed process, written there, seen here"


def _nccl_rank(pg, n):
    """One rank of `check_nccl`: its collectives against NumPy, then the timed all-reduce; (checks, ms)."""
    import jitorch.distributed as dist
    r, size = pg.rank(), pg.size()
    jt.cuda.set_device(r)
    data = [np.arange(n, dtype=np.float32) % 7 + k for k in range(size)]

    def dev(a):
        return jt.from_numpy(np.ascontiguousarray(a)).to(f"cuda:{r}")

    checks = []
    for op, reduce in ((dist.ReduceOp.SUM, np.sum), (dist.ReduceOp.MAX, np.max), (dist.ReduceOp.AVG, np.mean)):
        for dtype in (jt.float32, jt.bfloat16):
            x = dev(data[r]).to(dtype)
            dist.all_reduce(x, op=op, group=pg)
            checks.append(np.allclose(x.float().cpu().numpy(), reduce(data, 0), rtol=1e-2))
    x = dev(data[r])
    dist.broadcast(x, src=size - 1, group=pg)
    checks.append((x.cpu().numpy() == data[-1]).all())
    out = dev(np.zeros(size * n, np.float32))
    dist.all_gather_into_tensor(out, dev(data[r]), group=pg)
    checks.append((out.cpu().numpy() == np.concatenate(data)).all())
    piece = dev(np.zeros(n // size, np.float32))
    dist.reduce_scatter_tensor(piece, dev(data[r]), group=pg)
    checks.append((piece.cpu().numpy() == np.sum(data, 0)[r * (n // size):(r + 1) * (n // size)]).all())
    out = dev(np.zeros(size * 4, np.float32))
    dist.all_to_all_single(out, dev(np.full(size * 4, r, np.float32)), group=pg)
    checks.append((out.cpu().numpy() == np.repeat(np.arange(size, dtype=np.float32), 4)).all())
    if size > 1:
        got = dev(np.zeros(n, np.float32))
        works = [dist.isend(dev(data[r]), (r + 1) % size, group=pg), dist.irecv(got, (r - 1) % size, group=pg)]
        for w in works:
            w.wait()
        checks.append((got.cpu().numpy() == data[(r - 1) % size]).all())
    x = dev(data[r])
    dist.all_reduce(x, group=pg)  # the timed one: its buffers are made, and the communicator is warm
    start, end = jt.cuda.Event(enable_timing=True), jt.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        dist.all_reduce(x, group=pg)
    end.record()
    end.synchronize()
    return sum(bool(c) for c in checks), len(checks), start.elapsed_time(end) / 5


def check_nccl(ranks=1, n=1 << 24):
    """NCCL's collectives (all_reduce in float32 and bfloat16, broadcast, all_gather, reduce_scatter,
    all_to_all, send/recv) on ``ranks`` devices against NumPy, one rank per device as threads of this process
    (`jitorch.distributed.threads`), and an all-reduce of ``n`` float32 timed by events: its bus bandwidth,
    NCCL's measure (2 (ranks - 1) / ranks of the bytes per second). Passes, saying so, where NCCL is absent."""
    from ..distributed import nccl, threads
    try:
        lib = nccl.library()
    except RuntimeError as error:
        return True, f"not run: {error}"
    results = threads.run(ranks, lambda pg: _nccl_rank(pg, n), timeout=300)
    passed, total = sum(r[0] for r in results), sum(r[1] for r in results)
    ms = max(max(r[2] for r in results), 1e-6)  # events measure at least a microsecond on a device
    rate = f"{4 * n * 2 * (ranks - 1) / ranks / ms / 1e6:.0f} GB/s bus bandwidth" if ranks > 1 else \
        f"{4 * n / ms / 1e6:.0f} GB/s of the buffer"
    return passed == total, (f"NCCL {lib.version_string()}, {ranks} rank(s): {passed}/{total} collectives match "
                             f"NumPy; all_reduce of {4 * n / 2 ** 20:.3g} MiB {ms:.3f} ms, {rate}")


def main(argv=None):
    """Run the checks and print their table; 0 when all pass. With ``--emulate``, or with no GPU, the kernel
    and tensor checks run on the host's kernel emulator (a fake device running the kernels' own code)."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m jitorch.cuda.selftest", description=__doc__.split("\n")[0])
    parser.add_argument("--emulate", action="store_true", help="run the kernels on the host emulator even "
                        "when a GPU is present")
    args = parser.parse_args(argv)
    rows = [("ptxas sm_80/sm_90",) + check_ptxas()]
    if jt.cuda.is_available() and not args.emulate:
        rows += _run_checks((("allocator (driver)", check_allocator),) + _tensor_checks(kernel_rows=ROWS) +
                            (("streams, events, bandwidth", check_streams_and_bandwidth),
                             ("pinned memory", check_pinned_memory), ("CUDA IPC (multiprocessing)", check_ipc),
                             ("NCCL, one device", check_nccl)) +
                            ((("NCCL, every device", functools.partial(check_nccl, jt.cuda.device_count())),)
                             if jt.cuda.device_count() > 1 else ()))
    else:
        from ..backends.cuda import emulator
        from ..backends.cuda.fake import FakeBackend
        from ..runtime.cuda_backend import use_backend
        if not emulator.available():
            print("no CUDA GPU and no kernel emulator on this host: running the checks that need neither")
        else:
            print("no CUDA GPU in use: the kernels run on the host emulator (their NVPTX IR, a cooperative "
                  "thread per CUDA thread)")
            with use_backend(FakeBackend(emulate="ptx")):
                rows += _run_checks(tuple((f"{name} (emulated)", check)
                                          for name, check in _tensor_checks(kernel_rows=EMULATED_ROWS)))
    width = max(len(r[0]) for r in rows)
    for name, ok, detail in rows:
        print(f"{name:<{width}}  {'ok  ' if ok else 'FAIL'}  {detail}")
    return 0 if all(ok for _, ok, _ in rows) else 1


def _tensor_checks(kernel_rows):
    """The checks that run on a GPU or on the emulator, named; the kernel check over ``kernel_rows`` rows."""
    return (("kernels vs CPU", functools.partial(check_kernels, kernel_rows)), ("CUDA tensors", check_tensors),
            ("registry ops vs CPU", check_registry_ops), ("graph and autograd", check_graph_and_autograd))


def _run_checks(checks):
    rows = []
    for name, check in checks:
        t = time.perf_counter()
        try:
            ok, detail = check()
        except Exception as e:  # a failed check is a row of the table, not the end of the run
            ok, detail = False, f"{type(e).__name__}: {e}"
        rows.append((name, ok, f"{detail} ({time.perf_counter() - t:.1f} s)"))
    return rows


if __name__ == "__main__":
    sys.exit(main())
