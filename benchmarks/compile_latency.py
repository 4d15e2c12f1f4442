"""Compile latency of a nanoGPT training step (forward + backward + AdamW in one compiled function).

    python benchmarks/compile_latency.py [--layers 4] [--profile out.prof] [--repeat 5] [--threads 1] [--stages] [--steady N]
                                         [--baseline /work/main]

Times the first call with an empty disk kernel cache (cold) and the second and third calls, then
the first call in a new process over the disk cache the first process filled (warm), in ``--repeat``
new processes (their median and minimum: a shared machine's load moves single runs by a third). Times
are CPU seconds of the process (compilation is single-threaded), steadier than wall time there.
``--threads`` (default 1, as `benchmarks/models.py` times first calls) is `jitorch.set_num_threads`'s: the
first call also runs the step, whose products, left to BLAS's own threads (``--threads 0``), spin-wait on a
shared machine and cost that run 0.1-0.3 s of CPU more than the step's work on one thread.
``--steady N`` compiles the step anew N times in one process instead (`steady`), for how compile work grows with
--layers. ``--stages`` prints where each warm first call's CPU time went (`STAGES`, and the cyclic collector's passes
inside them), measured without a profiler (cProfile inflates the Python-heavy stages 3-5x and the native ones not at
all); each warm process's line, then their medians. ``--baseline DIR`` (another checkout of jitorch: the code before a
change) times its warm first calls too, each process of the baseline's after one of this tree's, over the same cache
folder (its first process, whose kernels' keys may differ from this tree's, fills its entries and is not counted), and
prints both trees' medians side by side: the machine's load then falls on both alike.
"""

from __future__ import annotations

import argparse
import cProfile
import contextlib
import gc
import importlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def load_gpt():
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "programs", "gpt.py")
    spec = importlib.util.spec_from_file_location("gpt_program", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_step(jt, gpt, layers):
    jt.manual_seed(0)
    model = gpt.GPT(65, 64, layers, 4, 128, 0.0, flash=True)
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")

    def step(x, y):
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    x = jt.randint(0, 65, (12, 64))
    y = jt.randint(0, 65, (12, 64))
    return jt.compile(step), x, y


# (label, module, attribute path) of the first call's stages, in pipeline order; a stage's time is inclusive
# (an indented one lies inside the one above it) and counted once where a stage calls itself again.
STAGES = (
    ("trace (forward, backward, optimizer)", "jitorch.jit.compile", "trace_with_inputs"),
    ("compile the graph (below)", "jitorch.jit.executor", "CompiledGraph.__init__"),
    ("  passes", "jitorch.jit.executor", "optimize_cached"),
    ("  recompute copies, fusion", "jitorch.jit.executor", "fuse_cached"),
    ("  kernel sources, keys, object code", "jitorch.jit.executor", "CompiledGraph._prebuilt"),
    ("  groups lowered to steps", "jitorch.jit.executor", "CompiledGraph._lower"),
    ("  memory plan", "jitorch.jit.executor", "Plan"),
    ("  generate the call", "jitorch.jit.executor", "CompiledGraph._generate"),
    ("run the generated call", "jitorch.jit.compile", "run_graph"),
)


# The cyclic garbage collector's passes during the first call, wherever they fall (inside the stages above: a pass
# runs in whatever allocates when it is due; `jit.collector` pauses it while a graph is traced and compiled).
COLLECTOR = "cyclic collector (inside the above)"


def stage_labels():
    """The stage table's rows: `STAGES`' labels, then `COLLECTOR`."""
    return [label for label, _, _ in STAGES] + [COLLECTOR]


@contextlib.contextmanager
def time_stages():
    """Within the block, each of `STAGES` adds its CPU seconds to the dict this yields (by label), and the
    collector's passes theirs (`COLLECTOR`); the functions are put back after it."""
    seconds = dict.fromkeys(stage_labels(), 0.0)
    started = [0.0]

    def collection(phase, info):
        if phase == "start":
            started[0] = time.process_time()
        else:
            seconds[COLLECTOR] += time.process_time() - started[0]
    gc.callbacks.append(collection)
    restore = []
    for label, module_name, path in STAGES:
        owner = importlib.import_module(module_name)
        *parents, name = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        original = owner.__dict__[name]
        active = [0]

        def timed_stage(*args, _original=original, _label=label, _active=active, **kwargs):
            if _active[0]:  # (called again inside itself: counted by the outer call)
                return _original(*args, **kwargs)
            _active[0] = 1
            start = time.process_time()
            try:
                return _original(*args, **kwargs)
            finally:
                seconds[_label] += time.process_time() - start
                _active[0] = 0
        setattr(owner, name, timed_stage)
        restore.append((owner, name, original))
    try:
        yield seconds
    finally:
        gc.callbacks.remove(collection)
        for owner, name, original in reversed(restore):
            setattr(owner, name, original)


def timed(fn, *args, profile=None):
    start = time.process_time()
    if profile is not None:
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
    out = fn(*args)
    if profile is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    return out, time.process_time() - start


def measure(layers, profile=None, threads=1, stages=None):
    """(first, second, third call seconds, first three losses) in this process; ``stages`` (a dict): the first
    call's CPU seconds by stage (`STAGES`) are put in it."""
    import jitorch as jt
    if threads:
        jt.set_num_threads(threads)
    step, x, y = make_step(jt, load_gpt(), layers)
    with time_stages() if stages is not None else contextlib.nullcontext({}) as seconds:
        loss1, first = timed(step, x, y, profile=profile)
    if stages is not None:
        stages.update(seconds)
    loss2, second = timed(step, x, y)
    loss3, third = timed(step, x, y)
    print(f"compiled graphs reused by a later trace: {step.reused_compilations}", file=sys.stderr)
    return first, second, third, float(loss1), float(loss2), float(loss3)


def warm_process(args, root=None):
    """The JSON report of one warm first call, in a new process of this script (of the checkout ``root``'s, run
    there, where given)."""
    script = __file__ if root is None else os.path.join(root, "benchmarks", "compile_latency.py")
    command = [sys.executable, script, "--warm", "--layers", str(args.layers), "--threads", str(args.threads)]
    if args.profile_warm and root is None:
        command += ["--profile-warm", args.profile_warm]
    if args.stages:
        command.append("--stages")
    env = None if root is None else dict(os.environ, PYTHONPATH=root)
    out = subprocess.run(command, check=True, capture_output=True, text=True, cwd=root, env=env).stdout
    return json.loads(out.splitlines()[-1])


def print_compared(reports, baseline):
    """This tree's and the baseline's warm first calls (CPU ms by stage where timed, else the whole call): medians."""
    print(f"warm first calls, CPU ms, medians of {len(reports)} processes each, interleaved "
          f"(baseline / this tree / ratio):")
    # (the stages both trees time: the baseline's script may time others)
    labels = [label for label in stage_labels() if reports[0]["stages"] and baseline[0]["stages"]
              and label in reports[0]["stages"] and label in baseline[0]["stages"]] + ["whole first call"]

    def value(report, label):
        return report["first"] if label == "whole first call" else report["stages"][label]
    for label in labels:
        old = statistics.median(value(r, label) for r in baseline) * 1e3
        new = statistics.median(value(r, label) for r in reports) * 1e3
        print(f"  {label:<38}{old:7.0f}{new:7.0f}   {new / old if old else float('nan'):5.2f}")


def print_stages(reports):
    """Each warm first call's stage times (CPU ms), one column per process, and their medians."""
    print("warm first calls, CPU ms by stage (one column per process; median last):")
    columns = [[r["stages"][label] * 1e3 for label in stage_labels()] + [r["first"] * 1e3] for r in reports]
    labels = stage_labels() + ["whole first call"]
    for i, label in enumerate(labels):
        values = [c[i] for c in columns]
        print(f"  {label:<38}" + "".join(f"{v:7.0f}" for v in values) + f"   | {statistics.median(values):5.0f}")


def steady(layers, repeat, threads=1):
    """{stage: the least CPU seconds over ``repeat`` first calls of new compiled functions of one step}, and that
    of the whole first call, in this process after an eager step (the optimizer's state exists, every cache is
    warm): the work each graph costs, without a new process's one-time costs, and the minimum, which a loaded
    machine moves little. Compared over --layers, it shows how compile work grows with the graph."""
    import jitorch as jt
    if threads:
        jt.set_num_threads(threads)
    step, x, y = make_step(jt, load_gpt(), layers)
    step.fn(x, y)  # eagerly: the state Adam makes at its first step exists for every trace below
    best = {}
    for _ in range(repeat):
        with time_stages() as seconds:
            _, first = timed(jt.compile(step.fn), x, y)
        for label, value in [*seconds.items(), ("whole first call", first)]:
            best[label] = min(best.get(label, value), value)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--profile", help="write cProfile stats of the cold first call here")
    parser.add_argument("--profile-warm", help="write cProfile stats of the warm first call here")
    parser.add_argument("--repeat", type=int, default=1, help="warm first calls, each in a new process")
    parser.add_argument("--threads", type=int, default=1,
                        help="jitorch.set_num_threads for every process (0: not called, BLAS keeps its threads)")
    parser.add_argument("--stages", action="store_true", help="where each warm first call's CPU time went")
    parser.add_argument("--steady", type=int, metavar="N",
                        help="instead: the least CPU ms by stage over N new compilations in one process")
    parser.add_argument("--baseline", metavar="DIR",
                        help="another checkout of jitorch whose warm first calls are timed in turn with this tree's")
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)  # the second process
    args = parser.parse_args(argv)
    if args.steady:
        print(f"layers {args.layers}: least CPU ms of {args.steady} compilations of the step in one process:")
        for label, value in steady(args.layers, args.steady, args.threads).items():
            print(f"  {label:<38}{value * 1e3:7.1f}")
        return
    if args.warm:
        stages = {} if args.stages else None
        first = measure(args.layers, args.profile_warm, args.threads, stages)[0]
        print(json.dumps({"first": first, "stages": stages}))
        return
    os.environ["JITORCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitorch-cold-")
    cold, second, third, *losses = measure(args.layers, args.profile, args.threads)
    baseline, reports = [], []
    if args.baseline:
        warm_process(args, args.baseline)  # (its kernels' entries, where its keys are not this tree's)
    for _ in range(max(1, args.repeat)):
        reports.append(warm_process(args))
        if args.baseline:
            baseline.append(warm_process(args, args.baseline))
    if args.stages:
        print_stages(reports)
    if baseline:
        print_compared(reports, baseline)
    warm = sorted(r["first"] for r in reports)
    spread = f" (median of {len(warm)}; min {warm[0]:.3f}s)" if len(warm) > 1 else ""
    print(f"layers {args.layers}: cold first {cold:.2f}s, second {second:.2f}s, third {third:.3f}s, "
          f"warm first {statistics.median(warm):.3f}s{spread}; losses {' '.join(f'{v:.4f}' for v in losses)}")


if __name__ == "__main__":
    main()
