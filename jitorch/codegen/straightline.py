"""A compiled graph's call as straight-line Python, generated once per graph.

A call of a small compiled graph spends most of its time in Python, not in
its kernels: walking the steps, their per-call argument lists and the pytree
of outputs. Everything those walks decide is known when the graph is built
(which values are inputs, which outputs need fresh memory and of what shape,
which kernel runs single-threaded), so, as torch.fx does for its graph
modules, the plan is printed once as a Python function with those decisions
made and the objects it uses bound as globals. Steps that gain nothing from
it (eager steps, split reductions, CUDA launches) appear as a call of their
own ``run``.

``JITORCH_LOGS=codegen`` logs each generated function's source.
"""

from __future__ import annotations


class Source:
    """Python source under construction, and the objects its names stand for."""

    def __init__(self):
        self.lines = []
        self.namespace = {}
        self._ids = {}
        self.profiled = False  # steps emit the lines that report them to a profiler's recorder ``_r``

    def name(self, obj, hint):
        """A global name bound to ``obj`` in the generated function (one per object)."""
        found = self._ids.get(id(obj))
        if found is None:
            found = self._ids[id(obj)] = f"{hint}{len(self._ids)}"
            self.namespace[found] = obj
        return found

    def emit(self, line, indent=1):
        self.lines.append("    " * indent + line)

    def function(self, name, params, tail, head=()):
        """Compile the ``head`` lines, the lines, then the ``tail`` lines, as ``def name(params)``; returns
        (the function, its source). One body may be compiled with several heads and tails."""
        text = f"def {name}({params}):\n" + "\n".join(["    " + line for line in head] + self.lines
                                                        + ["    " + line for line in tail]) + "\n"
        code = compile(text, f"<jitorch {name}>", "exec")
        exec(code, self.namespace)  # noqa: S102 - our own generated source, as torch.fx's codegen
        return self.namespace[name], text
