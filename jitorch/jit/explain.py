"""`jitorch.explain`: what compiling a function for some arguments does, in words."""

from __future__ import annotations

from ..ir.printer import op_counts
from . import plan_cache
from .compile import CompiledFunction, compile


class Explanation:
    """A printable report: the traced graph, its guards, the cache, or why it runs eagerly."""

    def __init__(self, name, entry, cache, reused, executable=None, retrace_reason=None):
        self.name = name
        self.retrace_reason = retrace_reason  # why these arguments were traced again, when they were
        self.steps = list(executable.steps) if executable is not None else []
        self.call_source = getattr(executable, "source", None)  # the generated Python of a call
        self.kernel_cache = _cache_info() if executable is not None else None
        self.plan_cache = plan_cache.info() if executable is not None else None  # this process's counts
        self.graph = entry.graph if entry is not None else None
        self.guards = entry.guards() if entry is not None else []
        self.eager_reason = entry.eager_reason if entry is not None else "the recompile limit was reached"
        self.cache_entries = len(cache)
        self.reused = reused
        self.split = entry.split if entry is not None else None  # the forward and backward of calls with grad

    @property
    def compiles(self):
        return self.graph is not None

    def __str__(self):
        lines = [f"jitorch.explain({self.name})"]
        if self.graph is None:
            lines.append(f"  runs eagerly: {self.eager_reason}")
        else:
            g = self.graph
            lines.append(f"  traced: {len(g.inputs)} inputs, {len(g.constants)} constants, {len(g.nodes)} nodes "
                         f"({op_counts(g.nodes)})")
            if g.mutations:
                lines.append(f"  writes back into: {', '.join('%' + t.name for t, _ in g.mutations)}")
        if self.split is not None:
            forward, backward = self.split.forward.graph, self.split.backward.graph
            lines.append(f"  with grad: a forward graph of {len(forward.nodes)} nodes saving {self.split.saved} "
                         f"values, and a backward graph of {len(backward.nodes)} nodes ({op_counts(backward.nodes)})")
        lines.append(f"  cache: {self.cache_entries} entr{'y' if self.cache_entries == 1 else 'ies'}; "
                     f"{'these arguments reuse one' if self.reused else 'these arguments were traced now'}")
        if not self.reused and self.retrace_reason is not None:
            lines.append(f"  retraced: {self.retrace_reason}")
        if self.guards:
            lines.append("  guards:")
            lines.extend(f"    {g}" for g in self.guards)
        if self.steps:
            kernels = [st for st in self.steps if hasattr(st, "kernel")]
            lines.append(f"  kernels: {len(kernels)}, in launch order with the eager ops between them:")
            for st in self.steps:
                if hasattr(st, "kernel"):
                    lines.append(f"    kernel {st.kernel.name} ({st.kernel.source.kind}): {', '.join(st.kernel.ops)}")
                else:
                    lines.append(f"    eager: {', '.join(n.op.name for n in st.nodes)} ({st.reason})")
        if self.call_source is not None:
            lines.append(f"  a call runs {self.call_source.count(chr(10))} lines of generated Python "
                         "(.call_source; JITORCH_LOGS=codegen prints them)")
        if self.kernel_cache is not None:
            c = self.kernel_cache
            lines.append(f"  kernel cache: {c.memory_hits} memory hits, {c.disk_hits} disk hits, {c.misses} "
                         f"compiled; {c.entries} entries on disk in {c.directory}")
            p = self.plan_cache
            lines.append(f"  fusion plan cache: {p['hits']} hits, {p['misses']} misses, {p['rejected']} rejected, "
                         f"{p['writes']} written (graphs of {plan_cache.MIN_NODES} nodes or more)")
        if self.graph is not None:
            lines.append("  graph:")
            lines.extend(f"    {line}" for line in str(self.graph).splitlines())
        return "\n".join(lines)

    __repr__ = __str__


def explain(fn, *args, **kwargs):
    """Report what ``jitorch.compile(fn)`` does for these arguments: the traced graph,
    its guards and cache entries, or why the function would run eagerly. Nothing runs."""
    compiled = fn if isinstance(fn, CompiledFunction) else compile(fn)
    from .compile import guard_key, python_guards_hold
    reused = guard_key(args, kwargs) in compiled.cache
    retraced_before = compiled.retrace_reason
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        entry = compiled._entry(args, kwargs)
        if entry is not None and entry.graph is not None and not python_guards_hold(entry.graph):
            # what a call would do: the cached graph assumed Python state (a captured variable) that changed
            entry = compiled._switch(entry, args, kwargs)
            reused = entry is not None and compiled.retrace_reason is retraced_before
    executable = compiled._executable(entry) if entry is not None and entry.graph is not None else None
    reason = compiled.retrace_reason if compiled.retrace_reason is not retraced_before else None
    return Explanation(compiled.name, entry, compiled.cache, reused, executable, reason)


def _cache_info():
    from ..codegen.cache import default_cache
    return default_cache().info()
