"""``torch.autograd.graph``: the backward graph's nodes and edges, saved-tensor hooks (activation offloading
and checkpointing), multi-tensor gradient hooks, and version bumps for writes autograd cannot see."""

from __future__ import annotations

import abc
import contextlib
import functools
import threading
from typing import NamedTuple, Optional

from ..ops import registry
from ..runtime.grad_mode import enable_grad
from ..runtime.hooks import RemovableHandle
from . import engine, saved_hooks
from .function import FunctionNode
from .mutation_on_saved import allow_mutation_on_saved_tensors

__all__ = ["Node", "GradientEdge", "get_gradient_edge", "increment_version", "saved_tensors_hooks", "save_on_cpu",
           "disable_saved_tensors_hooks", "register_multi_grad_hook", "allow_mutation_on_saved_tensors"]


class Node(abc.ABC):
    """The type of every backward node (``grad_fn``, a leaf's gradient accumulator): ``isinstance(t.grad_fn,
    Node)`` holds for them all. Each has ``name()`` and ``next_functions``; op and custom-Function nodes
    also ``register_hook`` and ``register_prehook``."""

    @abc.abstractmethod
    def name(self):
        """The node's name, as torch's (``MulBackward0``)."""

    @property
    @abc.abstractmethod
    def next_functions(self):
        """(node or None, output index) per input the node passes a gradient to."""


Node.register(engine.NodeHooks)      # op nodes, custom Function nodes, compiled calls' nodes
Node.register(engine.AccumulateGrad)
Node.register(FunctionNode)


class GradientEdge(NamedTuple):
    """Where a gradient is computed in the graph: a node and which of its outputs. ``autograd.grad(loss,
    get_gradient_edge(x))`` is ``autograd.grad(loss, x)``."""

    node: Node
    output_nr: int
    ownership_token: Optional[Node] = None


def get_gradient_edge(tensor):
    """The `GradientEdge` of ``tensor``'s gradient: its grad_fn and output index, or a leaf's accumulator."""
    if not tensor.requires_grad:
        raise RuntimeError("It is not possible to get the gradient edge for a Tensor that does not require "
                           "gradients")
    if tensor.grad_fn is None:
        with enable_grad():
            node = engine.gradient_edge(tensor)
    else:
        node = tensor.grad_fn
    return GradientEdge(node, getattr(tensor, "_output_nr", 0))


def increment_version(tensor):
    """Mark ``tensor`` (or each tensor of an iterable) as written in place, for a write autograd did not
    see: a backward that saved it raises. Inference tensors have no version counter: left alone."""
    for t in ((tensor,) if isinstance(tensor, registry.Tensor) else tensor):
        if not t.is_inference():
            t._bump_version()


class saved_tensors_hooks:
    """Within this context, every tensor an op (or ``ctx.save_for_backward``) saves for backward is
    stored as ``pack_hook(tensor)`` and read back in backward as ``unpack_hook(packed)``. Nested,
    only the innermost pair applies; a tensor saved before the context opened keeps how it was saved.
    A compiled function called within it runs eagerly, so its saved tensors go through the hooks."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        saved_hooks.push(self.pack_hook, self.unpack_hook)

    def __exit__(self, *args):
        saved_hooks.pop()


class save_on_cpu(saved_tensors_hooks):
    """Saved tensors kept in CPU memory and moved back to their device for backward (on a CPU tensor
    ``cpu()`` is the tensor itself: no copy, as torch's; ``pin_memory=True`` copies into new memory)."""

    def __init__(self, pin_memory=False, device_type="cuda"):
        def pack_to_cpu(tensor):
            if not pin_memory:
                return tensor.device, tensor.cpu()
            packed = registry.FUNCTIONS["empty"](tuple(tensor.shape), dtype=tensor.dtype)
            packed.copy_(tensor)
            return tensor.device, packed

        def unpack_from_cpu(packed):
            device, tensor = packed
            return tensor.to(device, non_blocking=pin_memory)

        super().__init__(pack_to_cpu, unpack_from_cpu)


@contextlib.contextmanager
def disable_saved_tensors_hooks(error_message):
    """Within this context, opening a `saved_tensors_hooks` raises ``RuntimeError(error_message)``."""
    previous = saved_hooks.disabled_message()
    try:
        saved_hooks.set_disabled(error_message)
        yield
    finally:
        saved_hooks.set_disabled(previous)


class _MultiHandle(RemovableHandle):
    """The handles of one `register_multi_grad_hook` call, removed together."""

    def __init__(self, handles):
        self.handles = handles

    def remove(self):
        for handle in self.handles:
            handle.remove()


def _node_of(t):
    return t.node if isinstance(t, GradientEdge) else get_gradient_edge(t).node


def _task_id():
    task = engine.current_graph_task()
    if task is None:
        raise AssertionError("expected this hook to be called inside a backward call")
    return task.id


def register_multi_grad_hook(tensors, fn, *, mode="all"):
    """Call ``fn`` once per backward over several tensors' gradients. ``mode="all"``: after the gradients of
    every tensor the backward will compute, with the list of them (None for those it does not compute);
    ``"any"``: at the first of them, with that gradient. Returns a handle whose ``remove()`` unregisters it."""
    supported = ("all", "any")
    if mode not in supported:
        raise ValueError(f"Expects mode to be one of {supported} but got {mode}")
    lock = threading.Lock()
    if mode == "all":
        count, expected, buffer = {}, {}, {}
        nodes = [_node_of(t) for t in tensors]

        def inner_hook(idx, grad):
            task = engine.current_graph_task()
            key = _task_id()
            with lock:
                seen = count.get(key, 0)
                count[key] = seen + 1
                if not seen:
                    expected[key] = sum(task.will_execute(n) for n in nodes)
                    buffer[key] = [None] * len(nodes)
            buffer[key][idx] = grad
            if seen == expected[key] - 1:
                grads = buffer.pop(key)
                del count[key], expected[key]
                fn(grads)

        handles = tuple(t.register_hook(functools.partial(inner_hook, i)) for i, t in enumerate(tensors))
    else:
        ran = set()

        @functools.wraps(fn)
        def wrapped(grad):
            key = _task_id()
            with lock:
                if key in ran:
                    return
                ran.add(key)
            fn(grad)

        handles = tuple(t.register_hook(wrapped) for t in tensors if t.requires_grad)
    return _MultiHandle(handles)
