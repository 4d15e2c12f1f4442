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

A large graph's call is dominated by its kernels, not by Python, and Python's compiler takes about
20 microseconds a line: a GPT training step's 1,600 lines took 25 ms to compile, a tenth of its warm
first call. There each step's lines become a function of the names they bind (`Source.shared`), which
the steps whose lines differ only in those names share (a model's layers, an optimizer's update of each
parameter), and the call walks a table of those functions and their arguments (`Source.calls`): 36
functions of 229 lines for that step's 433 steps. A run of kernels (`jit.kernel_runs`) is patched the same way,
each kernel's lines a shared function called from a table of the run's: the step's first call, which sets up
AdamW's state, made one function of 888 lines of its optimizer's run (compiled in 20-30 ms); with them shared,
the call is 346 lines, compiled in 7 ms.

``JITORCH_LOGS=codegen`` logs each generated function's source.
"""

from __future__ import annotations

from .pycode import compiled


class Source:
    """Python source under construction, and the objects its names stand for."""

    def __init__(self):
        self.lines = []
        self.namespace = {}
        self._ids = {}
        self.profiled = False  # steps emit the lines that report them to a profiler's recorder ``_r``
        self._used = None  # while `shared` collects a step's lines: name -> the parameter it is passed as
        self._shared = {}  # the lines of a shared function, with its parameters -> its name
        self._definitions = []  # the shared functions' source, compiled with the function
        self._tables = []  # (the table a `calls` loop walks, the calls it is made of)

    def name(self, obj, hint):
        """A global name bound to ``obj`` in the generated function (one per object); while `shared`
        collects lines, the parameter that the name is passed as."""
        found = self._ids.get(id(obj))
        if found is None:
            found = self._ids[id(obj)] = f"{hint}{len(self._ids)}"
            self.namespace[found] = obj
        if self._used is not None:
            return self._used.setdefault(found, f"p{len(self._used)}")
        return found

    def shared(self, fill, params):
        """(the name of a function of the local variables named in the list ``params`` and of the names `name`
        gives the lines ``fill(self)`` emits (at indent 1, reading no other local variable), defined once for
        all the lines that differ only in those names; those names, as the function takes them after
        ``params``). See the module docstring; `calls` calls it."""
        lines, used = self.lines, self._used
        self.lines, self._used = [], {}
        try:
            fill(self)
            text, names = "\n".join(self.lines), self._used
        finally:
            self.lines, self._used = lines, used
        function = self._shared.get(text)
        if function is None:
            function = self._shared[text] = f"_step{len(self._shared)}"
            self._definitions.append(f"def {function}({', '.join([*params, *names.values()])}):\n{text}\n")
        return function, list(names)

    @property
    def sharing(self):
        """Whether the lines emitted now are collected by `shared` (a function of their names)."""
        return self._used is not None

    def calls(self, calls, params, indent, kept=None):
        """Emit a loop calling each of ``calls`` in order, (a function `shared` named, or a callable object;
        the names of the objects it takes after ``params``), on the local variables ``params`` and those
        objects; ``kept``: a local variable that holds the list of their results. Its table of functions and
        arguments is made when the source is compiled (`function`)."""
        table = []
        self._tables.append((table, calls))
        if kept is not None:
            self.emit(f"{kept} = [_f({', '.join(params)}, *_a) for _f, _a in {self.name(table, 'calls')}]", indent)
            return
        self.emit(f"for _f, _a in {self.name(table, 'calls')}:", indent)
        self.emit(f"_f({', '.join(params)}, *_a)", indent + 1)

    def emit(self, line, indent=1):
        self.lines.append("    " * indent + line)

    def function(self, name, params, tail, head=()):
        """Compile the ``head`` lines, the lines, then the ``tail`` lines, as ``def name(params)``; returns
        (the function, its source). One body may be compiled with several heads and tails."""
        text = "".join(self._definitions) + f"def {name}({params}):\n" + "\n".join(
            ["    " + line for line in head] + self.lines + ["    " + line for line in tail]) + "\n"
        code = compiled(text, f"<jitorch {name}>")
        exec(code, self.namespace)  # noqa: S102 - our own generated source, as torch.fx's codegen
        for table, calls in self._tables:
            table[:] = [(self.namespace[f] if isinstance(f, str) else f, tuple(self.namespace[n] for n in names))
                        for f, names in calls]
        return self.namespace[name], text
