"""Random programs of many small kernels over views of one storage, compiled at two threads, where consecutive
kernels that touch no memory another writes run as one fork of the thread team (`jit.kernel_runs.shared_groups`,
session 51): ``python -m tests.fuzz.shared --start S --seeds N``.

A program (`generate_shared`) takes a flat input ``a`` and matrices ``b`` and ``c`` (arguments, or captured as an
optimizer's parameters are) and draws statements, each a kernel of its own shape (so that fusion keeps them apart):
a pointwise map, a row or column reduction, or a product by another value's full sum of squares (clipping's
coefficient), of a view of an earlier value (an offset slice, a step, a transpose, a flip, a column window), or
an in-place write (``mul_``, ``add_``, ``copy_`` of another value) into all of an input or an earlier value (an
update in place) or through a view of it. Its results and the inputs it writes are compared (`check_shared`)
between torch, compiled jitorch at one thread, at two threads (two calls, the second over an arena already made)
and at two threads with every shared group run backwards (`_reversed_run`), whose bits must be one thread's: a
kernel's rows compute the same values on whichever thread and in whichever order they run, so only a missed
dependency between the kernels of one group (a read racing a write of the same memory) makes them differ. The
backwards run finds such a dependency whatever the threads' timing (on a loaded machine the team's worker seldom
runs beside the caller); a grouping that ignores arena slots or in-place targets fails seeds 14 and 12.
"""

from __future__ import annotations

import argparse
import gc
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

import jitorch as jt
from jitorch.codegen import cpu
from jitorch.jit import kernel_runs
from jitorch.jit.compile import CompiledFunction
from jitorch.jit.kernel_runs import KernelRun

MAPS = ("{} * 1.5 + 0.25", "{}.atan()", "({}).abs().sqrt()", "{}.sigmoid()", "{} * {} ", "({}).tanh() * 3")
REDUCTIONS = ("{}.sum({d})", "{}.amax({d})", "{}.mean({d})", "({}).pow(2).sum({d})")


@dataclass
class Case:
    """One drawn program: its source (a function of ``T``, the library, and the inputs ``a`` and ``b``), the
    inputs' sizes and dtype."""
    seed: int
    captured: bool = False  # the inputs captured by the compiled function (as an optimizer's parameters are)
    lines: list = field(default_factory=list)
    n: int = 0
    rows: int = 0
    cols: int = 0
    dtype: str = "float32"

    def source(self):
        body = "\n".join("    " + line for line in self.lines)
        return f"def program(T, a, b, c):\n{body}\n"

    def inputs(self):
        rng = np.random.default_rng(self.seed)
        return (rng.standard_normal(self.n).astype(self.dtype),
                rng.standard_normal((self.rows, self.cols)).astype(self.dtype),
                rng.standard_normal((self.rows, self.cols)).astype(self.dtype))


def _view(rng, name, shape, copies=True):
    """A view of value ``name`` (of ``shape``) and the view's shape: an offset slice, a step, a transpose, a column
    window or the value itself, or where ``copies``, a flip (a copy)."""
    if len(shape) == 1:
        n = shape[0]
        kind = rng.integers(4)
        if kind == 0 and n > 8:
            lo = int(rng.integers(0, n // 2))
            hi = int(rng.integers(lo + 1, n + 1))
            return f"{name}[{lo}:{hi}]", (hi - lo,)
        if kind == 1 and n > 8:
            step = int(rng.integers(2, 5))
            lo = int(rng.integers(0, step))
            return f"{name}[{lo}::{step}]", (len(range(lo, n, step)),)
        if kind == 2 and copies:
            return f"{name}.flip(0)", (n,)
        for r in (7, 8, 12, 16, 24, 32, 48, 64, 96, 128):
            if n % r == 0 and n // r > 1 and rng.integers(2):
                return f"{name}.view({r}, {n // r}).t()", (n // r, r)
        return name, shape
    r, c = shape
    kind = rng.integers(5)
    if kind == 0:
        return f"{name}.t()", (c, r)
    if kind == 1 and c > 2:
        lo = int(rng.integers(0, c - 1))
        hi = int(rng.integers(lo + 1, c + 1))
        return f"{name}[:, {lo}:{hi}]", (r, hi - lo)
    if kind == 2 and r > 2:
        lo = int(rng.integers(0, r - 1))
        return f"{name}[{lo}:]", (r - lo, c)
    if kind == 3 and copies:
        return f"{name}.flip(1)", (r, c)
    return name, shape


def generate_shared(seed):
    """The program of ``seed`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    case = Case(seed, captured=bool(rng.random() < 0.4))
    case.rows = int(rng.choice([64, 96, 128, 200]))
    case.cols = int(rng.choice([96, 128, 160, 256]))
    case.n = case.rows * case.cols * int(rng.choice([1, 2])) + int(rng.choice([0, 0, 777]))
    case.dtype = "float32" if rng.random() < 0.7 else "float64"
    values = {"a": (case.n,), "b": (case.rows, case.cols), "c": (case.rows, case.cols)}
    forms = np.random.default_rng([seed, 1])  # (a stream of its own: a write's form leaves later draws alone)
    results = []
    for k in range(int(rng.integers(4, 14))):
        name = str(rng.choice(sorted(values)))
        roll = rng.random()
        if roll < 0.3:
            _write(rng, forms, case, name, values)
            continue
        view, shape = _view(rng, name, values[name], copies=rng.random() < 0.15)
        out = f"v{k}"
        if roll < 0.5 and len(shape) == 2:
            d = int(rng.integers(2))
            case.lines.append(f"{out} = " + str(rng.choice(REDUCTIONS)).format(view, d=d))
            values[out] = (shape[1 - d],)
        elif roll < 0.6:
            # scaled by a full reduction of another value (clipping's coefficient)
            other = str(rng.choice(sorted(values)))
            case.lines.append(f"{out} = {view} * ({other}.pow(2).sum() + 1).rsqrt()")
            values[out] = shape
        else:
            text = str(rng.choice(MAPS))
            case.lines.append(f"{out} = " + text.format(view, view))
            values[out] = shape
        results.append(out)
    case.lines.append(f"return [{', '.join(results)}]")
    return case


def _write(rng, forms, case, name, values):
    """An in-place write into value ``name`` (an input or an earlier result): mostly of all of it (a kernel that
    writes it in place: an optimizer's update), else through a view (a scatter): by a scalar, or from another
    value of the written shape, as a method (``copy_``, ``add_``) or, as ``forms`` draws, the function's ``out=``
    (the same values)."""
    if rng.random() < 0.7:
        view, shape = name, values[name]
    else:
        view, shape = _view(rng, name, values[name], copies=False)
    others = [v for v in sorted(values) if values[v] == shape and v != name]
    kind = rng.random()
    if others and kind < 0.5:
        other = str(rng.choice(others))
        if forms.random() < 0.5:
            case.lines.append(f"T.mul({other}.atan(), 0.5, out={view})" if kind < 0.2
                              else f"T.add({view}, {other}.atan() * 0.5, out={view})")
        else:
            case.lines.append(f"{view}.{'copy_' if kind < 0.2 else 'add_'}({other}.atan() * 0.5)")
    else:
        case.lines.append(f"{view}.{rng.choice(['mul_', 'add_'])}({float(rng.choice([0.5, 2.0, -1.0]))})")


def _shared_groups(compiled):
    """How many kernels run in shared groups in ``compiled``'s graphs."""
    gc.collect()
    n = 0
    for entry in compiled.cache.values() if isinstance(compiled, CompiledFunction) else ():
        for unit in (entry.executable.runs or ()) if entry.executable is not None else ():
            if type(unit) is KernelRun:
                n += sum(len(seg) for seg, shared in zip(unit.segments, unit.shared) if shared)
    return n


def _run(lib, program, case, compiled=False):
    """``program``'s results and its inputs after two calls, each on fresh copies of the case's inputs, or where the
    case's inputs are captured, both on the same (the second call reads what the first wrote); and the function
    called."""
    if case.captured:
        inputs = [lib.tensor(x.copy()) for x in case.inputs()]
        fn = jt.compile(lambda: program(lib, *inputs)) if compiled else (lambda: program(lib, *inputs))
        for _ in range(2):
            out = fn()
    else:
        fn = jt.compile(program) if compiled else program
        for _ in range(2):
            inputs = [lib.tensor(x.copy()) for x in case.inputs()]
            out = fn(lib, *inputs)
    return [o.numpy().copy() if lib is jt else o.detach().numpy().copy() for o in [*out, *inputs]], fn


def _reversed_run(group, n):
    """`kernel_runs.SharedPrograms.run` made deterministic and adversarial: the group's rows dealt into three pieces
    per kernel, run on the calling thread from the last piece to the first, so that a kernel reading what another
    of its group writes (a dependency the grouping missed) reads the other's old or new values, whichever order the
    program gave, and the result differs from one thread's without depending on timing."""
    pieces = [call for part in kernel_runs.deal(group.items, 3 * len(group.items)) for call in part]
    for call in reversed(pieces):
        cpu.step_program()(kernel_runs._program([call]), 0, 0)


def check_shared(case):
    """Mismatches of ``case`` (texts; empty where it passes) and how many kernels its two-thread call ran in shared
    groups."""
    namespace = {}
    exec(case.source(), namespace)  # noqa: S102 (the fuzzer's own generated program)
    program = namespace["program"]
    expected, _ = _run(torch, program, case)
    before = jt.get_num_threads()
    got = {}
    shared = 0
    run = kernel_runs.SharedPrograms.run
    try:
        for threads in (2, "reversed", 1):
            jt.set_num_threads(1 if threads == 1 else 2)
            if threads == "reversed":
                kernel_runs.SharedPrograms.run = _reversed_run
            got[threads], compiled = _run(jt, program, case, compiled=True)
            kernel_runs.SharedPrograms.run = run
            if threads == 2:
                shared = _shared_groups(compiled)
    finally:
        kernel_runs.SharedPrograms.run = run
        jt.set_num_threads(before)
    problems = []
    # (the maps are well conditioned: atan, not sin, whose value at a sum of 2048 squares moved by the sum's
    # rounding, 1e-6 of 2047.55, by 2e-3 (seeds 199, 849, 946); a race moves values by far more, and the bits
    # against one thread are exact)
    tol = dict(rtol=1e-4, atol=1e-4) if case.dtype == "float32" else dict(rtol=1e-10, atol=1e-10)
    names = [f"result {i}" for i in range(len(expected) - 3)] + ["input a", "input b", "input c"]
    for name, want, two, backwards, one in zip(names, expected, got[2], got["reversed"], got[1]):
        if not np.array_equal(two, one, equal_nan=True):
            problems.append(f"{name}: two threads' bits differ from one thread's")
        if not np.array_equal(backwards, one, equal_nan=True):
            problems.append(f"{name}: the shared groups run backwards give other bits than one thread's")
        if want.shape != two.shape or not np.allclose(two, want, equal_nan=True, **tol):
            problems.append(f"{name}: compiled differs from torch")
    return problems, shared


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.shared", description=__doc__.split("\n")[0])
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=100)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    failing, with_groups = 0, 0
    for seed in range(args.start, args.start + args.seeds):
        case = generate_shared(seed)
        problems, shared = check_shared(case)
        with_groups += shared > 0
        if problems:
            failing += 1
            print(f"seed {seed} ({case.dtype}, captured {case.captured}, shared kernels {shared}):\n"
                  + case.source() + "  " + "\n  ".join(problems), flush=True)
        if (seed - args.start + 1) % 25 == 0:
            print(f"{seed - args.start + 1} seeds, {failing} failing, {with_groups} with shared groups", flush=True)
    print(f"seeds {args.start}..{args.start + args.seeds - 1}: {failing} failing, {with_groups} with shared groups")
    return 1 if failing else 0


if __name__ == "__main__":
    raise SystemExit(main())
