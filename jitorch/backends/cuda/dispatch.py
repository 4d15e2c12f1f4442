"""CUDA tensors: device storage, transfers, writes, and eager ops on the device.

A CUDA tensor is an ordinary `Tensor` over a `CudaStorage`: a storage with no
host array whose address is a block of the device's caching allocator. The
block goes back to its pool when the storage dies, that is when the last tensor
(or view) using it is gone.

Eager ops on CUDA tensors (`execute`, called by the registry when an op's
result or input lives on a CUDA device) run, in order of preference:

1. **transfers** (``_to_copy`` across devices, ``copy_`` from or to the host):
   host-device copies on the current stream;
2. **factories** (zeros, full, arange, eye, linspace, ...): filled or computed on the device;
3. **a directly written kernel** (`cuda_ops.IMPLEMENTATIONS`): the tiled matmul family, indexing,
   copies, joins, scans, sorts and merges, scatter_reduce, data-dependent selections (one read-back
   of the count, as torch), moments, ...;
4. **a kernel generated from the op's one-op graph**: the graph is built as the
   tracer would record it (a non-contiguous tensor enters as its storage span
   seen through ``as_strided``, which the kernel builder folds into index
   maths), fused, and compiled for NVPTX; it is cached per op, argument kinds
   (shape, strides when not contiguous, dtype), scalar arguments and device;
5. otherwise (random numbers, drawn from the CPU generator's stream so that a seed gives the same
   numbers on both devices; float64 products; unique over a dim; ...): **on the host**: the tensor
   arguments are copied to the host, the op's CPU kernel runs, and the results are copied back.
   This synchronises the stream; its results are exactly the CPU ones.

Everything device-specific goes through the current backend (cuda_backend),
so the logic here runs on a fake device in tests.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from . import cuda_backend
from .casts import convert, copy_into
from .cuda_allocator import track
from .device import CPU, to_device
from .storage import Storage
from .strided import contiguous_strides, is_contiguous, is_non_overlapping_and_dense

_local = threading.local()
_KERNELS: dict = {}     # one-op graph key -> (kernel, group, graph inputs, outputs) or None (runs on host)
_COPIES: dict = {}      # (shape, dst dtype and strides, src dtype and strides) -> strided copy LoopKernel


class CudaStorage(Storage):
    """Device memory: ``size`` elements at ``data_ptr()``, a block of ``allocator``."""

    __slots__ = ()
    on_device = True

    def no_data_error(self, tensor):
        return RuntimeError(f"the elements of a tensor on {tensor.device} are in device memory: copy them to the "
                            "host with .cpu() first")


# Devices and memory -----------------------------------------------------------------------

def canonical(device):
    """``device`` with its index (``cuda`` is ``cuda:0``), checked against the devices present."""
    backend = cuda_backend.current()
    backend.require()
    index = device.index or 0
    count = backend.device_count()
    if index >= count:
        raise RuntimeError(f"CUDA error: invalid device ordinal (device {index} requested, device_count() is "
                           f"{count})")
    return to_device(f"cuda:{index}")


def empty_storage(n, dtype, device):
    """A storage of ``n`` elements on a CUDA device, from its caching allocator (on the current stream's pool)."""
    device = canonical(device)
    backend = cuda_backend.current()
    alloc = backend.allocator(device.index)
    block = alloc.malloc(n * dtype.itemsize, int(backend.stream()))
    storage = CudaStorage(None, dtype, device, n)
    storage._ptr = block.address
    track(storage, alloc, block)
    return storage


def empty(shape, dtype, device, strides=None):
    """An uninitialised CUDA tensor filling its own storage: compact, or with dense ``strides``."""
    from ..tensor import Tensor
    shape = tuple(shape)
    storage = empty_storage(int(np.prod(shape, dtype=np.int64)), dtype, device)
    return Tensor._make(storage, shape, contiguous_strides(shape) if strides is None else tuple(strides), 0)


def address(t):
    """The device address of ``t``'s first element."""
    return t._storage.data_ptr() + t._offset * t.dtype.itemsize


def _span(shape, strides):
    """Elements from a view's first to its last element (0 for an empty view)."""
    if 0 in shape:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides))


# Transfers --------------------------------------------------------------------------------

@contextlib.contextmanager
def non_blocking(flag=True):
    """Copies between host and device inside the block are queued on the stream without waiting."""
    before = getattr(_local, "non_blocking", False)
    _local.non_blocking = flag
    try:
        yield
    finally:
        _local.non_blocking = before


def _asynchronous():
    return getattr(_local, "non_blocking", False)


def _host_values(array, dtype):
    """``array`` as a C-contiguous host array of ``dtype`` (converted by the cast table)."""
    array = np.asarray(array)
    return np.asarray(array if array.dtype == dtype.np else convert(array, dtype.np), order="C")


def upload(array, dtype, device):
    """A CUDA tensor holding a NumPy array's values (cast to ``dtype``)."""
    host = _host_values(array, dtype)
    t = empty(host.shape, dtype, device)
    cuda_backend.current().upload(t._storage.data_ptr(), host, _asynchronous())
    return t


def download(t):
    """A NumPy array with the values of CUDA tensor ``t`` (any strides): its span comes to the host,
    then NumPy takes the view. Waits for the copy unless inside `non_blocking`."""
    host = _download_span(t)
    if is_contiguous(t._shape, t._stride):
        return host[:t.numel()].reshape(t._shape)
    item = t.dtype.itemsize
    return np.lib.stride_tricks.as_strided(host, t._shape, tuple(s * item for s in t._stride)).copy()


def _download_span(t):
    """The elements from CUDA tensor ``t``'s first to its last, in a host array (see `download`)."""
    span = _span(t._shape, t._stride)
    host = np.empty(span, t.dtype.np)
    if span:
        cuda_backend.current().download(host, address(t), _asynchronous())
        if not _asynchronous():
            from . import cuda_errors
            cuda_errors.check(t.device.index)
    return host


def _host_mirror(t, Tensor):
    """A host tensor with CUDA tensor ``t``'s values and strides (over a copy of its span), so that a CPU
    kernel sees the operand's layout as CPU eager would."""
    return Tensor._make(Storage(_download_span(t), t.dtype), t._shape, t._stride, 0)


def host_array(t):
    """``t``'s values on the host: its own NumPy view on CPU, a copy of a CUDA tensor's."""
    return download(t) if t._storage.on_device else t._array()


def write(dst, src):
    """Write ``src`` (a tensor on any device, or a NumPy array) into CUDA tensor ``dst``, broadcast to its
    shape and cast to its dtype, on the device: one device copy where both are the same compact run,
    else the strided copy kernel, which reads ``src`` and writes ``dst`` in place (host values go up
    first, at their own size)."""
    from ..tensor import Tensor
    if not dst.numel():
        return
    backend = cuda_backend.current()
    if not (isinstance(src, Tensor) and src._storage.on_device):
        values = np.asarray(src._array() if isinstance(src, Tensor) else src)
        if values.shape == dst._shape and is_contiguous(dst._shape, dst._stride):
            return backend.upload(address(dst), _host_values(values, dst.dtype), _asynchronous())
        src = upload(values, dst.dtype, dst.device)
    elif src.device != dst.device:
        src = upload(download(src), src.dtype, dst.device)
    elif src._storage is dst._storage:
        src = copy_values(src)  # the same memory: read all of it before writing any
    if src.dtype is dst.dtype and src._shape == dst._shape and is_contiguous(dst._shape, dst._stride) and \
            is_contiguous(src._shape, src._stride):
        return backend.device_copy(address(dst), address(src), dst.numel() * dst.dtype.itemsize)
    _copy_into(dst, address(src), src.dtype, _broadcast_strides(src, dst._shape))


def _copy_into(dst, src_address, src_dtype, src_strides):
    """The strided copy kernel: ``dst[p] = src[p]`` where ``src`` starts at ``src_address`` with element
    ``src_strides`` over ``dst``'s shape (0 to broadcast, negative to read backwards)."""
    from ..codegen.nvptx.copy import copy_kernel
    key = (dst._shape, (dst.dtype, dst._stride), (src_dtype, tuple(src_strides)))
    kernel = _cached(_COPIES, key, lambda: copy_kernel(*key))
    cuda_backend.current().launch(kernel, [src_address, address(dst)], dst.device.index)


def _broadcast_strides(t, shape):
    """``t``'s element strides over ``shape``, which it broadcasts to (0 along the dims it repeats)."""
    pad = len(shape) - t.ndim
    return (0,) * pad + tuple(0 if n == 1 and m != 1 else s for n, m, s in zip(t._shape, shape[pad:], t._stride))


def copy_values(t):
    """A compact copy of CUDA tensor ``t``'s values, with no autograd history."""
    out = empty(t._shape, t.dtype, t.device)
    write(out, t)
    return out


def _to_copy(op, spec, args):
    """``x.to(dtype, device)`` with a CUDA tensor on either side, laid out as torch's preserve_format."""
    from ..tensor import Tensor
    x, dtype, device = args
    target = spec.device
    if x.device.type == "cuda" and target.type == "cuda" and canonical(target) == x.device:
        return _cast(x, spec)
    strides = _preserved_strides(x)
    n = int(np.prod(x._shape, dtype=np.int64))
    flat = np.empty(n, spec.dtype.np)
    item = flat.itemsize
    copy_into(np.lib.stride_tricks.as_strided(flat, x._shape, tuple(s * item for s in strides)), host_array(x))
    if target.type != "cuda":
        return Tensor._make(Storage(flat, spec.dtype), x._shape, strides, 0)
    out = Tensor._make(empty_storage(n, spec.dtype, target), x._shape, strides, 0)
    if n:
        cuda_backend.current().upload(out._storage.data_ptr(), flat, _asynchronous())
    return out


def _copy(op, spec, args):
    """The value ``self.copy_(src)`` writes: ``src`` broadcast and cast, on ``self``'s device."""
    self, src, flag = args
    with non_blocking(flag or _asynchronous()):
        if self.device.type == "cpu":
            from ..tensor import Tensor
            values = _host_values(np.broadcast_to(download(src), spec.shape), spec.dtype)
            return Tensor._from_array(values, spec.dtype)
        if src.device.type != "cuda" or src.device != self.device:
            return upload(np.broadcast_to(host_array(src), spec.shape), spec.dtype, self.device)
    return _cast(src.expand(spec.shape), spec)


def _clone(op, spec, args):
    """``x.clone(memory_format=)``: preserve_format by default, compact for contiguous_format."""
    from ..ops.views import contiguous_format
    x, memory_format = args
    return copy_values(x) if memory_format is contiguous_format else _cast(x, spec)


def _cast(x, spec):
    """A copy of CUDA tensor ``x`` in ``spec``'s dtype, laid out as torch's preserve_format (dense strides in
    ``x``'s order), by `write`."""
    from ..tensor import Tensor
    out = Tensor._make(empty_storage(int(np.prod(x._shape, dtype=np.int64)), spec.dtype, x.device), x._shape,
                       _preserved_strides(x), 0)
    write(out, x)
    return out


def _preserved_strides(t):
    from ..ops.views import dense_strides
    return tuple(dense_strides(t._shape, t._stride))


_TRANSFERS = {"_to_copy": _to_copy, "copy": _copy, "clone": _clone}


# Eager dispatch ---------------------------------------------------------------------------

def execute(op, args, spec, strides=None):
    """Run ``op`` eagerly where its CUDA tensors live (see the module docstring for how); a kernel generated
    for it writes its result with ``strides`` (dense; None: contiguous), the layout the caller wants (see
    `laid_out`)."""
    transfer = _TRANSFERS.get(op.name)
    if transfer is not None:
        return transfer(op, spec, args)
    from . import cuda_ops
    if op.name in cuda_ops.FACTORIES:
        return cuda_ops.create(op, args, spec)
    device = _device_of(op, args, spec)
    args = _lift_cpu_scalars(op, args, device)
    special = cuda_ops.IMPLEMENTATIONS.get(op.name)
    if special is not None:
        result = special(op, args, spec)
        if result is not NotImplemented:
            return result
    return _run(op, args, spec, device, strides)


def laid_out(t, strides):
    """CUDA tensor ``t`` addressing its elements with ``strides`` (dense; None: contiguous) from its storage's
    start: ``t`` itself, or, where only the strides of its size-1 dims differ (they address nothing) or it
    is empty, ``t`` with those, else its values copied into new memory laid out so. A tensor on the host is
    returned as it is."""
    if not t._storage.on_device:
        return t
    strides = contiguous_strides(t._shape) if strides is None else tuple(strides)
    if t._stride == strides and not t._offset:
        return t
    if not t._offset and (not t.numel() or all(n == 1 or a == b for n, a, b in zip(t._shape, t._stride, strides))):
        return type(t)._make(t._storage, t._shape, strides, 0)
    out = empty(t._shape, t.dtype, t.device, strides)
    write(out, t)
    return out


def _device_of(op, args, spec):
    from ..ops.registry import _spec_device, _tensors_of
    device = _spec_device(spec) if spec is not None else None
    if device is None or device.type != "cuda":
        device = next(t.device for t in _tensors_of(op, args) if t.device.type == "cuda")
    return canonical(device)


def _lift_cpu_scalars(op, args, device):
    """0-dim CPU tensors (which torch lets join CUDA operands) as 0-dim tensors on ``device`` (queued: the
    driver has staged the element when the copy returns)."""
    from ..tensor import Tensor
    with non_blocking():
        return _lifted(op, args, device, Tensor)


def _lifted(op, args, device, Tensor):
    out = list(args)
    for i, is_list in op.tensor_args:
        v = out[i]
        if isinstance(v, Tensor) and v.device.type == "cpu" and not v._shape:
            out[i] = upload(v._array(), v.dtype, device)
        elif is_list and v is not None:
            out[i] = [upload(t._array(), t.dtype, device) if isinstance(t, Tensor) and t.device.type == "cpu"
                      and not t._shape else t for t in v]
    return out


def _run(op, args, spec, device, strides):
    """The op through its one-op graph's kernel (its result written with ``strides``), else on the host."""
    entry = _kernel_for(op, args, spec, device, strides)
    if entry is None:
        return on_host(op, args, device)
    kernel, group, inputs, outputs = entry
    from .cuda_graph import CudaKernelStep
    env = dict(zip(inputs, _graph_tensors(op, args)))
    CudaKernelStep(kernel, group.nodes, _layouts(outputs, strides)).run(env, None, False)
    results = [env[v] for v in outputs]
    from ..ops.registry import TensorSpec
    if spec.__class__ is TensorSpec:
        return results[0]
    if isinstance(spec, list):
        return results
    return op.result_type(*results) if op.result_type else tuple(results)


def _graph_tensors(op, args):
    from ..tensor import Tensor
    for a in args:
        if isinstance(a, Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (t for t in a if isinstance(t, Tensor))


def _literal_key(a):
    from ..tensor import Tensor
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
    from ..tensor import Tensor
    if any(t.numel() == 0 for t in _graph_tensors(op, args)):
        return None  # nothing to launch: the host computes the (empty or identity-filled) result
    try:
        key = (op.name, device.index, tuple(_literal_key(a) for a in args), strides)
        hash(key)
    except TypeError:  # an argument that cannot key a cache (a Generator's state, ...): no kernel
        return None
    return _cached(_KERNELS, key, lambda: _build(op, args, spec, device, strides, Tensor))


def _cached(table, key, make):
    """``table[key]``, made on first use; a table grows to 4096 entries at most (programs of ever new
    shapes; the PTX stays cached on disk)."""
    if key not in table:
        if len(table) > 4096:
            table.clear()
        table[key] = make()
    return table[key]


def _build(op, args, spec, device, strides, Tensor):
    from ..codegen.cache import default_cache
    from ..codegen.errors import CompileError
    from ..codegen.kernel import build, is_row_softmax
    from ..codegen.nvptx import NVPTX, compile_kernel
    from ..ir.graph import Graph, TensorType
    from ..ir.passes.fusion import fuse
    from ..ops.registry import OPS, TensorSpec
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
        span = g.add_input(TensorType((_span(t._shape, t._stride),), t.dtype, device))
        inputs.append(span)
        return g.add_node(OPS["as_strided"], (span, t._shape, t._stride, 0),
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
    groups = fuse(g)
    if len(groups) != 1 or node not in groups[0].nodes:
        return None
    group = groups[0]
    if group.kind not in ("pointwise", "reduction") and not (len(group.nodes) == 1 and is_row_softmax(node)):
        return None
    try:
        kernel = compile_kernel(build(group, f"jitorch_eager_{op.name.replace('.', '_')}", NVPTX,
                                      layouts=_layouts(node.outputs, strides)), default_cache())
    except CompileError:
        return None
    return kernel, group, inputs, list(node.outputs)


def _upload_laid_out(t, device):
    """Host tensor ``t`` copied to ``device`` in its own layout where it fills its storage densely (a CPU
    kernel's result, laid out by the op's rule), else compact."""
    if t._offset or t._storage.size != t.numel() or not is_non_overlapping_and_dense(t._shape, t._stride):
        return upload(t._array(), t.dtype, device)
    out = empty(t._shape, t.dtype, device, t._stride)
    if t.numel():
        cuda_backend.current().upload(out._storage.data_ptr(), t._storage.data, _asynchronous())
    return out


def on_host(op, args, device):
    """``op`` computed by its CPU kernel on host copies of its arguments (in their layouts); tensor results go to
    ``device`` in theirs."""
    from ..ops import registry
    from ..tensor import Tensor

    def to_host(a, arg):
        if isinstance(a, Tensor):
            return _host_mirror(a, Tensor) if a._storage.on_device else a
        if isinstance(a, (list, tuple)):
            return type(a)(to_host(x, arg) for x in a)
        if arg.type == "Device" and a is not None:
            return CPU
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
