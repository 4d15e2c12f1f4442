"""`jitorch.compile`: trace on the first call, reuse the graph while its guards hold.

A call's guard key is the structure of its arguments plus, per leaf, the
tensor's shape, dtype, device, contiguity and ``requires_grad``, or the Python
value itself. A key seen before reuses its cache entry; a new key traces
again, up to `config.recompile_limit` entries (counting those dropped because
the Python state they assumed changed), after which the function warns once
and runs eagerly. A function that cannot be traced runs eagerly with one
warning (``fullgraph=False``, the default) or raises (``fullgraph=True``).
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field

from ..runtime import grad_mode as _grad_mode
from ..runtime.autocast_mode import STATE as _autocast, restored as _autocast_restored
from ..runtime.grad_mode import is_grad_enabled, no_grad
from ..runtime.threads import is_warn_always_enabled
from ..ops import registry
from ..ops.registry import contiguous_strides_cached
from ..ops.random_ops import generator_states
from ..ops.value_checks import EagerRerun
from ..runtime import dtypes as _dtypes
from ..runtime.dtypes import get_default_dtype
from ..runtime.device import current_cuda_index, get_default_device
from ..tensor import Tensor
from ..ir.graph import Value
from ..runtime.pytree import tree_flatten, tree_unflatten
from ..runtime import logs
from ..autograd import saved_hooks as _saved_hooks
from ..autograd.engine import version_checked
from .differentiable import outputs_read_overwritten
from .errors import StateWriteError, TraceError
from .fingerprint import graph_fingerprint, transplant
from .output_bases import base_groups, eager_bases, return_bases
from .results import captured_parameters, python_guards_hold, returned_aliases, run_graph
from .tracer import current_tracer, trace_with_inputs


class config:
    """Settings of `jitorch.compile`."""

    recompile_limit = 8  # cache entries per compiled function, as torch's cache_size_limit


# "llvm": fused kernels compiled with llvmlite (the default); "interpreter": the reference interpreter.
BACKENDS = ("llvm", "interpreter")


def _layout(shape, strides):
    """True for a tensor with exactly contiguous strides, else its strides: a trace sees any other tensor's real
    strides (which decide whether ``reshape``, ``contiguous`` and ``view`` copy or alias, and, those of size-1
    and empty dims too, the strides of copies, ``_like`` factories and pointwise results, as torch's)."""
    return True if strides == contiguous_strides_cached(shape) else strides


def _leaf_guard(leaf):
    if isinstance(leaf, Tensor):
        return ("tensor", tuple(leaf.shape), leaf.dtype, leaf.device, _layout(leaf._shape, leaf._stride),
                leaf.requires_grad, leaf.requires_grad and leaf.grad_fn is None,
                leaf.requires_grad and leaf.grad_fn is None and leaf.grad is None)
    try:
        hash(leaf)
    except TypeError:
        return ("object", type(leaf), id(leaf))
    return ("value", type(leaf), leaf)


def _modes():
    """The global state a trace depends on: grad mode, the default dtype (Python numbers and factories
    take it), the default device (factories take it), autocast (the casts the trace records) and the current
    CUDA device (where ``device="cuda"`` puts a factory's tensors)."""
    return is_grad_enabled(), get_default_dtype(), _autocast.key, get_default_device(), current_cuda_index()


def guard_key(args, kwargs):
    """What a cached graph assumes about a call's arguments (and grad mode, the default dtype), as a
    hashable key."""
    leaves, spec = tree_flatten((args, kwargs))
    return (spec, _modes()) + tuple(_leaf_guard(leaf) for leaf in leaves)


def _tensor_args_key(args):
    """The guard key of a call whose arguments are all tensors, flat; None otherwise. (Its own
    shape, not `guard_key`'s: it is built on every call, so it takes what is cheap to read and to
    hash, the device as its type and index.)"""
    key = [(_grad_mode._state.enabled, _dtypes._default_dtype, _autocast.key, get_default_device(),
            current_cuda_index())]  # _modes()
    for a in args:
        if a.__class__ is not Tensor:
            return None
        shape, strides, device, requires_grad = a._shape, a._stride, a.device, a._requires_grad
        leaf = requires_grad and a.grad_fn is None  # a trace sees whether in-place ops on it are allowed
        key.append((shape, a.dtype, device.type, device.index, _layout(shape, strides), requires_grad, leaf,
                    leaf and a.grad is None, requires_grad and _has_hooks(a)))
    return tuple(key)


def _inputs_alias(leaves, graph, memo=None):
    """Whether a tensor the graph writes into shares memory with another tensor argument or captured
    tensor (or is passed twice), or is over read-only memory (`from_numpy` of a non-writeable array, whose
    eager write raises NumPy's ValueError: the compiled kernels would write through it, into an immutable
    ``bytes`` too). Tensors that are only read may share memory (inputs and targets sliced
    from one sequence). ``memo``: a one-item list holding the storages of the previous call (the arguments'
    and the captured tensors', in order, None for a captured non-tensor) and its answer, which holds again
    when they are the same storages: an optimizer's step writes hundreds of captured tensors, whose check
    cost 0.17 ms per GPT step; comparing the storages, 0.04."""
    inputs = [a for a in leaves if isinstance(a, Tensor)]
    if memo is not None:
        storages = tuple(id(t._storage) for t in inputs) + tuple(
            id(t._storage) if isinstance(t, Tensor) else None for t in graph.constant_tensors.values())
        known = memo[0]
        if known is not None and known[0] == storages:
            return known[1]
        memo[0] = (storages, _inputs_alias(leaves, graph))
        return memo[0][1]
    by_value = dict(zip(graph.inputs, inputs))
    targets = [by_value[t] if t in by_value else graph.constant_tensors[t.name] for t, _ in graph.mutations]
    if any(isinstance(t, Tensor) and _read_only(t._storage) for t in targets):
        return True
    written = {id(t._storage) for t in targets if isinstance(t, Tensor)}
    everything = inputs + [t for t in graph.constant_tensors.values() if isinstance(t, Tensor)]
    touching = [id(t._storage) for t in everything if id(t._storage) in written]
    return len(touching) != len(written)


def _read_only(storage):
    data = None if storage.on_device else storage._data
    return data is not None and not data.flags.writeable


def describe_guards(key, names):
    """The guards of a key, one readable line per argument leaf."""
    lines = []
    lines.append(f"grad mode: {'enabled' if key[1][0] else 'disabled'}")
    lines.append(f"default dtype: {key[1][1]}")
    lines.append(f"autocast: {_show_autocast(key[1][2])}")
    lines.append(f"default device: {key[1][3]}")
    lines.append(f"current CUDA device: cuda:{key[1][4]}")
    for name, guard in zip(names, key[2:]):
        if guard[0] == "tensor":
            _, shape, dtype, device, layout, requires_grad, leaf, no_grad_yet = guard
            lines.append(f"{name}: Tensor shape={list(shape)} dtype={dtype} device={device} "
                         f"{_show_layout(layout)} requires_grad={requires_grad}"
                         + (" non-leaf" if requires_grad and not leaf else "") + (" grad=None" if no_grad_yet else ""))
        elif guard[0] == "value":
            lines.append(f"{name} == {guard[2]!r} ({guard[1].__name__})")
        else:
            lines.append(f"{name} is the same {guard[1].__name__} object")
    return lines


def guard_difference(old, new, names):
    """Why ``new`` misses the entry keyed ``old``: the first guard that differs."""
    if old[0] != new[0]:
        return "the structure of the arguments changed"
    if old[1][0] != new[1][0]:
        return f"grad mode changed to {'enabled' if new[1][0] else 'disabled'}"
    if old[1][1] != new[1][1]:
        return f"the default dtype changed from {old[1][1]} to {new[1][1]}"
    if old[1][2] != new[1][2]:
        return f"autocast changed from {_show_autocast(old[1][2])} to {_show_autocast(new[1][2])}"
    if old[1][3] != new[1][3]:
        return f"the default device changed from {old[1][3]} to {new[1][3]}"
    if old[1][4] != new[1][4]:
        return f"the current CUDA device changed from cuda:{old[1][4]} to cuda:{new[1][4]}"
    fields = ("kind", "shape", "dtype", "device", "layout", "requires_grad", "leaf-ness", ".grad being None")
    for name, a, b in zip(names, old[2:], new[2:]):
        if a == b:
            continue
        if a[0] == b[0] == "tensor":
            which = next(f for f, x, y in zip(fields, a, b) if x != y)
            show = _show_layout if which == "layout" else _show
            return f"{which} of {name} changed from {show(a[fields.index(which)])} to {show(b[fields.index(which)])}"
        return f"{name} changed from {_show(a[-1])} to {_show(b[-1])}"
    return "the guards differ"


def _show_autocast(key):
    return "off" if key is None else ", ".join(f"{device_type} {dtype}" for device_type, dtype in key)


def _show(v):
    return list(v) if isinstance(v, tuple) else v


def _show_layout(layout):
    return "contiguous" if layout is True else f"non-contiguous strides={list(layout)}"


@dataclass
class CacheEntry:
    """One traced specialisation: its graph, or why it runs eagerly."""

    key: tuple
    names: list
    graph: object = None
    eager_reason: str = None
    calls: int = field(default=0)
    executable: object = None
    backward: object = None  # the compiled vector-Jacobian product, for calls that need a backward
    split: object = None  # or the forward and backward graphs cut from one joint trace (a SplitCall)
    plain: bool = False  # a graph without writes or Python-state guards: `reusable` always holds
    with_backward: bool = False  # calls of its fast path record a backward node (`_call_with_backward`)
    alias_memo: list = field(default_factory=lambda: [None])  # `_inputs_alias`'s, for `reusable`

    def guards(self):
        lines = describe_guards(self.key, self.names)
        if self.graph is not None:  # what the trace assumed of Python state (see jitorch.compiler.guard)
            lines += [f"python state: {check.__doc__ or check}" for check in self.graph.python_guards]
        return lines

    def reusable(self, args):
        """Whether this entry's graph may run on ``args`` as they are (the fast path's checks
        beyond the argument key)."""
        g = self.graph
        return not (g.mutations and _inputs_alias(args, g, self.alias_memo)) and (not g.python_guards or python_guards_hold(g))


class CompiledFunction:
    """``fn`` compiled: call it like ``fn``; `lower` shows what it compiles to."""

    def __init__(self, fn, *, fullgraph=False, dynamic=None, backend="llvm"):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}: expected one of {', '.join(BACKENDS)}")
        if backend == "llvm":
            # Load the code generator (llvmlite, the math library) now, when compilation is asked
            # for, rather than inside the first call, whose latency users watch. That includes LLVM's
            # library itself (llvmlite.binding, 20-30 ms), which the code generator loads on first use.
            from . import executor  # noqa: F401
            import llvmlite.binding  # noqa: F401
        self.fn = fn
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.backend = backend
        self.cache: dict = {}
        self._fast: dict = {}  # flat keys of all-tensor positional calls -> compiled entries
        self._warned_limit = False
        self._traces = 0
        self._reruns = False  # whether a graph of this function may rerun its call eagerly (`EagerRerun`)
        self._traced_states = None  # the generators' states as the latest such graph's trace ended
        self._stale = 0  # entries dropped because Python state changed: they count toward the limit
        self._shelved: dict = {}  # guard key -> those entries, reused when their state comes back
        self.discard_mutations = False  # a compiled backward recomputes the forward but must not redo its writes
        self.retrace_reason = None  # why the latest trace after the first was needed (jitorch.explain shows it)
        # (fingerprint, compiled graph) of the latest trace that set up Python state, which the next trace
        # may repeat (see `fingerprint`); how many traces reused a compiled graph so
        self._last_one_shot = None
        self.reused_compilations = 0
        self.name = getattr(fn, "__name__", type(fn).__name__)
        functools.update_wrapper(self, fn, updated=())

    def __get__(self, obj, objtype=None):
        """As a method decorator: bind to the instance, with a cache per instance."""
        if obj is None:
            return self
        bound = obj.__dict__.get(self._attr_name)
        if bound is None:
            bound = CompiledFunction(self.fn.__get__(obj, objtype), fullgraph=self.fullgraph,
                                     dynamic=self.dynamic, backend=self.backend)
            obj.__dict__[self._attr_name] = bound
        return bound

    @property
    def _attr_name(self):
        return f"_jitorch_compiled_{id(self)}"

    def __call__(self, *args, **kwargs):
        # A graph that may rerun the call eagerly may have drawn random numbers before its check failed: the
        # rerun draws from the generators' states at the call's start, as an eager call would (a call that
        # traces takes them as its trace ends: tracing draws nothing).
        traces, drawn = self._traces, (generator_states() if self._reruns else None)
        try:
            return self._call(args, kwargs)
        except EagerRerun as e:
            # (raised by a check before the call wrote an output or an input: `value_checks.EagerRerun`)
            logs.log("recompiles", "%s runs eagerly this call: %s", self.name, e)
            for gen, state in (self._traced_states if self._traces != traces else drawn) or ():
                gen.set_state(state)
            return self.fn(*args, **kwargs)

    def _call(self, args, kwargs):
        if registry.DISPATCH_HOOKS and registry.transforms_active():
            # inside vmap or forward AD: their hooks must see every op (a graph would run on batched or dual
            # tensors as if they were plain ones), so the function runs eagerly through them
            return self.fn(*args, **kwargs)
        if _saved_hooks.OPEN[0] and is_grad_enabled() and _saved_hooks.active() is not None:
            # a graph's forward and backward keep their saved values inside it, out of the hooks' reach
            logs.log("recompiles", "%s runs eagerly: saved_tensors_hooks are set, which its graph would bypass",
                     self.name)
            return self.fn(*args, **kwargs)
        if not kwargs:
            # the common call, positional tensors only: a flat guard key and no pytree work
            key = _tensor_args_key(args)
            if key is not None:
                entry = self._fast.get(key)
                if entry is not None and (entry.plain or entry.reusable(args)):
                    entry.calls += 1
                    if entry.with_backward:
                        return self._call_with_backward(entry, args, kwargs, list(args))
                    return entry.executable.run(args)
        entry = self._entry(args, kwargs)
        if entry is not None and entry.graph is not None and not python_guards_hold(entry.graph):
            entry = self._switch(entry, args, kwargs)
        if entry is None:
            return self.fn(*args, **kwargs)
        entry.calls += 1
        if entry.graph is None:
            return self.fn(*args, **kwargs)
        if _unseen_input_hooks(entry.graph, args, kwargs):
            logs.log("recompiles", "%s runs eagerly: an input whose .grad it sets has hooks, which its trace "
                     "did not run", self.name)
            return self.fn(*args, **kwargs)
        if entry.graph.one_shot:
            # the trace initialised Python state (an optimizer's buffers): the next call traces anew
            self._forget(entry)
        if entry.graph.mutations and _inputs_alias(tree_flatten((args, kwargs))[0], entry.graph):
            # the graph treats its inputs and captured tensors as separate memory: a write through one
            # would be missed by another
            logs.log("recompiles", "%s runs eagerly: inputs share memory, or one is read-only, and the function "
                     "writes into one", self.name)
            return self.fn(*args, **kwargs)
        why = _eager_for_autograd(entry)
        if why is not None:
            logs.log("recompiles", "%s runs eagerly: %s", self.name, why)
            return self.fn(*args, **kwargs)
        executable = self._executable(entry)
        if executable is not None and not kwargs and _tensor_args_key(args) is not None and not entry.graph.one_shot:
            # the next calls with this key skip the checks above: the key holds what they read of the arguments
            # (hooks included), and grad mode, which with the graph decides whether the call needs a backward
            entry.plain = not entry.graph.mutations and not entry.graph.python_guards
            entry.with_backward = self._differentiable(entry)
            self._fast[_tensor_args_key(args)] = entry
        if self._differentiable(entry):
            return self._call_with_backward(entry, args, kwargs)
        return run_graph(entry.graph, args, kwargs, executable)

    def _switch(self, entry, args, kwargs):
        """The entry for a call whose Python state no longer fits ``entry``'s graph (a module back in
        training mode, changed momentum): an earlier graph whose assumptions hold again, or a new
        trace. ``entry`` is shelved for when its state comes back."""
        failed = next(c for c in entry.graph.python_guards if not c())
        self._forget(entry)
        shelf = self._shelved.setdefault(entry.key, [])
        revived = next((e for e in shelf if python_guards_hold(e.graph)), None)
        shelf.append(entry)
        if revived is not None:
            shelf.remove(revived)
            self.cache[entry.key] = revived
            logs.log("recompiles", "%s: reusing an earlier graph: no longer true: %s", self.name,
                     failed.__doc__ or failed)
            return revived
        self._stale += 1
        return self._entry(args, kwargs, reason=f"no longer true: {failed.__doc__ or failed}")

    def _forget(self, entry):
        """Drop a cache entry whose graph no longer fits the function's state."""
        self.cache.pop(entry.key, None)
        for k in [k for k, e in self._fast.items() if e is entry]:
            del self._fast[k]

    def _differentiable(self, entry):
        """Whether this call's outputs must carry a backward node: grad mode on, outputs that depend
        on inputs or captured parameters that require grad, and a function that returns tensors
        rather than calling backward() itself."""
        g = entry.graph
        return is_grad_enabled() and g.outputs_require_grad and not g.grad_targets

    def _call_with_backward(self, entry, args, kwargs, inputs=None):
        """Run the compiled forward as one autograd node whose backward is itself compiled:
        the vector-Jacobian product of ``fn`` with respect to the tensor arguments and the captured
        parameters that require grad, traced and compiled on its first use. The node takes and
        gives tensors only: the call's other arguments are fixed by the entry's guards, and the
        outputs' structure (and their non-tensor leaves) by its graph."""
        from .differentiable import CompiledCall
        params = list(captured_parameters(entry.graph).values())
        if inputs is None:  # (the fast path's calls pass their tensors, which are all the arguments)
            inputs = _tensor_leaves(args, kwargs)
        if entry.backward is None and entry.split is None:
            entry.split = self._split(entry, inputs, args, kwargs, params) if self._splittable(entry.graph) else None
        if entry.backward is None and entry.split is None:
            entry.backward = compile(_vjp_of(self.fn, args, kwargs, params, base_groups(entry.graph)),
                                     backend=self.backend)
            # the forward already made the call's in-place updates; the backward recomputes, never rewrites
            entry.backward.discard_mutations = True
        tensors = iter(CompiledCall.apply(self, entry, len(inputs), *inputs, *params))
        out_leaves, out_spec = tree_flatten(entry.graph.outputs)
        outputs = tree_unflatten([next(tensors) if isinstance(leaf, Value) else leaf for leaf in out_leaves],
                                 out_spec)
        # outputs over inputs' or parameters' memory: eager's views of them, with eager's view history
        return returned_aliases(entry.graph, inputs, outputs) if entry.graph.output_aliases else outputs

    def _splittable(self, graph):
        """Whether a call's forward and backward may be cut from one joint trace: compiled graphs that
        write only into captured buffers (`_writes_buffers_only`), return no inputs' or captured tensors'
        memory (memory the call makes, its leaves views of one base, is returned as a base: `output_bases`)
        and refresh no Python state per call. (The others recompute the forward in their backward, which
        replays those effects.)"""
        return (self.backend == "llvm" and _writes_buffers_only(graph)
                and all(isinstance(owner, tuple) and owner[0] == "output" for owner, _ in graph.output_aliases.values())
                and not graph.refreshers and not graph.one_shot
                and not graph.geometry_changes and not graph.rewrites_history)

    def _split(self, entry, inputs, args, kwargs, params):
        """The call's forward and backward graphs (`partition`), compiled; None where the joint function
        does not trace (its backward then recomputes the forward, and raises there what the joint trace
        raised: eagerly, an op without a derivative fails in the backward, not in the forward)."""
        from .differentiable import SplitCall
        from .executor import CompiledGraph, kernel_cache
        from .partition import split_joint
        from ..ops.registry import FUNCTIONS
        zeros = FUNCTIONS["zeros"]
        with no_grad():
            primal = [t.detach().requires_grad_(t.requires_grad) if t.dtype.is_floating_point else t.detach()
                      for t in inputs]
            cotangents = [zeros(v.type.shape, dtype=v.type.dtype, device=v.type.device)
                          for v in entry.graph.output_values()]
        try:
            # (at the slots of bases, the joint returns the base and takes its gradient, as the graph returns it)
            joint, _ = trace_with_inputs(_vjp_of(self.fn, args, kwargs, params, base_groups(entry.graph),
                                                 with_outputs=True), (*primal, *cotangents), {})
        except Exception as e:  # noqa: BLE001 (any error of the joint trace: see the docstring)
            logs.log("recompiles", "%s: the backward recomputes the forward: %s: %s", self.name, type(e).__name__, e)
            return None
        if not _writes_buffers_only(joint) or joint.refreshers or joint.one_shot:
            return None
        split = split_joint(joint, len(inputs))
        if _backward_reads_writes(split):
            logs.log("recompiles", "%s: the backward recomputes the forward: it reads a buffer the forward "
                     "writes", self.name)
            return None
        split.forward.meta_warnings = entry.graph.meta_warnings  # the forward's warnings, once a call
        logs.log("graph", "%s split into a forward graph:\n%s\nand a backward graph:\n%s", self.name,
                 split.forward, split.backward)
        forward, backward = CompiledGraph(split.forward, kernel_cache()), CompiledGraph(split.backward, kernel_cache())
        forward.label, backward.label = f"{self.name} (forward)", f"{self.name} (backward)"
        return SplitCall(forward, backward, split.inputs_read, split.saved, *_checked_alone(joint, split, len(inputs)))

    def _run_interpreted(self, entry, inputs):
        return run_graph(entry.graph, tuple(inputs), {}, None)

    def _executable(self, entry, device=None):
        """The entry's compiled graph (built on first use), or None for the interpreter. An explicit
        ``device`` builds (uncached) the graph's kernels for that device instead of its inputs'."""
        if self.backend == "interpreter":
            return None
        if device is not None:
            from .executor import CompiledGraph, kernel_cache
            return CompiledGraph(entry.graph, kernel_cache(), device=device)
        if entry.executable is None:
            from .executor import CompiledGraph, kernel_cache
            last, self._last_one_shot = self._last_one_shot, None
            fingerprint = graph_fingerprint(entry.graph) if last is not None or entry.graph.one_shot else None
            if last is not None and last[0] == fingerprint:
                # the trace after one that set up state (an optimizer's first step) is, as a rule, that trace
                logs.log("recompiles", "%s: the new trace is the last one's graph: its compiled form reused",
                         self.name)
                entry.graph = transplant(entry.graph, last[1])
                entry.executable = last[1]
                self.reused_compilations += 1
            else:
                entry.executable = CompiledGraph(entry.graph, kernel_cache())
                entry.executable.label = self.name
            if entry.graph.one_shot:
                self._last_one_shot = (fingerprint, entry.executable)
        return entry.executable

    def _entry(self, args, kwargs, trace_new=True, reason=None):
        """The cache entry for a call, traced now if there is none (``reason``: why, when it is not
        that the arguments differ from the cached ones')."""
        key = guard_key(args, kwargs)
        entry = self.cache.get(key)
        if entry is not None or not trace_new:
            return entry
        from .tracer import input_names
        names = input_names(self.fn, args, kwargs)
        if reason is None and self.cache:
            reason = guard_difference(next(reversed(self.cache.values())).key, key, names)
        if reason is not None:
            self.retrace_reason = reason
            logs.log("recompiles", "retracing %s: %s", self.name, reason)
        if len(self.cache) + self._stale >= config.recompile_limit:
            if not self._warned_limit or is_warn_always_enabled():
                warnings.warn(f"jitorch.compile: {self.name} was retraced {config.recompile_limit} times "
                              f"(jitorch.jit.compile.config.recompile_limit); running it eagerly from now on for "
                              f"new argument kinds", UserWarning, stacklevel=3)
                self._warned_limit = True
            logs.log("recompiles", "%s: recompile limit reached, running eagerly", self.name)
            return None
        entry = CacheEntry(key, names)
        try:
            entry.graph = self._trace(args, kwargs)
        except TraceError as e:
            if self.fullgraph:
                raise
            entry.eager_reason = str(e)
            warnings.warn(f"jitorch.compile: running {self.name} eagerly: {e}", UserWarning, stacklevel=3)
            logs.log("recompiles", "%s runs eagerly: %s", self.name, e)
            if isinstance(e, StateWriteError):
                # not cached: the eager call sets the state (a cached mask), with which the function may trace
                self._stale += 1
                return entry
        self.cache[key] = entry
        logs.log("guards", "guards of %s entry %d:\n  %s", self.name, len(self.cache),
                 "\n  ".join(entry.guards()))
        return entry

    def _trace(self, args, kwargs):
        graph, _ = trace_with_inputs(self.fn, args, kwargs, refreshed=True, reruns_eagerly=True)
        # (0-d CPU tensors join CUDA operands, as torch lets them)
        devices = sorted({str(v.type.device) for v in graph.values() if v.type.ndim or v.type.device.type != "cpu"}
                         or {"cpu"})
        if devices == ["meta"]:  # no memory for kernels to read: eager computes meta tensors' shapes
            raise TraceError(f"{self.name} has tensors on the meta device, which hold no data for kernels to read, "
                             "so it runs eagerly")
        if len(devices) > 1:  # its kernels are built for one device: run it as eager does
            raise TraceError(f"{self.name} has tensors on {' and '.join(devices)}: a compiled graph runs on one "
                             "device, so a function that moves tensors between devices runs eagerly")
        return_bases(graph)
        if self.discard_mutations:  # (nor repeat the forward's warnings)
            graph.mutations.clear()
            graph.meta_warnings.clear()
        logs.log("graph", "traced %s:\n%s", self.name, graph)
        self._traces += 1
        if any(n.op.name == "_check_values" and n.args[1] == EagerRerun.RULE for n in graph.nodes):
            self._reruns, self._traced_states = True, generator_states()
        return graph

    def lower(self, *args, device=None, **kwargs):
        """What a call with these arguments compiles to (traces without running). ``device="cuda"``
        shows the CUDA kernels (PTX as ``.asm``) of the same graph, on any machine."""
        entry = self._entry(args, kwargs)
        if entry is None or entry.graph is None:
            reason = entry.eager_reason if entry is not None else "the recompile limit was reached"
            raise TraceError(f"{self.name} does not compile for these arguments: {reason}")
        executable = self._executable(entry, device)
        return Lowered(entry.graph, entry.guards(), self.backend, executable)


@dataclass
class Lowered:
    """The stages of one compiled specialisation: the traced graph, the optimised graph
    and its kernels in launch order (each with ``.ops``, ``.llvm_ir`` and ``.asm``)."""

    graph: object
    guards: list
    backend: str
    executable: object = None

    @property
    def optimized_graph(self):
        return self.executable.graph if self.executable is not None else self.graph

    @property
    def kernels(self):
        return [] if self.executable is None else [LoweredKernel(k) for k in self.executable.kernels]

    @property
    def steps(self):
        """Every step in launch order: kernels and the ops that run eagerly."""
        return [] if self.executable is None else list(self.executable.steps)

    def text(self):
        """The traced graph's text form."""
        return str(self.graph)


class LoweredKernel:
    """One kernel: the ops it fused, its optimised LLVM IR and its assembly."""

    def __init__(self, kernel):
        self.name = kernel.name
        self.ops = kernel.ops
        self._kernel = kernel

    @property
    def llvm_ir(self):
        if self._kernel.llvm_ir is None:
            from ..codegen.cpu import optimise
            self._kernel.llvm_ir = str(optimise(self._kernel.source.llvm_ir))
        return self._kernel.llvm_ir

    @property
    def asm(self):
        if self._kernel.asm is not None:  # targets that keep their assembly (PTX)
            return self._kernel.asm
        from ..codegen.cpu import assembly
        return assembly(self._kernel.source)

    def __repr__(self):
        return f"<kernel {self.name}: {', '.join(self.ops)}>"


def _eager_for_autograd(entry):
    """Why a call must run eagerly for autograd's sake, or None. With grad mode on, a write into a
    tensor that requires grad gives it a new history eagerly (or raises, on a leaf), which a graph's
    write-back cannot; and the compiled backward recomputes the forward from the tensors as they are
    after the call, so outputs that require grad must not depend on values the call overwrote (a
    batch norm's running statistics, which its outputs do not read, may be updated)."""
    g = entry.graph
    if is_grad_enabled() and g.geometry_changes and g.outputs_require_grad:
        # the compiled backward would recompute from the tensors in their geometry after the call
        return "an in-place view op reshapes a tensor the outputs' gradient depends on"
    if not (is_grad_enabled() and g.mutations):
        return None
    if g.rewrites_history:
        return "with grad mode on, it writes in place into an input or captured tensor that requires grad"
    if g.outputs_require_grad and not g.grad_targets and outputs_read_overwritten(g):
        return "its outputs require grad and depend on values it overwrites, which its backward would recompute"
    return None


def _writes_buffers_only(graph):
    """Whether every write of ``graph`` goes into a captured tensor that does not require grad (a batch
    norm's running statistics and batch count): the forward graph of a split call makes those writes,
    and the backward graph, which must not read them (`_backward_reads_writes`), none."""
    return all(target.node is None and target.name in graph.constant_tensors
               and not getattr(graph.constant_tensors[target.name], "requires_grad", False)
               for target, _ in graph.mutations)


def _backward_reads_writes(split):
    """Whether a split call's backward graph reads a buffer its forward graph writes, or a value written
    into one: it would read the buffer after the write (or the buffer itself, which the next call rewrites),
    where eager's backward read what the forward saved."""
    forward = split.forward
    if not forward.mutations:
        return False
    written = {target.name for target, _ in forward.mutations}
    values = {id(v) for _, v in forward.mutations}
    saved = forward.outputs[len(forward.outputs) - split.saved:]
    return bool(written & set(split.backward.constants)) or any(id(v) in values for v in saved)


def _has_hooks(t):
    d = t.__dict__
    # (a grad_dtype, like a hook, changes what backward writes to .grad: the trace ran on a stand-in without it)
    return bool(d.get("_hooks") or d.get("_post_accumulate_grad_hooks") or "_grad_dtype" in d)


def _unseen_input_hooks(graph, args, kwargs):
    """Whether an input whose .grad the traced backward sets carries hooks: the trace ran on a stand-in
    without them (a captured tensor's hooks are traced, and guarded, instead)."""
    targets = [t for t in graph.grad_targets if isinstance(t, int)]
    if not targets:
        return False
    inputs = _tensor_leaves(args, kwargs)
    return any(_has_hooks(inputs[t]) for t in targets)


def _tensor_leaves(args, kwargs):
    """The tensors of a call's arguments, in graph-input order."""
    return [leaf for leaf in tree_flatten((args, kwargs))[0] if isinstance(leaf, Tensor)]


def _vjp_of(fn, args, kwargs, params=(), bases=(), with_outputs=False):
    """``vjp(*inputs, *grad_outputs) -> gradients of fn's tensor outputs w.r.t. the inputs that require
    grad, then w.r.t. ``params`` (tensors ``fn`` captures)``: ``inputs`` are the tensors of a call
    ``fn(*args, **kwargs)``, whose other leaves stay as they are (only those are kept, not the
    call's tensors). At the slots of ``bases`` (`output_bases.base_groups`) the compiled call gave the
    base of its outputs' memory: the gradients there are the base's. ``with_outputs``: the joint
    function, returning ``(fn's tensor outputs, the gradients)``."""
    from ..autograd.gradients import grad
    from ..runtime.grad_mode import enable_grad

    leaves, spec = tree_flatten((args, kwargs))
    is_tensor = [isinstance(leaf, Tensor) for leaf in leaves]
    others = [None if t else leaf for t, leaf in zip(is_tensor, leaves)]
    n = sum(is_tensor)
    autocast = _autocast.key  # the forward's: the recomputation casts as it did, whatever the backward's is

    def vjp(*vjp_args):
        inputs, grads = vjp_args[:n], vjp_args[n:]
        with enable_grad():
            # fn runs on copies, as the call's tensors need not be leaves: an in-place view op that left an
            # input's geometry as it was (``x.t_()`` of a 1-d ``x``) raised on a leaf that requires grad
            copies = [t.clone() if t.requires_grad else t for t in inputs]
            it = iter(copies)
            call_args, call_kwargs = tree_unflatten([next(it) if t else o for t, o in zip(is_tensor, others)], spec)
            with _autocast_restored(autocast):
                result = fn(*call_args, **call_kwargs)
            returned = tree_flatten(result)[0]
            leaves = eager_bases(returned, bases)
            outs = [o for o in leaves if isinstance(o, Tensor)]
            tracer = current_tracer()
            if tracer is not None:
                # (from the returned tensors too: a view's node, after its base's, may check what it saved)
                tracer.graph.saved_eagerly = _saved_eagerly(
                    tracer, outs, copies, outs + [o for o in returned if isinstance(o, Tensor)])
            wanted = [t for t in inputs if t.requires_grad] + list(params)
            pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad]
            grads = grad([o for o, _ in pairs], wanted, grad_outputs=[g for _, g in pairs], allow_unused=True,
                         materialize_grads=True) if wanted else ()  # (grad() refuses no inputs, as torch's)
            return (outs, grads) if with_outputs else grads
    return vjp


def _checked_alone(joint, split, n):
    """The call's tensors (input positions, captured tensors, output positions) that eager's nodes save
    (`Graph.saved_eagerly`) and ``split``'s backward graph does not read (``n``: how many tensors the call
    takes): a compiled call checks their versions at its backward, as eager's would, rather than giving the
    gradient of the forward's values after a write into one."""
    saved = joint.saved_eagerly or ()
    read = {id(t) for t in split.backward.constant_tensors.values()}
    positions = tuple(sorted(k for k in saved if isinstance(k, int) and k < n and k not in split.inputs_read))
    captured = tuple(joint.constant_tensors[k] for k in sorted(k for k in saved if isinstance(k, str))
                     if k in joint.constant_tensors and id(joint.constant_tensors[k]) not in read)
    outputs = tuple(sorted(k[1] for k in saved if isinstance(k, tuple)))
    return positions, captured, outputs


def _saved_eagerly(tracer, outs, copies, ends):
    """The input indices and constant names of the call's tensors, and ``("output", k)`` of its outputs
    ``outs``, whose memory the nodes of the traced history of ``ends`` (``outs``, and the tensors the call
    returns) saved (``copies``: the inputs the traced call ran on, clones of those that require grad): eager's
    backward checks their versions, and so must a compiled call's, whatever its backward graph reads (a layer
    norm's reads the statistics its forward saved, not the input)."""
    owners = {id(_memory(o)): ("output", k) for k, o in enumerate(outs)}
    owners.update((id(_memory(fake)), key) for key, fake in tracer.owner_fakes())
    # a captured tensor saved as the library code passed it (`saves_also` of a module's weight) is the real one
    constants = tracer.graph.constant_tensors
    owners.update((id(_memory(t)), name) for name, t in constants.items() if isinstance(t, Tensor))
    owners.update((id(_memory(c)), i) for i, c in enumerate(copies))
    return frozenset(owners[id(_memory(t))] for t in version_checked(ends) if id(_memory(t)) in owners)


def _memory(t):
    st = t._storage
    return getattr(st, "root", st)


_COMPILERS: list = []  # (class, compiler(obj, **options)): a library's objects that compile their own way


def register_compiler(cls, compiler):
    """Compile instances of ``cls`` with ``compiler(obj, fullgraph=, dynamic=, backend=)`` (a library
    above jit registers its own: `nn.Module` compiles to an ``OptimizedModule``)."""
    _COMPILERS.append((cls, compiler))


def compile(fn=None, *, fullgraph=False, dynamic=None, backend="llvm", mode=None, options=None):
    """Compile ``fn``: ``@jitorch.compile``, ``@jitorch.compile(fullgraph=True)`` or ``jitorch.compile(fn)``.

    The first call traces ``fn`` into a graph (see `jitorch.jit.trace`); later
    calls with arguments of the same kinds reuse it. ``fullgraph=True`` raises
    `TraceError` where the function cannot be traced instead of running it
    eagerly. ``dynamic`` is accepted for torch compatibility; shapes are
    specialised either way. ``backend="llvm"`` (the default) runs fused kernels
    compiled with llvmlite; ``backend="interpreter"`` the reference interpreter.
    """
    if fn is None:
        return functools.partial(compile, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                 options=options)
    if not callable(fn):
        raise TypeError(f"jitorch.compile expected a callable, got {type(fn).__name__}")
    for cls, compiler in _COMPILERS:
        if isinstance(fn, cls):
            return compiler(fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend)
    return CompiledFunction(fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend)
