"""Eager ops on CUDA tensors through their one-op graph's generated kernel, else on the host.

The graph is built as the tracer would record it (a non-contiguous tensor enters as its storage span seen
through ``as_strided``, which the kernel builder folds into index maths), fused, and compiled for NVPTX; the
kernel is cached per op, argument kinds (shape, strides when not contiguous, dtype), scalar arguments and
device. An op without such a kernel (random numbers, drawn on the host from the device's generator, so that a
seed gives the same numbers on both devices; float64 products; unique over a dim; ...) runs **on the host**: the
tensor arguments are copied to the host, the op's CPU kernel runs, and the results are copied back. This
synchronises the stream; its results are exactly the CPU ones.
"""

from __future__ import annotations

from ...ir.graph import Graph, TensorType
from ...ops import registry
from ...ops.random_ops import device_generator
from ...ops.registry import OPS, TensorSpec
from ...runtime import cuda_memory
from ...runtime.cuda_memory import download_span, non_blocking
from ...runtime.device import CPU
from ...runtime.storage import Storage
from ...runtime.strided import is_contiguous, is_non_overlapping_and_dense, span
from ...tensor import Tensor
from .copies import empty, upload
from .graph_step import CudaKernelStep
from .kernels import cached, graph_kernel

_KERNELS: dict = {}     # one-op graph key -> (kernel, group, graph inputs, outputs) or None (runs on host)


def run(op, args, spec, device, strides):
    """The op through its one-op graph's kernel (its result written with ``strides``), else on the host."""
    entry = _kernel_for(op, args, spec, device, strides)
    if entry is None:
        return on_host(op, args, device)
    kernel, group, inputs, outputs = entry
    env = dict(zip(inputs, _graph_tensors(op, args)))
    CudaKernelStep(kernel, group.nodes, _layouts(outputs, strides)).run(env, None, False)
    results = [env[v] for v in outputs]
    if spec.__class__ is TensorSpec:
        return results[0]
    if isinstance(spec, list):
        return results
    return op.result_type(*results) if op.result_type else tuple(results)


def _graph_tensors(op, args):
    for a in args:
        if isinstance(a, Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (t for t in a if isinstance(t, Tensor))


def _literal_key(a):
    if isinstance(a, Tensor):
        return ("T", a._shape, None if is_contiguous(a._shape, a._stride) else a._stride, a.dtype)
    if isinstance(a, (list, tuple)):
        return (type(a).__name__,) + tuple(_literal_key(x) for x in a)
    if isinstance(a, float):
        return ("f", repr(a))  # -0.0 and 0.0 make different kernels
    return (type(a).__name__, a)


def _layouts(outputs, strides):
    """{graph output: strides} for a one-op graph whose result is laid out with ``strides`` (None: compact)."""
    return {} if strides is None else {outputs[0]: tuple(strides)}


def _kernel_for(op, args, spec, device, strides):
    """The cached (kernel, group, graph inputs, graph outputs) of ``op`` on these arguments, its result
    written with ``strides``, or None when the op has no kernel on the device (it runs on the host)."""
    if any(t.numel() == 0 for t in _graph_tensors(op, args)):
        return None  # nothing to launch: the host computes the (empty or identity-filled) result
    try:
        key = (op.name, device.index, tuple(_literal_key(a) for a in args), strides)
        hash(key)
    except TypeError:  # an argument that cannot key a cache (a Generator's state, ...): no kernel
        return None
    return cached(_KERNELS, key, lambda: _build(op, args, spec, device, strides))


def _build(op, args, spec, device, strides):
    specs = [spec] if spec.__class__ is TensorSpec else list(spec) if isinstance(spec, (tuple, list)) else [None]
    if not all(isinstance(s, TensorSpec) and None not in s.shape for s in specs):
        return None
    g = Graph()
    inputs = []

    def value(t):
        if is_contiguous(t._shape, t._stride):
            v = g.add_input(TensorType(t._shape, t.dtype, device))
            inputs.append(v)
            return v
        whole = g.add_input(TensorType((span(t._shape, t._stride),), t.dtype, device))
        inputs.append(whole)
        return g.add_node(OPS["as_strided"], (whole, t._shape, t._stride, 0),
                          [TensorType(t._shape, t.dtype, device)]).outputs[0]

    node_args = []
    for a in args:
        if isinstance(a, Tensor):
            node_args.append(value(a))
        elif isinstance(a, (list, tuple)) and any(isinstance(x, Tensor) for x in a):
            node_args.append([value(x) if isinstance(x, Tensor) else x for x in a])
        else:
            node_args.append(a)
    node = g.add_node(op, node_args, [TensorType(tuple(s.shape), s.dtype, device) for s in specs])
    g.outputs = node.outputs[0] if len(node.outputs) == 1 else tuple(node.outputs)
    made = graph_kernel(g, node, f"jitorch_eager_{op.name.replace('.', '_')}", _layouts(node.outputs, strides))
    return None if made is None else (*made, inputs, list(node.outputs))


def _upload_laid_out(t, device):
    """Host tensor ``t`` copied to ``device`` in its own layout where it fills its storage densely (a CPU
    kernel's result, laid out by the op's rule), else compact."""
    if t._offset or t._storage.size != t.numel() or not is_non_overlapping_and_dense(t._shape, t._stride):
        return upload(t._array(), t.dtype, device)
    out = empty(t._shape, t.dtype, device, t._stride)
    if t.numel():
        cuda_memory.upload(out._storage.data_ptr(), t._storage.data, t.dtype)
    return out


def on_host(op, args, device):
    """``op`` computed by its CPU kernel on host copies of its arguments (in their layouts); tensor results go to
    ``device`` in theirs."""

    def to_host(a, arg):
        if isinstance(a, Tensor):
            return _host_mirror(a) if a._storage.on_device else a
        if isinstance(a, (list, tuple)):
            return type(a)(to_host(x, arg) for x in a)
        if arg.type == "Device":  # None too: it would name the default device, which may be this one
            return CPU
        if arg.type == "Generator" and a is None:
            return device_generator(device)
        return a

    host_args = [to_host(a, arg) for a, arg in zip(args, op.schema.args)]
    with registry.meta_warnings_into([]):  # the call's meta rule has run (and warned) on the device's tensors
        result = registry.execute(op, host_args)

    # Fresh host results need not be waited for: the driver stages pageable memory before returning.
    def back(r):
        if isinstance(r, Tensor):
            with non_blocking():
                return _upload_laid_out(r, device)
        if isinstance(r, list):
            return [back(x) for x in r]
        if isinstance(r, tuple):
            items = [back(x) for x in r]
            return type(r)(*items) if hasattr(r, "_fields") else tuple(items)
        return r
    return back(result)


def _host_mirror(t):
    """A host tensor with CUDA tensor ``t``'s values and strides (over a copy of its span), so that a CPU
    kernel sees the operand's layout as CPU eager would."""
    return Tensor._make(Storage(download_span(t), t.dtype), t._shape, t._stride, 0)
