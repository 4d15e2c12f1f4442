"""The reference interpreter: runs a graph node by node with the eager kernels.

It is the oracle every compiled result is compared with, so it does nothing
clever. Nodes read their tensor arguments as eager ops would, so results have
eager's strides and offsets (a slice of a slice stays a view of the first
tensor); only where the IR means the compact layout of a value (contiguous,
offset 0, a storage of exactly its elements) and the tensor has another does
a node read a compact copy: the ``as_strided`` family addresses that layout's
storage, and a ``view`` the tensor's strides cannot express reads it. Results
are what the kernels give: a returned input is that input, and a view may
share memory with an input.
"""

from __future__ import annotations

from ..runtime.autocast_mode import excluded as autocast_excluded
from ..runtime.grad_mode import no_grad
from ..ops import registry
from ..ops.views import compact
from ..runtime.strided import view_strides
from ..tensor import Tensor
from ..runtime.pytree import tree_map
from .graph import TensorType, Value, warning_as_traced


def interpret(graph, inputs, constants=None):
    """Run ``graph`` on ``inputs`` (tensors for ``graph.inputs``, in order).

    ``constants`` maps constant names to tensors; by default the graph's own
    ``constant_tensors``, read now, so in-place changes made to them since
    tracing are seen. Returns ``(outputs, mutations)``: the output pytree with
    values replaced by tensors (literals kept), and a list of ``(target Value,
    tensor)`` that the caller writes back into the inputs and constants.
    Raises ValueError if an input or constant does not match its type.
    """
    inputs = list(inputs)
    if len(inputs) != len(graph.inputs):
        raise ValueError(f"the graph takes {len(graph.inputs)} inputs, got {len(inputs)}")
    tensors = graph.constant_tensors if constants is None else constants
    env = {}
    for v, t in zip(graph.inputs, inputs):
        env[v] = _checked(f"input %{v.name}", v, t)
    for name, v in graph.constants.items():
        if name not in tensors:
            raise ValueError(f"no tensor for constant {name!r}")
        env[v] = _checked(f"constant {name!r}", v, tensors[name])
    # a graph's backward, if it has one, is in its nodes: running them records none; its casts too, which
    # autocast must not add to
    with no_grad(), autocast_excluded(), warning_as_traced(graph):
        for node in graph.nodes:
            result = registry.call(node.op, _arguments(node, env))
            results = [result] if isinstance(result, Tensor) else list(result)
            for v, t in zip(node.outputs, results, strict=True):
                env[v] = t
    outputs = tree_map(lambda x: env[x] if isinstance(x, Value) else x, graph.outputs)
    return outputs, [(target, env[v]) for target, v in graph.mutations]


def _checked(what, v, t):
    """``t``, checked against the type of the input or constant ``v`` it is bound to."""
    if not isinstance(t, Tensor):
        raise ValueError(f"{what} must be a tensor of type {v.type}, not {type(t).__name__}")
    got = TensorType(tuple(t.shape), t.dtype, t.device)
    if got != v.type:
        raise ValueError(f"{what} must be a tensor of type {v.type}, got {got}")
    return t


# Ops that address the storage of the compact layout of their tensor arguments.
STORAGE_ADDRESSING = frozenset(("as_strided", "as_strided_scatter", "_as_strided_add"))
# Ops that reshape ``self`` without a copy, which strides that cannot express the new shape refuse.
RESHAPING_VIEWS = frozenset(("view", "view_as", "unflatten"))


def _arguments(node, env):
    """A node's arguments with values replaced by their tensors (inside lists too), compact where the
    op reads the compact layout (see the module docstring)."""
    op = node.op
    if op.name in STORAGE_ADDRESSING:
        read = compact
    elif op.name in RESHAPING_VIEWS:
        shape = node.outputs[0].type.shape
        read = lambda t: t if view_strides(t.shape, t._stride, shape) is not None else compact(t)  # noqa: E731
    else:
        read = None

    def one(a):
        if isinstance(a, Value):
            return env[a] if read is None else read(env[a])
        if isinstance(a, (list, tuple)):
            return type(a)(one(x) for x in a)
        return a
    return [one(a) for a in node.args]
