"""Fake tensors: real `Tensor` objects with a shape, dtype, device and strides but no data.

Meta rules read only geometry, so a fake tensor lets the verifier re-run an
op's meta rule on a node's input types, and lets the tracer run user code
whose ops record nodes instead of computing. A fake tensor's storage has no
buffer; reading its values raises.
"""

from __future__ import annotations

from math import prod

from ..ops import registry
from ..runtime.storage import Storage
from ..runtime.strided import contiguous_strides
from ..tensor import Tensor
from .graph import TensorType, Value, substitute


def fake_tensor(shape, dtype, device, strides=None, offset=0, storage_size=None):
    """A data-less tensor; compact (contiguous, offset 0) unless strides are given."""
    shape = tuple(shape)
    strides = contiguous_strides(shape) if strides is None else tuple(strides)
    if storage_size is None:
        storage_size = prod(shape)
    return Tensor._make(Storage(None, dtype, device, storage_size), shape, strides, offset)


def fake_of_type(type):
    """The compact fake tensor of an IR value's type."""
    return fake_tensor(type.shape, type.dtype, type.device)


def fake_args(args):
    """The arguments with each value (nested lists and tuples too) replaced by a compact fake tensor of its type."""
    return list(substitute(args, _fake_of_value))


def _fake_of_value(v):
    return fake_of_type(v.type)



def add_op(g, name, *given):
    """The value of op ``name`` on the ``given`` leading arguments (the schema's defaults after them), added
    to graph ``g`` with the type its meta rule gives: a small graph built by hand (a kernel's)."""
    op = registry.OPS[name]
    args = given + tuple(a.default for a in op.schema.args[len(given):])
    spec = registry.quiet_meta(op, [fake_tensor(a.type.shape, a.type.dtype, a.type.device) if isinstance(a, Value)
                                    else a for a in args])
    return g.add_node(op, args, [TensorType(tuple(spec.shape), spec.dtype, spec.device)]).outputs[0]
