"""Hooks for code that knows it may be traced by `jitorch.compile` (as ``torch.compiler``).

Library code such as an optimizer keeps Python state across calls: buffers it
creates on its first step, learning rates a scheduler changes. A traced graph
is specialised to that state, so such code tells the compiler about it:

* `eager_state` creates persistent tensors for real while tracing (they become
  graph constants), and makes the trace serve this one call: the next call
  traces again, with the state in place;
* `dynamic_scalar` turns a Python number that changes between calls (a
  learning rate) into a captured 0-d tensor refreshed before every call;
* `guard` records a check of Python state the trace relies on; a call where it
  fails traces again instead of running a stale graph.
"""

from __future__ import annotations

import contextlib

from .ir.graph import Value
from .jit.tracer import current_tracer

__all__ = ["is_compiling", "eager_state", "dynamic_scalar", "guard"]


def is_compiling():
    """True while `jitorch.compile` is tracing a function."""
    return current_tracer() is not None


def reruns_eagerly():
    """True while `jitorch.compile` traces a graph whose calls run the function eagerly instead where a check of
    rule "finite_else_eager" fails (`ops.value_checks.EagerRerun`): library code may then take a faster form that
    is exact only for finite values (DCGAN's Winograd convolutions). Not in an export's or a backward's own trace,
    whose graphs run with no function to fall back on."""
    tracer = current_tracer()
    return tracer is not None and tracer.reruns_eagerly


@contextlib.contextmanager
def _untraced(tracer):
    """The block's ops run for real: ``tracer`` stops recording meanwhile."""
    from .ops import registry
    position = registry.DISPATCH_HOOKS.index(tracer)
    registry.DISPATCH_HOOKS.remove(tracer)
    try:
        yield
    finally:
        registry.DISPATCH_HOOKS.insert(position, tracer)


@contextlib.contextmanager
def eager_state():
    """Run the block eagerly, even while tracing: tensors it makes are real and persist (an
    optimizer's momentum buffers). Outside a trace it does nothing."""
    tracer = current_tracer()
    if tracer is None:
        yield
        return
    tracer.one_shot = True
    with _untraced(tracer):
        yield


def dynamic_scalar(read, dtype=None):
    """A Python number the traced code uses but that changes between calls (a learning rate a
    scheduler sets). Outside a trace: ``read()``. While tracing: a real 0-d tensor the graph
    captures, set to ``read()`` before every call of the compiled graph, so a new value needs no
    new trace. ``dtype`` defaults to the default float dtype."""
    tracer = current_tracer()
    if tracer is None:
        return read()
    from .ops.creation import scalar_overflows, tensor as make_tensor
    from .runtime.dtypes import float32, float64
    with _untraced(tracer):
        holder = make_tensor(read(), dtype=dtype)
    tracer.give_name(holder, "c")
    array = holder._array()  # (a 0-d view of the holder's memory)
    direct = holder.dtype in (float32, float64)

    def refresh():
        value = read()
        if direct and type(value) is float and not scalar_overflows(value, holder.dtype):
            # straight into its memory, as `dynamic_scalars` writes (NumPy's rounding of a Python float to the
            # dtype: fill_'s), its version counted; else fill_, which raises torch's error on overflow (its
            # dispatch cost 25 us a call, twice per GPT step)
            array[()] = value
            holder._bump_version()
        else:
            holder.fill_(value)
    tracer.refreshers.append(refresh)
    return holder


def dynamic_scalars(read, names, dtype):
    """`dynamic_scalar` for numbers that one ``read()`` returns together (a sequence, one per name in
    ``names``), each held in a 0-d CPU tensor of ``dtype`` that the graph captures as a constant of that
    name. One refresher writes them all before each call, straight into their memory (as NumPy assigns a
    Python number to an element of the dtype: ``fill_``'s rounding), counting the write on each tensor's
    version. Outside a trace: ``read()``."""
    tracer = current_tracer()
    if tracer is None:
        return read()
    from .ops.creation import tensor as make_tensor
    with _untraced(tracer):  # (what read() reads is read for real: not recorded, nor guarded on)
        values = read()
        if len(values) != len(names):
            raise ValueError(f"dynamic_scalars: read() gave {len(values)} numbers for {len(names)} names")
        holders = [make_tensor(v, dtype=dtype) for v in values]
    arrays = [h._array() for h in holders]  # (0-d views of the holders' memory)
    for holder, name in zip(holders, names):
        tracer.give_name(holder, name)

    def refresh():
        for holder, array, value in zip(holders, arrays, read(), strict=True):
            array[()] = value
            holder._bump_version()
    tracer.refreshers.append(refresh)
    return holders


def scalars_refreshed():
    """While tracing: whether the graph's captured scalars are set again before each of its calls, as
    `jitorch.compile` sets them (an export, or `jitorch.jit.trace`, keeps the values they hold now), so that
    library code may hand the graph numbers it computes per call (`dynamic_scalars`) instead of ops. False
    outside a trace."""
    tracer = current_tracer()
    return tracer is not None and tracer.refreshed


def counted_increments(counter):
    """While tracing: k where the traced value of the captured tensor ``counter`` is, at this point of
    the trace, its value before the call plus k increments by 1 that the traced code made
    (``counter.add_(1)``, each in the counter's dtype); None where it is anything else (an input,
    another write, a view of other memory) or outside a trace. Read off the graph: the chain of ``add``
    nodes from the counter's current value back to its constant. An optimizer's bias corrections then
    come from the counter's value at each call (`dynamic_scalars`) instead of ops in the graph."""
    tracer = current_tracer()
    if tracer is None:
        return None
    value = tracer.value_of(counter)
    k = 0
    while value.node is not None:
        node = value.node
        if node.op.name != "add" or len(node.args) != 3 or not _is_one(node.args[1]) or not _is_one(node.args[2]) \
                or not isinstance(node.args[0], Value):
            return None
        value = node.args[0]
        k += 1
    graph = tracer.graph
    name = value.name
    if graph.constants.get(name) is not value or graph.constant_tensors.get(name) is not counter:
        return None
    return k


def _is_one(v):
    return type(v) in (int, float) and v == 1


def guard(check, description=None):
    """While tracing, make the graph valid only while ``check()`` (no arguments) returns True;
    ``description`` names the assumption in the recompile log. Outside a trace it does nothing."""
    tracer = current_tracer()
    if tracer is not None:
        if description is not None:
            check.__doc__ = description
        tracer.python_guards.append(check)
