"""Consecutive kernel steps of a compiled call run by one native call.

Between two kernels of a compiled call, the generated Python (`executor`) patches the next kernel's argument
array and calls its machine code through ctypes. In a training step that Python runs with caches the kernels
and products have just filled, about three times slower than the same lines in a small step (gpt-4x128: the
interpreter's samples, perf, 3.8 ms per step against 1.3 in the same step at tiny sizes). A *run* is a
sequence of consecutive kernel steps whose argument arrays can all be patched before the first of them runs:
the call patches them all, then hands the kernels, in order, to one native loop (`codegen.cpu.step_program`) over a
program held by the arena (each kernel's entry point, its argument array, its range), instead of one ctypes call
per kernel. The kernels, their arguments and their order are the ones the steps would run, so the results are
the same bits.

A step joins a run when it is a CPU kernel over its whole loop (not a split reduction), checks no gather's
indices (they are read before the kernel, and an earlier kernel of the run may write them), and copies no value
that an earlier kernel of the run writes (a compact copy of a value laid out for other readers is made while
patching). A kernel that splits its loop across threads runs in the program only while the call runs on one
thread (``jitorch.get_num_threads() == 1``); otherwise each such kernel is called alone, after the same patching,
and the kernels between them run in programs of their own. Profiled calls run every kernel alone, so that each
is a span.
"""

from __future__ import annotations

import ctypes
import functools

from ..codegen import cpu

# Runs shorter than this stay steps of their own (one kernel gains nothing from a program).
MIN_RUN = 2


class KernelRun:
    """Consecutive `executor.KernelStep` s run by one native call (see the module docstring)."""

    def __init__(self, steps):
        self.steps = steps
        self.parallel = any(step.kernel.parallel for step in steps)
        # at more than one thread: each kernel that splits across them alone, the others between them in programs
        # of their own where there are `MIN_RUN` or more
        self.segments = []
        for step in steps:
            if step.kernel.parallel or not self.segments or self.segments[-1][-1].kernel.parallel:
                self.segments.append([step])
            else:
                self.segments[-1].append(step)

    def programs(self, arena, inplace):
        """The run's programs over ``arena``'s argument arrays (int64 ctypes arrays, `cpu.step_program`'s): the
        whole run's, then, where a kernel splits across threads, each of `segments` 's that has `MIN_RUN` kernels
        or more, else None; ``inplace``: with the kernels that write in place where the step has one
        (`executor.Plan.inplace`)."""
        def program(steps):
            words = [len(steps)]
            for step in steps:
                kernel = step.inplace_kernel if inplace and step.inplace_kernel is not None else step.kernel
                words += [kernel.address, ctypes.addressof(arena.args[step]), 0, kernel.outer]
            return (ctypes.c_int64 * len(words))(*words)
        segments = [program(seg) if len(seg) >= MIN_RUN else None for seg in self.segments] if self.parallel else []
        return [program(self.steps), *segments]

    def emit(self, src, indent):
        """The run's lines of the generated call: each step's argument patching, then the program; where a kernel
        splits across threads and the call has more than one, that kernel alone and the programs of the others.
        In a call of shared functions (`straightline.Source.shared`: a large graph's), each step's patching is a
        shared function too, called from a table: an optimizer's run of a few hundred kernels otherwise made
        one function of its 900 lines, which Python compiled in 20-30 ms of the step's warm first call."""
        if src.sharing:
            params = ["env", "arena", "inplace"]
            # (the compact copies a step's patching makes are returned, and kept until the program has run; a step
            # whose arguments are all fixed patches nothing)
            src.calls([src.shared(functools.partial(_patching, step), params) for step in self.steps
                       if step.dynamic_inputs or step.fresh_outputs or step.inplace_outputs], params, indent,
                      kept="_kept")
        else:
            for k, step in enumerate(self.steps):
                step.emit_arguments(src, indent, tag=f"{k}_")
        src.emit(f"programs = arena.programs[{src.name(self, 'run')}][inplace]", indent)
        if not self.parallel:
            src.emit("_step_program(programs[0], 0, 0)", indent)
            return
        src.emit("if _num_threads() == 1:", indent)
        src.emit("_step_program(programs[0], 0, 0)", indent + 1)
        src.emit("else:", indent)
        for k, segment in enumerate(self.segments, 1):
            if len(segment) >= MIN_RUN:
                src.emit(f"_step_program(programs[{k}], 0, 0)", indent + 1)
                continue
            for step in segment:
                src.emit("a = arena.args[" + src.name(step, "step") + "]", indent + 1)
                step.emit_call(src, indent + 1)

    def __repr__(self):
        return f"<run of {len(self.steps)} kernels>"


def _patching(step, src):
    """A step's argument patching as the body of a shared function, which returns the compact copies it made."""
    held = step.emit_arguments(src, 1)
    if held:
        src.emit(f"return ({', '.join(held)},)", 1)


def kernel_runs(steps, joins):
    """``steps`` with each maximal sequence of consecutive steps that ``joins`` takes (a predicate on a step) and
    that may be patched before any of them runs made one `KernelRun` (sequences of at least `MIN_RUN` steps);
    the steps as they are where there is no native code to run a program (asked for only where a run forms)."""
    units, current, written = [], [], set()

    def close():
        units.extend([KernelRun(list(current))] if len(current) >= MIN_RUN else current)
        current.clear()
        written.clear()

    for step in steps:
        if not joins(step):
            close()
            units.append(step)
            continue
        if step.compacted & written:  # it copies a value an earlier kernel of the run writes
            close()
        current.append(step)
        written.update(step.outputs)
    close()
    if len(units) < len(steps) and cpu.step_program() is None:
        return list(steps)
    return units
