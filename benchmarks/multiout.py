"""Reduction groups with siblings and row epilogues (issue 19): a compiled training step's kernels and the bytes
they move, and its time, with them against without.

    python benchmarks/multiout.py [--models gpt-4x128,gpt-6x384,lstm] [--steps 5] [--reps 11] [--threads 1,2]
                                  [--graphs]

"With" is fusion as it is; "without" sets `fusion.REDUCTION_SIBLINGS` False and `fusion.ROW_EPILOGUE_MAX` 0 while
the step compiles (its first calls), which gives the groups fusion made before either existed. Both steps are
built in this process with the fusion plan cache out of the way (`plan_cache.MIN_NODES`: every graph fused anew,
or the second system would adopt the first's stored plan). Per system: the generated kernels per step by kind,
and the bytes they move (each kernel's input and output buffers once, at the values' sizes, as
benchmarks/kernel_audit.py counts them). Then the step's CPU time with over without: the median over ``--reps``
interleaved turns of ``--steps`` steps each (`step_profile.with_over_without`: the calling thread's CPU time at
one thread, the process's at more).

``--graphs`` times instead, alike, the two forms on graphs of their own (`GRAPHS`): a log_softmax's backward over
(700, 10000) float32 (a row sum and the gradient reading the incoming gradient again: a row epilogue), a layer
norm over (768, 512), and a column sum of a product with a sibling over (768, 512).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.dirname(__file__))
import jitorch  # noqa: E402
from jitorch.ir.passes import fusion  # noqa: E402
from jitorch.jit import plan_cache  # noqa: E402
from jitorch.jit.executor import KernelStep  # noqa: E402
import models  # noqa: E402
from kernel_audit import compiled_graphs, nbytes  # noqa: E402
from step_profile import with_over_without  # noqa: E402


@contextlib.contextmanager
def fusion_rules(new):
    """Fusion with (``new``) or without reduction siblings and row epilogues, the plan cache unused."""
    saved = fusion.REDUCTION_SIBLINGS, fusion.ROW_EPILOGUE_MAX, plan_cache.MIN_NODES
    if not new:
        fusion.REDUCTION_SIBLINGS, fusion.ROW_EPILOGUE_MAX = False, 0
    plan_cache.MIN_NODES = float("inf")
    try:
        yield
    finally:
        fusion.REDUCTION_SIBLINGS, fusion.ROW_EPILOGUE_MAX, plan_cache.MIN_NODES = saved


def built(name, threads, quick=False):
    """{"with": step, "without": step}: model ``name``'s compiled step under each rule, warmed up."""
    jitorch.set_num_threads(threads)
    calls = {}
    for label in ("with", "without"):
        with fusion_rules(label == "with"):
            calls[label] = models.system_call("jitorch compiled", name, quick)
            for _ in range(4):  # (compiles in its first calls; Adam's traces again once its state exists)
                calls[label]()
    return calls


def kernel_counts(call):
    """(kernels per step by kind, bytes they move per step) of a built step."""
    kinds, moved = collections.Counter(), 0
    for graph in compiled_graphs(call):
        for step in graph.steps:
            if type(step) is KernelStep:
                kinds[step.kernel.source.kind] += 1
                moved += sum(nbytes(v) for v in (*step.inputs, *step.outputs))
    return kinds, moved


def _log_softmax_backward(g, out):
    return g - out.exp() * g.sum(-1, keepdim=True)


def _layer_norm(x, w, b):
    return jitorch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)


def _column_sum_and_sibling(x, w):
    d = x * w
    return d.sum(0), d, (x + 1) * 3


# name -> (function, its arguments' shapes)
GRAPHS = {
    "log_softmax backward (700, 10000)": (_log_softmax_backward, ((700, 10000), (700, 10000))),
    "layer norm (768, 512)": (_layer_norm, ((768, 512), (512,), (512,))),
    "column sum and sibling (768, 512)": (_column_sum_and_sibling, ((768, 512), (512,))),
}


def graph_ratio(fn, shapes, threads, calls=20, reps=11):
    """(kernels with, kernels without, the CPU time of ``calls`` calls with over without: median of ``reps``
    interleaved turns) of ``fn`` compiled for float32 arguments of ``shapes``."""
    jitorch.set_num_threads(threads)
    args = [jitorch.randn(*shape) for shape in shapes]
    compiled, kernels = {}, {}
    for label in ("with", "without"):
        with fusion_rules(label == "with"):
            c = jitorch.compile(fn)
            kernels[label] = len(c.lower(*args).executable.kernels)
            c(*args)
        compiled[label] = lambda c=c: c(*args)
    return kernels["with"], kernels["without"], with_over_without(compiled, calls, reps, threads)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt-4x128,gpt-6x384,lstm")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--reps", type=int, default=11)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--quick", action="store_true", help="tiny sizes (for tests)")
    p.add_argument("--graphs", action="store_true", help="the forms on graphs of their own, not the models' steps")
    args = p.parse_args(argv)
    if args.graphs:
        for threads in (int(t) for t in args.threads.split(",")):
            for name, (fn, shapes) in GRAPHS.items():
                with_k, without_k, ratio = graph_ratio(fn, shapes, threads, reps=args.reps)
                print(f"{name}: {with_k} kernel(s) against {without_k}; CPU time with/without at {threads} "
                      f"thread(s): {ratio:.3f} (median of {args.reps} interleaved turns)")
        return
    for name in args.models.split(","):
        for i, threads in enumerate(int(t) for t in args.threads.split(",")):
            calls = built(name, threads, args.quick)
            if i == 0:
                for label, call in calls.items():
                    kinds, moved = kernel_counts(call)
                    listed = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
                    print(f"{name} {label:>7}: {sum(kinds.values())} kernels ({listed}), {moved / 1e6:.1f} MB moved")
            ratio = with_over_without(calls, args.steps, args.reps, threads)
            clock = "thread" if threads == 1 else "process"
            print(f"{name}: step CPU time with/without at {threads} thread(s): {ratio:.3f} "
                  f"(median of {args.reps} interleaved turns, {clock} CPU time)")


if __name__ == "__main__":
    main()
