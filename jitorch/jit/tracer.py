"""Tracing: run a function on fake tensors and record the ops it calls into a Graph.

The tracer installs itself as a dispatch hook (`registry.DISPATCH_HOOKS`), so
every registry op, called as a function, a method, an operator or from inside a
composite, records a node instead of computing. Inputs become fake tensors
(shape, dtype, device, no data); captured real tensors become named constants
the first time an op uses them; reading data in Python (``bool(t)``,
``t.item()``) raises `TraceError` naming the user's line.

In-place ops are recorded functionally. Each fake storage holds the current
value of its whole (compact) base tensor and a version counter. A fake tensor
caches the value it last read with the version it read it at; when the
storage's version has moved on (something wrote through another view), the
tensor re-reads itself from the base with ``as_strided``. An in-place op on the
base replaces the base value; on a view it scatters the new values into the
base with ``as_strided_scatter``. Inputs and constants whose storage was
written get a mutation entry: the new value is written back after each call.
An in-place view op (``c.t_()``) reshapes a captured tensor itself while the
trace runs, for Python to read its geometry as eagerly; it gets its own back at
the end, each call reshapes it, and the graph is guarded on its geometry.
"""

from __future__ import annotations

import inspect
import threading
from math import prod

import numpy as np

from ..autograd.engine import NodeHooks, gradient_edge, passes_gradient
from ..ir.passes import decompose
from ..ir.graph import Graph, TensorType
from ..ops import registry
from ..ops.registry import contiguous_strides_cached
from ..ops.random_ops import Generator
from ..ops.real_identities import history_root
from ..runtime.storage import Storage
from ..runtime.strided import contiguous_strides, is_non_overlapping_and_dense
from ..tensor import GRAD_WATCHERS, VALUE_WATCHERS, Tensor
from ..runtime.pytree import tree_flatten, tree_unflatten
from .captures import CapturedState
from .collector import collector_paused
from .errors import StateWriteError, TraceError, describe_call, trace_error, user_frame, where

_LITERALS = (type(None), bool, int, float, str)



def _contiguous(shape):
    """`contiguous_strides`, remembered per shape where it is a tuple (a fake of each traced result asks)."""
    return contiguous_strides_cached(shape) if type(shape) is tuple else contiguous_strides(shape)


class TraceStorage(Storage):
    """The storage of fake tensors: the current value of its base, no data.

    The base is compact (its shape with contiguous strides). For a non-contiguous input or captured
    tensor it stands for the memory the real tensor spans, and its first value is built from the
    graph value only when something reads that memory other than through the tensor itself.
    """

    __slots__ = ("tracer", "_value", "build", "base_shape", "origin", "origin_geometry", "initial_version",
                 "compact", "laid_out")

    def __init__(self, tracer, value, origin=None, compact=True, base_type=None, build=None):
        t = base_type or value.type
        super().__init__(None, t.dtype, t.device, prod(t.shape))
        self.tracer = tracer
        self._value = value         # the Value holding the whole base tensor now
        self.build = build          # makes the first value when there is none yet
        self.base_shape = t.shape
        self.origin = origin        # the input or constant Value this storage came from, if any
        self.origin_geometry = None  # (shape, strides) of the origin's tensor over this storage
        self.initial_version = 0
        self.compact = compact      # False when as_strided on the real tensor would reach other memory
        self.laid_out = None        # (Value, strides): the memory of a new result eager lays out that way

    @property
    def value(self):
        if self._value is None:
            self._value = self.build()
        return self._value

    @value.setter
    def value(self, value):
        self._value = value

    def no_data_error(self, tensor):
        frame, reader = user_frame(2)
        what = describe_call(reader)
        return TraceError(
            f"{what} on a traced tensor at {where(frame)}: it needs the tensor's values, which do not exist "
            "while tracing. Python control flow or conversions that depend on tensor data cannot be compiled; "
            "use tensor ops (jitorch.where, masks) instead, or let jitorch.compile run the function eagerly"
        )


def _fresh_edge(t):
    """Where a backward from ``t`` starts: `gradient_edge`, not ``t.grad_fn``, whose history is stale for a
    view of memory written after the view was made (a backward regenerates it from the base). A view eager
    may not regenerate (an output of unbind, whose backward raises) keeps its recorded history: the call
    itself runs as eager's forward does."""
    try:
        return gradient_edge(t)
    except RuntimeError:
        return t.grad_fn


# (what `Tracer._module_names` holds of a name not read yet: no object the function sees is it)
_NOT_READ = object()


class Tracer:
    """Records the ops a function calls; `trace` drives it."""

    def __init__(self, fn=None):
        self.graph = Graph()
        self.fn = fn
        self.lifted: dict = {}     # id(real tensor) -> (real tensor, its fake)
        self._lifted_over: dict = {}  # id(storage) -> the (real tensor, fake) of `lifted` over it, in order
        self.watched: list = []    # storages of inputs and constants, checked for writes at the end
        self.grad_owners: dict = {}  # id -> [real tensor, constant name, .grad before the trace, touched]
        self.one_shot = False      # see jitorch.compiler.eager_state
        self._visible_names = None  # id(tensor) -> (tensor, its name_for), as the visible objects were when read
        self._given_names: dict = {}  # id(tensor) -> (tensor, name) of tensors named by `give_name`
        # name -> (visible object, [(tensor, its name)] of its modules' parameters and buffers), and
        # id(an optimizer's per-parameter state) -> (that dict, its size, the optimizer's name, its position),
        # as the reads of the names since the last full one found them
        self._module_names: dict = {}
        self._states_read: dict = {}
        self.real_inputs = set()   # ids of the call's tensors (they have fakes of their own)
        self.input_fakes: list = []  # the fakes standing for the call's tensors, in graph-input order
        # id(node) -> (node, input index or constant name): where a backward reaches an input or captured tensor
        # that requires grad, as its history began (an in-place view op, ``x.t_()``, gives it a new one on top)
        self.owner_edges: dict = {}
        self.python_guards: list = []  # see jitorch.compiler.guard
        self.refreshers: list = []     # see jitorch.compiler.dynamic_scalar
        self.refreshed = False         # whether the graph's caller runs the refreshers (see trace_with_inputs)
        self.reruns_eagerly = False    # whether the graph's caller reruns eagerly on `EagerRerun` (trace_with_inputs)
        self.made: dict = {}           # id -> tensor the traced code made from Python data (new at each call)
        self.values_guarded: set = set()  # ids of captured tensors whose values Python read: guarded
        self.reshaped: dict = {}  # id -> (captured tensor, its geometry before an in-place view op changed it)
        # the dispatch hooks and grad watchers are process-wide: other threads' ops stay eager
        self.thread = threading.get_ident()

    # Fake tensors -----------------------------------------------------------------

    def new_fake(self, value, origin=None, requires_grad=False, compact=True):
        storage = TraceStorage(self, value, origin, compact)
        shape = value.type.shape
        return self._fake_over(storage, value, shape, _contiguous(shape), requires_grad)

    def _fake_over(self, storage, value, shape, strides, requires_grad):
        t = Tensor._make(storage, shape, strides, 0)
        t._trace_value = (value, 0)
        if requires_grad:
            t._requires_grad = True
        if storage.origin is not None:
            storage.origin_geometry = (tuple(shape), tuple(strides))
            self.watched.append(storage)
        return t

    def outside_fake(self, value, real):
        """The fake standing for ``real``, an input or captured tensor whose elements are the graph
        value ``value``. One with exactly contiguous strides is compact, as graph values are. Any other keeps
        its real strides (those of size-1 and empty dims too: copies and pointwise results keep them, as
        torch's), so the ops that copy or view by layout (``contiguous``, ``reshape``, ``view``,
        ``is_contiguous``) decide as they do eagerly, and a write after them reaches ``real`` exactly
        when it would eagerly; its storage stands for the memory ``real`` spans."""
        if real._stride == _contiguous(real._shape):
            fake = self.new_fake(value, origin=value, requires_grad=real.requires_grad, compact=_is_compact(real))
        else:
            fake = self.strided_fake(value, tuple(real._stride), value, _is_compact(real), real.requires_grad)
        if real.requires_grad and real.grad_fn is not None:
            # not a leaf, as ``real``: in-place ops on it are allowed as eagerly. A captured tensor's gradient
            # goes on into its history (where autograd.grad finds it); an input's is the compiled call's to pass on
            fake.grad_fn = OutsideHistory() if id(real) in self.real_inputs else gradient_edge(real)
        return fake

    def strided_fake(self, value, strides, origin=None, compact=True, requires_grad=False):
        """A fake holding ``value`` with non-contiguous ``strides``; its storage stands for the memory such
        a tensor spans, whose value is built from ``value`` only when something reads that memory other
        than through the tensor itself (see `_spanned_memory`)."""
        t = value.type
        base_shape, build = _spanned_memory(t.shape, strides)
        storage = TraceStorage(self, None, origin, base_type=TensorType(base_shape, t.dtype, t.device),
                               build=lambda: self.value_of(build(self.new_fake(value))), compact=compact)
        return self._fake_over(storage, value, t.shape, strides, requires_grad)

    def result_fake(self, value, strides):
        """The fake of a new result: compact, or laid out with ``strides`` as eager lays it out
        (`registry.result_strides`), so views, ``is_contiguous`` and later results see eager's layout."""
        if strides is None or strides == _contiguous(value.type.shape):
            return self.new_fake(value)
        fake = self.strided_fake(value, strides)
        fake._storage.laid_out = (value, strides)
        return fake

    def stands_in(self, t):
        """Whether ``t`` is the fake of an input or captured tensor itself (not a view or result of one)."""
        return any(t is f for f in self.input_fakes) or any(t is f for _, f in self.lifted.values())

    def is_ours(self, t):
        st = t._storage
        return isinstance(st, TraceStorage) and st.tracer is self

    def fake(self, t):
        """The fake tensor standing for ``t``: itself, or the constant a real tensor becomes."""
        st = t._storage
        if isinstance(st, TraceStorage):  # (tested inline: a trace asks this of every tensor argument, often)
            if st.tracer is self:
                return t
            raise TraceError("a tensor from another trace was used in this one")
        entry = self.lifted.get(id(t))
        if entry is None and not t.requires_grad:
            entry = self._alias(t)
        if entry is None:
            if t._storage.data is None and not t._storage.on_device:
                raise TraceError(f"a tensor on device '{t.device}' with no data was captured by a traced function")
            name = self.name_for(t)
            value = self.graph.add_constant(name, t, TensorType(tuple(t.shape), t.dtype, t.device))
            if id(t) in self.made and not t.requires_grad:
                # eagerly a new tensor at each call: a copy of the constant, so writes stay in the graph (no
                # origin to write back to) and a call returns a new tensor, never the constant itself
                copy = self.add(registry.OPS["clone"], (value, None), [value.type])[0]
                entry = self._lift(t, self.new_fake(copy))
            else:
                entry = self._lift(t, self.outside_fake(value, t))
            if t.requires_grad:
                self.own_grad(t, value.name, entry[1])
        return entry[1]

    def made_from_data(self, t):
        """The traced code made ``t`` from Python data (``jitorch.tensor([...])``)."""
        if current_tracer() is self:
            self.made[id(t)] = t

    def values_read(self, t):
        """Python reads the values of ``t`` while tracing (``item``, ``tolist``): the trace goes on with them
        as constants. A fake's have none (its read raises); a captured tensor's may change between calls, so
        the graph is guarded on them; a tensor the traced code wrote has real values that are not the ones
        the code reads eagerly, so the function cannot be traced."""
        if current_tracer() is not self or isinstance(t._storage, TraceStorage):
            return
        if any(real._storage is t._storage and fake._storage._version for real, fake in self.lifted.values()):
            raise trace_error("item", "it reads into Python the values of a tensor that the function wrote "
                                      "before, which are computed by the graph and do not exist while tracing")
        if id(t) not in self.made and id(t) not in self.values_guarded:
            self.values_guarded.add(id(t))
            self.python_guards.append(_values_guard(t, self.name_for(t)))

    def data_replaced(self, t):
        """Traced code replaces the data of ``t`` (``t.data = other``): eagerly an input or captured tensor
        then has other memory and geometry, which a graph's call cannot give it."""
        if current_tracer() is not self:
            return
        if not isinstance(t._storage, TraceStorage) or any(t is f for f in self.input_fakes):
            raise trace_error("data", "it replaces an input's or captured tensor's memory and geometry, which a "
                                      "graph cannot do")

    def _alias(self, t):
        """A captured tensor over the memory of one captured before that fills it (``p.data``, a
        view of a parameter) becomes a fake on that one's fake storage, as a view does: a write
        through either is a write to the one graph value both read. None if there is no such tensor."""
        for real, fake in self._lifted_over.get(id(t._storage), ()):
            if real._storage is t._storage and fake._storage.origin is not None and _is_compact(real):
                return self._lift(t, Tensor._make(fake._storage, t._shape, t._stride, t._offset))
        return None

    def _lift(self, real, fake):
        """Record ``fake`` as the fake of the real tensor ``real`` (in `lifted`, and by its storage: a search
        of all of them per captured tensor made tracing a model quadratic in its parameters)."""
        before = self.lifted.get(id(real))
        entry = self.lifted[id(real)] = (real, fake)
        if fake.requires_grad and fake._storage.origin is not None:
            self.own_edge(fake, fake._storage.origin.name)
        over = self._lifted_over.setdefault(id(real._storage), [])
        # (where `lifted` keeps the first's place, so does this; found by identity: tensors compare elementwise)
        at = next((i for i, e in enumerate(over) if e is before), None) if before is not None else None
        if at is None:
            over.append(entry)
        else:
            over[at] = entry
        return entry

    def own_grad(self, real, name, fake):
        """A captured tensor that requires grad (a module's parameter): a backward() in the trace
        accumulates into the real tensor's ``.grad``, where the traced code reads it (``p.grad``).
        Its ``.grad`` holds fakes until the trace ends; an existing ``.grad`` the traced code reads
        becomes a constant that the graph re-reads from the tensor at each call."""
        from ..autograd.engine import gradient_edge
        fake._accumulator = gradient_edge(real)  # one leaf node for both: autograd.grad(..., real) finds it
        self.grad_owners[id(real)] = [real, name, real.__dict__.get("_grad"), False]

    def grad_touched(self, t, reading):
        """Traced code reads or sets a captured tensor's ``.grad`` (``p.grad``, ``opt.zero_grad()``,
        a backward() accumulating): the graph then depends on it. Owning the tensor now also
        records its ``.grad`` from before the call."""
        if (self.is_ours(t) or isinstance(t._storage, TraceStorage) or not t.requires_grad
                or id(t) in self.real_inputs or threading.get_ident() != self.thread):
            return
        self.fake(t)
        owner = self.grad_owners[id(t)]
        owner[3] = True
        before = owner[2]
        if reading and before is not None and t.__dict__.get("_grad") is before:
            value = self.graph.add_constant(f"{owner[1]}_grad", before,
                                            TensorType(tuple(before.shape), before.dtype, before.device))
            self.graph.grad_constants[value.name] = t
            grad_fake = self.outside_fake(value, before)
            self._lift(before, grad_fake)
            t.__dict__["_grad"] = grad_fake

    def finish_grads(self):
        """Restore captured tensors' ``.grad``; returns (constant name, final fake or None) for those
        the traced code changed, and guards for those it touched."""
        changed, guards, accumulated = [], [], []
        for real, name, before, touched in self.grad_owners.values():
            after = real.__dict__.get("_grad")
            real.__dict__["_grad"] = before
            unchanged = after is before or (before is not None and id(before) in self.lifted
                                            and after is self.lifted[id(before)][1])
            if not unchanged:
                changed.append((name, after))
            if touched:
                guards.append(_grad_is_none_guard(real, name, before is None))
                accumulated.append(real)
        if accumulated:
            guards.append(_leaf_hooks_guard(accumulated))
        return changed, guards

    def hook_registered(self, t, method):
        """Traced code registers a hook on ``t``. On a tensor the trace made, the hook runs in the
        traced backward and each call's tensor is new, as in eager. An input or a captured tensor
        outlives the call: eager adds a hook to it at every call, which a graph cannot repeat."""
        if threading.get_ident() != self.thread:
            return
        if self.is_ours(t) and (t._storage.origin is None or (t.grad_fn is not None and not self.stands_in(t))):
            return
        raise trace_error(method, "it adds a hook to a tensor that outlives the call (an input or a tensor the "
                          "function captures), which a graph cannot repeat at each call; register the hook "
                          "once, outside the compiled function")

    def give_name(self, t, name):
        """Name the constant ``t`` will become ``name`` (`name_for` then does not search for it): for tensors
        the trace makes itself (`jitorch.compiler.dynamic_scalar`'s), which no visible object holds, and whose
        search read every visible name twice."""
        self._given_names[id(t)] = (t, name)

    def name_for(self, t):
        """A readable constant name: the name `give_name` gave ``t``, the variable that holds ``t`` in the traced
        function, or ``model.0.weight`` for a parameter or buffer of a module it holds; ``c`` otherwise. The names
        are read once for all tensors (a search per tensor made tracing a model quadratic in its size),
        and read again when ``t`` is not among them (state the trace made since): first only what is new
        (an optimizer's first step makes its state a tensor at a time, and walking a GPT's modules and
        state for each of them was a sixth of its trace), then, where that does not find ``t``, in full."""
        given = self._given_names.get(id(t))
        if given is not None and given[0] is t:
            return given[1]
        names = self._visible_names
        if names is None or id(t) not in names:
            names = self._visible_names = self._read_visible_names(since_last=names is not None)
            if id(t) not in names:
                names = self._visible_names = self._read_visible_names()
        held, name = names.get(id(t), (t, "c"))
        return name if held is t else "c"

    def _read_visible_names(self, since_last=False):
        """id(tensor) -> (tensor, name) of every tensor `name_for` can name, the first way found winning
        (the tensor held, so that its id stays its own). ``since_last``: the last read's names, with those
        of what is new since: tensors and module parameters of names bound to other objects (the modules'
        of the names bound to the same objects not walked again) and an optimizer's new state."""
        names = dict(self._visible_names) if since_last else {}
        if not since_last:
            self._module_names, self._states_read = {}, {}
        objects = list(self._visible_objects())
        for name, value in objects:
            if isinstance(value, Tensor):
                names.setdefault(id(value), (value, name))
        for name, value in objects:
            if isinstance(value, Tensor):
                continue
            if self._module_names.get(name, (_NOT_READ,))[0] is not value:
                members = [(p, f"{name}.{qualified}" if name != "self" else qualified)
                           for method in ("named_parameters", "named_buffers") if callable(getattr(value, method, None))
                           for qualified, p in getattr(value, method)()]
                self._module_names[name] = (value, members)
                for p, qualified in members:
                    names.setdefault(id(p), (p, qualified))
            state = getattr(value, "state", None)  # an optimizer: its per-parameter buffers
            if isinstance(state, dict):
                for i, per_param in enumerate(state.values()):
                    if not isinstance(per_param, dict):
                        continue
                    seen = self._states_read.get(id(per_param))
                    if seen is not None and seen[0] is per_param and seen[1:] == (len(per_param), name, i):
                        continue  # (read as it is now)
                    self._states_read[id(per_param)] = (per_param, len(per_param), name, i)
                    for key, held in per_param.items():
                        if isinstance(held, Tensor):
                            names.setdefault(id(held), (held, f"{name}.{key}_{i}"))
        return names

    def _visible_objects(self):
        """(name, object) the traced function reaches directly: closure cells, the globals its code
        names, and the attributes of the object it is bound to (or is: a module)."""
        fn = getattr(self.fn, "__func__", self.fn)
        code = getattr(fn, "__code__", None)
        if code is not None:
            for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
                try:
                    yield name, cell.cell_contents
                except ValueError:
                    continue
            module_globals = getattr(fn, "__globals__", {})
            for name in code.co_names:
                if name in module_globals:
                    yield name, module_globals[name]
        owner = getattr(self.fn, "__self__", None) or (self.fn if not inspect.isfunction(self.fn) else None)
        if owner is not None:
            yield "self", owner
            for name, value in vars(owner).items() if hasattr(owner, "__dict__") else ():
                yield name, value

    def value_of(self, t):
        """The Value holding ``t``'s elements now (re-read from its base if written since)."""
        t = self.fake(t)
        st = t._storage
        cached = t.__dict__.get("_trace_value")
        if cached is not None and cached[1] == st._version:
            return cached[0]
        value = self.read(st, t._shape, t._stride, t._offset)
        t._trace_value = (value, st._version)
        return value

    def read(self, st, shape, strides, offset):
        """The Value of the elements at this geometry of the trace storage ``st`` now."""
        if shape == st.base_shape and offset == 0 and strides == _contiguous(st.base_shape):
            return st.value
        return self.add(registry.OPS["as_strided"], (st.value, shape, strides, offset),
                        [TensorType(tuple(shape), st.dtype, st.device)])[0]

    # Recording ----------------------------------------------------------------------

    def add(self, op, args, types):
        return self.graph.add_node(op, args, types).outputs

    def node_args(self, op, args):
        """The op's arguments with tensors replaced by Values (and checked to be literals otherwise)."""
        out = []
        for a in args:
            if isinstance(a, Tensor):
                out.append(self.value_of(a))
            elif isinstance(a, Generator):
                self.graph.add_object(a)
                out.append(a)
            elif isinstance(a, (list, tuple)) and any(isinstance(x, Tensor) for x in a):
                out.append([self.value_of(x) if isinstance(x, Tensor) else x for x in a])
            else:
                out.append(a)
        return out

    def fake_args(self, op, args):
        out = list(args)
        for i, is_list in op.tensor_args:
            v = out[i]
            if is_list and v is not None:
                out[i] = [self.fake(x) if isinstance(x, Tensor) else x for x in v]
            elif isinstance(v, Tensor):
                out[i] = self.fake(v)
        return out

    def record(self, op, args):
        """Record ``op(*args)``; returns fake results shaped as eager returns them."""
        return self._record(op, self.fake_args(op, args))

    def _record(self, op, args):
        """`record` of arguments that `fake_args` made."""
        if op.view is not None:
            return self.record_view(op, args)
        # each run of the graph gives the meta rule's warnings (`registry.meta_warnings_into`, without the
        # generator-based context manager's cost: this runs once per traced op)
        sinks = registry._WARNING_SINKS
        sinks.append(self.graph.meta_warnings)
        try:
            spec = op.meta(*args)
        finally:
            sinks.pop()
        specs = [spec] if isinstance(spec, registry.TensorSpec) else spec
        if specs is None or not all(isinstance(s, registry.TensorSpec) for s in specs):
            raise trace_error(op.public_name, "it returns a Python value computed from tensor data, "
                              "which does not exist while tracing")
        if any(n is None for s in specs for n in s.shape):
            raise trace_error(op.public_name, "the size of its result depends on the tensors' values, "
                              "so it cannot be part of a graph of fixed shapes")
        outputs = self.add(op, self.node_args(op, args),
                           [TensorType(tuple(s.shape), s.dtype, s.device) for s in specs])
        fakes = [self.result_fake(v, registry.result_strides(op, s, args)) for v, s in zip(outputs, specs)]
        if op.requires_grad_index is not None and args[op.requires_grad_index]:
            fakes[0]._requires_grad = True
        return registry.returned_as(op, spec, fakes)

    def record_view(self, op, args):
        """A view op: a node for readability and later view folding, and a fake view
        sharing the base's storage, so writes through either are seen by both."""
        base = args[0]
        if op.public_name == "as_strided" and not base._storage.compact:
            # before the geometry is checked against the fake's storage, which is smaller than the real one
            # (fuzz seed 7610840: a captured tensor ``as_strided_`` made a [1, 1] view at offset 1 re-traced)
            raise trace_error("as_strided", "it addresses the storage of an input that does not fill it "
                              "exactly (a slice, an expanded tensor), and a graph holds only the input's elements")
        geo = op.view(*args)
        geos = geo if isinstance(geo, list) else [geo]
        if len(geos[0]) == 4:  # (shape, strides, offset, dtype): view(dtype)
            raise trace_error(op.public_name, "it reads the memory as another dtype, which a graph of typed values "
                              "does not express")
        node_args = self.node_args(op, args)
        if op.public_name == "as_strided":
            node_args[0] = base._storage.value  # it addresses the storage, not the tensor: read the whole base
        outputs = self.add(op, node_args, [TensorType(tuple(g[0]), base.dtype, base.device) for g in geos])
        views = []
        for g, v in zip(geos, outputs):
            t = Tensor._view_of(base, *g)
            t._trace_value = (v, base._storage._version)
            views.append(t)
        return tuple(views) if isinstance(geo, list) else views[0]  # (a tuple, as eager's `registry._make_views`)

    def write(self, target, result):
        """Write ``result``'s values into the fake ``target`` (an in-place op), functionally."""
        target = self.fake(target)
        value = self.value_of(result)
        if result.dtype is not target.dtype:
            value = self.add(registry.OPS["_to_copy"], (value, target.dtype, None),
                             [TensorType(tuple(target._shape), target.dtype, target.device)])[0]
        st = target._storage
        if target._shape == st.base_shape and target._offset == 0 and \
                target._stride == _contiguous(st.base_shape):
            st.value = value
        else:
            st.value = self.add(registry.OPS["as_strided_scatter"],
                                (st.value, value, target._shape, target._stride, target._offset),
                                [st.value.type])[0]
        st._version += 1
        target._trace_value = (value, st._version)

    # The dispatch hook ------------------------------------------------------------------

    def call(self, op, args, out):
        if threading.get_ident() != self.thread:
            return NotImplemented
        fakes = self.fake_args(op, args)  # (once: the record, the write and autograd take the same)
        if out is None:
            result = self._record(op, fakes)
        else:
            try:
                result = self._record(op, fakes)
            except NotImplementedError:
                registry.cast_before_kernel(op, out, fakes)
                raise
            # eager's rule and write: refused under grad as eagerly, resized and written through the hooks
            return registry.write_out(op, out, registry.out_grad(op, fakes, out, result), fakes)
        autograd = registry.AUTOGRAD
        if autograd is not None:
            # (the fakes decide: a tensor the code made from data has no history, its fake may have one from a
            # write: ``v = jitorch.tensor([...]); v[0] = x.sum(); v * 2``, fuzz seed 7501246)
            if autograd.needs_grad(op, fakes):
                # the backward graph of traced ops is built too: a backward() inside the traced
                # function then records its gradient ops into this same graph
                autograd.record(op, fakes, result)
            elif op.view is not None:  # an in-place op on its base may give it a history later, as eagerly
                autograd.track_views(self.fake(args[0]), result)
        return result

    def resize_out(self, out, shape, strides):
        """An ``out=`` tensor of another shape than its result, resized as `Tensor._resize` does (a new
        geometry over its memory, or new memory), with eager's warning at each call of the graph."""
        if threading.get_ident() != self.thread:
            return NotImplemented
        fake = self.fake(out)
        message = registry.out_resize_warning(fake, shape)
        if message is not None:
            self.graph.meta_warnings.append((UserWarning, message))
        if fake._offset + prod(shape) <= fake._storage.size:  # eager reshapes it over the same memory
            fake._set_geometry(shape, strides, fake._offset)
            fake.__dict__.pop("_trace_value", None)  # the value it held was of the old geometry: read anew
            return fake
        if fake._storage.origin is not None:
            raise TraceError(f"an out= tensor over an input's or captured tensor's memory is resized from "
                             f"{list(fake.shape)} to {list(shape)}, which a graph cannot do to the real tensor")
        fresh = fake.new_zeros(tuple(shape))
        fake._storage = fresh._storage
        fake._set_geometry(fresh._shape, strides, 0)  # (zeros in any dense layout: fresh's value is its value)
        fake._trace_value = fresh._trace_value
        return fake

    def write_out(self, out, result):
        """Write a result without history into the ``out=`` tensor ``out``, as eager's plain write (no
        autograd: ``eq`` into a float tensor that requires grad is allowed)."""
        if threading.get_ident() != self.thread:
            return NotImplemented
        self.write(out, result)
        return out

    def call_inplace(self, op, args):
        if threading.get_ident() != self.thread:
            return NotImplemented
        target = args[0]
        fake = self.fake(target)
        autograd = registry.AUTOGRAD
        state = None
        fakes = self.fake_args(op, args)
        grad = autograd is not None and autograd.needs_grad_inplace(op, fakes)
        write = registry.expanded_write(op, fake)
        if write is not None and (grad or write is not registry.write_all):
            # torch writes these element by element into the shared memory (`registry.write_inplace`), where the
            # last write to a location holds it, which a graph's scatter of the whole result does not order (only
            # fill_'s and zero_'s, which write every element alike, come out the same; fill_diagonal_'s, which warns
            # of nothing, wrote the rows' unfilled elements over the diagonal: trust55); with history, a backward
            # raises (`autograd.engine.ExpandedWriteNode`)
            raise TraceError(f"{op.public_name}_ writes into an expanded tensor of shape {list(fake.shape)} and "
                             f"strides {list(fake._stride)}, which a graph does not do as eagerly")
        if grad:
            state = autograd.prepare_inplace(op, fakes, copy=self.history_copy)
        result = self._inplace(op, args, target, fake)
        if state is not None:
            # eagerly the real tensor gets a new history, which a graph's write-back cannot give it
            self.graph.rewrites_history |= fake._storage.origin is not None
            autograd.finish_inplace(op, state, self.fake_args(op, args), fake)
        return result

    def history_copy(self, fake):
        """A fake tensor with ``fake``'s current value and autograd history (what an in-place
        op's backward reads as its input)."""
        t = self.new_fake(self.value_of(fake), requires_grad=fake._requires_grad)
        t.grad_fn = fake.grad_fn
        if "_output_nr" in fake.__dict__:
            t._output_nr = fake._output_nr
        return t

    def _inplace(self, op, args, target, fake):
        if op.view is not None:  # ``t_()``, ``squeeze_()``: the tensor becomes a view of itself
            args = self.fake_args(op, args)
            view = self.record_view(op, args)
            if target is not fake:  # a captured tensor: Python reads its new shape (``c.t_(); c.shape``) as eagerly
                self.reshaped.setdefault(id(target), (target, target._shape, target._stride, target._offset))
                target._set_geometry(view._shape, view._stride, target._offset + view._offset - fake._offset)
            fake._set_geometry(view._shape, view._stride, view._offset)
            fake._trace_value = view._trace_value
            return target
        try:
            result = op.composite(*args) if op.composite is not None else self.record(op, args)
        except NotImplementedError:
            registry.cast_before_kernel(op, fake, args)
            raise
        registry.check_inplace(op, fake, result)
        self.write(fake, result)
        return target

    def restore_reshaped(self):
        """Give the captured tensors that in-place view ops reshaped while tracing their geometry back: each
        call reshapes them (`jit.compile.change_geometry`, or eagerly)."""
        for real, shape, strides, offset in self.reshaped.values():
            real._set_geometry(shape, strides, offset)

    # Driving -------------------------------------------------------------------------------

    def __enter__(self):
        registry.DISPATCH_HOOKS.insert(0, self)
        GRAD_WATCHERS.append(self)
        VALUE_WATCHERS.append(self)
        return self

    def __exit__(self, *exc):
        registry.DISPATCH_HOOKS.remove(self)
        GRAD_WATCHERS.remove(self)
        VALUE_WATCHERS.remove(self)

    def output(self, result):
        """Set the graph's outputs from the function's result, and its mutations."""
        leaves, spec = tree_flatten(result)
        values = []
        for leaf in leaves:
            if isinstance(leaf, Tensor) and id(leaf) in self.made and self.fake(leaf).requires_grad:
                # (its fake's history, from a write, does not reach the tensor a call returns: runs eagerly)
                raise TraceError(f"the traced function returns a tensor of shape {list(leaf.shape)} it made from "
                                 "data and then wrote values that require grad into")
            if isinstance(leaf, Tensor):
                if leaf.requires_grad and leaf.grad_fn is None and isinstance(leaf._storage, TraceStorage) \
                        and not any(leaf is t for t in self.input_fakes):
                    # eagerly a leaf of its own (fuzz seed 7202672: ``hann_window(1, requires_grad=True)``;
                    # ``x.detach().requires_grad_()``), which a graph's output, made without history, is not
                    raise TraceError(f"the traced function returns a tensor of shape {list(leaf.shape)} it made "
                                     "that requires grad (a leaf), which a graph's output cannot be")
                values.append(self.value_of(leaf))
            elif isinstance(leaf, _LITERALS):
                values.append(leaf)
            else:
                raise TraceError(f"the traced function returned a {type(leaf).__name__}, which a graph cannot "
                                 "hold (outputs are tensors, numbers, strings and None in tuples, lists and dicts)")
        self.graph.outputs = tree_unflatten(values, spec)
        pieces = []  # the unsafe split outputs the leaves are or view, once each (see `alias_history`)
        self.graph.output_aliases = self.output_aliases(leaves, pieces)
        self.graph.output_bases = self.shared_new_memory(leaves, self.graph.output_aliases, pieces)
        self.graph.output_layouts, layouts = self.output_layouts(leaves, self.graph.output_aliases)
        self.graph.layouts.update(layouts)
        # whether any output depends differentiably on inputs that require grad (then a compiled
        # call must give its outputs a backward node)
        self.graph.outputs_require_grad = any(isinstance(leaf, Tensor) and leaf.requires_grad for leaf in leaves)
        self.graph.output_requires_grad = [leaf.requires_grad for leaf in leaves if isinstance(leaf, Tensor)]
        self.graph.traced_constants = dict(self.graph.constant_tensors)
        self.graph.gradient_reaches = self.gradient_reaches([leaf for leaf in leaves
                                                             if isinstance(leaf, Tensor) and leaf.requires_grad])
        for st in self.watched:
            if st._version != st.initial_version:
                self.graph.mutations.append((st.origin, self.read(st, *st.origin_geometry, 0)))
        self.graph.geometry_changes = self.geometry_changes()
        self.check_captured_aliasing()
        return self.graph

    def owner_fakes(self):
        """(input index or constant name, its fake) for the call's tensors and the captured tensors
        themselves (not views lifted onto one)."""
        owners = list(enumerate(self.input_fakes))
        for real, fake in self.lifted.values():
            origin = fake._storage.origin
            if origin is not None and self.graph.constant_tensors.get(origin.name) is real:
                owners.append((origin.name, fake))
        return owners

    def geometry_changes(self):
        """The inputs and captured tensors an in-place view op (``x.t_()``) gave a new geometry over
        their own memory: owner -> (shape, strides, offset from the tensor's own)."""
        changes = {}
        for owner, fake in self.owner_fakes():
            st = fake._storage
            geometry = (tuple(fake._shape), tuple(fake._stride), fake._offset)
            if st in self.watched and geometry != (*st.origin_geometry, 0):
                changes[owner] = geometry
        return changes

    def own_edge(self, fake, owner):
        """Record where a backward reaches ``fake`` (an input's or captured tensor's stand-in) now: `owner_edges`."""
        node = fake.grad_fn or gradient_edge(fake)
        self.owner_edges[id(node)] = (node, owner)

    def gradient_reaches(self, outputs):
        """The input indices and constant names whose gradient a backward from ``outputs`` reaches
        (eagerly the others' ``.grad`` stays None)."""
        owners = {k: owner for k, (_, owner) in self.owner_edges.items()}
        for i, fake in enumerate(self.input_fakes):
            if fake.requires_grad:
                owners[id(fake.grad_fn or gradient_edge(fake))] = i
        for _, fake in self.lifted.values():
            if fake.requires_grad and fake._storage.origin is not None:
                owners[id(fake.grad_fn or gradient_edge(fake))] = fake._storage.origin.name
        reached, seen = set(), set()
        stack = [(_fresh_edge(t), getattr(t, "_output_nr", 0)) for t in outputs]
        while stack:
            node, output_nr = stack.pop()
            if id(node) in seen or not passes_gradient(node, output_nr):
                continue
            seen.add(id(node))
            if id(node) in owners:
                reached.add(owners[id(node)])
            stack.extend((nxt, nr) for nxt, nr in node.next_functions if nxt is not None)
        return reached

    def output_aliases(self, leaves, pieces):
        """Output leaves over the memory of an input or captured tensor (``x.add_(1); return x``,
        ``return x.t()``): leaf index -> (input index or constant name, geometry), the geometry None
        for the tensor itself, else (shape, strides, offset, history: `alias_history`), the offset
        counted from the real tensor's own. A call returns the real tensor there, or that view of it,
        as eager does, rather than a new tensor with its values."""
        owners = {v: i for i, v in enumerate(self.graph.inputs)}
        for real, fake in self.lifted.values():
            if fake._storage.origin is not None:
                owners[fake._storage.origin] = fake._storage.origin.name
        fake_of = dict(self.owner_fakes())
        itself = {id(f): owner for owner, f in fake_of.items()}
        itself.update((id(self.graph.constant_tensors[owner]), owner) for owner in fake_of if isinstance(owner, str))
        reshaped = self.geometry_changes()
        aliases, first = {}, {}
        for k, leaf in enumerate(leaves):
            if not isinstance(leaf, Tensor):
                continue
            if id(leaf) in first:  # ``return y, y``: the same tensor again, as eager
                aliases[k] = (("leaf", first[id(leaf)]), None)
                continue
            first[id(leaf)] = k
            fake = self.fake(leaf)
            st = fake._storage
            owner = owners.get(st.origin) if isinstance(st, TraceStorage) else None
            if owner is None:
                continue
            shape, strides = tuple(fake._shape), tuple(fake._stride)
            unmoved = (shape, strides) == st.origin_geometry and fake._offset == 0
            if itself.get(id(leaf)) == owner and (unmoved or owner in reshaped):  # (reshaped after the call)
                aliases[k] = (owner, None)
            else:
                history = alias_history(leaf, fake, fake_of[owner], pieces, self.gradient_reaches)
                aliases[k] = (owner, (shape, strides, fake._offset, history))
        return aliases

    def output_layouts(self, leaves, aliases):
        """How eager lays out the output leaves that are new tensors (not in ``aliases``): a list with one
        (storage size, ((leaf index, strides, offset), ...)) per storage they lie in; and, for the storages
        of new results eager lays out non-contiguously, {the result's Value: its strides}, for an executor
        to allocate and write those values that way (`jit.compile.eager_layouts` checks the leaves)."""
        groups, layouts = {}, {}
        for k, leaf in enumerate(leaves):
            if not isinstance(leaf, Tensor) or k in aliases:
                continue
            fake = self.fake(leaf)
            st = fake._storage
            groups.setdefault(id(st), (st.size, []))[1].append((k, tuple(fake._stride), fake._offset))
            if isinstance(st, TraceStorage) and st.laid_out is not None:
                value, strides = st.laid_out
                layouts[value] = strides
        return [(size, tuple(members)) for size, members in groups.values()], layouts

    def shared_new_memory(self, leaves, aliases, pieces):
        """Output leaves over memory the call makes (``y = x * 2; return y, y[0]``), as AOTAutograd
        returns them: per storage, one leaf ``j`` stands for the storage's whole value (the base),
        which the graph returns once, and each leaf ``k`` over it gets ``aliases[k] = (("output", j),
        geometry)`` as `output_aliases` gives views of inputs (geometry None: the base itself, as
        computed). A lone leaf that is the whole storage, or the tensor that made it (eager's layout of a
        new result is the executor's to give), is an ordinary output. Returns {j: the
        base's Value}; `jit.compile` makes the graph return it (an export keeps the leaves' own)."""
        groups = {}
        for k, leaf in enumerate(leaves):
            if k in aliases or not isinstance(leaf, Tensor):
                continue
            st = self.fake(leaf)._storage
            if st.origin is None:
                groups.setdefault(id(st), (st, []))[1].append(k)
        bases = {}
        for st, members in groups.values():
            fakes = [self.fake(leaves[k]) for k in members]
            whole = [k for k, f in zip(members, fakes) if _is_whole(f)]
            lone = len(members) == 1 and (bool(whole) or leaves[members[0]]._base is None)  # returned as computed
            if lone or any(f.dtype is not st.dtype for f in fakes):
                continue
            # the tensor eager made stands for the storage where it fills it, else any leaf: it is the root of
            # the leaves that require grad (others may be detached from it), or of any; an unsafe split's
            # output counts as part of the tensor it was split from (its gradient reaches that one's inputs)
            roots = [history_root(f) for f in fakes]
            root = next((r for k, r in zip(members, roots) if leaves[k].requires_grad), roots[0])
            j = next((k for k, f in zip(members, fakes) if k in whole and f is root), members[0])
            bases[j] = st.value
            for k, f in zip(members, fakes):
                geometry = (tuple(f._shape), tuple(f._stride), f._offset, alias_history(leaves[k], f, root, pieces))
                aliases[k] = (("output", j), None if f is root and k in whole else geometry)
        return bases

    def check_captured_aliasing(self):
        """Captured tensors are separate graph values: a write through one would be missed by another
        over the same memory (a parameter and a view of it), so such a function cannot be compiled."""
        written = {target for target, _ in self.graph.mutations}
        by_storage = {}
        for real, fake in self.lifted.values():
            by_storage.setdefault(id(real._storage), set()).add(fake._storage.origin)
        for origins in by_storage.values():
            if len(origins) > 1 and written.intersection(origins):
                names = " and ".join(sorted(v.name for v in origins))
                raise TraceError(f"the captured tensors {names} share memory and the function writes into "
                                 "one of them; a graph would not see the write through the other")


# `alias_history` of a returned leaf that is a tensor of its own over another's memory (``y.detach()``), of a
# view of one, of an unsafe split's output (its own tensor, with a view's history), and of a view of one
ALIAS = "alias"
VIEW_OF_ALIAS = "view of alias"
UNSAFE_SPLIT = "unsafe split"
VIEW_OF_UNSAFE_SPLIT = "view of unsafe split"
CUT = "view without a backward path"


def _autograd_root(t):
    """The tensor whose history ``t``'s follows when written in place: its base, or itself."""
    return t if t._base is None else t._base


def _piece(fake, root):
    """Whether ``fake`` is an ``unsafe_`` split's output of ``root``'s memory (no view in autograd's sense)."""
    return fake._base is None and fake is not root and history_root(fake) is root


def alias_history(leaf, fake, root, pieces, reaches=None):
    """How a returned leaf (``fake`` in the trace) over the memory of ``root`` (an input's or captured
    tensor's fake, or the tensor that made new memory) relates to it for autograd, for a call to
    rebuild it so (`jit.results.returned_view`): True, an autograd view of it (the leaf requires grad);
    (`UNSAFE_SPLIT`, n), a tensor of its own with a view's history (an ``unsafe_`` split's output that requires
    grad: an in-place op on it rewrites no other leaf's history, fuzz seed 7952220); (`VIEW_OF_UNSAFE_SPLIT`,
    n, the piece's (shape, strides, offset)), an autograd view of such a piece, which eager's is (a write
    into it rewrites the piece's history, not ``root``'s); n numbers the piece in ``pieces`` (the leaves over
    one piece share it, as eager's); False, a view of it without history (a later in-place op on it gives it
    one); `ALIAS`, a tensor of its own over that memory (``root.detach()``); `VIEW_OF_ALIAS`, a view of such
    a tensor; `CUT`, given ``reaches`` (`Tracer.gradient_reaches`, for a ``root`` that is an input's or captured
    tensor's), a view that requires grad but whose backward reaches none: ``with no_grad(): v = p[1:]``, then
    ``v[0]``, whose ``SelectBackward0`` leads nowhere in eager, so ``p`` gets no gradient through it (fuzz seed
    5100145 of ``--regions``)."""
    if leaf.requires_grad:
        if _piece(fake, root):
            return UNSAFE_SPLIT, _number(pieces, fake)
        piece = fake._base
        if piece is not None and _piece(piece, root):
            return VIEW_OF_UNSAFE_SPLIT, _number(pieces, piece), (tuple(piece._shape), tuple(piece._stride),
                                                                  piece._offset)
        return CUT if reaches is not None and not reaches([leaf]) else True
    own = _autograd_root(fake)
    if own is root:
        return False
    return ALIAS if own is fake else VIEW_OF_ALIAS


def _number(pieces, piece):
    """``piece``'s index in ``pieces``, added there if new."""
    n = next((n for n, p in enumerate(pieces) if p is piece), None)
    if n is None:
        n = len(pieces)
        pieces.append(piece)
    return n


def _is_whole(fake):
    """Whether a fake tensor is its storage's whole value: its base shape, contiguous, from offset 0."""
    st = fake._storage
    return fake._shape == st.base_shape and fake._offset == 0 and fake._stride == _contiguous(st.base_shape)


def _is_traced(value):
    return isinstance(value, Tensor) and isinstance(value._storage, TraceStorage)


def _captured_tensors(graph):
    """The captured tensors a graph reads (not the ``.grad`` tensors it re-reads at each call)."""
    return [t for name, t in graph.constant_tensors.items()
            if name not in graph.grad_constants and isinstance(t, Tensor)]


def _captured_read(tracer, graph):
    """(name, tensor) of the captured tensors the trace read: the graph's constants and the captured tensors
    over their memory (not the ``.grad`` tensors it re-reads at each call)."""
    names = {id(t): name for name, t in graph.constant_tensors.items() if isinstance(t, Tensor)}
    grads = {id(graph.constant_tensors.get(name)) for name in graph.grad_constants}
    return [(names[id(real)] if id(real) in names else tracer.name_for(real), real)
            for real, _ in tracer.lifted.values() if id(real) not in grads]


def _values_guard(tensor, name):
    """A check that ``tensor`` holds the values (bit for bit) it holds now, which the trace read into Python."""
    def values():
        return tensor.dtype, tuple(tensor.shape), np.ascontiguousarray(tensor._host_array()).tobytes()
    seen = values()

    def check():
        return values() == seen
    check.__doc__ = f"the values of {name}, read into Python while tracing, are unchanged"
    return check


def _grad_is_none_guard(tensor, name, was_none):
    """A graph traced with a captured parameter's ``.grad`` None (or not) fits only calls where it still is."""
    import weakref
    ref = weakref.ref(tensor)

    def check():
        t = ref()
        return t is not None and (t.__dict__.get("_grad") is None) == was_none
    check.__doc__ = f"{name}.grad is {'None' if was_none else 'a tensor'}"
    return check


def _leaf_hooks_guard(tensors):
    """A traced backward ran the ``register_hook`` and post-accumulate-grad hooks of the captured
    leaves it accumulated into (a parameter's) and cast to their grad_dtype: adding or removing a hook, or
    changing the grad_dtype, must trace again."""
    def hooks_of(t):
        d = t.__dict__
        return tuple(d.get("_hooks") or ()), tuple(d.get("_post_accumulate_grad_hooks") or ()), \
            d.get("_grad_dtype", t.dtype)
    seen = [hooks_of(t) for t in tensors]

    def check():
        return [hooks_of(t) for t in tensors] == seen
    check.__doc__ = "the hooks of captured tensors the traced backward accumulated into are unchanged"
    return check


def _requires_grad_guard(graph):
    """A graph is specialised to which captured tensors require grad (what its backward reaches, which
    gradients a compiled call gives): freezing or unfreezing a parameter must trace again."""
    tensors = [t for name, t in graph.constant_tensors.items()
               if name not in graph.grad_constants and isinstance(t, Tensor) and t.dtype.is_floating_point]
    if not tensors:
        return []
    flags = [t._requires_grad for t in tensors]

    def check():
        return [t._requires_grad for t in tensors] == flags
    check.__doc__ = "captured tensors' requires_grad flags are unchanged"
    return [check]


def current_tracer():
    """The tracer recording now in this thread, or None."""
    me = threading.get_ident()
    for hook in registry.DISPATCH_HOOKS:
        if isinstance(hook, Tracer) and hook.thread == me:
            return hook
    return None


def _spanned_memory(shape, strides):
    """(shape of the compact base standing for the memory a tensor of this non-contiguous layout spans,
    a function of a compact fake holding the tensor's elements that returns the base filled with them).
    A permutation of a dense layout is that permutation; any other is the 1-D span, with the elements
    scattered into their places (gaps hold zeros: no view of the tensor reaches them). Expanded dims
    (stride 0) hold one element."""
    if is_non_overlapping_and_dense(shape, strides):
        order = sorted(range(len(shape)), key=lambda d: -strides[d])
        return tuple(shape[d] for d in order), lambda t: t.permute(order)
    kept = tuple(1 if s == 0 else n for n, s in zip(shape, strides))
    extent = 0
    for s, n in sorted((s, n) for n, s in zip(kept, strides) if n > 1):
        if s <= extent:
            raise TraceError(f"an input or captured tensor of shape {list(shape)} has elements that share memory "
                             f"(strides {list(strides)}), which a graph cannot represent")
        extent += (n - 1) * s

    def build(t):
        base = t.new_zeros((extent + 1,))
        base.as_strided(kept, strides, 0).copy_(t[tuple(slice(0, n) for n in kept)])
        return base
    return (extent + 1,), build


class OutsideHistory(NodeHooks):
    """The ``grad_fn`` of the stand-in for an input that is not a leaf (a clone of a parameter, an
    activation): it makes the stand-in a non-leaf, as the real tensor, so in-place ops and views of
    it are allowed or refused as eagerly. A backward() inside the traced function that reaches it
    would go on into the real tensor's history, which a graph cannot."""

    __slots__ = ("hooks", "retained", "pre_hooks", "post_hooks", "next_functions", "__weakref__")
    num_outputs = 1

    def __init__(self):
        self.hooks = {}
        self.retained = {}
        self.pre_hooks = None
        self.post_hooks = None
        self.next_functions = ()

    def name(self):
        return "OutsideHistory"

    def apply(self, grads, create_graph):
        raise TraceError("a backward() inside the traced function reaches an input that is not "
                         "a leaf: its gradient would flow on into that tensor's history from outside the call, "
                         "which a graph cannot do")

    def release(self):
        """Nothing is held (the engine frees each node it ran)."""


def _is_compact(t):
    """Whether ``t`` fills its storage exactly from offset 0, in some order of its dims: then its fake's
    base stands for the whole storage, which ``as_strided`` may address."""
    return is_non_overlapping_and_dense(t._shape, t._stride) and t._offset == 0 and t._storage.size == t.numel()


def input_names(fn, args, kwargs):
    """A name per flattened argument leaf: ``x``, ``xs_0``, ``cfg_lr`` (from the signature when it binds)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
        named = list(bound.arguments.items())
    except (TypeError, ValueError):
        named = [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    names = []
    for name, value in named:
        leaves, spec = tree_flatten(value)
        if spec.kind == "leaf":
            names.append(name)
        else:
            names.extend(f"{name}_{i}" for i in range(len(leaves)))
    return names


def trace(fn, *args, **kwargs):
    """Trace ``fn(*args, **kwargs)`` into a `Graph`; tensors in ``args``/``kwargs`` become its inputs.

    Python control flow is specialised to the example arguments; reading tensor
    data in Python raises `TraceError`.
    """
    graph, _ = trace_with_inputs(fn, args, kwargs)
    return graph


@collector_paused()
def trace_with_inputs(fn, args, kwargs, refreshed=False, reruns_eagerly=False):
    """(graph, flat list of the real input tensors in graph-input order). ``refreshed``: the caller runs the
    graph's refreshers before each call (`jitorch.compile` does; an export or `trace` keeps the captured values
    as they are now), so library code may hand the graph numbers set per call instead of ops
    (`jitorch.compiler.scalars_refreshed`). ``reruns_eagerly``: the caller runs the function eagerly instead where
    a call of the graph raises `ops.value_checks.EagerRerun` (`jitorch.compile`'s forward graphs do), so library
    code may take a form that covers fewer values (`jitorch.compiler.reruns_eagerly`)."""
    tracer = Tracer(fn)
    tracer.refreshed = refreshed
    tracer.reruns_eagerly = reruns_eagerly
    leaves, spec = tree_flatten((args, kwargs))
    names = input_names(fn, args, kwargs)
    if len(names) != len(leaves):
        names = [f"arg{i}" for i in range(len(leaves))]
    fake_leaves, inputs = [], []
    tracer.real_inputs = {id(leaf) for leaf in leaves if isinstance(leaf, Tensor)}
    for name, leaf in zip(names, leaves):
        if isinstance(leaf, Tensor):
            value = tracer.graph.add_input(TensorType(tuple(leaf.shape), leaf.dtype, leaf.device), name,
                                           requires_grad=leaf.requires_grad)
            fake_leaves.append(tracer.outside_fake(value, leaf))
            inputs.append(leaf)
            if not leaf.is_contiguous() and _is_compact(leaf):  # a permutation of a dense layout
                tracer.graph.layouts[value] = tuple(leaf._stride)
        else:
            fake_leaves.append(leaf)
    fargs, fkwargs = tree_unflatten(fake_leaves, spec)
    fakes = [f for f in fake_leaves if isinstance(f, Tensor)]
    tracer.input_fakes = fakes
    for i, f in enumerate(fakes):
        if f.requires_grad:
            tracer.own_edge(f, i)
    # what the function reaches of Python state before it runs (it may rebind it: the next call must then
    # retrace; it may store traced tensors there: they are taken back)
    state = CapturedState(fn, args, kwargs)
    with tracer:
        try:
            initial = [tracer.fake(real.grad) if real.requires_grad and real.grad is not None else None
                       for real in inputs]
            for f, g in zip(fakes, initial):
                f.grad = g
            # warnings of the ops' Python code too (indexing's deprecations): each run of the graph gives them
            with registry.meta_warnings_into(tracer.graph.meta_warnings):
                result = fn(*fargs, **fkwargs)
            # (a tensor made from Python data too: eagerly each call stores a new one; fuzz seed 7200446)
            stored = state.stored_traced_values(lambda v: _is_traced(v) or id(v) in tracer.made)
        except BaseException:
            state.restore()  # the call runs eagerly (or raises): it makes its changes itself
            raise
        finally:
            tracer.restore_reshaped()
            captured, grad_guards = tracer.finish_grads()
        if stored:
            state.restore()
            raise StateWriteError(f"it stores tensors it computes in Python state ({', '.join(stored)}), which a "
                                  "graph cannot set; this call runs eagerly, and the next one traces again")
        # a backward() inside fn set inputs' or captured parameters' .grad: the graph returns those too
        targets = [i for i, (f, g) in enumerate(zip(fakes, initial)) if f.grad is not g]
        grads = [fakes[i].grad for i in targets] + [g for _, g in captured]
        targets += [name for name, _ in captured]
        if targets:
            result = (result, grads)
        graph = tracer.output(result)
        graph.grad_targets = targets
        graph.python_guards = (tracer.python_guards + grad_guards + _requires_grad_guard(graph) + state.guards
                               + state.tensor_guards(_captured_tensors(graph))
                               + state.geometry_guards(_captured_read(tracer, graph)))
        graph.one_shot = tracer.one_shot
        graph.refreshers = tracer.refreshers
    return graph, inputs


decompose.TRACER = Tracer  # the decompositions pass traces with this layer's tracer

__all__ = ["Tracer", "TraceError", "trace", "trace_with_inputs"]
