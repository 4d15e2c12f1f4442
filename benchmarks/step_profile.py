"""Where a compiled training step's time goes, by category, for the models of benchmarks/models.py.

    python benchmarks/step_profile.py [--models cnn,lstm,gpt-4x128,dcgan] [--threads 1] [--steps 10] [--cpu-clock]
                                      [--system "jitorch.compile(model)"] [--runs [--reps 7]] [--torch-ops [--top 12]]

Each model's whole step (forward, backward, optimizer: one jitorch.compile'd function) is warmed up, timed
unprofiled (process CPU ms per step), then run under `jitorch.profiler.profile`, whose spans of the compiled
call are summed per category:

    products        BLAS products (matmul, mm, bmm) writing into their arena buffers
    conv windows    a convolution's col2im sums, padded copies and the zeros they start from
    copies          view kernels: a view that needs its elements copied (im2col, a permute then reshape)
    softmax         row softmax/log-softmax kernels, log-softmax's statistics (with the prologue they evaluate)
    fused kernels   every other generated kernel (pointwise and reduction groups; the optimizer's updates)
    eager steps     other nodes run with the eager kernels (recurrences, dropout's random numbers, indexing)
    Python          the compiled call's time outside those spans (its generated Python between them)

``--system "jitorch.compile(model)"`` profiles that system of benchmarks/models.py instead: the model compiled into a
forward and a backward graph (whose spans are summed as above), the loss, autograd's engine, clipping and the
optimizer eager (not counted: the profiler slows eager ops, whose fast paths step aside for it).

``--phases`` (with ``--system "jitorch.compile(model)"``) times the step's parts in the calling thread's CPU time,
unprofiled, each call timed where the step makes it (`PHASES`): the compiled call (its forward graph apart), the
backward (the backward graph and the accumulation into ``.grad`` apart; the rest is the engine's walk and the eager
loss's backward), clipping, the optimizer step and zero_grad; "outside" is the step's time that none of them holds
(the eager loss, the step function's Python).

``--torch`` (with ``--phases``) times torch.compile(model)'s step alike beside it (`torch_phase_times`: its compiled
modules' calls, backward, clipping, optimizer, zero_grad, and the matrix products its graphs call), and at one thread
the matrix products of jitorch's graphs (`product_times`), each system built and timed after the other.

``--cpu-clock`` times the spans in the calling thread's CPU time (``time.thread_time_ns``), for a shared
machine: at more than one thread, other threads' chunks are then not counted.

``--runs`` also times the unprofiled step with runs of kernels (`jit.kernel_runs`) against the same step without
them, built in the same process and interleaved (``--reps`` turns of ``--steps`` steps each, the calling thread's CPU
time at one thread, the process's at more): the median of the per-turn ratios, and how many kernels the runs hold.

``--torch-ops`` prints torch eager's step by op instead, to set beside jitorch's categories: torch.profiler's self
CPU ms per step of the ops that take the most (one thread; its spans are wall time, so a busy machine's waits and
the profiler's own cost are in the figures: compare shares within a run).

``--by-op`` also prints each category's spans by op kind (a kernel's ops, each once; an eager step's op), the
most costly first. Each span costs the profiler some microseconds, which small kernels' figures carry; for
figures without it, ``--perf-map`` writes ``/tmp/perf-<pid>.map`` naming every generated kernel's machine code
(its name and ops) after the steps, which ``perf report`` reads for the process's JIT addresses:

    perf record -D 8000 -o step.data python benchmarks/step_profile.py --models gpt-4x128 --steps 200 --perf-map
    perf report -i step.data --sort sym
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(__file__))
import jitorch  # noqa: E402
from jitorch.codegen import cpu  # noqa: E402
from jitorch.profiler import profile, recorder  # noqa: E402
import models  # noqa: E402

PRODUCTS = frozenset({"matmul", "mm", "bmm"})
WINDOWS = frozenset({"_as_strided_add", "as_strided_scatter", "new_zeros", "zeros"})
CATEGORIES = ("products", "conv windows", "copies", "softmax", "fused kernels", "eager steps", "Python")
SYSTEMS = ("jitorch compiled", "jitorch.compile(model)")  # (of benchmarks/models.py)


def category(event):
    """The category of a profiled span of a compiled call, or None for spans that are not a step of it."""
    if event.kind in ("external", "eager_step"):
        if event.name in PRODUCTS:
            return "products"
        return "conv windows" if event.name in WINDOWS else "eager steps"
    if event.kind != "kernel":
        return None
    ops = event.args.get("ops") or ()
    if event.name.endswith("_view"):
        return "copies"
    return "softmax" if {"softmax", "log_softmax", "_log_softmax_stats"} & set(ops) else "fused kernels"


def op_kind(event):
    """What a profiled step of a compiled call ran: a kernel's ops (each once, sorted), else the op's name."""
    ops = event.args.get("ops") if event.kind == "kernel" else None
    return "+".join(sorted(set(ops))) if ops else event.name


def profile_step(name, quick=False, steps=10, threads=1, system="jitorch compiled", by_op=None):
    """(CPU ms per unprofiled step, {category: (ms per step, calls per step)}) of ``name``'s step under ``system``
    (one of SYSTEMS); ``by_op``, a dict, gets {(category, `op_kind`): [ms per step, calls per step]}."""
    jitorch.set_num_threads(threads)
    call = models.system_call(system, name, quick)
    for _ in range(4):  # (compiles; Adam's first compiled call traces again)
        call()
    start = time.process_time()
    for _ in range(steps):
        call()
    plain = (time.process_time() - start) / steps * 1e3
    with profile() as prof:
        for _ in range(steps):
            call()
    times, calls, whole = collections.Counter(), collections.Counter(), 0.0
    for event in prof.events():
        ms = event.cpu_time_total / 1e3 / steps
        if event.kind == "compiled_call":
            whole += ms
            continue
        kind = category(event)
        if kind is not None:
            times[kind] += ms
            calls[kind] += 1 / steps
            if by_op is not None:
                entry = by_op.setdefault((kind, op_kind(event)), [0.0, 0.0])
                entry[0] += ms
                entry[1] += 1 / steps
    times["Python"] = max(0.0, whole - sum(times.values()))
    return plain, {c: (times[c], calls[c]) for c in CATEGORIES}


# (label, module path, owner's attribute path, function name): the calls `phase_times` times; nested ones are
# parts of the one before them (the forward graph of the compiled call, the graph and accumulation of the backward)
PHASES = (
    ("compiled call", "jitorch.nn.modules.compiled", "OptimizedModule", "forward"),
    ("  forward graph", "jitorch.jit.differentiable", "", "_forward_split"),
    ("backward", "jitorch.tensor", "Tensor", "backward"),
    ("  backward graph", "jitorch.jit.differentiable", "", "_backward_split"),
    ("  accumulate .grad", "jitorch.autograd.engine", "", "_accumulate"),
    ("clip_grad_norm_", "jitorch.nn.utils", "", "clip_grad_norm_"),
    ("optimizer step", "jitorch.optim.optimizer", "Optimizer", "step"),
    ("zero_grad", "jitorch.optim.optimizer", "Optimizer", "zero_grad"),
)


def phase_times(name, quick=False, steps=10, threads=1):
    """(thread CPU ms per step, {`PHASES` label: thread CPU ms per step}) of ``name``'s jitorch.compile(model) step,
    each phase's calls timed by a wrapper (restored after); "outside" gets the step's time outside the top-level
    phases."""
    import importlib
    jitorch.set_num_threads(threads)
    call = models.system_call("jitorch.compile(model)", name, quick)
    targets = []
    for label, module, owner, attr in PHASES:
        holder = importlib.import_module(module)
        targets.append((label, getattr(holder, owner) if owner else holder, attr))
    return _timed_phases(call, targets, steps, [label for label, *_ in PHASES])


def _timed_phases(call, targets, steps, labels):
    """(thread CPU ms per step, {label: thread CPU ms per step}, "outside" added) of ``call`` run ``steps`` times
    after 4 untimed calls, with each (label, holder, attribute) of ``targets`` wrapped by a timer while it runs
    (the holder's own attribute, put back after); labels that start with a space are parts of the one before."""
    for _ in range(4):
        call()
    spent = collections.Counter()
    saved = []

    def timed(fn, label):
        def wrapper(*args, **kwargs):
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] += time.thread_time() - start
        return wrapper
    try:
        for label, holder, attr in targets:
            fn = holder.__dict__[attr] if attr in getattr(holder, "__dict__", {}) else getattr(holder, attr)
            saved.append((holder, attr, attr in getattr(holder, "__dict__", {}), fn))
            setattr(holder, attr, timed(fn, label))
        start = time.thread_time()
        for _ in range(steps):
            call()
        total = (time.thread_time() - start) / steps * 1e3
    finally:
        for holder, attr, own, fn in reversed(saved):
            if own:
                setattr(holder, attr, fn)
            else:
                delattr(holder, attr)
    by = {label: spent[label] / steps * 1e3 for label in labels}
    by["outside"] = total - sum(ms for label, ms in by.items() if not label.startswith(" "))
    return total, by


def torch_phase_times(name, quick=False, steps=10, threads=1, system="torch.compile(model)"):
    """`phase_times` of ``name``'s step under torch (``system``: "torch.compile(model)" or "torch eager"), each in
    the calling thread's CPU time: the compiled modules' calls, ``Tensor.backward``, ``clip_grad_norm_``, the
    step's optimizers' ``step`` and ``Optimizer.zero_grad``; "products" (a part of the first two) sums the matrix
    products the compiled graphs call (inductor's ``extern_kernels``: mm, addmm, bmm, baddbmm), the work that
    jitorch's graphs give BLAS, as `product_times` sums jitorch's (None where the graphs call none of
    them). At one thread torch runs them all in the calling thread."""
    torch = models.real_torch()
    torch.set_num_threads(threads)
    w = models.workload(torch, name, quick)
    nets = tuple(torch.compile(m) for m in w.nets) if system == "torch.compile(model)" else w.nets
    optimizers = [c.cell_contents for c in w.step.__closure__ or ()
                  if isinstance(c.cell_contents, torch.optim.Optimizer)]
    targets = [("compiled call", net, "forward") for net in nets]
    targets += [("backward", torch.Tensor, "backward"), ("clip_grad_norm_", torch.nn.utils, "clip_grad_norm_")]
    targets += [("optimizer step", opt, "step") for opt in optimizers]
    targets += [("zero_grad", torch.optim.Optimizer, "zero_grad")]
    if system == "torch.compile(model)":
        from torch._inductor.select_algorithm import extern_kernels
        targets += [("  products", extern_kernels, op) for op in ("mm", "addmm", "bmm", "baddbmm")
                    if hasattr(extern_kernels, op)]
    labels = list(dict.fromkeys(label for label, *_ in targets))
    total, by = _timed_phases(lambda: w.step(nets, *w.batch), targets, steps, labels)
    if by.get("  products") == 0:  # (none called: nn.LSTM's graph calls aten's lstm, its products inside)
        by["  products"] = None
    return total, by


def product_times(name, quick=False, steps=10):
    """(thread CPU ms per step, ms per step in the matrix products of its compiled graphs) of ``name``'s
    jitorch.compile(model) step at one thread, where every product's BLAS call is made in the calling thread: by
    `ops.linalg._product` (NumPy's matmul), or by `runtime.blas_calls.run_words` where the graph keeps the gemm call
    of a product's buffers (jit/gemm_words.py)."""
    from jitorch.ops import linalg
    from jitorch.runtime import blas_calls
    jitorch.set_num_threads(1)
    call = models.system_call("jitorch.compile(model)", name, quick)
    targets = [("  products", linalg, "_product"), ("  products", blas_calls, "run_words")]
    total, by = _timed_phases(call, targets, steps, ["  products"])
    return total, by["  products"]


def runs_ratio(name, quick=False, steps=10, threads=1, reps=7):
    """(median of the per-turn ratios of CPU ms per step with runs of kernels to without, (kernels in runs, runs,
    kernel steps)) of ``name``'s compiled step: both built here, then run in turns (see the module docstring)."""
    from jitorch.jit import kernel_runs
    from jitorch.jit.executor import KernelStep
    from jitorch.jit.kernel_runs import KernelRun
    jitorch.set_num_threads(threads)
    calls, saved = {}, kernel_runs.MIN_RUN
    try:
        for label, min_run in (("without", float("inf")), ("with", saved)):
            kernel_runs.MIN_RUN = min_run  # (read when a compiled graph generates its call)
            calls[label] = models.system_call("jitorch compiled", name, quick)
            for _ in range(4):
                calls[label]()
    finally:
        kernel_runs.MIN_RUN = saved
    ratio = with_over_without(calls, steps, reps, threads)
    (compiled,) = [c.cell_contents for c in calls["with"].__closure__ if hasattr(c.cell_contents, "cache")]
    graphs = [e.executable for e in compiled.cache.values() if e.executable is not None]
    held = [len(u.steps) for g in graphs for u in g.runs if type(u) is KernelRun]
    kernels = sum(type(st) is KernelStep for g in graphs for st in g.steps)
    return ratio, (sum(held), len(held), kernels)


def with_over_without(calls, steps, reps, threads):
    """The median over ``reps`` turns of the CPU time of ``steps`` calls of ``calls["with"]`` over as many of
    ``calls["without"]``, each first in every other turn (the calling thread's CPU time at one thread, the
    process's at more)."""
    clock = time.thread_time if threads == 1 else time.process_time
    ratios = []
    for rep in range(reps):
        turn = {}
        for label in ("with", "without") if rep % 2 == 0 else ("without", "with"):
            start = clock()
            for _ in range(steps):
                calls[label]()
            turn[label] = clock() - start
        ratios.append(turn["with"] / turn["without"])
    return sorted(ratios)[len(ratios) // 2]


@contextlib.contextmanager
def cpu_clock():
    """Spans timed in the calling thread's CPU time: the recorder's clock (bound when it was imported) and the one
    a profiled compiled call reads (``time.perf_counter_ns``, when it is made); both restored after."""
    saved = time.perf_counter_ns, recorder._clock
    time.perf_counter_ns = recorder._clock = time.thread_time_ns
    try:
        yield
    finally:
        time.perf_counter_ns, recorder._clock = saved


def write_perf_map(path=None):
    """Writes ``perf``'s map of this process's JIT code (``/tmp/perf-<pid>.map`` unless ``path``): each live
    generated kernel's entry address, the span to the next one (the kernels' sizes are not kept) and its name
    with its ops; returns the path."""
    # (type(), not isinstance: that reads ``__class__``, which some of torch's deprecated module proxies warn on)
    kernels = {k.address: f"{k.name}[{'+'.join(sorted(set(k.ops)))}]" for k in gc.get_objects()
               if type(k) is cpu.CompiledKernel}
    path = path or f"/tmp/perf-{os.getpid()}.map"
    starts = sorted(kernels)
    with open(path, "w") as f:
        for start, end in zip(starts, starts[1:] + [starts[-1] + (1 << 16)] if starts else []):
            f.write(f"{start:x} {min(end - start, 1 << 20):x} {kernels[start].replace(' ', '_')}\n")
    return path


def print_phases(name, args):
    """``--phases``' lines for model ``name``: jitorch.compile(model)'s parts; with ``--torch``, torch.compile(model)'s
    beside them and, at one thread, the matrix products of jitorch's graphs (built and timed one after the other)."""
    plural = "s" if args.threads > 1 else ""
    total, by = phase_times(name, args.quick, args.steps, args.threads)
    if not args.torch:
        print(f"{name}, jitorch.compile(model) ({args.threads} thread{plural}): {total:.2f} thread CPU ms per step")
        for label, ms in by.items():
            print(f"  {label:20s} {ms:8.2f} ms")
        return
    torch_total, torch_by = torch_phase_times(name, args.quick, args.steps, args.threads)
    if args.threads == 1:
        by["  products"] = product_times(name, args.quick, args.steps)[1]
    print(f"{name} ({args.threads} thread{plural}), thread CPU ms per step: jitorch.compile(model) {total:.2f}, "
          f"torch.compile(model) {torch_total:.2f} ({total / torch_total:.2f}x)")
    for label in dict.fromkeys([*by, *torch_by]):
        mine, theirs = by.get(label), torch_by.get(label)
        print(f"  {label:20s} {'-' if mine is None else f'{mine:.2f}':>8s} {'-' if theirs is None else f'{theirs:.2f}':>8s}")


def torch_ops(name, quick=False, steps=3, top=12):
    """(ms per step of torch eager's step in torch.profiler's CPU total, [(op, self CPU ms per step, calls per
    step)] of the ``top`` ops of most self time) for ``name`` at one thread, after 3 untimed steps."""
    torch = models.real_torch()
    torch.set_num_threads(1)
    call = models.system_call("torch eager", name, quick)
    for _ in range(3):
        call()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            call()
    ops = [(e.key, e.self_cpu_time_total / 1e3 / steps, e.count / steps) for e in prof.key_averages()]
    ops.sort(key=lambda op: -op[1])
    return sum(op[1] for op in ops), ops[:top]


def print_torch_ops(name, quick=False, steps=3, top=12):
    """``--torch-ops``' lines for model ``name``."""
    total, ops = torch_ops(name, quick, steps, top)
    print(f"{name}, torch eager (1 thread, under torch.profiler): {total:.2f} self CPU ms per step")
    for op, ms, calls in ops:
        print(f"  {ms:8.2f} ms  {calls:6.0f}  {op}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="cnn,lstm,gpt-4x128,dcgan")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--quick", action="store_true", help="tiny sizes (for tests)")
    p.add_argument("--cpu-clock", action="store_true", help="spans in the calling thread's CPU time")
    p.add_argument("--system", default=SYSTEMS[0], choices=SYSTEMS)
    p.add_argument("--by-op", action="store_true", help="each category's spans by op kind")
    p.add_argument("--perf-map", action="store_true", help="write perf's map of the generated kernels at the end")
    p.add_argument("--runs", action="store_true", help="the step with runs of kernels against without, interleaved")
    p.add_argument("--reps", type=int, default=7, help="--runs' turns")
    p.add_argument("--phases", action="store_true", help="the compile(model) step's parts, thread CPU, unprofiled")
    p.add_argument("--torch", action="store_true", help="with --phases: torch.compile(model)'s parts beside them")
    p.add_argument("--torch-ops", action="store_true", help="torch eager's step by op (torch.profiler)")
    p.add_argument("--top", type=int, default=12, help="--torch-ops' ops shown")
    args = p.parse_args(argv)
    for name in args.models.split(","):
        if args.torch_ops:
            print_torch_ops(name, args.quick, min(args.steps, 3), args.top)
            continue
        if args.phases:
            print_phases(name, args)
            continue
        ops = {} if args.by_op else None
        with cpu_clock() if args.cpu_clock else contextlib.nullcontext():
            plain, by = profile_step(name, args.quick, args.steps, args.threads, args.system, ops)
        print(f"{name}, {args.system} ({args.threads} thread{'s' if args.threads > 1 else ''}): {plain:.2f} CPU ms "
              "per step unprofiled")
        for kind in CATEGORIES:
            ms, n = by[kind]
            print(f"  {kind:14s} {ms:8.2f} ms  {n:6.0f} calls")
            for (category, op), (op_ms, op_n) in sorted((ops or {}).items(), key=lambda item: -item[1][0]):
                if category == kind:
                    print(f"      {op_ms:8.3f} ms  {op_n:6.0f}  {op}")
        if args.runs:
            ratio, (held, runs, kernels) = runs_ratio(name, args.quick, args.steps, args.threads, args.reps)
            print(f"  runs of kernels: {held} of {kernels} kernels in {runs} runs; CPU time with/without "
                  f"{ratio:.3f} (median of {args.reps} interleaved turns)")
    if args.perf_map:
        print(f"kernels named in {write_perf_map()}")


if __name__ == "__main__":
    main()
