"""The autograd engine: recording backward nodes as ops run, and running them.

Every registry op on tensors that require grad records one `Node` (its
``grad_fn``) holding the op's arguments and result and the version counters
of the tensors among them. ``backward`` walks the nodes from the outputs in
reverse topological order, calls each op's derivative rule (jitorch ops, so
``create_graph=True`` records the backward too), sums each gradient down to
its input's shape, and accumulates into the ``.grad`` of leaves. Saved
tensors are dropped after use unless ``retain_graph``. Hooks run where torch's
engine runs them: tensor hooks and ``retain_grad`` on a node's incoming
gradients, then the node's pre-hooks, its rule, its post-hooks; a leaf's
hooks before accumulation and its post-accumulate-grad hooks after. A backward
that captures gradients (``autograd.grad``, ``backward(inputs=...)``) runs only
the nodes on a path to what it captures.
"""

from __future__ import annotations

import functools
import inspect
import sys
from weakref import ref as _weakref
from collections import OrderedDict

from ..ops import registry
from ..ops.factories import new_empty_strided
from ..ops.views import compact_window, contiguous_format
from ..runtime import allocator
from ..runtime import profiling as _profiling
from ..runtime.grad_mode import _state as _grad_state, enable_grad, is_grad_enabled, no_grad
from ..runtime.hooks import add_hook
from ..runtime.strided import contiguous_strides, is_non_overlapping_and_dense
from ..tensor import INFERENCE_VIEW, NO_GRAD_VIEW, view_refs
from . import saved_hooks
from .anomaly_mode import _STATE as anomaly_state, check_backward, forward_trace, warn_failure
from .rule import EVERYTHING, Args, Unsaved, is_linearizing


class NodeHooks:
    """Hooks on a backward node as a whole (torch's ``grad_fn.register_prehook`` and
    ``grad_fn.register_hook``), shared by op nodes and custom Function nodes."""

    __slots__ = ()

    def register_prehook(self, hook):
        """Call ``hook(grad_outputs)`` before this node runs: a tuple per output, None where no
        gradient arrived; a returned tuple of the same length replaces them."""
        if self.pre_hooks is None:
            self.pre_hooks = OrderedDict()
        return add_hook(self.pre_hooks, hook)

    def register_hook(self, hook):
        """Call ``hook(grad_inputs, grad_outputs)`` after this node ran: a returned tuple replaces
        the gradients it passes on to its inputs."""
        if self.post_hooks is None:
            self.post_hooks = OrderedDict()
        return add_hook(self.post_hooks, hook)


# torch's node names that do not follow from an op's name: its split overloads, chunk, which it makes with
# split (a view's node name shows in the errors of writes into it), and copy_'s hand-written node
_NODE_NAMES = {"chunk": "SplitBackward0", "split.sizes": "SplitWithSizesBackward0",
               "split_with_sizes": "SplitWithSizesBackward0", "copy": "torch::autograd::CopyBackwards"}


class Node(NodeHooks):
    """A backward function: ``grad_fn`` of an op's outputs."""

    __slots__ = ("op", "args", "versions", "out", "next_functions", "input_specs", "freed", "hooks", "retained",
                 "pre_hooks", "post_hooks", "trace", "packed", "saving", "__weakref__")

    def __init__(self, op, args, out, next_functions, input_specs, versions=(), saving=True):
        self.op = op
        self.args = args
        self.out = out
        self.versions = versions              # (saved tensor, its version counter then): see `_save`
        self.retained = {}                    # output index -> weakref of a tensor that retains its grad
        self.next_functions = next_functions  # per tensor input: (Node or AccumulateGrad or None, 0)
        self.input_specs = input_specs        # per tensor input: (schema position, list index, shape, dtype)
        self.freed = False
        self.hooks = {}                       # output index -> {id: hook(grad) -> grad or None} (register_hook)
        self.pre_hooks = None
        self.post_hooks = None
        self.trace = forward_trace() if anomaly_state["enabled"] else None  # the forward call's stack
        self.packed = False                   # its saved tensors went through saved_tensors_hooks (`_pack`)
        self.saving = saving                  # its rule reads an argument or result (`_save`): see `release`

    def name(self):
        known = _NODE_NAMES.get(self.op.name)
        if known is not None:
            return known
        base = "".join(p.capitalize() for p in self.op.public_name.strip("_").split("_"))
        return f"{base}Backward0"

    @property
    def num_outputs(self):
        out = self.out
        return len(out) if isinstance(out, (tuple, list)) else 1

    def apply(self, grads, create_graph):
        """The gradients of this node's tensor inputs, given its outputs' gradients."""
        return _call_rule(self, grads, create_graph)

    def release(self):
        """Free what the node saved after a backward through it (without ``retain_graph``). A node whose rule reads
        no argument nor result (a clone's, a view's, an add's) saved nothing, and a later backward may run it again,
        as torch's nodes without saved variables (fuzz seed 32 of ``--models``: a second forward from a cloned input
        whose clone node an earlier backward had passed through)."""
        if not self.saving:
            return
        self.freed = True
        self.args = None
        self.out = None  # the output holds this node (grad_fn): let the pair go without the cyclic GC
        self.versions = ()

    def __repr__(self):
        return f"<{self.name()} object>"


class AccumulateGrad:
    """The node of a leaf: sums incoming gradients into ``variable.grad``."""

    __slots__ = ("variable", "next_functions", "__weakref__")

    def __init__(self, variable):
        self.variable = variable
        self.next_functions = ()

    def name(self):
        return "torch::autograd::AccumulateGrad"

    def __repr__(self):
        return "<AccumulateGrad object>"


def gradient_edge(t, version=None):
    """Where a gradient for ``t`` goes: its grad_fn, or the leaf's AccumulateGrad. ``version``: the
    version of ``t``'s memory the edge is for (an in-place op's inputs are read before its write),
    by default the current one."""
    fn = t.grad_fn
    if fn is not None:
        seen = t.__dict__.get("_view_version")
        current = t._storage._version if version is None else version
        if seen is not None and seen != current:
            return _refresh_view_history(t, current)
        return fn
    acc = t.__dict__.get("_accumulator")
    if acc is None:
        meta = t.__dict__.get("_creation_meta")
        if meta is not None:
            # a view made without grad mode, whose memory is as it was then: it requires grad through its
            # base, but a gradient for it goes nowhere, as torch's (no grad_fn and no accumulator). Else a
            # write since, or a multi-output view `_views_catch_up` could not give a history: torch raises.
            if (meta is NO_GRAD_VIEW or meta is INFERENCE_VIEW) and t.__dict__.get("_view_version") == (
                    t._storage._version if version is None else version):
                return None
            # such a view of a base that requires no grad, made to require grad itself (``requires_grad_()``, a
            # factory's ``requires_grad=True`` whose result is a view: a periodic ``hamming_window``), is a leaf
            # of its own, as torch's
            if "_view_version" in t.__dict__ or meta is not NO_GRAD_VIEW and meta is not INFERENCE_VIEW or (
                    t._base._requires_grad):
                raise RuntimeError(_view_message(t, "its base or another view of its base has been"))
        acc = t._accumulator = AccumulateGrad(t)
    return acc


def _refresh_view_history(view, version):
    """A view whose memory was written since its history was recorded (an in-place op on its base
    or on another view of it) reads its values from the base's new history, as torch regenerates
    a view's grad_fn: an ``as_strided`` of the base as it is now."""
    if "_creation_meta" in view.__dict__:
        raise RuntimeError(_view_message(view, "its base or another view of its base has been"))
    base = view._base
    with enable_grad():
        fresh = registry.call(registry.OPS["as_strided"], [base, tuple(view._shape), view._stride, view._offset])
    view.grad_fn = fresh.grad_fn
    view._requires_grad = True
    view._output_nr = 0
    view._view_version = version
    return view.grad_fn


def track_views(base, views):
    """Remember ``views`` (a view op's results on ``base``, which records no history) on their root
    base: torch regenerates such a view's grad_fn from its base once an in-place op gives the base a
    history (``b = zeros(3); v = b[1]; b.copy_(x)``: v requires grad), and so does `_views_catch_up`.
    Views made without grad mode go to `no_grad_views`.
    (The eager view shortcuts make and remember a view in one step: `Tensor._view_of`'s ``track``.)"""
    if not _grad_state.enabled:
        no_grad_views(base, views)
        return
    root = base._base
    if root is None:
        root = base
    if root._requires_grad or not root.dtype.is_floating_point:
        return
    tracked = view_refs(root)
    if views.__class__ is tuple or views.__class__ is list:  # (`_multi`)
        for v in views:
            tracked.append(_weakref(v))
            v._creation_meta = MULTI_OUTPUT_VIEW
        return
    tracked.append(_weakref(views))
    meta = base.__dict__.get("_creation_meta")
    if meta is not None:
        views._creation_meta = meta


def no_grad_views(base, views):
    """Mark ``views`` (a view op's results on ``base``, made without grad mode) as torch's views of creation
    meta NO_GRAD_MODE (INFERENCE_MODE inside ``inference_mode``): each requires grad while its root base
    does (its results then require grad, but no gradient reaches the base: `gradient_edge`), and once its
    memory has been written since it was made (an in-place op on it, its base or another view, with or
    without grad mode) an op that records history on it raises torch's error, as does an in-place op on it
    that records history. A root that does not require grad yet remembers the views (`view_refs`), which
    `_views_catch_up` makes require grad once an in-place op gives the root a history."""
    root = base._base
    if root is None:
        root = base
    if not root.dtype.is_floating_point:
        return
    meta = INFERENCE_VIEW if _grad_state.inference else NO_GRAD_VIEW
    for v in (views if views.__class__ is tuple or views.__class__ is list else (views,)):  # (`_multi`)
        if v._base is None:  # (an op that returned its input itself, as ``x.view_as(x)`` may not)
            continue
        v._creation_meta = meta
        if root._requires_grad:
            v._requires_grad = True
            v._view_version = root._storage._version  # (a view made unmarked never has one: stale at once)
        else:
            view_refs(root).append(_weakref(v))


def _views_catch_up(root):
    """An in-place op gave ``root`` a history: the views `track_views` remembered on it read their
    values from that history from now on (an ``as_strided`` of it), as torch's do."""
    if not root._requires_grad:
        return
    tracked = root._views
    root._views = None
    if tracked is None:
        return
    version = root._storage._version
    for ref in tracked:
        v = ref()
        if v is None or v._requires_grad:
            continue
        if "_creation_meta" in v.__dict__:  # requires grad as torch's, whose grad_fn then raises (`gradient_edge`)
            v._requires_grad = True
        else:
            _refresh_view_history(v, version)


def _multi(views):
    """Whether a view op's result is several views (a list while tracing)."""
    return views.__class__ is tuple or views.__class__ is list


def _tensor_inputs(op, args):
    """(schema position, list index or None, tensor) of every tensor argument."""
    Tensor = registry.Tensor
    for i, is_list in op.tensor_args:
        v = args[i]
        if is_list and v is not None:
            for j, t in enumerate(v):
                if isinstance(t, Tensor):
                    yield i, j, t
        elif isinstance(v, Tensor):
            yield i, None, v


_GRAD_ARGS: dict = {}  # op -> `grad_args(op)`


def grad_args(op):
    """The tensor arguments of ``op`` its rule differentiates (`Rule.differentiates`), as (the schema
    positions of single tensors, those of tensor lists): torch's differentiable inputs, the only ones
    that make its results require grad (``y.view_as(x)`` does not, with only ``x`` requiring grad).
    No argument of an op declared nondifferentiable; every one of an op without a rule (a composite's
    in-place form)."""
    found = _GRAD_ARGS.get(op)
    if found is None:
        rule = op.pieces.get("derivative")
        if "nondifferentiable" in op.pieces:
            args = ()
        elif rule is None:
            args = op.tensor_args
        else:
            args = [(i, is_list) for i, is_list in op.tensor_args if op.arg_names[i] in rule.differentiates]
        found = _GRAD_ARGS[op] = (tuple(i for i, is_list in args if not is_list),
                                  tuple(i for i, is_list in args if is_list))
    return found


def needs_grad(op, args):
    """Whether a call records a node: grad mode on and some differentiable tensor argument (`grad_args`)
    requires grad."""
    if not is_grad_enabled():
        return False
    singles, lists = _GRAD_ARGS.get(op) or grad_args(op)
    Tensor = registry.Tensor
    for i in singles:
        t = args[i]
        if t._requires_grad if t.__class__ is Tensor else isinstance(t, Tensor) and t._requires_grad:
            return True
    for i in lists:
        if args[i] is not None and any(isinstance(t, Tensor) and t._requires_grad for t in args[i]):
            return True
    return False


def needs_grad_inplace(op, args):
    """Whether an in-place call on ``args[0]`` records: `needs_grad`, and a target whose dtype carries gradients
    (floating point). torch records nothing for a write into an integer or bool tensor (``b.copy_(x)`` of an
    ``x`` that requires grad) and asks nothing of the views it is written through: a compiled step refused
    ``v[0:] = x`` into a view of an expanded bool input, which eager ran (fuzz seed 5590744)."""
    return args[0].dtype.is_floating_point and needs_grad(op, args)


def record(op, args, result, versions=None):
    """Attach a backward node to ``result`` (called after an op ran on tensors requiring grad).
    ``versions``: id -> version counter of inputs as they were before an in-place op wrote them."""
    Tensor = registry.Tensor
    if versions is None and result.__class__ is Tensor:
        fast = _FAST_RECORDERS.get(op, _UNBUILT)
        if fast is _UNBUILT:
            fast = _built_recorder(op)
        if fast is not None:
            return fast(args, result)
    if "nondifferentiable" in op.pieces:
        return result
    if op.attrs and _served_by_fallback(op, args):
        return record_unimplemented(op, args, result, op.attrs.get("fallback_name"))
    if isinstance(result, Tensor):
        if not result.dtype.is_floating_point:
            return result
        outs = (result,)
    else:
        outs = tuple(result)
        if not any(isinstance(o, Tensor) and o.dtype.is_floating_point for o in outs):
            return result
    positions = op.tensor_positions
    if positions is not None:  # no tensor lists: the common case
        inputs = [(i, None, args[i]) for i in positions if isinstance(args[i], Tensor)]
    else:
        inputs = list(_tensor_inputs(op, args))
    # the node's edges: its differentiable inputs alone, as torch's next_functions
    differentiable = set().union(*grad_args(op))
    grad_inputs = [x for x in inputs if x[0] in differentiable]
    if not any(t._requires_grad for _, _, t in grad_inputs):
        return result  # (a fast path's call, which asked whether any input requires grad)
    # An in-place op's inputs are read as they were before its write (``x.add_(x.squeeze())``: the view's
    # history is that of x before the write, and stays stale after it)
    edges = tuple([(gradient_edge(t, versions.get(id(t)) if versions else None), getattr(t, "_output_nr", 0))
                   if t._requires_grad else (None, 0) for _, _, t in grad_inputs])
    specs = tuple([(i, j, t._shape, t.dtype) for i, j, t in grad_inputs])
    args = args if args.__class__ is list else list(args)
    # why a view's history may never be rebased (torch's CreationMeta): the outputs of an op that makes
    # several views (``split``) may not, nor views of a view that may not
    meta = None
    if op.view is not None:
        meta = MULTI_OUTPUT_VIEW if _multi(result) else args[0].__dict__.get("_creation_meta")
    node = Node(op, args, result, edges, specs)
    _save(node, inputs, outs, _saves(op, grad_inputs), versions)
    k = 0
    for o in outs:
        if isinstance(o, Tensor) and o.dtype.is_floating_point:
            o.grad_fn = node
            o._requires_grad = True
            o._output_nr = k
            if op.view is not None:
                # a write into a view's memory after now makes this history stale (an in-place view op,
                # ``x.unsqueeze_(1)``, on a tensor that is no view gives no view: nothing to refresh it from)
                if o._base is not None:
                    o._view_version = o._storage._version
                if meta is not None:
                    o._creation_meta = meta
        k += 1
    return result


_FAST_RECORDERS: dict = {}  # op -> `_fast_recorder(op)`
_UNBUILT = object()


def recorder(op):
    """``record(args, result)`` for ``op``'s out-of-place calls with one plain tensor result, without `record`'s
    own frame: `_fast_recorder`'s function where it serves the op, else `record` itself."""
    fast = _FAST_RECORDERS.get(op, _UNBUILT)
    if fast is _UNBUILT:
        fast = _built_recorder(op)
    return fast if fast is not None else functools.partial(record, op)


def _built_recorder(op):
    """`_fast_recorder(op)`, kept for the op's later calls (`_FAST_RECORDERS`)."""
    fast = _FAST_RECORDERS[op] = _fast_recorder(op)
    return fast


def _fast_recorder(op):
    """`record` for the commonest call, built once per op: an op with a rule, no tensor-list argument and no
    autograd fallback, that makes no view, called out of place with one tensor result. What the general
    path works out per call from the schema and the rule (which arguments are tensors the rule
    differentiates, which of them it reads given those that require grad, the names in `Unsaved`'s errors)
    depends only on which arguments are tensors and which of those require grad (the call's pattern): each
    pattern's recording is a function generated at its first call (`_record_plan`). None for an op this
    does not serve."""
    rule = op.pieces.get("derivative")
    positions = op.tensor_positions
    if (rule is None or "nondifferentiable" in op.pieces or op.view is not None or positions is None
            or op.attrs.get("autograd_fallback") is not None):
        return None
    differentiable = frozenset(grad_args(op)[0])
    # the pattern: per tensor position k, 1 << 2k where a tensor, and 2 << 2k where one the rule differentiates
    # that requires grad
    lines = ["def fast(args, result):",
             "    if pieces.get('derivative') is not rule:  # (replaced since: a test's monkeypatch)",
             "        return rebuilt(op, args, result)",
             "    if not result.dtype.is_floating_point:", "        return result"]
    for k, i in enumerate(positions):
        present = 1 << 2 * k
        if i in differentiable:
            value = f"({3 * present} if t._requires_grad else {present})"
        else:
            value = str(present)
        assign = "key =" if k == 0 else "key |="
        lines += [f"    t = args[{i}]", f"    {assign} {value} if isinstance(t, Tensor) else 0"]
    lines += ["    plan = plans.get(key)", "    if plan is None:",
              "        plan = plans[key] = make_plan(op, rule, positions, differentiable, key)",
              "    return result if plan is None else plan(args, result)"]
    env = {"Tensor": registry.Tensor, "plans": {}, "make_plan": _record_plan, "op": op, "rule": rule,
           "positions": positions, "differentiable": differentiable, "pieces": op.pieces, "rebuilt": _rebuilt}
    return registry.define("\n".join(lines) + "\n", "fast", "record_" + op.name.replace(".", "_"),
                           f"<jitorch record {op.name}>", env)


def _rebuilt(op, args, result):
    """`record` of a call of ``op`` whose rule was replaced since its `_fast_recorder` was built: built anew."""
    _FAST_RECORDERS.pop(op, None)
    return record(op, args, result)


def _record_plan(op, rule, positions, differentiable, key):
    """The function that records a node for `_fast_recorder`'s calls of ``op`` of pattern ``key`` as `record` and
    `_save` do, straight-line: the edges and input specs of the differentiable tensors, the version counters of
    the tensors the rule reads, `Unsaved` for the others and for the result unless the rule reads it. None
    where no differentiable tensor requires grad (no node)."""
    names = op.arg_names
    present = [i for k, i in enumerate(positions) if key >> 2 * k & 1]
    wanting = {i for k, i in enumerate(positions) if key >> 2 * k + 1 & 1}
    if not wanting:
        return None
    saves = rule.saves({names[i] for i in wanting})
    everything = saves is EVERYTHING
    kept = [i for i in present if everything or names[i] in saves]
    result_kept = everything or "result" in saves or "result0" in saves
    lines = ["def plan(args, result):", "    args = args if args.__class__ is list else list(args)"]
    lines += [f"    t{i} = args[{i}]" for i in present]
    edges, specs = [], []
    for i in present:
        if i not in differentiable:
            continue
        specs.append(f"({i}, None, t{i}._shape, t{i}.dtype)")
        if i in wanting:
            lines += [f"    e{i} = t{i}.grad_fn", f"    d = t{i}.__dict__",
                      f"    if e{i} is None or '_view_version' in d:", f"        e{i} = gradient_edge(t{i})",
                      f"    e{i} = (e{i}, d.get('_output_nr', 0))"]
            edges.append(f"e{i}")
        else:
            edges.append("(None, 0)")
    versions = [f"(t{i}, t{i}._storage._version)" for i in kept] + ["(result, result._storage._version)"] * result_kept
    lines += [f"    versions = [{', '.join(versions)}]"]
    for i in present:
        if i not in kept:
            lines += _unsaved_lines(f"t{i}", f"args[{i}]", (op.name, names[i]))
    if not result_kept:
        lines += _unsaved_lines("result", "out", (op.name, "result"))
    out = "result" if result_kept else "out"
    lines += [f"    node = Node(op, args, {out}, ({''.join(e + ', ' for e in edges)}), "
              f"({''.join(s + ', ' for s in specs)}), versions, {everything or bool(saves)})",
              "    if anomaly['enabled']:",
              "        node.trace = forward_trace(1)  # (the stack up to `record`'s caller, as the general path's)",
              "    d = result.__dict__",
              "    d['grad_fn'] = node",
              "    result._requires_grad = True",
              "    d['_output_nr'] = 0",
              "    if open_hooks[0] and versions:",
              "        pair = saved_hooks.active()",
              "        if pair is not None:",
              "            pack(node, pair, True)",
              "    return result"]
    env = {"Node": Node, "Unsaved": Unsaved, "new": object.__new__, "gradient_edge": gradient_edge, "op": op,
           "anomaly": anomaly_state, "forward_trace": forward_trace, "open_hooks": saved_hooks.OPEN,
           "saved_hooks": saved_hooks, "pack": _pack}
    return registry.define("\n".join(lines) + "\n", "plan", f"record_{op.name.replace('.', '_')}_{key}",
                           f"<jitorch record {op.name} {key}>", env)


def _unsaved_lines(tensor, target, what):
    """Lines that set ``target`` to `Unsaved` of ``tensor`` (names in a `_record_plan`), its ``__init__`` written
    out: a call's frame cost as much as its stores."""
    lines = [f"    u = new(Unsaved)"]
    lines += [f"    u.{slot} = {tensor}.{attr}" for slot, attr in Unsaved.KEPT]
    return lines + [f"    u.what = {what!r}", f"    {target} = u"]


class UnimplementedNode(Node):
    """torch's autograd fallback node (``NotImplemented``): the history of a call torch serves without a
    derivative (``scatter(..., reduce=)``, ``softmax(x, out=o)``); a backward through it raises."""

    __slots__ = ("what",)

    def name(self):
        return "torch::autograd::NotImplemented"

    def apply(self, grads, create_graph):
        if is_linearizing():  # (forward-mode AD's linearization: torch's forward AD refuses the op itself)
            raise NotImplementedError(f"Trying to use forward AD with aten::{self.what} that does not support it.")
        raise RuntimeError(f"derivative for aten::{self.what} is not implemented")


class ExpandedWriteNode(UnimplementedNode):
    """The history of an in-place write through an expanded tensor (`registry.write_inplace`): torch's backward
    through it raises its internal-overlap error (the written view's as_strided backward), so this one does."""

    __slots__ = ()

    def name(self):
        return "AsStridedBackward0"

    def apply(self, grads, create_graph):
        raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a "
                           "single memory location. Please clone() the tensor before performing the operation.")


_RENAMED: dict = {}  # node name -> the Node subclass that answers it


def rename_history(t, name):
    """Name ``t``'s history (the node of the op that made it, no other's) as torch's ``name`` where torch
    makes ``t`` with an op of its own that jitorch makes with a more general one (a reshape's copy is
    torch's ``_unsafe_view``, its view of a non-contiguous tensor ``_reshape_alias``): the name shows in
    ``grad_fn.name()`` and in the errors that name a view's node."""
    node = t.grad_fn
    if node is None or node.__class__ is not Node:
        return
    cls = _RENAMED.get(name)
    if cls is None:
        cls = _RENAMED[name] = type(name, (Node,), {"__slots__": (), "name": lambda self: name})
    node.__class__ = cls  # (no slot of its own: the same layout)


def _served_by_fallback(op, args):
    """Whether torch's autograd fallback serves every form of this call (``autograd_fallback(args)``)."""
    fallback = op.attrs.get("autograd_fallback")
    return fallback is not None and fallback(args)


def record_unimplemented(op, args, result, what=None):
    """Give ``result`` (one tensor, or a tuple of which the floating-point ones: ``ldl_factor_ex``'s LD) an
    `UnimplementedNode` over ``op``'s inputs that require grad; ``what``: the name its backward's error gives
    (the op's, by default)."""
    inputs = list(_tensor_inputs(op, args))
    edges = tuple((gradient_edge(t), getattr(t, "_output_nr", 0)) if t._requires_grad else (None, 0)
                  for _, _, t in inputs)
    node = UnimplementedNode(op, None, None, edges, tuple((i, j, t._shape, t.dtype) for i, j, t in inputs))
    node.what = what or op.public_name
    for nr, t in enumerate(result if isinstance(result, tuple) else (result,)):
        if t is result or t.dtype.is_floating_point:
            t.grad_fn = node
            t._requires_grad = True
            t._output_nr = nr
    return result


def _saves(op, inputs):
    """The names ``op``'s rule reads, given which of its ``inputs`` want a gradient (`Rule.saves`)."""
    rule = op.pieces.get("derivative")
    if rule is None:
        return EVERYTHING
    names = op.arg_names
    return rule.saves({names[i] for i, _, t in inputs if t._requires_grad})


def _save(node, inputs, outs, saves, versions):
    """Keep of the tensors the node's rule reads (a view's reads geometry alone) their version
    counters, and of the others their geometry alone (`Unsaved`). Inputs an in-place op wrote
    (``a.mul_(a)``'s ``other``) are expected at their ``versions`` from before the write."""
    op, args = node.op, node.args
    if op.view is not None:
        saves = frozenset()
    # (a name the rule reads that holds a Python number is saved too: torch wraps it in a tensor, ``x * 2``)
    node.saving = saves is EVERYTHING or bool(saves)
    kept = []
    names = op.arg_names
    for i, j, t in inputs:
        if saves is EVERYTHING or names[i] in saves:
            kept.append((t, t._storage._version if versions is None else versions.get(id(t), t._storage._version)))
        elif j is None:
            args[i] = Unsaved(t, (op.name, names[i]))
        else:
            args[i] = list(args[i])
            args[i][j] = Unsaved(t, (op.name, names[i]))
    single = len(outs) == 1 and node.out is outs[0]
    stored = []
    for k, o in enumerate(outs):
        if isinstance(o, registry.Tensor) and not (saves is EVERYTHING or "result" in saves
                                                   or f"result{k}" in saves):
            o = Unsaved(o, (op.name, "result" if single else f"result{k}"))
        elif isinstance(o, registry.Tensor):
            kept.append((o, o._storage._version))
        stored.append(o)
    node.out = stored[0] if single else tuple(stored)
    node.versions = kept
    if saved_hooks.OPEN[0] and kept:
        pair = saved_hooks.active()
        if pair is not None:
            _pack(node, pair, single)


def saves_also(result, tensors):
    """Make the backward of ``result`` (a function jitorch composes of ops, torch's one op) check the
    version counters of ``tensors`` (as they are now), as torch's node of that op saves them: a write into
    one of them before the backward raises torch's "modified by an inplace operation" where the composed
    ops' own nodes saved none of them (leaky_relu's product by a factor the forward chose) and the backward
    would give the gradient of the forward's values. The node of ``result``'s last op (or custom function)
    keeps them, and frees them after a backward, as torch's node does; under saved-tensor hooks torch packs
    them unchecked."""
    node = getattr(result, "grad_fn", None)
    if node is None or node.freed or saved_hooks.OPEN[0] and saved_hooks.active() is not None:
        return
    if isinstance(node, Node):
        if node.packed:
            return
        kept = [k for k, _ in node.versions]
    elif hasattr(node, "also_checked"):  # a custom function's node (`function.FunctionNode`)
        kept = [k for k, _ in node.also_checked]
    else:
        return
    extra = [(t, t._storage._version) for t in tensors
             if isinstance(t, registry.Tensor) and not any(k is t for k in kept)]
    if not extra:
        return
    if isinstance(node, Node):
        node.versions = list(node.versions) + extra
        node.saving = True
    else:
        node.also_checked = (*node.also_checked, *extra)


def saving(*names, in_place=True):
    """Decorate a function that composes of ops a torch op whose one node saves the arguments ``names``
    (derivatives.yaml's: leaky_relu's ``self``, mse_loss's ``self`` and ``target``): its tensor result's
    backward checks their versions (`saves_also`). An in-place form (an ``inplace=True`` argument) saves its
    result, the written input, at its new version, as torch's ``leaky_relu_``; or, with ``in_place=False``,
    nothing (torch's ``hardtanh_`` saves a copy of its input from before the write, as the composition's
    in-place node does)."""
    def decorate(fn):
        saved = _arguments_named(fn, names)
        flag = None if in_place else _arguments_named(fn, ("inplace",))

        @functools.wraps(fn)
        def saving_call(*args, **kwargs):
            out = fn(*args, **kwargs)
            if isinstance(out, registry.Tensor) and out._requires_grad and not (
                    flag is not None and flag(args, kwargs)[0]):
                saves_also(out, saved(args, kwargs))
            return out
        return saving_call
    return decorate


def _arguments_named(fn, names):
    """A function of a call's ``(args, kwargs)`` giving the values of ``fn``'s parameters ``names`` (None
    where a call leaves one to its default)."""
    params = list(inspect.signature(fn).parameters)
    positions = [(params.index(n), n) for n in names]
    return lambda args, kwargs: [args[i] if i < len(args) else kwargs.get(n) for i, n in positions]


def not_differentiable(function, *names):
    """Decorate a function that computes torch's op ``function`` whose arguments ``names`` have no derivative
    (derivatives.yaml's ``non_differentiable``: nll_loss's ``weight``, soft_margin_loss's ``target``): as
    torch's autograd does before computing, the call raises where grad mode is on and one of them requires
    grad, rather than giving a gradient torch refuses (or none, silently)."""
    def decorate(fn):
        values = _arguments_named(fn, names)

        @functools.wraps(fn)
        def checked_call(*args, **kwargs):
            if is_grad_enabled():
                for name, value in zip(names, values(args, kwargs)):
                    if isinstance(value, registry.Tensor) and value._requires_grad:
                        raise RuntimeError(f"The function '{function}' is not differentiable with respect to "
                                           f"argument '{name}'. This input cannot have requires_grad True.")
            return fn(*args, **kwargs)
        return checked_call
    return decorate


def check_also_saved(node, pairs):
    """Raise torch's error where a tensor of ``pairs`` (tensor, version: `saves_also`'s) was written since."""
    for t, version in pairs:
        if t._storage._version != version:
            raise RuntimeError(_modified_message(node, t, version))


def version_checked(outputs):
    """The tensors whose versions the backward from ``outputs`` checks: those the nodes of their history
    saved (op nodes' and custom functions'), each once."""
    found, seen, stack = {}, set(), [o.grad_fn for o in outputs if isinstance(o, registry.Tensor)]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Node):
            saved = [t for t, _ in node.versions]
        else:
            ctx = getattr(node, "ctx", None)
            saved = [t for t in getattr(ctx, "_saved", None) or () if isinstance(t, registry.Tensor)]
            saved += [t for t, _ in getattr(node, "also_checked", ())]
        found.update((id(t), t) for t in saved)
        stack.extend(edge for edge, _ in getattr(node, "next_functions", ()))
    return list(found.values())


def _pack(node, pair, single):
    """Put the tensors ``node`` saved through ``pair``'s pack hook (torch's saved_tensors_hooks): an input
    keeps its history for the unpacked tensor, an output the node itself; none is version-checked."""
    op = node.op
    names = op.arg_names
    saved_hooks.pack_saved(node.args, pair, lambda k, t: saved_edge(t), lambda k: (op.name, names[k]))
    outs = [node.out] if single else list(node.out)
    mine = _weakref(node)  # (the node holds its outputs' packed values: no cycle through them)
    saved_hooks.pack_saved(outs, pair, lambda k, t: (mine, k, False),
                           lambda k: (op.name, "result" if single else f"result{k}"))
    node.out = outs[0] if single else tuple(outs)
    node.versions = ()
    node.packed = True


def saved_edge(t):
    """Where a gradient for saved tensor ``t`` goes, as a `saved_hooks.Packed` edge, or None."""
    if not t._requires_grad:
        return None
    edge = gradient_edge(t)
    return None if edge is None else (edge, getattr(t, "_output_nr", 0), t.grad_fn is None)


def record_inplace(op, before, args, target, versions=None):
    """``target`` was written in place by ``op``: its history becomes the op's node, whose
    ``self`` input is ``before`` (``target``'s old history, with a copy of its old values if the
    rule reads them). A node that saved ``target`` (exp's saves its result) now sees a newer
    version and raises in backward, as torch's does."""
    if op.attrs and _served_by_fallback(op, args):
        record_unimplemented(op, [before] + list(args[1:]), target, op.public_name + "_")
        return
    record(op, [before] + list(args[1:]), target, versions)


def prepare_inplace(op, args, copy=None):
    """Before an in-place op on ``args[0]`` that needs grad: check it is allowed, keep what the
    backward will need: the target's old history (and a copy of its old values if the rule reads
    ``self``: ``copy(target)``, by default `Tensor._history_copy`) and, for a view written through,
    its base's (the write changes the base too, as torch's CopySlices records), and the version
    counters of the saved inputs before the write."""
    target = args[0]
    check_inplace_allowed(target)
    if target.grad_fn is not None:
        gradient_edge(target)  # a view whose base was written since: its history first catches up
    base = target._base
    if base is not None and base._requires_grad and base.grad_fn is None:  # (in-place view ops too: t_, as_strided_)
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")
    base_before = None
    if base is not None and op.view is None:
        window = compact_window(base, target)  # where the view is in the base, which need not fill its storage
        if window is None:
            raise RuntimeError("jitorch autograd: an in-place operation through a view that reaches memory outside "
                               "its base, of a base whose elements overlap, or across base dims whose memory order "
                               "is not their index order, is not supported; clone() the base first")
        base_before = base._history_copy(copy_data=False), window  # as_strided_scatter's rule reads no values
    if op.view is None and reads_old_self(op, args):
        before = copy(target) if copy is not None else target._history_copy()
    else:
        before = target._history_copy(copy_data=False)
    versions = {id(t): t._storage._version for _, _, t in _tensor_inputs(op, args)}
    return before, base_before, versions


def reads_old_self(op, args):
    """Whether the rule of in-place ``op`` reads ``self`` as it was before the write."""
    saves = _saves(op, list(_tensor_inputs(op, args)))
    return saves is EVERYTHING or "self" in saves


def finish_inplace(op, state, args, target):
    """After the in-place op: ``target``'s history becomes the op's node; a base written through
    the view gets an as_strided_scatter node that puts the view's new values into its old ones."""
    before, base_before, versions = state
    record_inplace(op, before, args, target, versions)
    expanded = registry.expanded_write(op, target) is not None
    if op.view is None and target._base is not None:
        target._view_version = target._storage._version  # its history is current: other views' is not
    if base_before is not None:
        base = target._base
        base_before, (strides, offset) = base_before
        scatter = registry.OPS["as_strided_scatter"]
        record_inplace(scatter, base_before, [base, target, tuple(target.shape), strides, offset], base)
        rename_history(base, "torch::autograd::CopySlices")
    if expanded:
        for t in (target, target._base):
            if t is not None:
                _refuse_backward(t)
    _views_catch_up(target if target._base is None else target._base)


def _refuse_backward(t):
    """Give ``t`` an `ExpandedWriteNode` over its current history."""
    node = ExpandedWriteNode(None, None, None, ((gradient_edge(t), getattr(t, "_output_nr", 0)),),
                             ((0, 0, t._shape, t.dtype),))
    t.grad_fn = node
    t.__dict__.pop("_output_nr", None)


def check_inplace_allowed(target):
    """torch's refusals of an in-place op that records history (grad mode on) on ``target``."""
    if "_creation_meta" in target.__dict__ and is_grad_enabled():
        raise RuntimeError(_view_message(target, "is being"))
    if target._requires_grad and target.grad_fn is None and is_grad_enabled():
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")


# Why a view's history may not be rebased after a write into its memory (``_creation_meta``): torch's
# messages, after the one naming the view.
CUSTOM_FUNCTION_VIEW = (
    " This view was created inside a custom Function (or because an input was returned as-is) and the autograd "
    "logic to handle view+inplace would override the custom backward associated with the custom Function, "
    "leading to incorrect gradients. This behavior is forbidden. You can fix this by cloning the output of the "
    "custom Function.")
MULTI_OUTPUT_VIEW = (
    " This view is the output of a function that returns multiple views. Such functions do not allow the output "
    "views to be modified inplace. You should replace the inplace operation by an out-of-place one.")


def _view_message(view, modified):
    """torch's error for a write into ``view`` (``modified`` = "is being") or into its base or another
    view of it, where ``view._creation_meta`` forbids rebasing its history."""
    fn = view.grad_fn
    meta = view._creation_meta
    if fn is None:
        subject = "A view was created in"
    else:
        name = fn.name()
        name = name[:-len("Backward0")] if name.endswith("Backward0") else name.removesuffix("Backward")
        subject = f"Output {getattr(view, '_output_nr', 0)} of {name} is a view"
        if meta is not NO_GRAD_VIEW and meta is not INFERENCE_VIEW:
            return f"{subject} and {modified} modified inplace.{meta}"
        subject += " of a view which was created in"  # (a view made with grad mode of a view made without)
    if meta is INFERENCE_VIEW:
        return f"{subject} inference mode and {modified} modified inplace in normal mode.{meta}"
    # (torch says "no_grad mode" of every other view without history, wherever it was made)
    return f"{subject} no_grad mode and {modified} modified inplace with grad mode enabled.{meta}"


# Hooks ----------------------------------------------------------------------------------------

def _hook_name(hook):
    return getattr(hook, "__name__", type(hook).__name__)


def _check_hook_grad(hook, old, new):
    """torch's checks of a gradient ``new`` that a hook returned in place of ``old``."""
    if old is None:
        raise RuntimeError("can't replace a None gradient with a non-None value")
    if not isinstance(new, registry.Tensor):
        raise TypeError(f"expected Variable, but hook returned '{type(new).__name__}'")
    if new.dtype is not old.dtype or new.device.type != old.device.type:
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the type of value "
                           f"(was {old.type()} got {new.type()})")
    if tuple(new.shape) != tuple(old.shape):
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the size of value")


def _run_tensor_hooks(hooks, grad):
    """``grad`` through a tensor's ``register_hook`` hooks, each of which may replace it."""
    for hook in tuple(hooks.values()):  # (a hook may remove itself)
        new = hook(grad)
        if new is not None:
            _check_hook_grad(hook, grad, new)
            grad = new
    return grad


def _run_tuple_hooks(hooks, grads, *extra):
    """``grads`` (a tuple) through node hooks called as ``hook(grads, *extra)``, each of which may
    return a tuple of the same length to replace them."""
    for hook in tuple(hooks.values()):
        new = hook(grads, *extra)
        if new is None:
            continue
        if not isinstance(new, tuple):
            raise TypeError(f"expected tuple, but hook returned '{type(new).__name__}'")
        if len(new) != len(grads):
            raise RuntimeError(f"hook '{_hook_name(hook)}' has returned an incorrect number of values "
                               f"(got {len(new)}, but expected {len(grads)})")
        for old, g in zip(grads, new):
            if g is not None:
                _check_hook_grad(hook, old, g)
        grads = new
    return grads


def _run_pre_hooks(node, grads):
    """The gradients of ``node``'s outputs (output index -> gradient) after its pre-hooks."""
    values = _run_tuple_hooks(node.pre_hooks, tuple(grads.get(k) for k in range(node.num_outputs)))
    return {k: g for k, g in enumerate(values) if g is not None}


def _run_post_hooks(node, input_grads, grads):
    """The gradients ``node`` passes to its inputs after its post-hooks. An op node's hooks see
    None for inputs that do not require grad (its rule may have computed one), as torch's do."""
    if isinstance(node, Node):
        input_grads = [g if nxt is not None else None for (nxt, _), g in zip(node.next_functions, input_grads)]
    outputs = tuple(grads.get(k) for k in range(node.num_outputs))
    return list(_run_tuple_hooks(node.post_hooks, tuple(input_grads), outputs))


# Running backward -----------------------------------------------------------------------------

def sum_to(grad, shape, dtype):
    """``grad`` summed over the dims it was broadcast along, to ``shape``, in ``dtype``."""
    shape = tuple(shape)
    have = tuple(grad.shape)
    if have != shape:
        lead = len(have) - len(shape)
        dims = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and have[lead + i] != 1)
        if dims:
            grad = grad.sum(dims, keepdim=True)  # contiguous: its dims can be dropped by a view
            grad = grad.view(shape) if tuple(grad.shape) != shape else grad
        elif lead or tuple(grad.shape) != shape:
            grad = grad.reshape(shape)
    if grad.dtype is not dtype:
        grad = grad.to(dtype)
    return grad


def _graph(roots):
    """How many edges point at each node reachable from ``roots`` (nodes hash by identity)."""
    deps, seen, stack = {}, set(), list(roots)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        for nxt, _ in n.next_functions:
            if nxt is not None:
                deps[nxt] = deps.get(nxt, 0) + 1
                stack.append(nxt)
    return deps


def capture_edge(t):
    """(node, output index) whose gradient capturing ``t`` returns: a tensor's, or a ``GradientEdge``'s
    (a tuple: torch.autograd.graph's)."""
    if isinstance(t, tuple):
        return t[0], t[1]
    return gradient_edge(t), getattr(t, "_output_nr", 0)


def _needed(roots, wanted):
    """The nodes reachable from ``roots`` through which a gradient reaches a ``wanted`` node (all a
    backward that captures gradients has to run)."""
    needed = {}
    stack = [(n, False) for n in roots]
    while stack:
        node, expanded = stack.pop()
        if expanded:  # its successors are settled (the graph is acyclic)
            needed[node] = any(nxt is not None and (nxt in wanted or needed[nxt]) for nxt, _ in node.next_functions)
        elif node not in needed:
            needed[node] = False
            stack.append((node, True))
            stack.extend((nxt, False) for nxt, _ in node.next_functions if nxt is not None and nxt not in needed)
    return {node for node, yes in needed.items() if yes}


def passes_gradient(node, output_nr):
    """Whether a gradient of ``node``'s output ``output_nr`` reaches its inputs: not where the op's rule
    reads other outputs' alone (`rule.only_with_grads_of`: slogdet's sign), nor where it gives none for
    these arguments (`rule.only_if`)."""
    if node.__class__ is not Node:
        return True
    rule = node.op.pieces.get("derivative")
    if rule is None:
        return True
    needed = getattr(rule.backward, "grads_of", None)
    return (needed is None or output_nr in needed) and _gives_gradient(node, rule)


def _gives_gradient(node, rule):
    predicate = getattr(rule.backward, "gives_gradient", None)
    # a node a backward freed keeps no arguments to ask (a trace whose function called backward): answered as
    # a rule without a predicate, since a second backward through it raises before any rule runs
    return predicate is None or node.freed or predicate(Args(node.op.schema, node.args, node.op.arg_names))


_RULE_TRAITS: dict = {}  # op -> `_rule_traits(its rule)`


def _rule_traits(rule):
    """(``rule``, its backward or None, its `rule.only_if` predicate or None), looked up once per op."""
    if rule is None:
        return None, None, None
    return rule, rule.backward, getattr(rule.backward, "gives_gradient", None)


def _call_rule(node, grads, create_graph):
    """The rule of ``node``'s op on its outputs' gradients: per tensor input, its gradient summed
    down to the input's shape and dtype (or None). Runs in the grad mode the caller set."""
    Tensor = registry.Tensor
    if node.freed:
        raise RuntimeError(
            "Trying to backward through the graph a second time (or directly access saved tensors after they "
            "have already been freed). Saved intermediate values of the graph are freed when you call "
            ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
            "graph a second time or if you need to access saved tensors after calling backward."
        )
    for t, version in node.versions:
        if t._storage._version != version:
            raise RuntimeError(_modified_message(node, t, version))
    op = node.op
    rule = op.pieces.get("derivative")
    traits = _RULE_TRAITS.get(op)
    if traits is None or traits[0] is not rule:  # (a rule replaced since: a test's monkeypatch)
        traits = _RULE_TRAITS[op] = _rule_traits(rule)
    _, backward, predicate = traits
    if backward is None:
        raise NotImplementedError(f"the derivative for '{op.name}' is not implemented")
    if predicate is not None and not predicate(Args(op.schema, node.args, op.arg_names)):  # (`_gives_gradient`)
        return [None] * len(node.input_specs)
    args, out = node.args, node.out
    if node.packed:
        args = saved_hooks.unpacked(args)
        out = tuple(saved_hooks.unpacked(out)) if isinstance(out, tuple) else saved_hooks.unpacked([out])[0]
    outs = out if isinstance(out, (tuple, list)) else None
    if outs is None:
        g = grads[0]
    else:
        needed = getattr(backward, "grads_of", None)  # (`passes_gradient`)
        if needed is not None and all(grads.get(k) is None for k in needed):
            return [None] * len(node.input_specs)
        fill = not getattr(backward, "undefined_grads", False)  # (`rule.undefined_grads`)
        g = tuple(grads.get(k) if grads.get(k) is not None else
                  (registry.FUNCTIONS["zeros"](tuple(o.shape), dtype=o.dtype, device=o.device)
                   if fill and isinstance(o, (Tensor, Unsaved)) else None)
                  for k, o in enumerate(outs))
    result = backward(g, Args(op.schema, args, op.arg_names), out)
    names = op.arg_names
    out = []
    for (pos, j, shape, dtype) in node.input_specs:
        got = result.get(names[pos])
        if j is not None and got is not None:
            got = got[j]
        if got is not None and (got._shape != shape or got.dtype is not dtype):
            got = sum_to(got, shape, dtype)
        out.append(got)
    return out


def _modified_message(node, t, version):
    """torch's error for a saved tensor written in place since: it names the tensor's creator
    (the node itself for a saved output), none for a leaf."""
    out = getattr(node, "out", None)  # (a custom function's node keeps no outputs: ``t`` is none of them)
    outs = out if isinstance(out, tuple) else (out,)
    mine = [k for k, o in enumerate(outs) if o is t]
    creator, nr = (node, mine[0]) if mine else (t.grad_fn, getattr(t, "_output_nr", 0))
    made = ""
    if creator is not None:
        name = creator.name()
        made = f", which is output {nr} of {name.removesuffix('Backward0').removesuffix('Backward')},"
    return (f"one of the variables needed for gradient computation has been modified by an inplace operation: "
            f"[{t.type()} {list(t.shape)}]{made} is at version {t._storage._version}; expected version {version} "
            "instead.")


class _Holder:
    __slots__ = ("value",)


def _refcount_extras():
    """How many references ``sys.getrefcount`` counts beyond the holders of an object held by a
    local variable, and by an attribute (the call's own, which differ between Python versions)."""
    local = object()
    holder = _Holder()
    holder.value = object()
    return sys.getrefcount(local) - 1, sys.getrefcount(holder.value) - 1


_LOCAL_EXTRA, _ATTR_EXTRA = _refcount_extras()


def run_backward(roots, root_grads, retain_graph=False, create_graph=False, capture=None, accumulate=True,
                 then=None):
    """Propagate ``root_grads`` from ``roots`` (tensors). ``capture``: tensors whose gradient to return
    (autograd.grad) instead of accumulating into leaves; ``then(captured)``: called before the backward
    ends (``backward(inputs=...)`` accumulates there, its leaves' hooks seeing the running backward). The rules and hooks run with grad mode
    set to ``create_graph``, as in torch's engine."""
    _ENDING.append([])
    _TASKS.append(GraphTask())
    try:
        with (enable_grad() if create_graph else no_grad()):
            captured = _run(roots, root_grads, retain_graph, create_graph, capture, accumulate)
        if then is not None:
            then(captured)
        return captured
    finally:
        _TASKS.pop()
        for fn in _ENDING.pop():
            fn()


class GraphTask:
    """One running backward, as torch's graph task: an id, and which nodes it runs (`will_execute`)."""

    _count = 0

    def __init__(self):
        GraphTask._count += 1
        self.id = GraphTask._count
        self.reachable = {}            # the nodes an edge of the graph points at (`_graph`)
        self.roots = set()             # the nodes the backward starts from
        self.needed = None             # of those, the ones a capturing backward runs (None: all)

    def will_execute(self, node):
        """Whether this backward runs ``node`` (torch's ``_will_engine_execute_node``)."""
        return (node in self.reachable or node in self.roots) and (self.needed is None or node in self.needed)


_TASKS: list = []  # the running backwards, innermost last


def current_graph_task():
    """The innermost running backward's `GraphTask`, or None outside one."""
    return _TASKS[-1] if _TASKS else None


_ENDING: list = []  # per running backward (innermost last): what `when_backward_ends` asked to call


def when_backward_ends(fn):
    """Call ``fn()`` once the backward now running (the innermost, when a hook runs another) ends, whether it
    returns or raises: a hook that starts something, such as DDP's thread advancing its all-reduces, stops it
    there also when a later rule or hook raises. Returns whether a backward is running (outside one nothing is
    registered)."""
    if _ENDING:
        _ENDING[-1].append(fn)
    return bool(_ENDING)


def _run(roots, root_grads, retain_graph, create_graph, capture, accumulate):
    start = []
    for i, (t, g) in enumerate(zip(roots, root_grads)):
        if not t._requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        start.append((gradient_edge(t), getattr(t, "_output_nr", 0), g))
    deps = _graph([n for n, _, _ in start])
    pending = {}      # node -> {output index: grad}
    for n, k, g in start:
        slot = pending.setdefault(n, {})
        slot[k] = g if k not in slot else slot[k] + g
    captured = {}
    wanted = dict(capture_edge(t) for t in capture) if capture is not None else None
    needed = _needed([n for n, _, _ in start], wanted) if wanted is not None else None
    task = _TASKS[-1]
    task.reachable, task.roots = deps, {n for n, _, _ in start}
    task.needed = None if wanted is None else needed | set(wanted)
    # a gradient nothing else holds may become a leaf's .grad as it is; while tracing, the tracer owns .grad
    steal = not create_graph and not (registry.DISPATCH_HOOKS and registry.hooks_take_calls())
    ready = [n for n, _, _ in start if n not in deps]
    done = set()
    while ready:
        node = ready.pop()
        if node in done:
            continue
        done.add(node)
        if needed is not None and node not in needed and node not in wanted:
            continue  # no gradient autograd.grad asks for depends on it: as torch, it does not run
        grads = pending.pop(node, {})
        if node.__class__ is AccumulateGrad:
            g = grads.pop(0, None)
            if wanted is not None:
                if node in wanted and g is not None:
                    captured[id(node)] = g
            elif g is not None and accumulate:
                owned = steal and sys.getrefcount(g) == 1 + _LOCAL_EXTRA  # (before the call holds it too)
                if _profiling.RECORDER is None:
                    _accumulate(node.variable, g, create_graph, owned)
                else:
                    _profiling.RECORDER.backward(node, lambda: _accumulate(node.variable, g, create_graph, owned))
            continue
        if node.hooks:
            for k, hooks in node.hooks.items():
                if grads.get(k) is not None:
                    grads[k] = _run_tensor_hooks(hooks, grads[k])
        if node.retained:
            for k, ref in node.retained.items():  # after the hooks, as torch does
                t = ref()
                if t is not None and grads.get(k) is not None:
                    g = grads[k].detach()
                    t.grad = g if t.grad is None else t.grad + g
        if wanted is not None and node in wanted:
            captured[id(node)] = grads.get(wanted[node])
            if node not in needed:
                continue
        if node.pre_hooks:  # after tensor hooks, retain_grad and capture, as torch's engine
            grads = _run_pre_hooks(node, grads)
        for g in grads.values():
            if g is not None:
                try:
                    if _profiling.RECORDER is None:
                        input_grads = node.apply(grads, create_graph)
                    else:
                        input_grads = _profiling.RECORDER.backward(node, lambda: node.apply(grads, create_graph))
                    if anomaly_state["enabled"]:
                        check_backward(node, input_grads)
                except Exception:
                    warn_failure(node)
                    raise
                break
        else:  # reachable, but the rules upstream gave it no gradient (expand_as's ``other``): nothing to pass on
            input_grads = [None] * len(node.next_functions)
        if node.post_hooks:
            input_grads = _run_post_hooks(node, input_grads, grads)
        grads = g = None
        if not retain_graph:
            node.release()
        for (nxt, k), g in zip(node.next_functions, input_grads):
            if nxt is None:
                continue
            if g is not None:
                slot = pending.get(nxt)
                if slot is None:
                    pending[nxt] = {k: g}
                else:
                    slot[k] = g if k not in slot else slot[k] + g
            left = deps[nxt] - 1
            deps[nxt] = left
            if not left:
                ready.append(nxt)
        input_grads = g = None
    return captured


def _accumulate(leaf, g, create_graph, owned=False):
    """Add ``g`` into ``leaf.grad``. As torch's AccumulateGrad, a first gradient that nothing else
    holds (``owned``: the caller's reference to ``g`` is the only one) becomes ``.grad`` without a copy."""
    want = leaf.__dict__.get("_grad_dtype", g.dtype)  # (a leaf's grad_dtype: the gradient cast to it, which its
    if want is not None and g.dtype is not want:      # hooks then see, as torch's engine casts it on its way)
        g = g.to(want)
    hooks = leaf.__dict__.get("_hooks")
    if hooks:
        owned = False  # a hook may keep the gradient it sees
        g = _run_tensor_hooks(hooks, g)
    if create_graph:
        leaf.grad = g if leaf.grad is None else leaf.grad + g
    elif leaf.grad is None:
        strides = _contract_strides(leaf)
        stolen = _stolen(g) if owned and _obeys(g, strides) else None
        leaf.grad = stolen if stolen is not None else _copy_laid_out(g.detach(), strides)
    elif not is_grad_enabled():
        leaf.grad.add_(g.detach())  # in place, as torch's AccumulateGrad: references to .grad see the sum
    else:
        leaf.grad = leaf.grad + g.detach()
    post = leaf.__dict__.get("_post_accumulate_grad_hooks")
    if post:
        for hook in tuple(post.values()):
            if hook(leaf) is not None:
                raise RuntimeError("Tensor post accumulate grad hooks should return None.")


def _contract_strides(leaf):
    """The strides of a first ``leaf.grad`` under torch's gradient layout contract: the leaf's own where
    they are non-overlapping and dense, else contiguous (so a Linear weight's gradient, which the product
    computes transposed, is contiguous like the weight)."""
    shape, strides = leaf._shape, leaf._stride
    return tuple(strides) if is_non_overlapping_and_dense(shape, strides) else contiguous_strides(shape)


def _obeys(g, strides):
    """Whether ``g`` is laid out with ``strides`` (those of size-1 dims aside)."""
    return all(n == 1 or a == b for n, a, b in zip(g._shape, g._stride, strides))


def _copy_laid_out(g, strides):
    """A copy of ``g`` in new memory laid out with ``strides``, as torch's clone_obey_contract."""
    if strides == contiguous_strides(g._shape):
        return g.clone(memory_format=contiguous_format)
    return new_empty_strided(g, g._shape, strides).copy_(g)


def _stolen(g):
    """``g`` as a new tensor without history on its memory, when ``g`` and a base of it that
    nothing else holds are the only tensors on that memory and no NumPy array outside them views
    it (a hook may have kept ``g.numpy()``), else None."""
    if (g.__class__ is not registry.Tensor or g.grad_fn is not None or g._requires_grad or g._offset
            or g.device.type != "cpu" or not g.is_contiguous()):
        return None
    if g._storage.size != g.numel():
        return None
    # (counted before any local variable holds them)
    if g._base is None:
        holders = 1
    elif sys.getrefcount(g._base) == 1 + _ATTR_EXTRA:
        holders = 2
    else:
        return None
    if sys.getrefcount(g._storage) != holders + _ATTR_EXTRA:
        return None
    base = g._base
    memory = g._storage._data
    # (a compiled call's large results, and large eager factories', are views of a caching allocator's buffer:
    # taken when they are the only one)
    if (memory.base is not None and not allocator.only_view(memory)) or not (
            g._arr is None or g._arr is memory) or not (base is None or base._arr is None or base._arr is memory):
        return None  # NumPy views on the memory, whose holders are unknown
    slots = 1 + (g._arr is memory) + (base is not None and base._arr is memory)  # the storage's, the tensors'
    if sys.getrefcount(memory) != slots + 1 + _LOCAL_EXTRA:
        return None
    return registry.Tensor._make(g._storage, g._shape, g._stride, 0, g._arr)
