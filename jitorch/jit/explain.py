"""`jitorch.explain`: what compiling a function for some arguments does, in words."""

from __future__ import annotations

import warnings

from ..ir.parser import ParseError, parse
from ..ir.printer import op_counts
from . import plan_cache
from .compile import CompiledFunction, _tensor_leaves, compile
from .errors import TraceError
from .report import GraphView, write_html
from .results import captured_parameters


class Explanation:
    """A printable report: the traced graph, its guards, the cache, or why it runs eagerly."""

    def __init__(self, name, entry, cache, reused, executable=None, retrace_reason=None, traced=None,
                 make_split=None):
        self.name = name
        self.executable = executable
        # () -> the graph as traced, before the passes (which rewrite the traced graph in place), or a
        # string saying why it cannot be had; replaced by what it gives when first asked
        self._traced = traced
        # () -> the forward and backward graphs a call with grad compiles, cut when first asked for (None:
        # the call has them already, or needs none)
        self._make_split = make_split
        self.retrace_reason = retrace_reason  # why these arguments were traced again, when they were
        self.steps = list(executable.steps) if executable is not None else []
        self.call_source = getattr(executable, "source", None)  # the generated Python of a call
        self.kernel_cache = _cache_info() if executable is not None else None
        self.plan_cache = plan_cache.info() if executable is not None else None  # this process's counts
        self.graph = entry.graph if entry is not None else None
        self.guards = entry.guards() if entry is not None else []
        self.eager_reason = entry.eager_reason if entry is not None else "the recompile limit was reached"
        self.cache_entries = len(cache)
        self.entries = [dict(calls=e.calls, nodes=None if e.graph is None else len(e.graph.nodes),
                             eager_reason=e.eager_reason, guards=e.guards(), this=e is entry) for e in cache.values()]
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
        runs = [len(u.steps) for u in getattr(self.executable, "runs", None) or () if hasattr(u, "steps")]
        if runs:
            lines.append(f"  {sum(runs)} of its kernels run in {len(runs)} runs, one native call each "
                         f"(jit.kernel_runs): {len(self.executable.runs)} Python-level steps for {len(self.steps)}")
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

    def graph_views(self):
        """The graphs the HTML report draws: as traced (before the passes), after the passes with
        the steps that run it, and for calls with grad the forward and backward graphs."""
        if self.graph is None:
            return []
        if callable(self._traced):  # made once: it may trace the function again
            self._traced = self._traced()
        traced = self._traced if self._traced is not None else "not kept by this explanation"
        if self._make_split is not None:
            self.split, self._make_split = self._make_split(), None
        views = [GraphView("before", "Traced graph, before the passes", traced if not isinstance(traced, str) else None,
                           unavailable=traced if isinstance(traced, str) else None)]
        if self.executable is not None:
            views.append(GraphView("after", "After the passes, as kernels and eager steps", self.executable.graph,
                                   self.executable.steps))
        if self.split is not None:
            views.append(GraphView("forward", "Forward of a call with grad", self.split.forward.graph,
                                   self.split.forward.steps))
            views.append(GraphView("backward", "Backward of a call with grad", self.split.backward.graph,
                                   self.split.backward.steps))
        return views

    def to_html(self, path, kernel_times=None, profile=None):
        """Write this explanation as one self-contained HTML file at ``path`` (atomically): the graphs
        drawn as SVG with each kernel in its colour, each kernel's ops, LLVM IR and assembly (PTX on
        CUDA), the guards, the cache entries, the IR texts and the generated call source.

        ``kernel_times`` maps kernel names to seconds measured by the caller (a profile); the report
        then shows each kernel's share of its graph's kernel time. Kernels of the forward and backward
        graphs of a call with grad are named ``"forward/<name>"`` and ``"backward/<name>"``. An
        unknown name or a time that is not a finite number >= 0 raises ValueError, before writing.

        ``profile`` (instead of ``kernel_times``): a finished `jitorch.profiler.profile` that recorded
        calls of this function with these arguments; its kernel times are this report's shares."""
        views = self.graph_views()
        if profile is not None:
            if kernel_times is not None:
                raise ValueError("to_html: pass kernel_times or profile, not both")
            kernel_times = self._profiled_times(profile, views)
        write_html(self, views, path, kernel_times)

    def _profiled_times(self, profile, views):
        """Seconds per kernel of this report from a profile: the kernels of this function's graphs (a
        profile also holds other functions' kernels, and those of this function's other cache entries,
        whose graphs this report does not draw)."""
        known = {name for view in views if view.steps is not None for name, _, _ in view.kernels()}
        times = {name: us * 1e-6 for name, us in profile.kernel_times(self.name).items() if name in known}
        if not times:
            raise ValueError(f"to_html: the profile recorded no kernel of {self.name}'s compiled graphs: "
                             "profile calls of the compiled function with these arguments")
        return times


def explain(fn, *args, html=None, kernel_times=None, profile=None, **kwargs):
    """Report what ``jitorch.compile(fn)`` does for these arguments: the traced graph,
    its guards and cache entries, or why the function would run eagerly. Nothing runs.

    ``html``: a path where the report is also written as one self-contained HTML file (see
    `Explanation.to_html`, which takes ``kernel_times`` or a ``profile`` of calls of ``fn``); for a
    call that needs grad, the forward and backward graphs a call would compile are made for the
    report too."""
    if (kernel_times is not None or profile is not None) and html is None:
        raise ValueError("jitorch.explain: kernel_times and profile are for the HTML report: pass html= as well")
    compiled = fn if isinstance(fn, CompiledFunction) else compile(fn)
    from .compile import guard_key, python_guards_hold
    reused = guard_key(args, kwargs) in compiled.cache
    retraced_before = compiled.retrace_reason
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        entry = compiled._entry(args, kwargs)
        if entry is not None and entry.graph is not None and not python_guards_hold(entry.graph):
            # what a call would do: the cached graph assumed Python state (a captured variable) that changed
            entry = compiled._switch(entry, args, kwargs)
            reused = entry is not None and compiled.retrace_reason is retraced_before
    traced = None
    if entry is not None and entry.graph is not None:
        traced = _traced_graph(compiled, entry, args, kwargs)
    executable = compiled._executable(entry) if entry is not None and entry.graph is not None else None
    reason = compiled.retrace_reason if compiled.retrace_reason is not retraced_before else None
    make_split = None
    if executable is not None and entry.split is None and entry.backward is None \
            and compiled._differentiable(entry) and compiled._splittable(entry.graph):
        # (decided now, under the grad mode of the call explained)
        def make_split():
            entry.split = compiled._split(entry, _tensor_leaves(args, kwargs), args, kwargs,
                                          list(captured_parameters(entry.graph).values()))
            return entry.split
    explanation = Explanation(compiled.name, entry, compiled.cache, reused, executable, reason, traced, make_split)
    if html is not None:
        explanation.to_html(html, kernel_times, profile)
    return explanation


def _traced_graph(compiled, entry, args, kwargs):
    """() -> the entry's graph before the passes, which building its executable rewrites in place:
    a copy through its text while it is still as traced, else (an entry already compiled) a new trace
    of the same call, made only when asked for. A string says why there is none."""
    if entry.executable is None:
        text = str(entry.graph)

        def from_text():
            try:
                return parse(text)
            except ParseError as e:
                return f"its text does not parse back: {e}"
        return from_text

    def trace_again():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                return compiled._trace(args, kwargs)
            except TraceError as e:
                return f"tracing it again failed: {e}"
    return trace_again


def _cache_info():
    from ..codegen.cache import default_cache
    return default_cache().info()
