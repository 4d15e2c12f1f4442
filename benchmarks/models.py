"""Training steps of torch-style models, under jitorch and under torch, and the first compiled step's latency.

    python benchmarks/models.py [--quick] [--models gpt,lstm,dcgan,cnn] [--threads 1,2] [--no-latency | --no-steps]

The model code names only ``torch``: the models of examples/programs/ are loaded with that name bound to
jitorch or to torch, and the steps below take the library as an argument. Models (float32, CPU):

    gpt-4x128  nanoGPT-style GPT (examples/programs/gpt.py): 4 layers, 128 dims, 4 heads, block 64, batch 12,
               AdamW and gradient clipping at 1.0, as nanoGPT trains it; vocabulary 65 (shakespeare_char)
    gpt-6x384  the same at 6 layers, 384 dims, 6 heads, block 64, batch 4
    lstm       word language model (examples/programs/word_language_model.py): Embedding, 2-layer nn.LSTM,
               tied Linear decoder, 200 dims, vocabulary 10000, bptt 35, batch 20, dropout 0.2, SGD with
               clipping at 0.25 (the hidden state enters each step as zeros: the example detaches it between
               chunks, so a step's work is the same)
    dcgan      DCGAN on 32x32 RGB images (nz 100, ngf = ndf = 64, batch 64): one D update on real and
               fake images and one G update, Adam(0.5, 0.999), BCEWithLogitsLoss
    cnn        the MNIST convnet of examples/programs/mnist.py on 28x28 inputs, batch 64, Adadelta
    generate   not a training step: gpt-4x128's ``generate()`` (nanoGPT's sampling loop, temperature 0.8,
               top_k 200) of 64 tokens from a one-token prompt, under no_grad; eager systems only

Systems (median ms per step; the systems alternate round by round in one process so that the shared
machine's noise falls on all of them alike):

    jitorch compiled       forward, backward and optimizer step in one jitorch.compile'd function
    jitorch eager
    jitorch.compile(model) the model compiled, backward and optimizer step eager (torch.compile's habit)
    torch eager
    torch.compile(model)   the same habit under torch ("fails <exception class>" when it does not compile)

First-call latency: ``gpt-2x128``, ``gpt-4x128``, ``gpt-8x128`` (and the chosen models) compile their whole step
in a fresh interpreter, once with an empty kernel cache (JITORCH_CACHE_DIR pointed at a new temporary
folder) and once with that cache warm; a second fresh run of each under cProfile says where the time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import math
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import types
import warnings

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(__file__))
from llvmlite.binding.targets import TargetMachine  # noqa: E402

import jitorch  # noqa: E402
from jitorch.autograd import engine  # noqa: E402
from jitorch.codegen import cache, cpu, kernel, linker  # noqa: E402
from jitorch.ir.passes import fusion, manager  # noqa: E402
from jitorch.runtime import logs  # noqa: E402
from jitorch.jit import executor, plan_cache, tracer  # noqa: E402
from timing import median_time, settle  # noqa: E402

PROGRAMS = os.path.join(ROOT, "examples", "programs")
SYSTEMS = ("jitorch compiled", "jitorch eager", "jitorch.compile(model)", "torch eager", "torch.compile(model)")
DEFAULT_MODELS = ("gpt-4x128", "gpt-6x384", "lstm", "dcgan", "cnn", "generate")
EAGER_ONLY = ("generate",)  # (a compiled system would trace the sampling loop)
LATENCY_GPTS = ("gpt-2x128", "gpt-4x128", "gpt-8x128")


def real_torch():
    """torch, or None where it is not installed; imported on first use, which the latency children never make."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def program(name, lib):
    """examples/programs/<name>.py as a module whose ``torch`` (and ``torch.*`` imports) is ``lib``."""
    path = os.path.join(PROGRAMS, f"{name}.py")
    with open(path) as f:
        source = f.read()
    if lib.__name__ != "jitorch":
        lines = source.splitlines(keepends=True)
        source = "".join(line.replace("jitorch", lib.__name__) if line.startswith(("import ", "from ")) else line
                         for line in lines)
    module = types.ModuleType(f"benchmark_{name}_{lib.__name__}")
    module.__file__ = path
    exec(compile(source, path, "exec"), module.__dict__)
    return module


class Workload:
    """One model's training step: ``nets`` (the modules a compile(model) system wraps), ``batch`` (the
    step's tensor arguments) and ``step(nets, *batch)``, which updates the parameters and returns the loss."""

    def __init__(self, nets, batch, step):
        self.nets, self.batch, self.step = nets, batch, step


def gpt_size(name, quick):
    """(layers, dims, heads, block, batch) of ``gpt-<layers>x<dims>``."""
    layers, dims = (int(n) for n in name.removeprefix("gpt-").split("x"))
    if quick:
        return layers, 32, 2, 16, 4
    return layers, dims, dims // 32 if dims <= 128 else dims // 64, 64, 12 if dims <= 128 else 4


def gpt(lib, name, quick):
    """nanoGPT's step: AdamW with weight decay on the matrices, gradients clipped at norm 1."""
    layers, dims, heads, block, batch = gpt_size(name, quick)
    vocab = 65
    model = program("gpt", lib).GPT(vocab, block, layers, heads, dims, dropout=0.0)
    opt = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), "cpu")
    idx = lib.randint(0, vocab, (batch, block))
    targets = lib.randint(0, vocab, (batch, block))

    def step(nets, x, y):
        _, loss = nets[0](x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss
    return Workload((model,), (idx, targets), step)


def generate(lib, name, quick):
    """nanoGPT's sample.py on gpt-4x128: ``generate()`` from one token, the context growing to the block size."""
    layers, dims, heads, block, _ = gpt_size("gpt-4x128", quick)
    model = program("gpt", lib).GPT(65, block, layers, heads, dims, dropout=0.0)
    model.eval()
    prompt = lib.zeros((1, 1), dtype=lib.long)

    def step(nets, idx):
        with lib.no_grad():
            tokens = nets[0].generate(idx, block, temperature=0.8, top_k=200)
        return tokens.sum()
    return Workload((model,), (prompt,), step)


def lstm(lib, name, quick):
    """The word language model's step: NLL of the log-softmax decoder, clipping at 0.25, SGD."""
    vocab, dims, bptt, batch = (50, 16, 8, 4) if quick else (10000, 200, 35, 20)
    model = program("word_language_model", lib).RNNModel(vocab, dims, dims, 2, dropout=0.2)
    opt = lib.optim.SGD(model.parameters(), lr=20.0)
    data = lib.randint(0, vocab, (bptt, batch))
    targets = lib.randint(0, vocab, (bptt * batch,))
    h0, c0 = model.init_hidden(batch)

    def step(nets, x, y, h, c):
        model.zero_grad()
        output, _ = nets[0](x, (h, c))
        loss = lib.nn.functional.nll_loss(output, y)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        opt.step()
        return loss
    return Workload((model,), (data, targets, h0, c0), step)


def dcgan_nets(lib, nz, ngf, ndf, nc=3):
    """A DCGAN generator (nz x 1 x 1 noise to nc x 32 x 32) and discriminator, PyTorch example's layers
    with one stage fewer for 32x32 images."""
    nn = lib.nn
    g = [nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 4), nn.ReLU(True)]
    for c in (ngf * 4, ngf * 2):
        g += [nn.ConvTranspose2d(c, c // 2, 4, 2, 1, bias=False), nn.BatchNorm2d(c // 2), nn.ReLU(True)]
    g += [nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False), nn.Tanh()]
    d = [nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True)]
    for c in (ndf, ndf * 2):
        d += [nn.Conv2d(c, c * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(c * 2), nn.LeakyReLU(0.2, inplace=True)]
    d += [nn.Conv2d(ndf * 4, 1, 4, 1, 0, bias=False), nn.Flatten(0)]
    return nn.Sequential(*g), nn.Sequential(*d)


def dcgan(lib, name, quick):
    """One D update (real, then detached fake images) and one G update, each with its Adam."""
    nz, width, batch = (8, 8, 4) if quick else (100, 64, 64)
    netG, netD = dcgan_nets(lib, nz, width, width)
    init = program("dcgan", lib).weights_init
    netG.apply(init)
    netD.apply(init)
    optD = lib.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optG = lib.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    criterion = lib.nn.BCEWithLogitsLoss()
    real = lib.rand(batch, 3, 32, 32) * 2 - 1
    noise = lib.randn(batch, nz, 1, 1)
    ones, zeros = lib.ones(batch), lib.zeros(batch)

    def step(nets, real, noise):
        G, D = nets
        netD.zero_grad()
        errD_real = criterion(D(real), ones)
        errD_real.backward()
        fake = G(noise)
        errD_fake = criterion(D(fake.detach()), zeros)
        errD_fake.backward()
        optD.step()
        netG.zero_grad()
        errG = criterion(D(fake), ones)
        errG.backward()
        optG.step()
        return errD_real + errD_fake + errG
    return Workload((netG, netD), (real, noise), step)


def cnn(lib, name, quick):
    """The MNIST example's step without autocast: NLL of the log-softmax, Adadelta."""
    batch = 8 if quick else 64
    model = program("mnist", lib).Net()
    opt = lib.optim.Adadelta(model.parameters(), lr=1.0)
    images, labels = lib.randn(batch, 1, 28, 28), lib.randint(0, 10, (batch,))

    def step(nets, x, y):
        opt.zero_grad()
        loss = lib.nn.functional.nll_loss(nets[0](x), y)
        loss.backward()
        opt.step()
        return loss
    return Workload((model,), (images, labels), step)


BUILDERS = {"lstm": lstm, "dcgan": dcgan, "cnn": cnn, "generate": generate}


def workload(lib, name, quick):
    """A fresh model, optimizer and batch of ``name`` under ``lib``, from seed 0."""
    lib.manual_seed(0)
    return (gpt if name.startswith("gpt-") else BUILDERS[name])(lib, name, quick)


def whole_step(lib, w):
    """The step, forward to optimizer update, as one compiled function."""
    def train_step(*batch):
        return w.step(w.nets, *batch)
    compiled = lib.compile(train_step)
    return lambda: compiled(*w.batch)


def system_call(system, name, quick):
    """A callable running one training step of model ``name`` under ``system`` (a fresh model each)."""
    lib = jitorch if system.startswith("jitorch") else real_torch()
    w = workload(lib, name, quick)
    if system == "jitorch compiled":
        return whole_step(lib, w)
    nets = tuple(lib.compile(m) for m in w.nets) if system.endswith("compile(model)") else w.nets
    return lambda: w.step(nets, *w.batch)


def system_calls(name, systems, quick):
    """{system: a callable running one training step}, for the ``systems`` that can run here."""
    have_torch = real_torch() is not None
    return {s: system_call(s, name, quick) for s in systems
            if (have_torch or s.startswith("jitorch")) and not (name in EAGER_ONLY and "compile" in s)}


def warm(calls, warmup):
    """Run each system ``warmup`` times (compiling; Adam's first compiled call traces again on the
    second, once its state exists) and return the first losses; a system that raises is replaced by its
    failure, and any warning that a compiled function runs eagerly is printed."""
    first_losses = {}
    for system, call in list(calls.items()):
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                losses = [call().item() for _ in range(warmup)]
        except Exception as e:  # noqa: BLE001 - a system that fails is reported, the others still run
            calls[system] = f"fails {type(e).__name__}"
            continue
        # a compiled function that falls back to eager says so in a warning: its time would be eager's
        for w in caught:
            if "eagerly" in str(w.message):
                print(f"  ({system}: {w.message})")
        first_losses[system] = losses[0]
        if not all(math.isfinite(v) for v in losses):
            calls[system] = "non-finite loss"
    return first_losses


def round_robin(calls, rounds, per_round):
    """Median seconds per step of each callable system, the systems taking turns for ``rounds`` rounds:
    ({system: wall seconds}, {system: process CPU seconds}). On a machine shared with other work the CPU
    time is the steadier of the two (it sums all threads, spinning ones included). Each turn starts once the
    last one's threads went quiet (`timing.settle`): torch's OpenMP threads spin-wait for milliseconds after its
    last op, on the cores the next system's threads need, and their CPU time counts in its process CPU (a
    jitorch compiled cnn step at 2 threads right after a torch eager step: 26.5 ms of process CPU, 8.0 of them
    torch's threads, against 18.4 right after a jitorch step)."""
    wall = {s: [] for s, c in calls.items() if callable(c)}
    cpu = {s: [] for s in wall}
    for system in wall:  # one untimed turn each: a thread count just set starts its pools
        calls[system]()
    for _ in range(rounds):
        for system in wall:
            settle()
            cpu0 = time.process_time()
            wall[system].append(median_time(calls[system], per_round, warmup=0))
            cpu[system].append((time.process_time() - cpu0) / per_round)
    return ({s: statistics.median(t) for s, t in wall.items()}, {s: statistics.median(t) for s, t in cpu.items()})


def set_threads(n):
    """Both libraries' intra-op thread count (jitorch's also sets NumPy's BLAS to one thread and splits large
    products on its own pool of ``n``)."""
    jitorch.set_num_threads(n)
    if "torch" in sys.modules:  # (the latency children never load it)
        sys.modules["torch"].set_num_threads(n)


def cell(value):
    """Seconds as milliseconds; a failure's text as it is."""
    return f"{value * 1e3:.2f}" if isinstance(value, float) else value


def ratio(results, a, b):
    """System ``a``'s time over ``b``'s, when both ran."""
    x, y = results.get(a), results.get(b)
    return f"{x / y:.2f}x" if isinstance(x, float) and isinstance(y, float) else "-"


def print_table(title, rows):
    """One table of ms/step per model and system, with jitorch compiled's ratios and jitorch eager's."""
    heads = [*SYSTEMS, "jc/torch eager", "jc/torch.compile", "je/torch eager"]
    widths = [max(len(h), 9) for h in heads]
    print(f"\n{title}  [jc = jitorch compiled, je = jitorch eager]")
    print(f"{'model':<11}" + "".join(f"{h:>{w + 2}}" for h, w in zip(heads, widths)))
    for model, results in rows.items():
        cells = [cell(results.get(s, "-")) for s in SYSTEMS]
        cells += [ratio(results, "jitorch compiled", "torch eager"), ratio(results, "jitorch compiled",
                                                                            "torch.compile(model)"),
                  ratio(results, "jitorch eager", "torch eager")]
        print(f"{model:<11}" + "".join(f"{c:>{w + 2}}" for c, w in zip(cells, widths)))


def run_steps(models, systems, threads, quick):
    """Print the ms/step tables, one per thread count: each model's systems built and compiled once, then
    timed in turns at each thread count. Returns {threads: {model: {system: seconds or failure}}} and
    {model: {system: first-step loss}}."""
    rounds, per_round = (2, 1) if quick else (5, 2)
    tables, cpu_tables, first_losses = {n: {} for n in threads}, {n: {} for n in threads}, {}
    for model in models:
        set_threads(threads[0])
        calls = system_calls(model, systems, quick)
        losses = first_losses[model] = warm(calls, 3)
        print(f"  {model}: first-step loss " + ", ".join(f"{s} {v:.4f}" for s, v in losses.items()), flush=True)
        for n in threads:
            set_threads(n)
            row = tables[n][model] = {s: c for s, c in calls.items() if not callable(c)}
            cpu_row = cpu_tables[n][model] = dict(row)
            wall, cpu = round_robin(calls, rounds, per_round)
            row.update(wall)
            cpu_row.update(cpu)
            print(f"  [{n}t] {model}: " + ", ".join(f"{s} {cell(t)}" for s, t in row.items()), flush=True)
    for n in threads:
        plural = "s" if n > 1 else ""
        print_table(f"{n} thread{plural}: wall ms/step (median)", tables[n])
        print_table(f"{n} thread{plural}: process CPU ms/step (median)", cpu_tables[n])
    return tables, first_losses


# ---- first-call latency (in a fresh interpreter) ----

def code_keys(*functions):
    """A predicate on cProfile's (file, line, name) keys: one of ``functions``."""
    keys = {(f.__code__.co_filename, f.__code__.co_firstlineno, f.__code__.co_name) for f in functions}
    return keys.__contains__


def path_part(part):
    """A predicate on cProfile's keys: a function of a file whose path contains ``part``."""
    return lambda key: part in key[0].replace(os.sep, "/")


def stages():
    """(label, predicate) of the compile pipeline's stages, in pipeline order; times are inclusive."""
    return (
        ("trace the step (all of it)", code_keys(tracer.trace_with_inputs)),
        ("  autograd: record forward nodes", code_keys(engine.record, engine.record_inplace,
                                                        engine.record_unimplemented)),
        ("  autograd: run backward", code_keys(engine.run_backward)),
        ("  optimizer code (jitorch/optim)", path_part("/jitorch/optim/")),
        ("compile the graph (all below)", code_keys(executor.CompiledGraph.__init__)),
        ("  IR passes (optimize)", code_keys(manager.optimize)),
        ("  fusion", code_keys(fusion.fuse, plan_cache.fuse_cached)),
        ("  kernel LLVM IR build", code_keys(kernel.build)),
        ("  LLVM optimise", code_keys(cpu.optimise)),
        ("  LLVM emit object", code_keys(TargetMachine.emit_object)),
        ("  link / resolve / check", code_keys(linker.Linker.link, linker.Linker.resolve,
                                                linker.Linker.check_object)),
        ("  kernel cache get / put", code_keys(cache.KernelCache.get, cache.KernelCache.put)),
        ("  memory plan", code_keys(executor.Plan.__init__)),
        ("  generate the call's Python", code_keys(executor.CompiledGraph._generate)),
        ("run the generated call", path_part("<jitorch ")),
    )


PACKAGES = ("jitorch/jit", "jitorch/autograd", "jitorch/ir/passes", "jitorch/ir", "jitorch/codegen",
            "jitorch/ops", "jitorch/nn", "jitorch/optim", "jitorch/runtime", "jitorch", "llvmlite", "numpy")


def package_of(filename):
    """The first of PACKAGES that ``filename`` lies in, or "other" (Python itself, builtins)."""
    path = filename.replace(os.sep, "/")
    for p in PACKAGES:
        if f"/{p}/" in path:
            return p
    return "other"


def first_call(name, quick, profile_path):
    """Child process: compile the whole step of ``name`` and time its first three calls, wall and process
    CPU (the second retraces once Adam's state exists), the first two under cProfile when ``profile_path``
    is given. One thread, as the compile itself runs on one."""
    set_threads(1)
    compiled = llvm_compiles()
    t0 = time.perf_counter()
    w = workload(jitorch, name, quick)
    call = whole_step(jitorch, w)
    build_s = time.perf_counter() - t0
    profiler = cProfile.Profile() if profile_path else None
    times, cpu_times = [], []
    for i in range(3):
        if profiler is not None and i < 2:
            profiler.enable()
        t, cpu = time.perf_counter(), time.process_time()
        call()
        times.append(time.perf_counter() - t)
        cpu_times.append(time.process_time() - cpu)
        if profiler is not None and i < 2:
            profiler.disable()
    if profiler is not None:
        profiler.dump_stats(profile_path)
    print(json.dumps({"build_s": build_s, "calls_s": times, "cpu_s": cpu_times, "llvm": compiled}))


def llvm_compiles():
    """A dict that the codegen log fills with what LLVM compiles from now on: "batches", [kernels, distinct
    texts, texts distinct but for their sizes] of each graph's module (`cpu.link_batch`), and "alone", the
    kernels compiled one by one (attention tiles, runtime programs). It turns that log on, to stderr."""
    compiled = {"batches": [], "alone": 0}

    class Collect(logging.Handler):
        def emit(self, record):
            if "but for their sizes" in record.msg:
                compiled["batches"].append(list(record.args))
            elif record.msg.startswith("compiled %s"):
                compiled["alone"] += 1
    logs.set_logs("codegen")
    logging.getLogger("jitorch.codegen").addHandler(Collect())
    return compiled


def child(name, quick, cache_dir, profile_path=None):
    """The JSON report of `first_call` run in a fresh interpreter with the kernel cache in ``cache_dir``."""
    cmd = [sys.executable, os.path.abspath(__file__), "--first-call", name] + (["--quick"] if quick else [])
    if profile_path:
        cmd += ["--profile", profile_path]
    env = dict(os.environ, JITORCH_CACHE_DIR=cache_dir, PYTHONPATH=ROOT)
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["process_s"] = time.perf_counter() - t
    return report


def inclusive(stats, ours):
    """(seconds spent in and under the functions that ``ours`` accepts, calls of them): counted on the
    calls from outside them, so that recursion is not counted twice."""
    seconds, calls = 0.0, 0
    for key, (_, _, _, _, callers) in stats.stats.items():
        if ours(key):
            edges = [edge for caller, edge in callers.items() if not ours(caller)]
            seconds += sum(edge[3] for edge in edges)
            calls += sum(edge[1] for edge in edges)
    return seconds, calls


def breakdown(profile_path):
    """([(stage, seconds, calls)], package self seconds, package inclusive seconds, top jitorch functions)
    of a profile."""
    stats = pstats.Stats(profile_path)
    stage_s = [(label, *inclusive(stats, ours)) for label, ours in stages()]
    self_s, incl_s = {}, {}
    for key, (_, _, tt, _, callers) in stats.stats.items():
        pkg = package_of(key[0])
        self_s[pkg] = self_s.get(pkg, 0.0) + tt
        incl_s[pkg] = incl_s.get(pkg, 0.0) + sum(e[3] for c, e in callers.items() if package_of(c[0]) != pkg)
    top = sorted(((ct, f"{os.path.relpath(k[0], ROOT) if k[0].startswith(ROOT) else k[0]}:{k[1]}({k[2]})")
                  for k, (_, _, _, ct, _) in stats.stats.items() if f"{os.sep}jitorch{os.sep}" in k[0]),
                 reverse=True)
    return stage_s, self_s, incl_s, top


def print_breakdown(title, profile_path, top_n):
    """Print a profile's stage, package and (``top_n``) jitorch function times."""
    stage_s, self_s, incl_s, top = breakdown(profile_path)
    total = pstats.Stats(profile_path).total_tt
    print(f"\n{title}: {total:.2f} s profiled (first two calls, cProfile inflates Python-heavy stages)")
    print("  stage (inclusive s, calls):")
    for label, s, n in stage_s:
        print(f"    {label:<38}{s:8.2f}{n:7d}")
    print("  package (self s / inclusive-from-outside s):")
    for pkg in sorted(self_s, key=self_s.get, reverse=True):
        print(f"    {pkg:<20}{self_s[pkg]:8.2f}{incl_s[pkg]:8.2f}")
    if top_n:
        print(f"  top {top_n} cumulative jitorch functions (s):")
        for ct, where in top[:top_n]:
            print(f"    {ct:7.2f}  {where}")


def run_latency(models, quick):
    """First-call latency of each model's compiled whole step, cold and warm kernel cache, in fresh processes."""
    print("\nfirst compiled calls in a fresh process, 1 thread (s, wall / process CPU): calls 1, 2 (Adam's state "
          "exists: retraced), 3")
    print(f"{'model':<11}{'cache':>6}{'build':>8}{'call 1':>14}{'call 2':>14}{'call 3':>14}{'process':>9}")
    profiles = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            for profiled in (False, True):
                cache = tempfile.mkdtemp(dir=tmp)
                for state in ("cold", "warm"):
                    prof = os.path.join(tmp, f"{name}-{state}.prof") if profiled else None
                    r = child(name, quick, cache, prof)
                    if profiled:
                        profiles[(name, state)] = prof
                        continue
                    calls = "".join(f"{w:8.2f} /{c:5.2f}" for w, c in zip(r["calls_s"], r["cpu_s"]))
                    llvm = r["llvm"]
                    made = ", ".join("{} kernels: {} texts, {} but for sizes".format(*b) for b in llvm["batches"])
                    print(f"{name:<11}{state:>6}{r['build_s']:8.2f}{calls}{r['process_s']:9.2f}   LLVM: "
                          f"{made or 'no batch'}; {llvm['alone']} alone", flush=True)
        for (name, state), prof in profiles.items():
            print_breakdown(f"{name}, {state} cache", prof, 15 if name == "gpt-4x128" else 0)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes and few repetitions (for tests)")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS),
                   help="comma-separated: gpt-<layers>x<dims> (gpt: both default sizes), lstm, dcgan, cnn")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of: {', '.join(SYSTEMS)}")
    p.add_argument("--no-latency", action="store_true")
    p.add_argument("--no-steps", action="store_true", help="the first-call latencies only")
    p.add_argument("--first-call", help=argparse.SUPPRESS)  # the fresh-process child of the latency runs
    p.add_argument("--profile", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    names = []
    for m in args.models.split(","):
        names += ["gpt-4x128", "gpt-6x384"] if m == "gpt" else [m]
    for m in names:
        if not (m in BUILDERS or (m.startswith("gpt-") and m[4:].replace("x", "", 1).isdigit())):
            p.error(f"unknown model {m!r}")
    args.models = names
    args.systems = args.systems.split(",")
    if not set(args.systems) <= set(SYSTEMS):
        p.error(f"unknown systems {sorted(set(args.systems) - set(SYSTEMS))}")
    args.threads = [int(n) for n in args.threads.split(",")]
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.first_call:
        first_call(args.first_call, args.quick, args.profile)
        return
    if not args.no_steps:
        run_steps(args.models, args.systems, args.threads, args.quick)
    if not args.no_latency:
        extra = [m for m in args.models if m not in LATENCY_GPTS]
        run_latency((["gpt-2x128"] if args.quick else list(LATENCY_GPTS)) + ([] if args.quick else extra),
                    args.quick)


if __name__ == "__main__":
    main()
