"""The profiler's slot: lower layers report what they run to ``RECORDER`` while it is set.

`jitorch.profiler` (a library) installs a recorder here while a profile records, and sets it back to None
after. The layers below it never import the profiler: each checks this slot with one attribute load and a
None test, so a run without a profile pays nothing more. While it is set, the recorder is told of:

* ``op(op, args, run, inplace=False)``: an op dispatched by the registry (``run()`` performs it and returns
  its result; ``inplace``: the op's in-place form);
* ``function(name, args, run)``: a call recorded as one op named ``name`` (``aten::gelu``: a library function
  that is no registry op, computed as it is without a profile);
* ``backward(node, run)``: an autograd node evaluated by the engine (``run()`` computes its gradients);
* ``allocated(storage)``: a new storage of memory (its free is the recorder's to watch, by a weak reference);
* ``compiled_call(graph, run)``: a call of a compiled graph (the executor's generated call, instrumented:
  ``graph.profiled_steps`` documents what it reports about its kernels and eager steps).
"""

RECORDER = None
