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

At more than one thread, consecutive kernels of a run that touch no memory another of them writes (`shared_groups`:
an optimizer's updates, one kernel per parameter; clipping's sums of squares, one per gradient) run as one fork of
the team instead: their rows, all kernels' together, are dealt into one program per thread of near-equal work
(`SharedPrograms`), a kernel's outer loop cut where a part's share ends. GPT-4x128's AdamW update of its 18
matrices was 12 forks and joins (one per kernel over 2**15 elements) with the 6 others run on the calling thread
while the workers waited, and clipping's 18 sums of squares of those matrices ran one after another on the calling
thread; each is now one fork. A kernel's rows give the same values whichever thread runs them and wherever its loop
is cut (kernels that split already are cut at any row; a full reduction goes whole), so the results are the same
bits at any thread count.
"""

from __future__ import annotations

import ctypes
import functools

from ..codegen import cpu
from ..codegen.cpu import PARALLEL_MIN_WORK
from ..runtime import threads

# Runs shorter than this stay steps of their own (one kernel gains nothing from a program).
MIN_RUN = 2


class KernelRun:
    """Consecutive `executor.KernelStep` s run by one native call (see the module docstring)."""

    def __init__(self, steps, memory=None):
        self.steps = steps
        # at more than one thread: each group of independent kernels (`shared_groups`, given ``memory``) dealt among
        # the threads; of the other kernels, each that splits across them alone, the others between them in
        # programs of their own where there are `MIN_RUN` or more
        self.segments, self.shared = [], []
        for group, shared in shared_groups(steps, memory):
            if shared:
                self.segments.append(group)
                self.shared.append(True)
                continue
            for step in group:
                if step.kernel.parallel or not self.segments or self.shared[-1] \
                        or self.segments[-1][-1].kernel.parallel:
                    self.segments.append([step])
                    self.shared.append(False)
                else:
                    self.segments[-1].append(step)
        self.parallel = any(step.kernel.parallel for step in steps) or any(self.shared)

    def programs(self, arena, inplace):
        """The run's programs over ``arena``'s argument arrays (int64 ctypes arrays, `cpu.step_program`'s): the
        whole run's, then, where a kernel splits across threads or a group is `shared`, per segment of `segments` a
        `SharedPrograms` where it is shared, else its program where it has `MIN_RUN` kernels or more, else None;
        ``inplace``: with the kernels that write in place where the step has one (`executor.Plan.inplace`)."""
        def program(steps):
            return _program([(kernel.address, ctypes.addressof(arena.args[step]), 0, kernel.outer)
                             for step, kernel in ((step, _kernel(step, inplace)) for step in steps)])
        segments = [SharedPrograms(seg, arena, inplace) if shared else program(seg) if len(seg) >= MIN_RUN else None
                    for seg, shared in zip(self.segments, self.shared)] if self.parallel else []
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
        for k, (segment, shared) in enumerate(zip(self.segments, self.shared), 1):
            if shared:
                src.emit(f"programs[{k}].run(_num_threads())", indent + 1)
                continue
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


def kernel_runs(steps, joins, memory=None):
    """``steps`` with each maximal sequence of consecutive steps that ``joins`` takes (a predicate on a step) and
    that may be patched before any of them runs made one `KernelRun` (sequences of at least `MIN_RUN` steps);
    the steps as they are where there is no native code to run a program (asked for only where a run forms).
    ``memory``: a value's memory (`shared_groups`), None to share no group among the threads."""
    units, current, written = [], [], set()

    def close():
        units.extend([KernelRun(list(current), memory)] if len(current) >= MIN_RUN else current)
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


def shared_groups(steps, memory):
    """``steps`` (kernel steps of a run, in order) cut into consecutive groups, each with whether its kernels run
    as one fork of the thread team (`SharedPrograms`): a maximal sequence of kernels none of which writes memory
    another of them reads or writes, ``memory(value)`` naming the memory a value lives in (values with one name
    share memory; the executor's: an arena slot, or the constant an in-place output updates, through views),
    shared where it holds two kernels or more, each over its own loop with no view or compact copy among its
    arguments, and `PARALLEL_MIN_WORK` elements or more in all. Without ``memory``, one group, not shared."""
    if memory is None:
        return [(list(steps), False)]
    groups, current, read, written = [], [], set(), set()

    def close():
        if current:
            groups.append((list(current), len(current) >= 2 and sum(s.kernel.source.work for s in current)
                           >= PARALLEL_MIN_WORK and all(_dealable(s) for s in current)))
        current.clear()
        read.clear()
        written.clear()

    for step in steps:
        reads = {memory(v) for v in step.inputs}
        writes = {memory(v) for v in step.outputs}
        if writes & (read | written) or reads & written or not _dealable(step):
            close()
        current.append(step)
        read.update(reads)
        written.update(writes)
        if not _dealable(step):
            close()
    close()
    return groups


def _dealable(step):
    """Whether a kernel step's rows may be dealt among threads by `SharedPrograms`: its arguments the values
    themselves (no view, no compact copy made while patching), its outer iterations independent, or only one
    (a full reduction, which goes whole to one thread: clip_grad_norm_'s per-parameter sums of squares)."""
    source = step.kernel.source
    return not step.views and not step.compacted and (source.mode == "thread" or source.outer == 1)


class SharedPrograms:
    """A shared group of a run (`shared_groups`) over an arena's argument arrays: per thread count, one program
    per thread (`cpu.step_program`'s, each call over its own range) dealing the group's rows into parts of
    near-equal work, in order, a kernel cut at a row where a part's share ends (one of a single outer iteration
    goes whole); `run` forks the team over them (`threads.run_native_parts`)."""

    def __init__(self, steps, arena, inplace):
        self.items = []  # (entry, argument array address, outer, work) per kernel
        for step in steps:
            kernel = _kernel(step, inplace)
            self.items.append((kernel.address, ctypes.addressof(arena.args[step]), kernel.outer, kernel.source.work))
        self._by_threads = {}

    def parts(self, n):
        """The ``n`` threads' programs (fewer where there are fewer rows), made once per ``n``."""
        programs = self._by_threads.get(n)
        if programs is None:
            programs = self._by_threads[n] = [_program(part) for part in deal(self.items, n)]
        return programs

    def run(self, n):
        """Run the group's kernels over all their rows, on ``n`` threads."""
        programs = self.parts(n)
        if len(programs) == 1 or not threads.run_native_parts(_program_entry(), programs):
            for program in programs:
                cpu.step_program()(program, 0, 0)


def deal(items, n):
    """``items`` ((entry, arguments, outer, work) per kernel) as at most ``n`` lists of (entry, arguments, lo, hi),
    every row of every kernel in exactly one, of near-equal work, in order."""
    total = sum(work for _, _, _, work in items)
    parts, current, done = [], [], 0.0
    for entry, args, outer, work in items:
        lo = 0
        while lo < outer:
            goal = total * (len(parts) + 1) / n
            if len(parts) == n - 1 or outer == 1 or work <= 0:  # (rows of no work: whole)
                hi = outer
            else:
                per_row = work / outer
                hi = lo + max(1, min(outer - lo, round((goal - done) / per_row)))
            current.append((entry, args, lo, hi))
            done += (hi - lo) * work / outer
            lo = hi
            if done >= goal and len(parts) < n - 1:
                parts.append(current)
                current = []
    if current:
        parts.append(current)
    return parts


def _kernel(step, inplace):
    """The kernel a run's program calls for ``step``: its in-place one where ``inplace`` and the step has one."""
    return step.inplace_kernel if inplace and step.inplace_kernel is not None else step.kernel


def _program(calls):
    """`cpu.step_program`'s words for ``calls`` ((entry, argument array address, lo, hi) per kernel)."""
    words = [len(calls)]
    for call in calls:
        words += call
    return (ctypes.c_int64 * len(words))(*words)


@functools.cache
def _program_entry():
    """The address of `cpu.step_program`'s machine code (what `threads.run_native_parts` calls)."""
    return ctypes.cast(cpu.step_program(), ctypes.c_void_p).value
