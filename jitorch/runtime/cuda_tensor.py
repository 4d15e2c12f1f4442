"""CUDA tensors: device storage, transfers, writes, and eager ops on the device.

A CUDA tensor is an ordinary `Tensor` over a `CudaStorage`: a storage with no
host array whose address is a block of the device's caching allocator. The
block goes back to its pool when the storage dies, that is when the last tensor
(or view) using it is gone.

Eager ops on CUDA tensors (`execute`, called by the registry when an op's
result or input lives on a CUDA device) run, in order of preference:

1. **transfers** (``_to_copy`` across devices, ``copy_`` from or to the host):
   host-device copies on the current stream;
2. **matmul, mm, bmm** of float32/float16 operands: the generated tiled kernel, reading the operands in
   place whatever their strides;
3. **a kernel generated from the op's one-op graph**: the graph is built as the
   tracer would record it (a non-contiguous tensor enters as its storage span
   seen through ``as_strided``, which the kernel builder folds into index
   maths), fused, and compiled for NVPTX; it is cached per op, argument kinds
   (shape, strides when not contiguous, dtype), scalar arguments and device;
4. otherwise (sorting, indexing with data-dependent sizes, random numbers,
   float64 matmul, creation ops, ...): **on the host**: the tensor arguments are
   copied to the host, the op's CPU kernel runs, and the results are copied
   back. This synchronises the stream; its results are exactly the CPU ones.

Everything device-specific goes through the current backend (cuda_backend),
so the logic here runs on a fake device in tests.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from . import cuda_backend
from .cuda_allocator import track
from .device import CPU, to_device
from .storage import Storage
from .strided import contiguous_strides, is_contiguous, wrap_dim

_local = threading.local()
_KERNELS: dict = {}     # one-op graph key -> (kernel, group, graph inputs, outputs) or None (runs on host)
_MATMULS: dict = {}     # (a shape, a strides, b shape, b strides, dtype) -> MatmulKernel (operands read in place)
_INDEXERS: dict = {}    # the arguments of index_kernel -> its LoopKernel
_COPIES: dict = {}      # (shape, dst dtype and strides, src dtype and strides) -> strided copy LoopKernel
_SCANS: dict = {}       # the arguments of scan_kernel -> its LoopKernel
MATMUL_OPS = ("matmul", "mm", "bmm", "mv", "dot", "vdot")
INDEXING_OPS = ("gather", "index_select", "scatter_add", "index_add")
JOIN_OPS = ("cat", "concat", "concatenate", "stack")


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


def empty(shape, dtype, device):
    """A compact, uninitialised CUDA tensor."""
    from ..tensor import Tensor
    shape = tuple(shape)
    storage = empty_storage(int(np.prod(shape, dtype=np.int64)), dtype, device)
    return Tensor._make(storage, shape, contiguous_strides(shape), 0)


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


def upload(array, dtype, device):
    """A CUDA tensor holding a NumPy array's values (cast to ``dtype``)."""
    host = np.asarray(array).astype(dtype.np, order="C", copy=False)
    t = empty(host.shape, dtype, device)
    cuda_backend.current().upload(t._storage.data_ptr(), host, _asynchronous())
    return t


def download(t):
    """A NumPy array with the values of CUDA tensor ``t`` (any strides): its span comes to the host,
    then NumPy takes the view. Waits for the copy unless inside `non_blocking`."""
    span = _span(t._shape, t._stride)
    host = np.empty(span, t.dtype.np)
    if span:
        cuda_backend.current().download(host, address(t), _asynchronous())
        if not _asynchronous():
            from . import cuda_errors
            cuda_errors.check(t.device.index)
    if is_contiguous(t._shape, t._stride):
        return host[:t.numel()].reshape(t._shape)
    item = t.dtype.itemsize
    return np.lib.stride_tricks.as_strided(host, t._shape, tuple(s * item for s in t._stride)).copy()


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
            return backend.upload(address(dst), values.astype(dst.dtype.np, order="C"), _asynchronous())
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
    from ..ops.registry import TensorSpec
    return _cast(t, TensorSpec(t._shape, t.dtype, t.device))


def _to_copy(op, spec, args):
    """``x.to(dtype, device)`` with a CUDA tensor on either side."""
    x, dtype, device = args
    target = spec.device
    if x.device.type == "cuda" and target.type == "cuda" and canonical(target) == x.device:
        return _cast(x, spec)
    if target.type == "cuda":
        return upload(host_array(x), spec.dtype, target)
    from ..tensor import Tensor
    return Tensor._from_array(download(x).astype(spec.dtype.np, order="C", copy=False), spec.dtype)


def _copy(op, spec, args):
    """The value ``self.copy_(src)`` writes: ``src`` broadcast and cast, on ``self``'s device."""
    self, src, flag = args
    with non_blocking(flag or _asynchronous()):
        if self.device.type == "cpu":
            from ..tensor import Tensor
            values = np.broadcast_to(download(src), spec.shape).astype(spec.dtype.np, order="C")
            return Tensor._from_array(values, spec.dtype)
        if src.device.type != "cuda" or src.device != self.device:
            return upload(np.broadcast_to(host_array(src), spec.shape), spec.dtype, self.device)
    return _cast(src.expand(spec.shape), spec)


def _clone(op, spec, args):
    return _cast(args[0], spec)


def _cast(x, spec):
    """A compact copy of CUDA tensor ``x`` (any strides) in ``spec``'s dtype: the ``_to_copy`` kernel."""
    from ..ops.registry import OPS
    return _run(OPS["_to_copy"], (x, spec.dtype, None), spec, x.device)


_TRANSFERS = {"_to_copy": _to_copy, "copy": _copy, "clone": _clone}


# Constant factories -----------------------------------------------------------------------

# zeros, ones, empty and full, sized, ``_like`` and ``new_``: made in device memory, never on the host
FACTORIES = frozenset(f"{prefix}{name}{suffix}" for name in ("zeros", "ones", "empty", "full")
                      for prefix, suffix in (("", ""), ("", "_like"), ("new_", "")))
_FILL = {"zeros": 0, "ones": 1, "empty": None}


def _create(op, spec, args):
    """A constant factory's result: device memory from the allocator, then filled on the device; on the CPU
    when asked (``zeros_like(cuda_tensor, device="cpu")``: only the input's layout is used)."""
    from ..ops.creation import _full_value
    from ..ops.views import dense_strides
    from ..tensor import Tensor
    names = [a.name for a in op.schema.args]
    source = args[0] if isinstance(args[0], Tensor) else None  # a _like or new_ op's tensor: its layout
    if spec.device.type != "cuda":
        from ..ops import registry
        stand_in = Tensor._make(Storage(np.empty(_span(source._shape, source._stride), source.dtype.np), source.dtype),
                                source._shape, source._stride, 0)
        return registry.execute(op, [stand_in] + list(args[1:]), spec)
    base = op.name.removeprefix("new_").removesuffix("_like")
    value = args[names.index("fill_value")] if base == "full" else _FILL[base]
    like = op.name.endswith("_like")
    strides = dense_strides(source._shape, source._stride) if like else contiguous_strides(spec.shape)
    t = Tensor._make(empty_storage(int(np.prod(spec.shape, dtype=np.int64)), spec.dtype, spec.device),
                     tuple(spec.shape), tuple(strides), 0)
    if value is not None:
        fill(t, _full_value(spec, value.item() if isinstance(value, Tensor) else value))
    return t


def fill(t, element):
    """Write ``element`` (a NumPy scalar of ``t``'s dtype) over all of compact CUDA tensor ``t``'s storage:
    one element goes up, then device copies double the filled prefix (log2(n) copies, all on the stream)."""
    backend = cuda_backend.current()
    n, item, start = t._storage.size, t.dtype.itemsize, t._storage.data_ptr()
    if not n:
        return
    backend.upload(start, np.full(1, element, t.dtype.np), True)
    done = 1
    while done < n:
        count = min(done, n - done)
        backend.device_copy(start + done * item, start, count * item)
        done += count


# Eager dispatch ---------------------------------------------------------------------------

def execute(op, args, spec):
    """Run ``op`` eagerly where its CUDA tensors live (see the module docstring for how)."""
    transfer = _TRANSFERS.get(op.name)
    if transfer is not None:
        return transfer(op, spec, args)
    if op.name in FACTORIES:
        return _create(op, spec, args)
    device = _device_of(op, args, spec)
    args = _lift_cpu_scalars(op, args, device)
    special = _SPECIAL.get(op.name)
    if special is not None:
        result = special(op, args, spec)
        if result is not NotImplemented:
            return result
    return _run(op, args, spec, device)


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


def _run(op, args, spec, device):
    """The op through its one-op graph's kernel, else on the host."""
    entry = _kernel_for(op, args, spec, device)
    if entry is None:
        return on_host(op, args, device)
    kernel, group, inputs, outputs = entry
    from .cuda_graph import CudaKernelStep
    env = dict(zip(inputs, _graph_tensors(op, args)))
    CudaKernelStep(kernel, group.nodes).run(env, None, False)
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


def _kernel_for(op, args, spec, device):
    """The cached (kernel, group, graph inputs, graph outputs) of ``op`` on these arguments, or None
    when the op has no kernel on the device (it runs on the host)."""
    from ..tensor import Tensor
    if any(t.numel() == 0 for t in _graph_tensors(op, args)):
        return None  # nothing to launch: the host computes the (empty or identity-filled) result
    try:
        key = (op.name, device.index, tuple(_literal_key(a) for a in args))
        hash(key)
    except TypeError:  # an argument that cannot key a cache (a Generator's state, ...): no kernel
        return None
    return _cached(_KERNELS, key, lambda: _build(op, args, spec, device, Tensor))


def _cached(table, key, make):
    """``table[key]``, made on first use; a table grows to 4096 entries at most (programs of ever new
    shapes; the PTX stays cached on disk)."""
    if key not in table:
        if len(table) > 4096:
            table.clear()
        table[key] = make()
    return table[key]


def _build(op, args, spec, device, Tensor):
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
        kernel = compile_kernel(build(group, f"jitorch_eager_{op.name.replace('.', '_')}", NVPTX), default_cache())
    except CompileError:
        return None
    return kernel, group, inputs, list(node.outputs)


def on_host(op, args, device):
    """``op`` computed by its CPU kernel on host copies of its arguments; tensor results go to ``device``."""
    from ..ops import registry
    from ..tensor import Tensor

    def to_host(a, arg):
        if isinstance(a, Tensor):
            return Tensor._from_array(download(a), a.dtype) if a._storage.on_device else a
        if isinstance(a, (list, tuple)):
            return type(a)(to_host(x, arg) for x in a)
        if arg.type == "Device" and a is not None:
            return CPU
        return a

    host_args = [to_host(a, arg) for a, arg in zip(args, op.schema.args)]
    result = registry.execute(op, host_args)

    # Fresh host results need not be waited for: the driver stages pageable memory before returning.
    def back(r):
        if isinstance(r, Tensor):
            with non_blocking():
                return upload(r._array(), r.dtype, device)
        if isinstance(r, list):
            return [back(x) for x in r]
        if isinstance(r, tuple):
            items = [back(x) for x in r]
            return type(r)(*items) if hasattr(r, "_fields") else tuple(items)
        return r
    return back(result)


# Matrix products ----------------------------------------------------------------------------

def _matmul(op, args, spec):
    """``matmul``/``mm``/``bmm``/``mv``/``dot`` through the tiled kernel (float32 and float16, non-empty),
    else NotImplemented. 1-D operands act as a row or a column, as on the CPU."""
    from ..codegen.errors import CompileError
    from ..codegen.nvptx.matmul import DTYPES, matmul_kernel
    a, b = args
    if a.dtype not in DTYPES or b.dtype is not a.dtype or not a.ndim or not b.ndim or 0 in a._shape or \
            0 in b._shape:
        return NotImplemented
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    key = (a2._shape, a2._stride, b2._shape, b2._stride, a.dtype)
    try:
        kernel = _cached(_MATMULS, key, lambda: matmul_kernel(a2._shape, b2._shape, a.dtype, a_strides=a2._stride,
                                                              b_strides=b2._stride))
    except CompileError:  # more batch matrices than one grid holds
        return NotImplemented
    out = empty(kernel.out_shape, a.dtype, a.device)
    cuda_backend.current().launch(kernel, [address(a2), address(b2), address(out)], a.device.index)
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    return out


# Indexing ---------------------------------------------------------------------------------

def _indexing(op, args, spec):
    """gather, index_select, scatter_add and index_add through their generated kernels (see
    codegen/nvptx/indexing.py), reading every operand in place; NotImplemented for what they do not cover
    (0-dim or empty operands, other index or element dtypes, a fractional alpha on integers)."""
    from ..codegen.errors import CompileError
    from ..codegen.nvptx.indexing import ATOMIC_DTYPES, INDEX_DTYPES, index_kernel
    from . import cuda_errors
    self, dim, index = args[0], args[1], args[2]
    adds = op.name in ("scatter_add", "index_add")
    source = args[3] if adds else None
    tensors = [self, index] + ([source] if adds else [])
    if not self.ndim or any(not t.numel() or t.device != self.device for t in tensors) or \
            index.dtype not in INDEX_DTYPES or (adds and self.dtype not in ATOMIC_DTYPES):
        return NotImplemented
    dim = dim % self.ndim
    alpha = args[4] if op.name == "index_add" else 1
    if not self.dtype.is_floating_point and alpha != int(alpha):
        return NotImplemented
    alpha = float(alpha) if self.dtype.is_floating_point else int(alpha)
    vector = op.name in ("index_select", "index_add")  # a 1-D index along dim
    if vector and index.ndim != 1 or not vector and index.ndim != self.ndim:
        return NotImplemented
    space = tuple(source._shape if op.name == "index_add" else index._shape if not vector else spec.shape)
    index_strides = tuple(index._stride[0] if d == dim else 0 for d in range(len(space))) if vector \
        else index._stride
    out = _cast(self, spec) if adds else empty(spec.shape, spec.dtype, self.device)
    target_strides = out._stride if adds else self._stride
    key = (op.name, space, dim, self._shape[dim], (index.dtype, index_strides), (self.dtype, target_strides),
           (source.dtype, source._stride) if adds else None, alpha)
    try:
        kernel = _cached(_INDEXERS, key, lambda: index_kernel(*key[:7], alpha=alpha))
    except CompileError:
        return NotImplemented
    pointers = [address(index), address(source), address(out)] if adds else \
        [address(self), address(index), address(out)]
    cuda_backend.current().launch(kernel, pointers + [cuda_errors.word(self.device)], self.device.index)
    return out


# Joining ----------------------------------------------------------------------------------

def _join(op, args, spec):
    """cat and stack: each input written into its slice of the result by `write` (a device copy or the
    strided copy kernel), cast to the promoted dtype on the way; 1-D empty inputs skipped, as torch does."""
    tensors, dim = args
    if any(t.device != tensors[0].device or t.device.type != "cuda" for t in tensors):
        return NotImplemented
    out = empty(spec.shape, spec.dtype, spec.device)
    if op.name == "stack":
        d = wrap_dim(dim, len(spec.shape))
        for i, t in enumerate(tensors):
            write(out.select(d, i), t)
        return out
    kept = [t for t in tensors if t._shape != (0,)]
    start = 0
    for t in kept:
        d = wrap_dim(dim, t.ndim)
        write(out.narrow(d, start, t._shape[d]), t)
        start += t._shape[d]
    return out


def _scaled_product(op, args, spec):
    """addmm and baddbmm: ``beta * self + alpha * product`` as the CPU computes it (the product through the
    tiled kernel, then the scalings; ``self`` ignored, NaNs included, when beta is 0)."""
    from ..autograd.grad_mode import no_grad
    inp, m1, m2, beta, alpha = args
    product = _matmul(op, (m1, m2), spec)
    if product is NotImplemented:
        return NotImplemented
    with no_grad():
        out = product if alpha == 1 else product.mul(alpha)
        return out if beta == 0 else out.add(inp if beta == 1 else inp.mul(beta))


def _repeat(op, args, spec):
    """``x.repeat(*reps)``: the result seen as (r0, n0, r1, n1, ...) takes ``x`` broadcast over the r's,
    in one strided copy."""
    from ..autograd.grad_mode import no_grad
    x, reps = args
    out = empty(spec.shape, spec.dtype, x.device)
    if out.numel():
        sizes = (1,) * (len(reps) - x.ndim) + x._shape
        with no_grad():
            write(out.view(tuple(v for r, n in zip(reps, sizes) for v in (r, n))),
                  x.reshape(tuple(v for n in sizes for v in (1, n))))
    return out


def _roll(op, args, spec):
    """``x.roll(shifts, dims)``: per rolled dim, its two pieces copied to their new places (a flattened
    roll when no dims are given, as torch does)."""
    from ..autograd.grad_mode import no_grad
    x, shifts, dims = args
    with no_grad():
        if not dims:
            return _roll(op, (x.reshape(-1), shifts, (0,)), spec).view(x._shape)
        current = x
        for shift, d in zip(shifts, dims):
            d = wrap_dim(d, x.ndim)
            n = x._shape[d]
            shift = shift % n if n else 0
            if shift:
                out = empty(current._shape, current.dtype, current.device)
                write(out.narrow(d, shift, n - shift), current.narrow(d, 0, n - shift))
                write(out.narrow(d, 0, shift), current.narrow(d, n - shift, shift))
                current = out
    return current if current is not x else copy_values(x)


def _flip(op, args, spec):
    """``x.flip(dims)``: one strided copy reading ``x`` backwards along the flipped dims."""
    x, dims = args
    flipped = {wrap_dim(d, x.ndim) for d in dims}
    out = empty(spec.shape, spec.dtype, x.device)
    if out.numel():
        last = sum((x._shape[d] - 1) * x._stride[d] for d in flipped)
        _copy_into(out, address(x) + last * x.dtype.itemsize, x.dtype,
                   [-s if d in flipped else s for d, s in enumerate(x._stride)])
    return out


def _scan(op, args, spec):
    """cumsum and cumprod through the generated scan (a thread walks each line in order, as the CPU does)."""
    from ..codegen.nvptx.scan import scan_kernel
    x, dim = args[0], args[1]
    if not x.ndim or not x.numel():
        return NotImplemented
    d = wrap_dim(dim, x.ndim)
    key = (op.name, x._shape, d, (x.dtype, x._stride), spec.dtype, spec.compute or spec.dtype)
    kernel = _cached(_SCANS, key, lambda: scan_kernel(*key))
    out = empty(spec.shape, spec.dtype, x.device)
    cuda_backend.current().launch(kernel, [address(x), address(out)], x.device.index)
    return out


def _arg_reduction(op, args, spec):
    """argmax, argmin, max.dim and min.dim through the generated line walk (first extreme, NaN beyond all);
    a full argmax/argmin walks the flattened tensor."""
    from ..autograd.grad_mode import no_grad
    from ..codegen.nvptx.scan import arg_kernel
    x, dim = args[0], args[1]
    if not x.numel() or x.dtype.name == "bool":
        return NotImplemented
    with no_grad():
        line = x.reshape(-1) if dim is None or not x.ndim else x
    d = 0 if dim is None or not x.ndim else wrap_dim(dim, x.ndim)
    key = (op.name, line._shape, d, (line.dtype, line._stride))
    kernel = _cached(_SCANS, key, lambda: arg_kernel(*key))
    specs = list(spec) if isinstance(spec, tuple) else [spec]
    outs = [empty(s.shape, s.dtype, x.device) for s in specs]
    cuda_backend.current().launch(kernel, [address(line)] + [address(t) for t in outs], x.device.index)
    return outs[0] if len(outs) == 1 else op.result_type(*outs)


def _softmax(op, args, spec):
    """softmax and log_softmax over any dim of a float32/float64 tensor: the row kernel over compact rows,
    with the dim moved last (and back) by strided copies when it is not."""
    from ..autograd.grad_mode import no_grad
    from ..ops.registry import TensorSpec
    x, dim, dtype = args
    if not x.ndim or not x.numel() or dtype not in (None, x.dtype) or x.dtype.name not in ("float32", "float64"):
        return NotImplemented
    d, last = wrap_dim(dim, x.ndim), x.ndim - 1
    with no_grad():
        rows = x.transpose(d, last)
        if not rows.is_contiguous():
            rows = copy_values(rows)
        out = _run(op, (rows, -1, None), TensorSpec(rows._shape, x.dtype, x.device), x.device)
        return out if d == last else copy_values(out.transpose(d, last))


_SPECIAL = {**dict.fromkeys(MATMUL_OPS, _matmul), **dict.fromkeys(INDEXING_OPS, _indexing),
            **dict.fromkeys(JOIN_OPS, _join), "addmm": _scaled_product, "baddbmm": _scaled_product,
            "repeat": _repeat, "roll": _roll, "flip": _flip, "cumsum": _scan, "cumprod": _scan,
            "softmax": _softmax, "log_softmax": _softmax, **dict.fromkeys(("argmax", "argmin", "max.dim",
                                                                            "min.dim"), _arg_reduction)}
