"""The fuzzer's long mode: ``python -m tests.fuzz --hours 1 [--cuda] [--start SEED] [--chains SHARE] [--statements N]
[--programs N] [--namespaced] [--out-views SHARE] [--losses SHARE] [--nets SHARE] [--convs SHARE] [--regions SHARE]
[--edges SHARE] [--reach] [--export] [--warm N]
[--report FILE]``.

Generates and checks programs from consecutive seeds until the time is up; prints the programs and ops
checked per minute, and each new kind of failure with its minimised program, which it also appends to the
report file (``fuzz-failures.txt`` by default), ready to become a named regression test. ``--chains 0.3``
draws 30% of the statements from the view-of-gather chains (pad then pool, gather then views: see
`generator.Generator.pad_windows`), which programs hold only where asked. ``--statements 40`` draws programs of
up to 40 statements (14 by default), whose later statements meet longer chains of views, writes and fused
kernels. ``--programs N`` stops after N programs (within the time), so that two environments check the same
seeds. ``--namespaced`` also draws the registry's ops that both libraries call in a namespace (``T.special.i0e``):
each seed then draws another program than without it. ``--out-views 0.3`` makes 30% of the ``out=`` statements write
a variable of the program, a permuted, stepped or offset view of a new buffer, or a buffer the call resizes
(`generator.Generator.out_view`). ``--losses 0.3`` draws 30% of the statements from the loss patterns the
``sums`` and ``lse`` passes rewrite (cross-entropy, nll of a log-softmax, picked log-probs, one-hot sums, sums
of a reshape: `generator.Generator.loss_pattern`). ``--nets 0.3`` draws 30% of the statements from network patterns
over a float variable's values repeated to odd sizes past a vector's lanes (17, 33, 200): GELU MLPs, scaled dot-product
attention with masks, cross-entropy and nll over odd class counts of computed logits, normalisations of computed
values, math functions over odd rows, reductions' ``out=`` calls (`generator.Generator.net_pattern`); compiled with
gradients, they split into forward and backward graphs with saved values. ``--convs 0.3`` draws 30% of the
statements from convolution patterns: 1-d and 2-d convolutions and transposed ones of a float variable's values,
channels-last half the time, with an activation, a residual, a pooling, a batch norm or a bias gradient's sum after
(`generator.Generator.conv_pattern`). ``--reach`` counts, per 100 programs, those reaching each of the compiler's
newest parts (the sums, lse and recompute passes, AVX-512 tail folding, the forward/backward cut, the attention
kernels, GELU traced, convolutions traced (channels-last), reductions' ``out=`` fast path, the fusion forms:
`reach.PARTS`). ``--models`` checks, per seed, a random small network trained under ``jitorch.compile(model)`` with
its parameters and inputs written between forward and backward, second losses, retained graphs and gradient
penalties (`models.generate_model`), against eager jitorch and torch; ``--rows 0.2`` follows 20% of their layers by
a row softmax; with ``--convs 0.5`` half of those of one leading dim take images through a convolution stem,
channels-last at times (`models._conv_stem`). ``--threads N`` sets jitorch's and torch's thread counts
(``set_num_threads``) for the run. ``--export`` also exports each program with ``jitorch.export`` on its first call's
inputs, saves it to a file, loads it back and calls it on the three calls' layouts, against eager calls without the
rebinding (`oracle.run_exported`): its outputs' values, dtypes, shapes, which of them view an input, and the inputs'
memory after each call; with ``--reach``, ``exported`` counts the programs the export took. ``--regions 0.2`` draws
20% of the statements inside a ``with`` region: ``no_grad``, ``enable_grad``, ``set_grad_enabled(False)``,
``inference_mode``, ``autocast`` to bfloat16 or float16 (`generator.Generator.in_region`); ``--edges 0.4`` draws
40% of the statements at the dtype and layout rules' edges: integer division and remainder of mixed signs and dtypes,
promotion across dtype categories and 0-d tensors, wraparound and shifts, ``where`` with scalars, index accumulation
with repeated indices, broadcasting in-place and ``out=`` calls, ``keepdim`` reductions over several dims, dims of
size 0 and 1, expanded and flipped operands, channels-last values (`generator.Generator.edge_pattern`); with ``--reach``,
``grad-mode region`` and ``autocast region`` count the programs holding one. ``--warm 25`` compiles each batch of 25
programs again in a fresh process on the run's kernel cache, its kernels and generated code read from disk
(`warm.check_warm`), against eager: each failure is printed with its program, unminimised (the mode runs in
another process), and the progress lines count the warm programs and their disk hits.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
import warnings

try:
    import resource
except ImportError:  # Windows: no peak memory in the progress lines
    resource = None

# a cache of compiled kernels of the run's own (as the tests have), and one BLAS thread per process
os.environ.setdefault("JITORCH_CACHE_DIR", tempfile.mkdtemp(prefix="jitorch-fuzz-cache-"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from .generator import generate, op_table  # noqa: E402
from .minimise import minimise  # noqa: E402
from .models import check_model, generate_model, minimise_model, model_source  # noqa: E402
from .oracle import CPU_MODES, EXPORTED, MODES, check, signature  # noqa: E402
from .program import source  # noqa: E402
from .reach import Reach, program_regions  # noqa: E402
from .warm import check_warm  # noqa: E402


def describe(program, mismatches):
    """A failure as text: the seed, the program, its inputs and layouts, and what differed."""
    decls = ", ".join(f"{t.name}: {t.dtype}{list(t.shape)}" for t in program.inputs)
    captured = ", ".join(f"{c.name} ({c.where}, {c.role}): {c.dtype}{list(c.shape)}" for c in program.captured)
    lines = [f"seed {program.seed}; inputs {decls}; layouts {program.layouts}"
             + (f"; captured {captured}" if captured else "") + f"; gradient run: {program.grad}",
             source(program).rstrip()]
    lines += [f"  {m}" for m in mismatches[:8]]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n")[0])
    parser.add_argument("--hours", type=float, default=0.0)
    parser.add_argument("--minutes", type=float, default=0.0)
    parser.add_argument("--start", type=int, default=1_000_000, help="the first seed")
    parser.add_argument("--cuda", action="store_true", help="also run on the emulated CUDA device")
    parser.add_argument("--chains", type=float, default=0.0, help="the share of view-of-gather chain statements")
    parser.add_argument("--programs", type=int, default=0, help="stop after this many programs (0: only the time)")
    parser.add_argument("--statements", type=int, default=14, help="the most statements a program holds")
    parser.add_argument("--namespaced", action="store_true",
                        help="also draw the ops called in a namespace (torch.special's)")
    parser.add_argument("--out-views", type=float, default=0.0,
                        help="the share of out= statements writing a variable, a view or a buffer to resize")
    parser.add_argument("--losses", type=float, default=0.0,
                        help="the share of loss-pattern statements (cross-entropy, one-hot and reshape sums)")
    parser.add_argument("--nets", type=float, default=0.0,
                        help="the share of network-pattern statements (GELU MLPs, attention, wide losses and maps)")
    parser.add_argument("--convs", type=float, default=0.0,
                        help="the share of convolution-pattern statements (channels-last half the time)")
    parser.add_argument("--regions", type=float, default=0.0,
                        help="the share of statements inside a grad-mode or autocast region")
    parser.add_argument("--edges", type=float, default=0.0,
                        help="the share of statements at the dtype and layout rules' edges (integer division, "
                             "promotion, repeated-index accumulation, keepdim reductions, stride 0, channels-last)")
    parser.add_argument("--reach", action="store_true",
                        help="count the programs reaching each of the compiler's newest parts (tests/fuzz/reach.py)")
    parser.add_argument("--models", action="store_true",
                        help="check random networks trained under compile(model) (tests/fuzz/models.py)")
    parser.add_argument("--rows", type=float, default=0.0,
                        help="with --models, the share of layers a row softmax follows")
    parser.add_argument("--threads", type=int, default=0, help="jitorch's and torch's thread count (0: as set)")
    parser.add_argument("--warm", type=int, default=0,
                        help="compile each batch of this many programs again in a fresh process on the warm cache")
    parser.add_argument("--export", action="store_true",
                        help="also export each program, save, load and call it (tests/fuzz/oracle.py, run_exported)")
    parser.add_argument("--report", default="fuzz-failures.txt")
    args = parser.parse_args(argv)
    if args.threads:
        import jitorch
        import torch
        jitorch.set_num_threads(args.threads)
        torch.set_num_threads(args.threads)
    seconds = 3600 * args.hours + 60 * args.minutes or 60.0
    modes = (MODES if args.cuda else CPU_MODES) + ((EXPORTED,) if args.export else ())
    warnings.simplefilter("ignore")
    table = op_table(args.namespaced)
    started = time.time()
    seen: dict = {}
    reach = Reach() if args.reach else None
    with reach or contextlib.nullcontext():
        seed = _burst(args, seconds, modes, table, seen, started, reach)
    print(f"seeds {args.start}..{seed - 1}", flush=True)
    for sig, n in sorted(seen.items(), key=lambda kv: -kv[1]):
        print(f"{n:6d}  {sig}")
    if reach is not None:
        print(f"reached per 100 of {reach.programs} programs: "
              + ", ".join(f"{part} {n:.1f}" for part, n in reach.per_hundred().items()), flush=True)
    return 0


def _burst(args, seconds, modes, table, seen, started, reach):
    """Check programs from ``args.start`` on until the time or the count is up; returns the next seed."""
    programs, ops, failing = 0, 0, 0
    seed = args.start
    warm = _Warm(args, seen)
    while time.time() - started < seconds and not (args.programs and programs >= args.programs):
        if args.models:
            program = generate_model(seed, args.rows, args.convs)
            outcome = check_model(program)
        else:
            program, _ = generate(seed, args.statements, table=table, chains=args.chains, out_views=args.out_views,
                                  losses=args.losses, nets=args.nets, convs=args.convs, regions=args.regions,
                                  edges=args.edges)
            outcome = check(program, modes)
        programs += 1
        ops += len(program.forward) if args.models else program.n_ops
        if outcome.mismatches:
            failing += 1
            first = outcome.mismatches[0]
            # (a model program's kind of failure is also its scenario's: a write into an input and one into a
            # parameter that both miss a version check are two kinds)
            sig = signature(first) + ((program.scenario_kind,) if args.models else ())
            seen[sig] = seen.get(sig, 0) + 1
            if seen[sig] == 1 and args.models:
                small = minimise_model(program, first)
                text = (f"generate_model({seed}, rows={args.rows}, convs={args.convs}) (threads {args.threads or 'as set'}):\n"
                        + model_source(small)
                        + "\n".join(f"  {m}" for m in (check_model(small).mismatches or [first])[:8]))
                print(f"\nnew failure ({sig[0]} vs {sig[1]}: {sig[2]}, {sig[-1]}):\n{text}\n", flush=True)
                with open(args.report, "a") as f:
                    f.write(text + "\n\n")
            elif seen[sig] == 1:
                small = minimise(program, first, modes)
                # (the seed alone draws another program under other options than the defaults)
                text = (f"generate({seed}, {args.statements}, chains={args.chains}, out_views={args.out_views}, "
                        f"losses={args.losses}, nets={args.nets}, convs={args.convs}, regions={args.regions}, "
                        f"edges={args.edges}, "
                        f"table=op_table({args.namespaced})):\n"
                        + describe(small, check(small, modes).mismatches or [first]))
                print(f"\nnew failure ({sig[0]} vs {sig[1]}: {sig[2]}):\n{text}\n", flush=True)
                with open(args.report, "a") as f:
                    f.write(text + "\n\n")
            else:  # the seed of each later failure of a kind already shown, so that none is lost
                print(f"failure again ({sig[0]} vs {sig[1]}: {sig[2]}): seed {seed}", flush=True)
        warm.add(program)
        seed += 1
        if reach is not None:
            reach.program(program.grad, exported=not args.models and outcome.exported,
                          regions=() if args.models else program_regions(program))
        if programs % 50 == 0:
            _progress(started, programs, ops, failing, len(seen))
    warm.run()
    _progress(started, programs, ops, failing, len(seen))
    return seed


class _Warm:
    """``--warm``'s batches: programs checked here, compiled again in a fresh process (`warm.check_warm`)."""

    def __init__(self, args, seen):
        self.args, self.seen = args, seen
        self.batch, self.programs, self.hits = [], 0, 0
        self.options = {"chains": args.chains, "out_views": args.out_views, "losses": args.losses,
                        "nets": args.nets, "convs": args.convs, "regions": args.regions, "edges": args.edges,
                        "namespaced": args.namespaced}

    def add(self, program):
        if self.args.warm and not self.args.models:
            self.batch.append((program.seed, self.args.statements))
            if len(self.batch) >= self.args.warm:
                self.run()

    def run(self):
        if not self.batch:
            return
        found, hits = check_warm(self.batch, self.options)
        self.programs += len(self.batch)
        self.hits += hits
        self.batch = []
        for seed, mismatches in sorted(found.items()):
            sig = signature(mismatches[0])
            self.seen[sig] = self.seen.get(sig, 0) + 1
            print(f"\nwarm failure ({sig[0]} vs {sig[1]}: {sig[2]}): seed {seed} (options {self.options}):\n"
                  + "\n".join(f"  {m}" for m in mismatches[:8]) + "\n", flush=True)
            with open(self.args.report, "a") as f:
                f.write(f"warm: generate({seed}, {self.args.statements}, **{self.options}):\n"
                        + "\n".join(f"  {m}" for m in mismatches[:8]) + "\n\n")
        print(f"warm: {self.programs} programs compiled again in fresh processes, {self.hits} disk hits", flush=True)


def _progress(started, programs, ops, failing, kinds):
    minutes = (time.time() - started) / 60
    # the process's peak size, so that a run of hours shows memory that grows with the programs compiled
    peak = f", peak memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB" if resource else ""
    print(f"{programs} programs ({programs / minutes:.0f}/min), {ops} ops ({ops / minutes:.0f}/min), "
          f"{failing} failing, {kinds} kinds of failure{peak}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
