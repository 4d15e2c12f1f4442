"""Reduction groups with more than one kind of output (issue 19): a compiled training step's kernels and the bytes
they move and write, and its time, with the forms against without.

    python benchmarks/multiout.py [--forms 47|48|49|50] [--models gpt-4x128,gpt-6x384,lstm] [--steps 5] [--reps 11]
                                  [--threads 1,2] [--graphs] [--system "jitorch.compile(model)"]

``--forms 47`` (the default): siblings and row epilogues. "With" is fusion as it is; "without" sets
`fusion.REDUCTION_SIBLINGS` False and `fusion.ROW_EPILOGUE_MAX` 0 while the step compiles (its first calls), which
gives the groups fusion made before either existed. ``--forms 50``: row reductions of which one reads another's
result (a layer norm's mean and variance) in one kernel; "without" sets `fusion.DEPENDENT_ROW_REDUCTIONS` False. ``--forms 48``: several reductions over one space in one
kernel; "without" sets `fusion.SHARED_REDUCTIONS` and `simplify.BROADCAST_READS` False (no shared reductions, and
a mean's backward ``expand`` read as a view: the steps built before session 48). Both steps are built in this
process with the fusion plan cache out of the way (`plan_cache.MIN_NODES`: every graph fused anew, or the second
system would adopt the first's stored plan). Per system: the generated kernels per step by kind, and the bytes
they move (each kernel's input and output buffers once, at the values' sizes, as benchmarks/kernel_audit.py
counts them) and write (its outputs). Then the step's CPU time, with and without and their ratio: medians over
``--reps`` interleaved turns of ``--steps`` steps each (the calling thread's CPU time at one thread, the process's
at more).

``--forms 49``: fusion keeping independent products and reductions that may share a loop from depending on each
other through a kernel, and a group computing once what a recompute copy and its original both compute in it;
"without" sets `fusion.UNTIED_PRODUCTS`, `fusion.UNTIED_REDUCTIONS` and `fusion.MERGE_REPEATS` False. The product
pairs per step (two products run at once) are printed with the kernels. ``--system "jitorch.compile(model)"``
builds the model compiled (a forward and a backward graph, whose kernels are counted) instead of the whole step.

``--graphs`` times instead, alike, the two forms on graphs of their own (`GRAPHS`): a log_softmax's backward over
(700, 10000) float32 (a row sum and the gradient reading the incoming gradient again: a row epilogue), a layer
norm over (768, 512), a column sum of a product with a sibling over (768, 512), a layer norm's forward statistics
and backward over (768, 512) and (4096, 768) (two row sums and two column sums), a log_softmax training
step's backward over (700, 10000) (one row sum: no pair to share), and a hand-written RMSNorm's step under a
loss linear in its output over (768, 128) and (4096, 768) (its forward's and its backward's row means may share a
loop) and followed by a product and a squared error (they may not: the backward's reads the forward's).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(__file__))
import jitorch  # noqa: E402
from jitorch.ir.passes import fusion  # noqa: E402
from jitorch.jit import plan_cache  # noqa: E402
from jitorch.jit.executor import KernelStep, ProductPair  # noqa: E402
from jitorch.ir.passes import simplify  # noqa: E402
import models  # noqa: E402
from kernel_audit import compiled_graphs, nbytes  # noqa: E402
from step_profile import with_over_without  # noqa: E402

# the module switches that turn each session's forms off, and their values then
FORMS = {"47": [(fusion, "REDUCTION_SIBLINGS", False), (fusion, "ROW_EPILOGUE_MAX", 0)],
         "48": [(fusion, "SHARED_REDUCTIONS", False), (simplify, "BROADCAST_READS", False)],
         "49": [(fusion, "UNTIED_PRODUCTS", False), (fusion, "UNTIED_REDUCTIONS", False),
                (fusion, "MERGE_REPEATS", False)],
         "50": [(fusion, "DEPENDENT_ROW_REDUCTIONS", False)]}


@contextlib.contextmanager
def fusion_rules(new, forms="47"):
    """Fusion with (``new``) or without the forms of session ``forms`` (`FORMS`), the plan cache unused."""
    switches = FORMS[forms]
    saved = [getattr(module, name) for module, name, _ in switches], plan_cache.MIN_NODES
    if not new:
        for module, name, off in switches:
            setattr(module, name, off)
    plan_cache.MIN_NODES = float("inf")
    try:
        yield
    finally:
        for (module, name, _), value in zip(switches, saved[0]):
            setattr(module, name, value)
        plan_cache.MIN_NODES = saved[1]


def built(name, threads, quick=False, forms="47", system="jitorch compiled"):
    """{"with": step, "without": step}: model ``name``'s step under ``system`` (benchmarks/models.py's "jitorch
    compiled" or "jitorch.compile(model)") under each rule, warmed up."""
    jitorch.set_num_threads(threads)
    calls = {}
    for label in ("with", "without"):
        with fusion_rules(label == "with", forms):
            calls[label] = models.system_call(system, name, quick)
            for _ in range(4):  # (compiles in its first calls; Adam's traces again once its state exists)
                calls[label]()
    return calls


def step_graphs(call):
    """The compiled graphs a built step runs: its whole step's, or for "jitorch.compile(model)" each compiled
    module's forward and backward graphs."""
    nets = [c.cell_contents for c in call.__closure__ if type(c.cell_contents) is tuple]
    if not nets:
        return compiled_graphs(call)
    return [graph for net in nets[0] for function in net._by_mode.values() for entry in function.cache.values()
            if entry.split is not None for graph in (entry.split.forward, entry.split.backward)]


def kernel_traffic(call):
    """(kernels per step by kind, bytes they move per step, bytes they write per step, product pairs per step:
    `executor.ProductPair`, two products run at once) of a built step."""
    kinds, moved, written, pairs = collections.Counter(), 0, 0, 0
    for graph in step_graphs(call):
        pairs += sum(type(step) is ProductPair for step in graph.steps)
        for step in graph.steps:
            if type(step) is KernelStep:
                kinds[step.kernel.source.kind] += 1
                moved += sum(nbytes(v) for v in (*step.inputs, *step.outputs))
                written += sum(nbytes(v) for v in step.outputs)
    return kinds, moved, written, pairs


def kernel_counts(call):
    """(kernels per step by kind, bytes they move per step) of a built step."""
    return kernel_traffic(call)[:2]


def interleaved(calls, steps, reps, threads):
    """(median seconds of ``steps`` calls of ``calls["with"]``, of ``calls["without"]``, median ratio with over
    without) over ``reps`` interleaved turns, each first in every other turn (`step_profile.with_over_without`'s
    clocks: the calling thread's CPU time at one thread, the process's at more)."""
    clock = time.thread_time if threads == 1 else time.process_time
    times = {"with": [], "without": []}
    ratios = []
    for rep in range(reps):
        for label in ("with", "without") if rep % 2 == 0 else ("without", "with"):
            start = clock()
            for _ in range(steps):
                calls[label]()
            times[label].append(clock() - start)
        ratios.append(times["with"][-1] / times["without"][-1])
    return statistics.median(times["with"]), statistics.median(times["without"]), statistics.median(ratios)


def _log_softmax_backward(g, out):
    return g - out.exp() * g.sum(-1, keepdim=True)


def _layer_norm(x, w, b):
    return jitorch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)


def _column_sum_and_sibling(x, w):
    d = x * w
    return d.sum(0), d, (x + 1) * 3


def _layer_norm_backward(g, x, w):
    """A layer norm's statistics and its input, weight and bias gradients, written out as autograd traces them."""
    mean = x.mean(-1, keepdim=True)
    xc = x - mean
    rstd = (xc * xc).mean(-1, keepdim=True).add(1e-5).rsqrt()
    xhat = xc * rstd
    gw = g * w
    a = gw.sum(-1, keepdim=True)
    b = (gw * xhat).sum(-1, keepdim=True)
    n = x.shape[-1]
    return (gw * n - a - xhat * b) * rstd / n, (g * xhat).sum(0), g.sum(0)


def _log_softmax_step(z, t):
    """A log_softmax's forward and backward (its gradient ``t - exp(out) * t.sum(-1)``), traced by autograd."""
    z = z.detach().requires_grad_()
    (z.log_softmax(-1) * t).sum().backward()
    return z.grad


def _rms_norm(x, w):
    """A hand-written RMSNorm, as users write it."""
    return x * jitorch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def _rms_norm_step(x, w, c):
    """An RMSNorm's forward and backward under a loss linear in its output (its two row means independent)."""
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    (_rms_norm(x, w) * c).sum().backward()
    return x.grad, w.grad


def _rms_norm_mlp_step(x, w, a, t):
    """An RMSNorm then a product, trained on a squared error: the gradient reaching the RMSNorm depends on its
    forward mean, so its backward mean cannot share that mean's loop."""
    x, w, a = x.detach().requires_grad_(), w.detach().requires_grad_(), a.detach().requires_grad_()
    ((_rms_norm(x, w) @ a - t) ** 2).mean().backward()
    return x.grad, w.grad, a.grad


# name -> (function, its arguments' shapes)
GRAPHS = {
    "log_softmax backward (700, 10000)": (_log_softmax_backward, ((700, 10000), (700, 10000))),
    "layer norm (768, 512)": (_layer_norm, ((768, 512), (512,), (512,))),
    "column sum and sibling (768, 512)": (_column_sum_and_sibling, ((768, 512), (512,))),
    "layer norm backward (768, 512)": (_layer_norm_backward, ((768, 512), (768, 512), (512,))),
    "layer norm backward (4096, 768)": (_layer_norm_backward, ((4096, 768), (4096, 768), (768,))),
    "log_softmax step (700, 10000)": (_log_softmax_step, ((700, 10000), (700, 10000))),
    "RMSNorm step (768, 128), a linear loss": (_rms_norm_step, ((768, 128), (128,), (768, 128))),
    "RMSNorm step (4096, 768), a linear loss": (_rms_norm_step, ((4096, 768), (768,), (4096, 768))),
    "RMSNorm, product, squared error step (768, 128)": (_rms_norm_mlp_step,
                                                        ((768, 128), (128,), (128, 512), (768, 512))),
}


def graph_ratio(fn, shapes, threads, calls=20, reps=11, forms="47"):
    """(kernels with, kernels without, the CPU time of ``calls`` calls with over without: median of ``reps``
    interleaved turns) of ``fn`` compiled for float32 arguments of ``shapes``."""
    kernels, compiled = graph_calls(fn, shapes, threads, forms)
    return kernels["with"], kernels["without"], with_over_without(compiled, calls, reps, threads)


def graph_calls(fn, shapes, threads, forms="47"):
    """({"with": kernels, "without": kernels}, {"with": call, "without": call}) of ``fn`` compiled for float32
    arguments of ``shapes`` with and without the forms of session ``forms``."""
    jitorch.set_num_threads(threads)
    args = [jitorch.randn(*shape) for shape in shapes]
    compiled, kernels = {}, {}
    for label in ("with", "without"):
        with fusion_rules(label == "with", forms):
            c = jitorch.compile(fn)
            kernels[label] = len(c.lower(*args).executable.kernels)
            c(*args)
        compiled[label] = lambda c=c: c(*args)
    return kernels, compiled


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--forms", default="47", choices=sorted(FORMS), help="whose forms: session 47's, 48's, 49's or 50's")
    p.add_argument("--models", default="gpt-4x128,gpt-6x384,lstm")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--reps", type=int, default=11)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--quick", action="store_true", help="tiny sizes (for tests)")
    p.add_argument("--system", default="jitorch compiled", choices=("jitorch compiled", "jitorch.compile(model)"),
                   help="the whole step compiled, or the model compiled (a forward and a backward graph)")
    p.add_argument("--graphs", action="store_true", help="the forms on graphs of their own, not the models' steps")
    args = p.parse_args(argv)
    if args.graphs:
        for threads in (int(t) for t in args.threads.split(",")):
            for name, (fn, shapes) in GRAPHS.items():
                kernels, compiled = graph_calls(fn, shapes, threads, args.forms)
                with_s, without_s, ratio = interleaved(compiled, 20, args.reps, threads)
                print(f"{name}: {kernels['with']} kernel(s) against {kernels['without']}; CPU time of a call "
                      f"{with_s / 20 * 1e3:.3f} ms against {without_s / 20 * 1e3:.3f}, with/without at {threads} "
                      f"thread(s): {ratio:.3f} (medians of {args.reps} interleaved turns)")
        return
    for name in args.models.split(","):
        for i, threads in enumerate(int(t) for t in args.threads.split(",")):
            calls = built(name, threads, args.quick, args.forms, args.system)
            if i == 0:
                for label, call in calls.items():
                    kinds, moved, written, pairs = kernel_traffic(call)
                    listed = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
                    print(f"{name} {label:>7}: {sum(kinds.values())} kernels ({listed}), {pairs} product pairs, "
                          f"{moved / 1e6:.1f} MB moved, "
                          f"{written / 1e6:.1f} MB written")
            with_s, without_s, ratio = interleaved(calls, args.steps, args.reps, threads)
            clock = "thread" if threads == 1 else "process"
            print(f"{name}: step CPU time {with_s / args.steps * 1e3:.2f} ms against "
                  f"{without_s / args.steps * 1e3:.2f}, with/without at {threads} thread(s): {ratio:.3f} "
                  f"(medians of {args.reps} interleaved turns, {clock} CPU time)")


if __name__ == "__main__":
    main()
