"""Running a compiled graph: its kernels and external ops in order, over a planned arena.

`CompiledGraph(graph)` optimises the graph, partitions it into fusion groups
and compiles each pointwise or reduction group to a CPU kernel. Groups the
code generator cannot lower (matmul, sorting, indexing, half types, ...) run
their nodes with the eager kernels, as the interpreter does; matrix products
write straight into their arena buffer, and views whose geometry the plan
knows are tensor headers only, which kernels read where they lie, through their
strides and offset (a convolution's product permuted to ``[N, C, H, W]``).

Memory is planned once, when the graph is built (see `_plan`):

* an intermediate that never leaves the call lives in an *arena* buffer owned
  by the compiled graph, which starts a cache line (`allocator.aligned_bytes`);
  values whose lifetimes do not overlap share a buffer,
  and every kernel's argument array is built once per arena, so a call only
  patches the addresses of its inputs and of its escaping outputs;
* an output, a value written back into an input, or anything a view of it may
  reach gets fresh memory per call, so two calls never return the same memory;
* an in-place update of an input (``p.sub_(lr * g)`` in a training step)
  whose old value nothing reads afterwards is computed straight into the
  input's memory by its pointwise kernel, instead of into a fresh buffer that
  is then copied back;
* a padded input or a col2im, which copies zeros and then writes part of
  them, takes the zeros' buffer when nothing reads them later.

A call takes a free arena (a new one when another thread holds them all), so
concurrent calls of one compiled graph never share buffers.

Buffers are compact, except where eager's layout shows (`Graph.layouts`): an input
that is a permutation of a dense layout is read in place through its strides, and
a result whose memory a call returns and that eager lays out in its operands'
memory order is written in that order; the outputs the plan cannot vouch for are
checked against eager's layout at the end of the call (`eager_layouts`).
"""

from __future__ import annotations

import ctypes
import itertools
from math import prod
import time
import warnings

import numpy as np

from ..runtime.grad_mode import no_grad
from ..ir.fake import fake_tensor
from ..ir.graph import Value, iter_values, warning_as_traced
from ..ir.passes.fusion import Group, product_work, reduction_sides
from ..ir.printer import op_counts
from ..runtime import blas_calls, logs, profiling, threads
from . import gemm_words, interop
from .kernel_runs import KernelRun, kernel_runs
from .cat_pieces import cat_pieces_into, cat_slices, fold_writers_into_cats, strided_read, write_pieces
from .collector import collector_paused
from .parts import independent_parts
from .plan_cache import fuse_cached, optimize_cached
from .results import eager_layouts, refresh_captured_state, returned_view, set_grads, views_a_piece, write_back
from ..ops import indexing, registry, value_checks, views
from ..ops.attention import attention_into
from ..ops.registry import laid_out
from ..ops import linalg
from ..ops.linalg import SPLIT_MIN_WORK
from ..ops.views import compact
from ..runtime import allocator
from ..runtime import dtypes as _dt
from ..runtime.storage import Storage
from ..runtime.strided import contiguous_strides
from ..tensor import Tensor
from ..runtime.pytree import tree_leaves, tree_map
# (mathlib: loaded with the backend, not on the first call; recurrence, attention, windows, rows and scatter:
# register ops.recurrences' fused cells, ops.attention's fused kernels, ops.views' col2im and padding kernels,
# ops.reductions' eager row softmax and ops.indexing's scatter-add of rows)
from ..codegen import attention, cpu, mathlib, recurrence, rows, scatter, windows  # noqa: F401
from ..codegen.kernel import RESHAPES, CompileError, build_many, build_shared, built_or_refused, composes, \
    gather_checks, is_row_softmax, row_softmax_of
from ..codegen.split_combine import combine_entry
from ..codegen.straightline import Source
from ..codegen.lowering import kind_of


def _address(arr):
    """A fresh writable array's address; ``c_char.from_buffer`` is the cheapest way to it."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(arr))
    except (TypeError, ValueError):  # empty arrays
        return arr.__array_interface__["data"][0]


def _wrap(arr, value):
    """A tensor over a fresh, compact array holding ``value``."""
    return Tensor._make(Storage(arr, value.type.dtype), value.type.shape, contiguous_strides(value.type.shape), 0, arr)


def _fresh(value):
    """Fresh memory for a value that leaves the call (from the caching allocator)."""
    arr, buf = allocator.empty(value.type.shape, value.type.dtype.np)
    t = _wrap(arr, value)
    allocator.track(t._storage, buf)
    return t


class KernelStep:
    """One compiled kernel: reads its input values, writes its outputs (arena, fresh or in place)."""

    def __init__(self, kernel, nodes):
        self.kernel = kernel
        self.nodes = nodes
        self.inputs = kernel.source.inputs
        self.outputs = kernel.source.outputs
        self.args_type = ctypes.c_void_p * (len(self.inputs) + len(self.outputs))
        split = kernel.source.split
        if split is not None:
            # A full reduction in parts: the partials' address (the kernel's output argument) and the result's
            # follow the inputs' in the argument array; the combining kernel (`split_combine`) reads the array
            # from the partials on and writes the result, so that no NumPy call follows the kernel.
            (out,) = self.outputs
            self.combine, self._combine_code = combine_entry(*split, out.type.dtype)
            self.args_type = ctypes.c_void_p * (len(self.inputs) + 2)
        # filled in by the plan: which arguments change per call
        self.dynamic_inputs = []   # (argument index, value)
        self.fresh_outputs = []    # (argument index, value, its strides)
        self.inplace_outputs = []  # (argument index, value, the input value whose memory it takes)
        self.inplace_kernel = None  # the kernel built knowing those outputs share their input's pointer
        self.eager_made = set()    # inputs computed by eager steps
        self.compacted = set()     # inputs laid out otherwise than this kernel reads them (see _kernel_layouts)
        self.layouts = {}          # value -> strides of the buffers it reads and writes that are not compact
        self.views = {}            # eager views it reads in place: value -> (strides, offset, root's size)
        # the indices its gathers read, checked before it runs: (tensor value, (size, op, dim, ndim))
        self.checks = [(v, tuple(rest)) for v, *rest in gather_checks(nodes)]

    def reads(self):
        return self.inputs

    def writes(self):
        return self.outputs

    def bind(self, arena):
        """This kernel's argument array over ``arena``'s buffers (per-call slots left empty); a split
        reduction's partials are a buffer of the arena's own."""
        args = self.args_type(*[arena.address(v) for v in (*self.inputs, *self.outputs)])
        split = self.kernel.source.split
        if split is not None:
            partials = allocator.aligned_bytes(split.parts * split.dtype.itemsize).view(split.dtype.np)
            arena.buffers.append(partials)
            args[len(self.inputs)] = _address(partials)
        return args

    def emit(self, src, indent):
        """This step's lines of the generated call (see `straightline`): its argument array patched
        with the addresses that change per call, then the kernel."""
        for v, check in self.checks:
            src.emit(f"_check_gather(env[{src.name(v, 'v')}], *{src.name(check, 'g')})", indent)
        self.emit_arguments(src, indent)
        self.emit_call(src, indent)
        if self.kernel.source.split is not None:
            offset = ctypes.sizeof(ctypes.c_void_p) * len(self.inputs)
            src.emit(f"{src.name(self.combine, 'fn')}(_addressof(a) + {offset}, 0, 1)", indent)

    def emit_arguments(self, src, indent, tag=""):
        """The lines that patch this step's argument array (``a``) with the addresses that change per call;
        returns the names of the local variables that hold the compact copies they make, which must live
        until the kernel has run; ``tag`` names those apart from another step's (`kernel_runs`)."""
        src.emit(f"a = arena.args[{src.name(self, 'step')}]", indent)
        held = []
        plain = []  # consecutive (argument index, value) of inputs read where they lie, not emitted yet

        def flush():
            if len(plain) >= PATCH_LOOP_FROM:
                src.emit(f"for i, v in {src.name(tuple(plain), 'patch')}:", indent)
                src.emit("a[i] = env[v]._storage.data_ptr()", indent + 1)
            else:
                for i, v in plain:
                    src.emit(f"a[{i}] = env[{src.name(v, 'v')}]._storage.data_ptr()", indent)
            plain.clear()

        for i, v in self.dynamic_inputs:
            # graph inputs and kernel outputs are compact (offset 0): their address is their storage's,
            # which is cached; what an eager step made (a view) may need compacting first
            if not (v in self.views or v in self.eager_made or v in self.compacted):
                plain.append((i, v))
                continue
            flush()
            value = src.name(v, "v")
            if v in self.views:  # an eager view read where it lies, through its strides
                strides, offset, size = self.views[v]
                src.emit(f"env[{value}] = t = _strided(env[{value}], {src.name(strides, 'g')}, {offset}, {size})",
                         indent)
                src.emit(f"a[{i}] = t._storage.data_ptr() + {offset * v.type.dtype.itemsize}", indent)
            elif v in self.eager_made:
                src.emit(f"env[{value}] = t = _compact(env[{value}])", indent)
                src.emit(f"a[{i}] = t._storage.data_ptr()", indent)
            else:  # laid out for its other readers: a compact copy, held until the call
                src.emit(f"held{tag}{i} = _compact(env[{value}])", indent)
                src.emit(f"a[{i}] = held{tag}{i}._storage.data_ptr()", indent)
                held.append(f"held{tag}{i}")
        flush()
        for i, v, strides in self.fresh_outputs:
            shape, dtype = v.type.shape, v.type.dtype
            nbytes = _numel(v) * dtype.itemsize
            if strides != contiguous_strides(shape):  # a flat buffer: arr is no view of the tensor
                made = f"_make(_Storage(arr, {src.name(dtype, 'dt')}), {shape!r}, {strides!r}, 0)"
                shape = (_numel(v),)
            else:
                made = f"_make(_Storage(arr, {src.name(dtype, 'dt')}), {shape!r}, {strides!r}, 0, arr)"
            if nbytes < allocator.MIN_BYTES:  # small: the pool would not keep it
                src.emit(f"arr = _np_empty({shape!r}, {src.name(dtype.np, 'np')})", indent)
                src.emit(f"env[{src.name(v, 'v')}] = {made}", indent)
            else:
                src.emit(f"arr, buf = _pool_empty({shape!r}, {src.name(dtype.np, 'np')})", indent)
                src.emit(f"env[{src.name(v, 'v')}] = t = {made}", indent)
                src.emit("_track(t._storage, buf)", indent)
            src.emit(f"a[{i}] = _address(arr)", indent)
        if len(self.inplace_outputs) >= PATCH_LOOP_FROM:
            src.emit(f"for i, v, target in {src.name(tuple(self.inplace_outputs), 'patch')}:", indent)
            src.emit("env[v] = t = env[target] if inplace else _fresh(v)", indent + 1)
            src.emit("a[i] = t._storage.data_ptr()", indent + 1)
            return held
        for i, v, target in self.inplace_outputs:
            value = src.name(v, "v")
            src.emit(f"env[{value}] = t = env[{src.name(target, 'v')}] if inplace else _fresh({value})", indent)
            src.emit(f"a[{i}] = t._storage.data_ptr()", indent)
        return held

    def emit_call(self, src, indent):
        """The line that runs this step's kernel on its argument array ``a``."""
        if self.inplace_kernel is not None:  # (one line, as an expression: the call's source compiles faster)
            src.emit(f"{_call(src, self.inplace_kernel)} if inplace else {_call(src, self.kernel)}", indent)
        else:
            src.emit(_call(src, self.kernel), indent)

    def __repr__(self):
        return repr(self.kernel)


def _call(src, kernel):
    """A CPU kernel's call on the argument array ``a`` (an expression): straight into its machine code when
    it never splits its loop across threads (in a profiled call, a split one runs through the recorder,
    which times each thread's chunk)."""
    if kernel.parallel and src.profiled:
        return f"_r.cpu_kernel({src.name(kernel, 'kernel')}, a)"
    if kernel.parallel:
        return f"{src.name(kernel, 'kernel')}(a)"
    return f"{src.name(kernel.fn, 'fn')}(a, 0, {kernel.outer})"


def _blas_product(node):
    """Whether a product node multiplies matrices, or batches of them, of its output's BLAS dtype (the
    operands NumPy's matmul takes as they are, with torch's broadcasting of the batch dims)."""
    out = node.outputs[0].type
    return out.dtype in (_dt.float32, _dt.float64) and out.device.type == "cpu" and all(
        isinstance(a, Value) and len(a.type.shape) >= 2 and a.type.dtype == out.dtype for a in node.args)


def _matmul_into(arrays, out):
    gemm_words.product(*arrays, out)  # (eager's product, split on the threads' pool where large)


def _biased_into(arrays, out):
    gemm_words.biased_product(*arrays, out)  # (a product and its bias add: `fold_biases_into_products`)


def _host_tensors(node):
    """Whether a node's tensor arguments and result are CPU arrays of one NumPy dtype (what a writer
    into an arena buffer takes as they are)."""
    out = node.outputs[0].type
    return out.device.type == "cpu" and out.dtype.is_floating_point and out.dtype.itemsize >= 4 and all(
        a.type.dtype == out.dtype for a in node.args if isinstance(a, Value))


def _host_cat(node, new_dims=0):
    """Whether a ``cat`` joins CPU arrays of its result's dtype, all of its number of dims (none the 1-D empty
    tensor cat skips), along an int dim: NumPy's concatenate writes them into the arena buffer as they are.
    ``new_dims`` 1: the same of a ``stack``, whose inputs have one dim fewer (`_host_stack`)."""
    tensors, dim = node.args[0], node.args[1] if len(node.args) > 1 else 0
    out = node.outputs[0].type
    return _host_tensors(node) and isinstance(dim, int) and isinstance(tensors, (list, tuple)) and all(
        isinstance(t, Value) and t.type.dtype == out.dtype and len(t.type.shape) + new_dims == len(out.shape)
        for t in tensors)


def _cat_into(args, out):
    tensors, dim = args[0], args[1] if len(args) > 1 else 0
    np.concatenate(tensors, axis=dim % out.ndim, out=out)


def _host_stack(node):
    """Whether a ``stack`` joins CPU arrays of its result's dtype along an int dim: NumPy writes them into the
    arena buffer as they are (a clipped step's 52 gradient norms: 0.19 ms through the eager op, whose dispatch
    checks each input, against 0.04)."""
    return _host_cat(node, new_dims=1)


def _stack_into(args, out):
    tensors, dim = args[0], args[1] if len(args) > 1 else 0
    if any(t is None for t in tensors):  # (the pieces placed in the result by their kernels are there)
        for i, t in enumerate(tensors):
            if t is not None:
                out[(slice(None),) * (dim % out.ndim) + (i,)] = t
        return
    if out.ndim == 1:
        # 0-d arrays, assigned as a sequence: 0.8 us for 52 where np.stack takes 27 (each value's bits kept,
        # a signalling NaN's too)
        out[...] = tensors
    else:
        np.stack(tensors, axis=dim % out.ndim, out=out)


def _zeros_into(args, out):
    views.fill_split(out, 0)


def _host_index_add(node):
    """Whether an ``index_add`` adds float32/float64 rows of its result's dtype on the CPU, by int32/int64
    indices along an int dim: eager's formula (`indexing.index_add_into`) writes it into the arena buffer."""
    x, dim, index, source = node.args[:4]
    out = node.outputs[0].type
    return out.device.type == "cpu" and out.dtype in (_dt.float32, _dt.float64) and isinstance(dim, int) \
        and all(isinstance(v, Value) for v in (x, index, source)) and x.type.dtype == source.type.dtype == out.dtype \
        and index.type.dtype in (_dt.int32, _dt.int64)


def _index_add_into(args, out):
    indexing.index_add_into(out, *args)


def _as_strided_add_into(args, out):
    views.as_strided_add_into(out, *args)


def _as_strided_scatter_into(args, out):
    views.as_strided_scatter_into(out, *args)


# Eager ops that can write an arena buffer directly, skipping a fresh result (whose new memory the
# op's first writes fault in, page by page: a convolution's padded input, col2im's sums and the zeros
# they start from are megabytes per call) and its wrapper: name -> (whether a node qualifies, the writer
# of ``(arguments: tensors as arrays, the rest as they are), out``).
_PRODUCTS = ("matmul", "mm", "bmm")
_WRITERS_INTO = {name: (_blas_product, _matmul_into) for name in _PRODUCTS}
_WRITERS_INTO.update({"zeros": (_host_tensors, _zeros_into), "new_zeros": (_host_tensors, _zeros_into),
                      "_as_strided_add": (_host_tensors, _as_strided_add_into),
                      "as_strided_scatter": (_host_tensors, _as_strided_scatter_into), "cat": (_host_cat, _cat_into),
                      "stack": (_host_stack, _stack_into),
                      "index_add": (_host_index_add, _index_add_into)})

# Eager ops whose first result the executor can have written in new memory of any dense layout (the order a
# view after it reads, see `permuted_for_products`): name -> (whether a node qualifies, the writer of
# ``(that result, a new tensor so laid out; the op's arguments as tensors and numbers)``, which returns the
# op's other results).
_WRITERS_LAID_OUT = {"_attention": (lambda node: node.outputs[0].type.device.type == "cpu", attention_into)}


def _compute_laid_out(node, env, strides):
    """`_compute` of a node of `_WRITERS_LAID_OUT`, its first result written in new memory with ``strides``."""
    out = node.outputs[0]
    t = Tensor._make(_aligned_storage(_numel(out), out.type.dtype, out.type.device), out.type.shape, strides, 0)
    env[out] = t
    rest = _WRITERS_LAID_OUT[node.op.name][1](t, *[_substitute(a, env, False) for a in node.args])
    for v, r in zip(node.outputs[1:], rest if isinstance(rest, (tuple, list)) else (rest,)):
        env[v] = r


def _compute_into_pieces(node, env, out, places):
    """`_compute` of a node of `cat_pieces.WRITERS`, its written results going into their ``places`` in ``out``
    (the array of the cat that joins them, see `fold_writers_into_cats`)."""
    write_pieces(node, [_substitute(a, env, False) for a in node.args], out, places)


# Graphs with this many constants or more bind them in a loop over a table (as fast per constant as two
# straight lines each, and the generated call's source compiles in less time: a GPT training step binds 210).
CONSTANTS_LOOP_FROM = 16
# Graphs of this many steps or more call each step's lines as a function shared by the steps whose lines differ
# only in the objects they name, from a table (see `straightline`): a call per step costs a fraction of a
# microsecond (0.2), and the source compiles in a sixth of the time (a GPT training step's 433 steps share 36).
SHARED_STEPS_FROM = 128
# A kernel step patches this many consecutive plain inputs (their storage's address) or in-place outputs, or more,
# in a loop over a table rather than a line each: the optimizer's merged one-element kernel of a GPT training step
# takes 53 of each, 440 lines, most of the generated call's source and of its compile time.
PATCH_LOOP_FROM = 8


class EagerStep:
    """Nodes run with the eager kernels (what the code generator does not lower)."""

    def __init__(self, nodes, reason):
        self.nodes = nodes
        self.reason = reason
        # a view of a compact value has a geometry known now: at run time it is a tensor header only
        self.geometry = {}  # filled by the plan: see _static_views
        self.into_arena = set()  # filled by the plan: the outputs a writer computes into their arena buffer
        self.into_fresh = set()  # filled by the plan: products' results that leave the call, written into new memory
        self.unfilled = set()  # filled by the plan: zeros not filled, whose one reader starts from zeros itself
        # filled by `fold_copies_into_cats`: a cat's inputs whose copy kernel is gone, each as (the copy's source,
        # the copied value's geometry over it), and per such cat node, where each input goes (`cat_slices`)
        self.pieces, self.slices = {}, {}
        # filled by `fold_writers_into_cats`: per such cat node whose pieces' sources one op writes straight into
        # the cat's result, (that op's node, where each of its written results lies in that result)
        self.producers = {}
        # filled by `read_windows_in_place`: a product's operand that is a copy of a convolution's windows, or that
        # copy transposed (a weight gradient's) -> (the copy's source, the windows' geometry over it, whether the
        # operand is transposed, whether the copy is computed), which the product reads where they lie
        self.windows = {}
        self.laid_out = {}  # filled by the compiled graph: node -> strides its first result is written with
        self.read_flags = set()  # filled by the plan: results of value checks that a step reads or the call returns
        # filled by `fold_biases_into_products`: a product node -> (the bias added to its result, the sum's value),
        # the step writing the sum (`gemm_words.biased_product`) where the product's result was
        self.biases = {}
        self.placed = set()  # filled by `fold_pieces_into_stacks`: a stack's pieces that their kernels wrote in it

    def reads(self):
        return [v for node in self.nodes for v in
                (iter_values(self.producers[node][0].args) if node in self.producers else
                 (self.pieces[v][0] if v in self.pieces else v for v in iter_values(node.args)
                  if v not in self.windows or self.windows[v][3]))] + \
            [source for source, *_ in self.windows.values()] + [bias for bias, _ in self.biases.values()]

    def writes(self):
        return [self.result(node) if node in self.biases else v for node in self.nodes for v in node.outputs]

    def result(self, node):
        """The value this step writes for ``node``: its first output, or the sum a product's bias was folded into."""
        return self.biases[node][1] if node in self.biases else node.outputs[0]

    def writers(self):
        """Outputs this step can write into an arena buffer."""
        return [self.result(n) for n in self.nodes if n.op.name in _WRITERS_INTO and _WRITERS_INTO[n.op.name][0](n)]

    def emit(self, src, indent):
        """This step's lines of the generated call: a product into its arena buffer, a view of a planned
        geometry as a tensor header (unless its root is laid out otherwise at run time), else the eager
        kernel."""
        if all(node.outputs[0] in self.unfilled for node in self.nodes):
            src.emit("pass", indent)  # (the generated step's body, which may be a function's)
            return
        for node in self.nodes:
            if node.outputs[0] in self.unfilled:
                continue
            if src.profiled:  # each node a span of its own: "external" where it writes into the arena (BLAS)
                src.emit("_s = _clock()", indent)
                self._emit_node(src, node, indent)
                kind = "external" if self.result(node) in self.into_arena | self.into_fresh else "eager_step"
                name = (self.producers[node][0] if node in self.producers else node).op.name  # (what takes the time)
                src.emit(f"_r.span({name!r}, {kind!r}, _s, {src.name({'reason': self.reason}, 'c')})", indent)
            else:
                self._emit_node(src, node, indent)

    def _emit_node(self, src, node, indent):
        out = node.outputs[0]
        if node.op.kind == "check" and out not in self.read_flags:  # (its result, a constant True, is unread)
            tensors = ", ".join(f"env[{src.name(v, 'v')}]" for v in node.args[0])
            src.emit(f"_check_values([{tensors}], {node.args[1]!r}, {src.name(node.args[2], 'g')})", indent)
            return
        if node in self.producers:  # a cat whose pieces an op writes into it (that op's results are not computed)
            if out not in self.into_arena:
                src.emit(f"env[{src.name(out, 'v')}] = _fresh({src.name(out, 'v')})", indent)
            producer, places = self.producers[node]
            src.emit(f"_compute_into_pieces({src.name(producer, 'node')}, env, env[{src.name(out, 'v')}]._array(), "
                     f"{src.name(places, 'g')})", indent)
            return
        if node in self.slices:  # a cat that reads its copied inputs' sources (its inputs are not computed)
            arrays = ", ".join(f"_strided_read(_compact(env[{src.name(self.pieces[a][0], 'v')}]), "
                               f"{src.name(self.pieces[a][1], 'g')})" if a in self.pieces else
                               _array_expression(src, a) for a in node.args[0])
            if out not in self.into_arena:  # (the plan gave it no arena buffer: new memory)
                src.emit(f"env[{src.name(out, 'v')}] = _fresh({src.name(out, 'v')})", indent)
            src.emit(f"_cat_pieces_into([{arrays}], env[{src.name(out, 'v')}]._array(), "
                     f"{src.name(self.slices[node], 'g')})", indent)
            return
        if node in self.biases:  # (a product whose bias add was folded in: it writes the sum)
            bias, out = self.biases[node]
            if out not in self.into_arena:
                _emit_fresh(src, out, indent)
            arrays = ", ".join(_array_expression(src, a) for a in (*node.args, bias))
            src.emit(f"{src.name(_biased_into, 'writer')}([{arrays}], env[{src.name(out, 'v')}]._array())", indent)
            return
        if out in self.into_fresh:
            _emit_fresh(src, out, indent)
        if self.windows and (out in self.into_arena or out in self.into_fresh or not self.windows[node.args[1]][3]):
            # (its one node, a product; where the windows' copy is not computed, its result is written in new
            # memory if the plan gave it no buffer)
            source, geometry, transposed, kept = self.windows[node.args[1]]
            if out not in self.into_arena and out not in self.into_fresh:
                _emit_fresh(src, out, indent)
            copied = _array_expression(src, node.args[1]) if kept else "None"
            src.emit(f"_windows_into({_array_expression(src, node.args[0])}, _compact(env[{src.name(source, 'v')}])"
                     f"._array(), {src.name(geometry, 'g')}, {transposed!r}, {copied}, "
                     f"env[{src.name(out, 'v')}]._array())", indent)
            return
        if out in self.into_arena or out in self.into_fresh:
            arrays = ", ".join("None" if isinstance(a, Value) and a in self.unfilled else
                               _array_expression(src, a, self.placed) for a in node.args)
            writer = src.name(_WRITERS_INTO[node.op.name][1], "writer")
            src.emit(f"{writer}([{arrays}], env[{src.name(out, 'v')}]._array())", indent)
            return
        if node in self.laid_out:
            src.emit(f"_compute_laid_out({src.name(node, 'node')}, env, {src.name(self.laid_out[node], 'g')})", indent)
            return
        compute = f"_compute({src.name(node, 'node')}, env)"
        geo = self.geometry.get(node)
        if geo is None:
            src.emit(compute, indent)
            return
        root, views, compact = geo
        if len(views) == 1:
            # one line, its shapes bound as names rather than printed: Python's compiler takes a third of the
            # time on it that it takes on the four lines below, and it runs the same operations
            shape, strides, offset = views[0]
            src.emit(f"env[{src.name(out, 'v')}] = _view_of(b, {src.name(shape, 'g')}, {src.name(strides, 'g')}, "
                     f"{offset!r}) if (b := env[{src.name(root, 'v')}])._offset == 0 and b._stride == "
                     f"{src.name(compact, 'g')} else _compute_one({src.name(node, 'node')}, env)", indent)
            return
        src.emit(f"b = env[{src.name(root, 'v')}]", indent)
        src.emit(f"if b._offset == 0 and b._stride == {compact!r}:", indent)
        for v, (shape, strides, offset) in zip(node.outputs, views):
            src.emit(f"env[{src.name(v, 'v')}] = _view_of(b, {shape!r}, {strides!r}, {offset!r})", indent + 1)
        src.emit("else:", indent)
        src.emit(compute, indent + 1)

    def __repr__(self):
        return f"<eager {' '.join(n.op.name for n in self.nodes)}>"


class ProductPair(EagerStep):
    """Two independent matrix products run at once, each on one thread (`interop.pair_products`), each into its
    arena buffer or, where it leaves the call (a backward graph's weight gradient), new memory; one after the
    other where either result has neither (its eager kernel makes it)."""

    def emit(self, src, indent):
        if not all(node.outputs[0] in self.into_arena | self.into_fresh for node in self.nodes):
            super().emit(src, indent)
            return
        for node in self.nodes:
            if node.outputs[0] in self.into_fresh:
                _emit_fresh(src, node.outputs[0], indent)
        products = ", ".join(f"({', '.join(_array_expression(src, a) for a in node.args)}, "
                             f"env[{src.name(node.outputs[0], 'v')}]._array())" for node in self.nodes)
        if src.profiled:
            names = src.name([node.op.name for node in self.nodes], "c")
            src.emit(f"_at_once_profiled(_r, {names}, [{products}])", indent)
        else:
            src.emit(f"_at_once([{products}])", indent)

    def __repr__(self):
        return f"<at once {' '.join(n.op.name for n in self.nodes)}>"


def _emit_fresh(src, value, indent):
    """The generated call's line binding ``value`` to new memory (`_fresh`), which a writer then fills."""
    src.emit(f"env[{src.name(value, 'v')}] = _fresh({src.name(value, 'v')})", indent)


def _joins_run(step):
    """Whether a step may be a kernel of a `KernelRun`: a CPU kernel over its whole loop, checking no gather's indices
    (see `kernel_runs`)."""
    return type(step) is KernelStep and step.kernel.source.split is None and not step.checks


def _product_work(step):
    """A step's multiply-adds if it is one matrix product that a writer computes into its arena buffer (what
    `interop.pair_products` pairs), else None."""
    if type(step) is not EagerStep or len(step.nodes) != 1 or step.windows or step.biases:
        return None
    (node,) = step.nodes
    return product_work(node) if node.op.name in _PRODUCTS and _blas_product(node) else None


def _movable(step):
    """Whether a step computes only its outputs (a kernel, views, a product), so it may run before its place."""
    return type(step) is KernelStep or isinstance(step, EagerStep) and not step.pieces and not step.laid_out and all(
        node.op.view is not None or node.op.name in _PRODUCTS for node in step.nodes)


def _array_expression(src, arg, placed=()):
    """The generated call's expression of an eager node's argument as a writer into the arena takes it: a
    tensor as its array, a list of tensors (cat's) as a list of arrays (None for the pieces in ``placed``,
    already where the writer would copy them), anything else as it is."""
    if isinstance(arg, Value):
        return f"env[{src.name(arg, 'v')}]._array()"
    if isinstance(arg, (list, tuple)) and any(isinstance(a, Value) for a in arg):
        return "[" + ", ".join("None" if a in placed else _array_expression(src, a) for a in arg) + "]"
    return src.name(arg, "c")


def _static_views(nodes, by_value, layouts):
    """Per view node of an eager step: (root value, per output its (shape, strides, offset), the root's
    strides), the geometry of its outputs over the value its chain of views starts from, known before any
    call (a chain such as ``split`` then ``view`` then ``transpose`` composes, across steps through
    ``by_value``; the root is compact at run time, or laid out as ``layouts`` says)."""
    geometry = {}
    for node in nodes:
        base = node.args[0] if node.args else None
        if (node.op.view is None or node.op.attrs.get("reinterprets") or not isinstance(base, Value)
                or any(isinstance(a, Value) for a in iter_values(node.args[1:]))):
            continue  # (a view(dtype) header is another dtype's: its eager kernel makes it)
        root, shape, strides, offset = by_value.get(base, (base, base.type.shape, _strides(base, layouts), 0))
        if not composes(node, shape, strides, offset):  # the eager kernel runs on the compacted input
            continue
        fake = fake_tensor(shape, base.type.dtype, base.type.device, strides, offset,
                           max(1, prod(root.type.shape)))
        try:
            geo = node.op.view(fake, *node.args[1:])
        except RuntimeError:  # a view the strided layout does not allow: the eager kernel copies
            continue
        views = [(tuple(g[0]), tuple(g[1]), g[2]) for g in (geo if isinstance(geo, list) else [geo])]
        if len(views) != len(node.outputs):
            continue
        for v, (shape, strides, offset) in zip(node.outputs, views):
            by_value[v] = (root, shape, strides, offset)
        geometry[node] = (root, views, _strides(root, layouts))
    return geometry


def _strided(t, strides, offset, size):
    """``t`` if it lies at ``strides`` from ``offset`` in its storage (what a kernel built to read an eager view
    in place reads), else a copy of its values laid out so in new memory of ``size`` elements."""
    if t._stride == strides and t._offset == offset:
        return t
    out = Tensor._make(_aligned_storage(size, t.dtype, t.device), t._shape, strides, offset)
    out._array()[...] = t._array()
    return out


def _aligned_storage(size, dtype, device):
    """New memory of ``size`` elements of ``dtype`` for a kernel or an eager writer to fill within the call, starting a
    cache line as the arena's buffers do (on the CPU)."""
    if device.type != "cpu":
        return Storage.empty(size, dtype, device)
    return Storage(allocator.aligned_bytes(size * dtype.itemsize).view(dtype.np), dtype)


def _compute(node, env):
    """Run ``node``'s eager kernel (`_view_or_compute`) and bind its outputs in ``env``."""
    result = _view_or_compute(node, env)
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    for v, r in zip(node.outputs, results):
        env[v] = r


def _compute_one(node, env):
    """`_compute` of a node of one output, which it returns."""
    _compute(node, env)
    return env[node.outputs[0]]


def _view_or_compute(node, env):
    """The eager kernel of ``node`` on its arguments as they are laid out. A view that the IR defines over
    its input's elements in row-major order (``as_strided``), or one the layout does not allow (``view`` of
    a transposed value, which eager made compact), runs on a compact copy of its input."""
    compacted = node.op.name == "as_strided"
    args = [_substitute(a, env, compacted) for a in node.args]
    if node.op.view is None or compacted:
        return registry.execute(node.op, args)
    try:
        return registry.execute(node.op, args)
    except RuntimeError:
        return registry.execute(node.op, [_substitute(a, env, True) for a in node.args])


def _strides(value, layouts):
    """The strides of ``value``'s buffer: compact unless ``layouts`` says otherwise."""
    return layouts.get(value) or contiguous_strides(value.type.shape)


def _substitute(arg, env, compacted):
    if isinstance(arg, Value):
        t = env[arg]
        return compact(t) if compacted else t
    if isinstance(arg, (list, tuple)) and any(isinstance(a, Value) for a in arg):
        return type(arg)(_substitute(a, env, compacted) for a in arg)
    return arg


class Arena:
    """The buffers of one in-flight call: one flat byte array per slot of the plan."""

    def __init__(self, plan, steps, runs=()):
        # (each starting a cache line: a kernel's vectors then never straddle two at a row's start)
        self.buffers = [allocator.aligned_bytes(nbytes) for nbytes in plan.slot_bytes]
        self.tensors = {v: _wrap(self.buffers[slot][(at := plan.offsets.get(v, 0)):
                                                    at + v.type.dtype.itemsize * _numel(v)]
                                 .view(v.type.dtype.np).reshape(v.type.shape), v)
                        for v, slot in plan.slots.items()}
        self.args = {s: s.bind(self) for s in steps if isinstance(s, KernelStep)}
        # per run of kernels (`kernel_runs`): its programs over these arrays, indexed by the call's ``inplace``
        self.programs = {run: (run.programs(self, False), run.programs(self, True)) for run in runs}

    def address(self, value):
        t = self.tensors.get(value)
        return None if t is None else t._storage.data_ptr()


def _numel(v):
    n = 1
    for d in v.type.shape:
        n *= d
    return n


def _feeding_reductions(nodes):
    """The nodes of a reduction group evaluated inside its reduction loops (its input side:
    `fusion.reduction_sides`, of all its reductions together), the reductions included."""
    reds = [n for n in nodes if n.op.kind == "reduction"]
    return reduction_sides(reds, nodes)[0] | set(reds) if reds else set()


def lifetimes(graph, steps, reads=None):
    """Per value: the value whose memory it shares (views), the last step reading that memory,
    and the set of values that leave the call (through outputs, mutations or their views). ``reads``: each step's
    ``reads()``, where the caller has them (`_step_reads`)."""
    root = {}
    for step in steps:
        if isinstance(step, EagerStep):
            for node in step.nodes:
                if node.op.view is not None:
                    base = next(iter_values(node.args))
                    for v in node.outputs:
                        root[v] = root.get(base, base)
    last_use = {}
    for j, read in enumerate(reads if reads is not None else _step_reads(steps)):
        for v in read:
            last_use[root.get(v, v)] = j
    leaving = set(graph.output_values()) | {v for _, v in graph.mutations}
    escaping = leaving | {root[v] for v in leaving if v in root}
    return root, last_use, escaping


def _step_reads(steps):
    """Each step's ``reads()``, asked once for the scans of one pass over the steps that change none of them: an
    eager step's are made anew at each asking (2,300 askings in the gpt-4x128 step's compile, 57,000 in generate's;
    1,200 and 26,000 now)."""
    return [step.reads() for step in steps]


def _reader_counts(reads):
    """{value: how many times the steps read it}, from each step's reads (`_step_reads`)."""
    readers = {}
    for read in reads:
        for v in read:
            readers[v] = readers.get(v, 0) + 1
    return readers


def fold_pieces_into_stacks(graph, steps, layouts):
    """(``steps`` without the host ``stack`` steps (`_host_stack`) whose pieces are all written straight into the
    stack's result, {piece: (the stack's result, the piece's index)}). Taken where the stack's result is compact
    and its pieces are whole runs of it (every dim before the stacked one of size 1) and lives in the arena (no
    view's, not leaving the call, of no kept layout), for each piece that the stack alone reads, once, and that
    is a compact output of a CPU kernel step (no split reduction) or the result of a stack so taken (the
    gradient of two unbinds: a stack of stacks), which then lies inside this one. A stack with other pieces too
    (an add's gradient passed through: a view) keeps its step, which copies only those (``placed`` names the
    others). A convolution's Winograd transforms stack nine pieces each way and back (`nn.functional._f22_tiles`).
    The same bits: each element is written by the same kernel, only at another address."""
    candidates = [step for step in steps if type(step) is EagerStep and len(step.nodes) == 1
                  and step.nodes[0].op.name == "stack" and not step.pieces and not step.producers]
    if not candidates:  # (no asking of every step's reads: tests/jit/test_latency56.py)
        return steps, {}
    reads = _step_reads(steps)
    root, last_use, escaping = lifetimes(graph, steps, reads)
    readers = _reader_counts(reads)
    made = {v: step for step in steps if type(step) is KernelStep and step.kernel.source.split is None
            for v in step.outputs}
    stacked, dropped, folded = {}, set(), set()
    for step in candidates:
        (node,) = step.nodes
        out = node.outputs[0]
        dim = node.args[1] if len(node.args) > 1 else 0
        if not _host_stack(node) or out in escaping or out in layouts or out in root or last_use.get(out) is None \
                or prod(out.type.shape[:dim % len(out.type.shape)]) != 1:
            continue
        placed = {v for v in node.args[0] if (v in made or v in folded) and readers.get(v) == 1
                  and v not in escaping and v not in layouts and v not in root}
        if placed:
            stacked.update((v, (out, i)) for i, v in enumerate(node.args[0]) if v in placed)
            folded.add(out)
            if placed.issuperset(node.args[0]):
                dropped.add(step)
            else:
                step.placed = placed
    return [step for step in steps if step not in dropped], stacked


class Plan:
    """Where each value of a compiled graph lives; see the module docstring."""

    def __init__(self, graph, steps, layouts, stacked=None):
        self.slots = {}          # value -> arena slot
        self.slot_bytes = []     # per slot: its size
        self.offsets = {}        # a stack's piece (`fold_pieces_into_stacks`) -> its byte offset in the stack's slot
        stacked = stacked or {}
        self.inplace = {}        # mutated value -> the input or constant value whose memory it reuses
        reads = _step_reads(steps)
        root, last_use, escaping = lifetimes(graph, steps, reads)
        self.root = root         # view value -> the value whose memory it shares
        inputs = set(graph.inputs) | set(graph.constants.values())
        mutated = {value: target for target, value in graph.mutations}
        # a value that also leaves the call another way (returned, as a .grad, or written into a
        # second target) must keep memory of its own
        shared_values = {}
        for v in [value for _, value in graph.mutations] + list(graph.output_values()):
            shared_values[v] = shared_values.get(v, 0) + 1
        # an input is written in place only after the last check of values (`checks_early`), which may raise
        last_check = max((j for j, step in enumerate(steps) if _checks(step)), default=-1)
        for j, step in enumerate(steps):
            if isinstance(step, KernelStep) and step.kernel.source.kind in ("pointwise", "reduction") \
                    and step.kernel.source.split is None and j > last_check:
                facts = {}  # what the step's outputs are checked against (made on first use, for all of them)
                for v in step.outputs:
                    target = mutated.get(v)
                    if target is not None and shared_values.get(v, 0) == 1 and target not in layouts \
                            and v not in layouts and self._can_update_in_place(
                            step, j, v, target, root, last_use, escaping, facts):
                        self.inplace[v] = target
        arena_candidates = set()
        for step in steps:
            if isinstance(step, KernelStep) and step.kernel.source.split is None:
                arena_candidates.update(step.outputs)
            elif isinstance(step, EagerStep):
                arena_candidates.update(step.writers())
        free, ends = {}, {}
        for j, step in enumerate(steps):
            taken = _updated_operand(step, j, root, last_use, escaping)
            if taken in self.slots and taken in ends.get(j, ()):
                # its result takes the operand's buffer, which it copies first (a no-op there): freed before
                ends[j].remove(taken)
                free.setdefault(self.slot_bytes[self.slots[taken]], []).append(self.slots[taken])
            for v in step.writes():
                if v in stacked:  # (the outermost stack's buffer lives from its first piece's step)
                    self._place_in_stack(v, stacked, free, ends, last_use)
                    continue
                if v in self.slots:  # (a stack, some of whose pieces were placed in it: `_place_in_stack`)
                    continue
                if (v in arena_candidates and root.get(v, v) is v and v not in escaping and v not in self.inplace
                        and v not in inputs and v not in layouts and last_use.get(v) is not None):
                    self.slots[v] = self._slot(_numel(v) * v.type.dtype.itemsize, free)
                    ends.setdefault(last_use[v], []).append(v)
            for v in ends.pop(j, []):
                slot = self.slots[v]
                free.setdefault(self.slot_bytes[slot], []).append(slot)
        views = {}
        for step in steps:
            if isinstance(step, EagerStep):
                step.geometry = _static_views(step.nodes, views, layouts)
                step.into_arena = {v for v in step.writers() if v in self.slots}
                step.into_fresh = {n.outputs[0] for n in step.nodes if n.op.name in _PRODUCTS
                                   and n.outputs[0] in escaping and self._fresh_result(n.outputs[0], root, inputs,
                                                                                     layouts, step)}
        unfilled = self._unfilled(steps, root, last_use, escaping, reads)
        for step, read in zip(steps, reads):
            if isinstance(step, EagerStep):
                step.unfilled = unfilled & (set(read) | set(step.writes()))
                step.read_flags = {n.outputs[0] for n in step.nodes if n.op.kind == "check"
                                   and (n.outputs[0] in last_use or n.outputs[0] in escaping)}
        eager_made = {v for step in steps if isinstance(step, EagerStep) for v in step.writes()}
        for step in steps:
            if not isinstance(step, EagerStep):  # a kernel, of the CPU's or the CUDA device's
                step.eager_made = eager_made & set(step.inputs)
                step.compacted = {v for v in step.inputs if v in layouts and v not in step.layouts}
            if isinstance(step, KernelStep):
                args = (*step.inputs, *step.outputs)
                step.dynamic_inputs = [(i, v) for i, v in enumerate(step.inputs) if v not in self.slots]
                step.fresh_outputs = [(i, v, _strides(v, layouts)) for i, v in enumerate(args)
                                      if i >= len(step.inputs) and v not in self.slots and v not in self.inplace]
                if step.kernel.source.split is not None:  # (its result's address follows the partials': `bind`)
                    step.fresh_outputs = [(i + 1, v, strides) for i, v, strides in step.fresh_outputs]
                step.inplace_outputs = [(i, v, self.inplace[v]) for i, v in enumerate(args)
                                        if i >= len(step.inputs) and v in self.inplace]

    def _place_in_stack(self, v, stacked, free, ends, last_use):
        """Gives ``v`` and the stacks holding it (`fold_pieces_into_stacks`) their slot and offsets: the outermost
        stack's slot, taken now (freed after its last reader) where it has none yet."""
        if v in self.slots:
            return
        if v not in stacked:
            self.slots[v] = self._slot(_numel(v) * v.type.dtype.itemsize, free)
            ends.setdefault(last_use[v], []).append(v)
            return
        out, i = stacked[v]
        self._place_in_stack(out, stacked, free, ends, last_use)
        self.slots[v] = self.slots[out]
        self.offsets[v] = self.offsets.get(out, 0) + i * _numel(v) * v.type.dtype.itemsize

    def _slot(self, nbytes, free):
        """A slot of ``nbytes``: a freed one of that size (from ``free``, {size: [slots]}), else a new one."""
        pool = free.get(nbytes)
        if pool:
            return pool.pop()
        self.slot_bytes.append(nbytes)
        return len(self.slot_bytes) - 1

    def _fresh_result(self, v, root, inputs, layouts, step):
        """Whether a product's result that leaves the call may be written by `_WRITERS_INTO`'s writer into new
        C-contiguous memory (`_fresh`), as eager's product makes it: a value of its own memory (no view's, no
        input's, none updated in place), laid out so (not in ``layouts``), that no arena buffer holds."""
        return (v in step.writers() and v not in self.slots and root.get(v, v) is v and v not in self.inplace
                and v not in inputs and v not in layouts)

    def _unfilled(self, steps, root, last_use, escaping, reads):
        """The zeros (``zeros``, ``new_zeros`` written into the arena) that a call does not fill: their one
        reader is a col2im, a padded copy or an embedding's backward (`_as_strided_add`, `as_strided_scatter`,
        `index_add` into the arena, whose writer starts from zeros itself when given None:
        `views.as_strided_add_into`, `indexing.index_add_into`), and nothing else reads them or a view of
        them, nor do they leave the call. ``reads``: each step's (`_step_reads`)."""
        made, readers = {}, {}
        for step, read in zip(steps, reads):
            for v in read:
                readers[v] = readers.get(v, 0) + 1
            if isinstance(step, EagerStep):
                made.update((n.outputs[0], (step, n)) for n in step.nodes
                            if n.op.name in ("zeros", "new_zeros") and n.outputs[0] in step.into_arena)
        viewed = {root[v] for v in root}
        found = set()
        for j, step in enumerate(steps):
            x = _updated_operand(step, j, root, last_use, escaping)
            if x in made and readers.get(x) == 1 and x not in viewed and step.nodes[0].outputs[0] in step.into_arena:
                found.add(x)
        return found

    def memory(self, value):
        """What names the memory ``value`` lives in during a call (`kernel_runs.shared_groups`): its arena slot, else
        the value whose memory it is, through views and in-place updates (an input or constant; else a value of
        its own memory)."""
        root = self.root.get(value, value)
        root = self.inplace.get(root, root)
        slot = self.slots.get(root)
        return root if slot is None else ("slot", slot)

    @staticmethod
    def _can_update_in_place(step, j, value, target, root, last_use, escaping, facts):
        """Whether the kernel of step ``j`` may write ``value`` into ``target``'s memory: it reads
        ``target`` only elementwise at the position it writes, through no view (in a reduction
        kernel: only after the reduction, in its epilogue), and no later step reads ``target`` or a
        view of it. ``facts``: the step's {value: its nodes that read it} ("reading"), the roots of
        its inputs that are views, the outputs of its view nodes, whether its outputs have one shape
        and the nodes feeding its reductions, filled here when empty: an optimizer's step asks of
        each output of its kernels, and each of these, made per output, took time growing as the
        square of the kernel's nodes (the GPT-8x128 step's plan: 19 ms, now 13)."""
        shape = value.type.shape
        if target.type.shape != shape or target.type.dtype != value.type.dtype or target in escaping:
            return False
        if not facts:
            reading = {}
            for n in step.nodes:
                for a in dict.fromkeys(iter_values(n.args)):
                    reading.setdefault(a, []).append(n)
            facts.update(reading=reading, viewed={root[v] for v in step.inputs if v in root},
                         by_views={v for n in step.nodes if n.op.view is not None for v in n.outputs},
                         one_shape=len({v.type.shape for v in step.outputs}) == 1)
        if last_use.get(target, -1) > j or target in facts["viewed"]:
            return False
        readers = facts["reading"].get(target, [])
        if not all(n.op.kind == "pointwise" and n.outputs[0].type.shape == shape for n in readers):
            return False
        if value in facts["by_views"]:
            # a view written into ``target``'s memory reached it before the group's other reads of ``target``
            # (fuzz seed 7701876: ``v = x + 0; x[::3].mul_(2); return v - x`` on a strided x gave zeros)
            return False
        if step.kernel.source.kind == "pointwise":
            # one iteration space: another output of a larger shape would revisit written positions
            return facts["one_shape"]
        if "feeding" not in facts:
            facts["feeding"] = _feeding_reductions(step.nodes)
        return not set(readers) & facts["feeding"]


def _checks(step):
    """Whether ``step`` is one of value checks (``_check_values``)."""
    return isinstance(step, EagerStep) and all(n.op.kind == "check" for n in step.nodes)


def checks_early(steps):
    """``steps`` with each step of value checks (``_check_values``: `ops.value_checks`) moved up to just after
    the steps that make what it reads (and after the checks before it, whose error comes first as eagerly): a
    bad value raises before the steps it need not wait for write an output, or an input in place."""
    out, last_check = [], 0
    for step in steps:
        if _checks(step):
            reads = set(step.reads())
            at = max([last_check] + [i + 1 for i, s in enumerate(out) if reads.intersection(s.writes())])
            out.insert(at, step)
            last_check = at + 1
        else:
            out.append(step)
    return out


def _warning_as_traced(graph, run):
    """``run`` that gives the warnings of ``graph``'s trace on every call (see `warning_as_traced`)."""
    def run_warning(inputs):
        with warning_as_traced(graph):
            return run(inputs)
    return run_warning


def _lowered(group):
    """Whether a group has a kernel form (else its nodes run as an eager step)."""
    return group.kind in ("pointwise", "reduction", "view") or row_softmax_of(group) is not None


def softmax_prologues(graph, groups):
    """``groups`` with each row softmax (`is_row_softmax`, an external call alone) merged with the pointwise
    group that computes its input, directly or through a group of reshapes (`kernel.RESHAPES`: a language
    model's ``decoded.view(-1, ntoken)``), where that input is all the group writes and each value on the way
    has the next as its only reader: a bias add before a log-softmax (a language model's decoder), an
    attention's scale and causal mask. The softmax kernel evaluates that prologue where it reads its input
    (`kernel.build_softmax`), so the input is never written and read back: one pass over memory less, and a
    kernel call less. The merged group (kind "external", the prologue's nodes, the reshapes, then the softmax)
    takes the softmax's place in the order; its prologue's values are what the separate kernel computed, bit
    for bit (the same lowering of each node)."""
    readers = {}
    for node in graph.nodes:
        for v in node.input_tuple():
            readers[v] = readers.get(v, 0) + 1
    sinks = set(graph.output_values()) | {v for _, v in graph.mutations}
    producer = {v: i for i, group in enumerate(groups) for v in group.outputs}

    def only_read_once(v):
        return readers.get(v) == 1 and v not in sinks

    prologue_of = {}  # softmax group's index -> the indices of its prologue's groups
    for k, group in enumerate(groups):
        if group.kind != "external" or len(group.nodes) != 1 or not is_row_softmax(group.nodes[0]):
            continue
        x = group.nodes[0].args[0]
        i = producer.get(x)
        if i is None or not only_read_once(x):
            continue
        taken = [i]
        if groups[i].kind == "view":  # reshapes of the prologue's value, one chain
            views = groups[i]
            chain = views.nodes[0].args[0] if views.nodes else None
            if len(views.inputs) != 1 or views.outputs != [x] or views.inputs[0] is not chain or any(
                    n.op.name not in RESHAPES or n.args[0] is not (chain if j == 0 else views.nodes[j - 1].outputs[0])
                    or not only_read_once(n.args[0]) for j, n in enumerate(views.nodes)):
                continue
            x, i = chain, producer.get(chain)
            if i is None:
                continue
            taken.insert(0, i)
        pro = groups[i]
        # (a gather or an arange in it would have to be read as the softmax's row reader does not)
        if pro.kind == "pointwise" and pro.outputs == [x] and tuple(pro.shape) == tuple(x.type.shape) \
                and all(kind_of(n) in ("pointwise", "view") for n in pro.nodes):
            prologue_of[k] = taken
    if not prologue_of:
        return groups
    merged = []
    taken = {i for indices in prologue_of.values() for i in indices}
    for k, group in enumerate(groups):
        if k in prologue_of:
            first, *rest = (groups[i] for i in prologue_of[k])
            nodes = [n for g in (first, *rest) for n in g.nodes]
            group = Group("external", nodes + group.nodes, first.inputs, group.outputs, group.shape)
        if k not in taken:
            merged.append(group)
    return merged


def permuted_for_products(graph, groups, wanted):
    """{value: strides} for the values that a view group then permutes and reshapes (a copy: a convolution's
    gradient in ``[N, C, H, W]`` made ``[C, H * W * N]`` for its products, an attention's ``[B, H, T, D]`` output
    made ``[B, T, H * D]``), written by a pointwise kernel or an eager op of `_WRITERS_LAID_OUT`: laid out so
    that the permutation is dense, the kernel or op writes them in that order (a kernel's loops follow the
    written strides) and the permutation and reshape become tensor headers, so the copy's pass over memory is
    gone. Only where every other reader is a pointwise kernel (which reads any strides and computes each
    element alone: a reduction's loops follow its operands' strides, and a reordered sum rounds otherwise; an
    eager op's value has no other reader), the producer is a pointwise kernel (a reduction kernel writing its
    prologue's values in another order changes its loops likewise) and the value leaves the call no other way
    (a returned value keeps eager's layout), and not for the values eager's layout already fixes (``wanted``):
    the values are the copy's bit for bit."""
    group_of = {node: group for group in groups for node in group.nodes}
    producer = {v: group for group in groups for v in group.outputs}
    sinks = set(graph.output_values()) | {v for _, v in graph.mutations}
    readers = {}
    for node in graph.nodes:
        for v in node.input_tuple():
            readers.setdefault(v, []).append(node)
    found = {}
    for group in groups:
        if group.kind != "view" or len(group.nodes) != 2:
            continue
        perm, reshape = group.nodes
        v = perm.args[0]
        dims = _permutation(perm)
        if dims is None or reshape.op.name not in RESHAPES or reshape.args[0] is not perm.outputs[0] \
                or group.outputs != reshape.outputs or not isinstance(v, Value) or v in sinks or v in wanted:
            continue
        if getattr(producer.get(v), "kind", None) == "pointwise":
            # (a kernel's value transposed, not permuted, is left as before: the copies of a GPT's transposed
            # heads that a cat joins are the cat's to read where they lie, `fold_copies_into_cats`)
            if perm.op.name != "permute" or any(n is not perm and group_of[n].kind != "pointwise" for n in readers[v]):
                continue
        elif not (laid_out_writer(producer.get(v)) and v is producer[v].nodes[0].outputs[0] and readers[v] == [perm]):
            continue
        dense = contiguous_strides([v.type.shape[d] for d in dims])
        strides = [0] * v.type.ndim
        for i, d in enumerate(dims):
            strides[d] = dense[i]
        found[v] = tuple(strides)
    return found


def _permutation(node):
    """The dims in the order a ``permute`` or ``transpose`` node puts its input's, else None."""
    v = node.args[0]
    if not isinstance(v, Value) or not v.type.ndim:
        return None
    if node.op.name == "permute":
        return [d % v.type.ndim for d in node.args[1]]
    if node.op.name == "transpose" and all(isinstance(d, int) for d in node.args[1:3]):
        dims = list(range(v.type.ndim))
        a, b = (d % v.type.ndim for d in node.args[1:3])
        dims[a], dims[b] = dims[b], dims[a]
        return dims
    return None


def laid_out_writer(group):
    """Whether ``group`` is one eager node of `_WRITERS_LAID_OUT` that qualifies (its first result can be written
    in any dense layout)."""
    if group is None or group.kind != "external" or len(group.nodes) != 1:
        return False
    entry = _WRITERS_LAID_OUT.get(group.nodes[0].op.name)
    return entry is not None and entry[0](group.nodes[0])


def copy_geometry(group, layouts):
    """(source, shape, strides, offset): the value a copy group (`kernel.build_copy`: views that fold, one
    reshape that copies, then reshapes of the copy) copies, as a strided view of the group's one input, whose
    buffer is compact (or laid out as ``layouts`` says); None where the group is not of that form. The group's
    output is that value's elements in row-major order."""
    if len(group.inputs) != 1 or len(group.outputs) != 1:
        return None
    (source,) = group.inputs
    by_value, copying = {}, None
    for node in group.nodes:  # (views that fold, then the copying reshape and reshapes of its result)
        if copying is None and node not in _static_views([node], by_value, layouts):
            copying = node
        if copying is not None and node.op.name not in RESHAPES:
            return None
    if copying is None:
        return None
    read = copying.args[0]
    if read is source:
        return source, tuple(source.type.shape), _strides(source, layouts), 0
    root, shape, strides, offset = by_value.get(read, (None, None, None, None))
    return (source, tuple(shape), tuple(strides), offset) if root is source else None


def read_windows_in_place(graph, steps, layouts):
    """``steps``, noting on each product step whose second operand is a copy of a convolution's windows (a copy
    kernel's output, `copy_geometry`, of a compact source), or that copy transposed (an eager step's
    ``transpose`` of its last two dims: a weight gradient's operand), that `ops.linalg.window_layout` takes,
    that source and the windows' geometry over it: its writer (`_windows_into`) reads the windows where they lie
    rather than the copy. A copy whose every reader so reads it (through such transposes), which leaves the call
    no other way, is not computed: its kernel and the transposes are dropped. The same bits: the windows'
    kernels are the columns and long-sum kernels the copy's products run. Only where those kernels serve
    products (`gemm.for_products`) and take the windows' runs (`gemm.runs_fit`): a product the kernel refuses at
    run time reads a copy made then."""
    from ..codegen import gemm
    if not gemm.for_products():
        return steps
    copies, made = {}, {}
    for step in steps:
        if type(step) is KernelStep and step.group.kind == "view" and step.kernel.source.split is None \
                and len(step.outputs) == 1:
            geo = copy_geometry(step.group, layouts)
            if geo is not None and geo[0] not in layouts and geo[0].type.dtype == step.outputs[0].type.dtype:
                copies[step.outputs[0]] = (geo[0], geo[1:])
                made[step.outputs[0]] = step
    transposes = {}  # a copy's transpose -> (the copy, its step)
    for step in steps:
        if type(step) is EagerStep and len(step.nodes) == 1 and step.nodes[0].op.name == "transpose" \
                and step.nodes[0].args[0] in copies and len(step.nodes[0].args[0].type.shape) == 3 \
                and {d % 3 for d in step.nodes[0].args[1:3]} == {1, 2}:
            transposes[step.nodes[0].outputs[0]] = (step.nodes[0].args[0], step)
    in_place = {}  # a copy -> the steps that read it, or its transposes, where they lie
    for step in steps:
        if type(step) is not EagerStep or len(step.nodes) != 1 or step.pieces or step.producers:
            continue
        (node,) = step.nodes
        if node.op.name not in _PRODUCTS or not _blas_product(node):
            continue
        a, b = node.args[:2]
        transposed = b in transposes
        copy = transposes[b][0] if transposed else b
        if copy not in copies:
            continue
        source, (shape, strides, _) = copies[copy]
        m = a.type.shape[-2]
        layout = linalg.window_layout(b.type.dtype.np, m, shape, strides, transposed)
        if layout is None or not gemm.runs_fit(b.type.dtype.np, layout[3], transposed) \
                or tuple(copy.type.shape) != (1, layout[0], layout[1]) \
                or tuple(a.type.shape) != (1, m, layout[1] if transposed else layout[0]):
            continue
        step.windows[b] = (*copies[copy], transposed, True)
        in_place.setdefault(copy, []).append(step)
    if not in_place:  # (no product reads a window copy, as in a model without convolutions: nothing to scan for)
        return steps
    reads = _step_reads(steps)
    _, _, escaping = lifetimes(graph, steps, reads)
    readers = {}
    for step, read in zip(steps, reads):
        for v in read:
            readers.setdefault(v, []).append(step)
    dropped = set()
    for copy, products in in_place.items():
        views = [step for c, step in transposes.values() if c is copy]
        if any(v in escaping or v in layouts for v in [copy] + [t.nodes[0].outputs[0] for t in views]) \
                or any(r not in products and r not in views for r in readers.get(copy, ())) \
                or any(r not in products for t in views for r in readers.get(t.nodes[0].outputs[0], ())):
            continue
        for p in products:
            (b,) = p.windows
            p.windows[b] = (*p.windows[b][:3], False)
        dropped.update([made[copy], *views])
    return [step for step in steps if step not in dropped]


def _windows_into(a, source, geometry, transposed, copied, out):
    """``out = a @ windows`` (``a`` and ``out`` batches of one matrix), or ``a @ windows.T`` where ``transposed``
    (a weight gradient), with the windows read where they lie in ``source`` (a compact array) at ``geometry``
    (shape, strides, offset); where the kernel does not take them, the product of their copy ``copied`` (or of a
    copy made here, where None: the step computes none), as `_matmul_into` computes it."""
    shape, strides, offset = geometry
    windows = linalg.window_sum_product if transposed else linalg.window_product
    if windows(a[0], source.reshape(-1)[offset:], shape, strides, out[0]) is None:
        if copied is None:  # (the copy kernel's (1, C * K, L * N) array; its transposed view)
            flat = source.reshape(-1)[offset:]
            view = np.lib.stride_tricks.as_strided(flat, shape, [s * flat.itemsize for s in strides])
            copied = np.ascontiguousarray(view).reshape(1, prod(shape[:(len(shape) + 1) // 2]), -1)
            copied = copied.transpose(0, 2, 1) if transposed else copied
        gemm_words.product(a, copied, out)


def fold_biases_into_products(graph, steps, layouts):
    """``steps`` without the kernels that only add a bias to a matrix product's result (``x @ w.t() + b``: a linear
    layer's, whose add fuses with nothing, as before attention or a recurrence): the product's step writes the sum
    (`gemm_words.biased_product`: the bias written first, the product added with beta 1, so neither BLAS's pass
    clearing the result nor the add's pass over it remains). The product reads a float matrix whose inner dim is at
    most `blas_calls.ADDS_EXACT_MAX_K` (the same bits as apart), its result nothing but the add, which adds a vector of its
    last dim made before the product; neither result leaves the call or takes a layout of its own."""
    reads = _step_reads(steps)
    _, _, escaping = lifetimes(graph, steps, reads)
    readers, made = {}, {}
    for j, (step, read) in enumerate(zip(steps, reads)):
        for v in read:
            readers.setdefault(v, []).append(step)
        for v in step.writes():
            made[v] = j
    dropped = set()
    for step in steps:
        folded = _bias_add(step, made, readers, escaping, layouts, steps)
        if folded is not None:
            product, node, bias, out = folded
            product.biases[node] = (bias, out)
            dropped.add(step)
    return [step for step in steps if step not in dropped]


def _bias_add(step, made, readers, escaping, layouts, steps):
    """(the product's step, its node, the bias, the sum) where ``step`` is a kernel that `fold_biases_into_products`
    folds into a product, else None."""
    if type(step) is not KernelStep or step.kernel.source.kind != "pointwise" or step.kernel.source.split is not None \
            or step.checks or len(step.nodes) != 1:
        return None
    (add,) = step.nodes
    if add.op.name != "add" or len(add.args) < 2 or add.args[2:] not in ((), (1,)):
        return None
    out = add.outputs[0]
    for p, bias in (add.args[:2], add.args[1::-1]):
        if not (isinstance(p, Value) and isinstance(bias, Value)) or p is bias or p not in made:
            continue
        product = steps[made[p]]
        if type(product) is not EagerStep or len(product.nodes) != 1 or product.windows or product.biases:
            continue
        (node,) = product.nodes
        shape, dtype = p.type.shape, p.type.dtype
        if (node.op.name not in _PRODUCTS or not _blas_product(node) or len(shape) < 2
                or tuple(bias.type.shape) != tuple(shape[-1:]) or bias.type.dtype != dtype
                or tuple(out.type.shape) != tuple(shape) or out.type.dtype != dtype
                or node.args[0].type.shape[-1] > blas_calls.ADDS_EXACT_MAX_K.get(dtype.np, 0)
                or made.get(bias, -1) >= made[p] or readers.get(p) != [step]
                or any(v in escaping or v in layouts for v in (p, out))):
            continue
        return product, node, bias, out
    return None


def fold_copies_into_cats(graph, steps, layouts):
    """``steps`` without the copy kernels whose one reader is a ``cat`` of CPU arrays of one dtype (`_host_cat`)
    with a compact result: that cat reads each such copy's source where it lies and writes it into its slice of
    the result (its arena buffer, or new memory where it leaves the call; see `cat_pieces`), noted on its step
    (``pieces``, ``slices``). The copy leaves the call no other way, and its source is a compact buffer of the
    copy's dtype."""
    reads = _step_reads(steps)
    _, _, escaping = lifetimes(graph, steps, reads)
    readers = _reader_counts(reads)
    copies = {}  # value -> (its copy kernel's step, (source, geometry))
    for step in steps:
        if type(step) is KernelStep and step.group.kind == "view" and step.kernel.source.split is None:
            (v,) = step.outputs
            geo = copy_geometry(step.group, layouts)
            if geo is not None and readers.get(v) == 1 and v not in escaping and v not in layouts \
                    and geo[0] not in layouts and geo[0].type.dtype == v.type.dtype:
                copies[v] = (step, (geo[0], geo[1:]))
    dropped = set()
    for step in steps:
        if not isinstance(step, EagerStep):
            continue
        for node in step.nodes:
            if node.op.name != "cat" or not _host_cat(node) or node.outputs[0] in layouts:
                continue
            pieces = {v: copies[v][1] for v in node.args[0] if v in copies}
            slices = cat_slices(node, {v: geo[0] for v, (_, geo) in pieces.items()}) if pieces else None
            if slices is None:
                continue
            step.pieces.update(pieces)
            step.slices[node] = slices
            dropped.update(copies[v][0] for v in pieces)
    return fold_writers_into_cats([step for step in steps if step not in dropped], escaping)


def _updated_operand(step, j, root, last_use, escaping):
    """The operand whose arena buffer eager step ``j``'s result may take, or None: a single
    `as_strided_scatter`, `_as_strided_add` or `index_add` that a writer computes into the arena (it copies its
    first operand into the result, then changes part of it: where they are one buffer, the copy is skipped), whose
    first operand is no view, leaves the call no other way, and is read by no later step (the zeros a
    convolution's padded input, col2im's sums or an embedding's gradient start from: megabytes filled, then
    copied, per call)."""
    if not isinstance(step, EagerStep) or len(step.nodes) != 1:
        return None
    (node,) = step.nodes
    if node.op.name not in _COPIES_FIRST or not step.writers():
        return None
    x, out = node.args[0], node.outputs[0]
    if not isinstance(x, Value) or x in root or x in escaping or last_use.get(x) != j \
            or x.type.dtype != out.type.dtype or _numel(x) != _numel(out) \
            or any(root.get(a, a) is x for a in iter_values(node.args[1:])):
        return None
    return x


_COPIES_FIRST = ("as_strided_scatter", "_as_strided_add", "index_add")


def _alone(node):
    """A fusion group of one node (what a refused group splits into)."""
    kind = kind_of(node)
    kind = "pointwise" if kind in ("gather", "index") else kind  # (an indexed load or an arange alone)
    values = [a for a in node.input_values()]
    shape = tuple(values[0].type.shape) if kind == "reduction" else tuple(node.outputs[0].type.shape)
    return Group(kind, [node], list(dict.fromkeys(values)), list(node.outputs), shape)


def split_refused(group):
    """The parts a group the kernel builder refuses is lowered as: its leading views (those that read no value
    the group computes; each alone, a tensor header) apart and the rest as one group of the group's kind and
    space, where there are both (a gradient clipping's ``as_strided`` of a bias's gradient, a group output, then
    the square, sum and sqrt of its norm: one reduction kernel rather than three); else one group per node."""
    computed, lead = set(), []
    for node in group.nodes:
        if node.op.view is not None and not any(v in computed for v in node.input_tuple()):
            lead.append(node)
        else:
            computed.update(node.outputs)
    rest = [node for node in group.nodes if node not in lead]
    if not lead or not rest:
        return [_alone(node) for node in group.nodes]
    inputs = list(dict.fromkeys(v for n in rest for v in n.input_tuple() if v not in computed))
    outputs = [v for v in group.outputs if v in computed]
    return [_alone(node) for node in lead] + [Group(group.kind, rest, inputs, outputs, group.shape)]


def copy_then_views(group):
    """The parts a view group the kernel builder refuses is lowered as, where a view follows its last reshape (a
    convolution's windows merged, then transposed for a weight gradient's product): the views up to that reshape
    (the copy a kernel makes), then each later view alone (a tensor header over the copy); None where no reshape
    comes before the last view (the group's views then all run as one eager step)."""
    last = max((i for i, n in enumerate(group.nodes[:-1]) if n.op.name in RESHAPES), default=None)
    if last is None:
        return None
    head, tail = group.nodes[:last + 1], group.nodes[last + 1:]
    computed = {v for n in head for v in n.outputs}
    inputs = list(dict.fromkeys(v for n in head for v in n.input_tuple() if v not in computed))
    read_after = {v for n in tail for v in n.input_tuple()}
    outputs = [v for n in head for v in n.outputs if v in group.outputs or v in read_after]
    return [Group("view", head, inputs, outputs, tuple(head[-1].outputs[0].type.shape))] + [_alone(n) for n in tail]


class CompiledGraph:
    """A graph's groups as kernels and eager steps, ready to run on input tensors.

    ``device`` ("cpu" or "cuda") picks the code generator; by default, the device of the
    graph's inputs."""

    @collector_paused()
    def __init__(self, graph, cache=None, device=None):
        self.graph, printed = optimize_cached(graph)
        self._backend = _backend(device or _device_of(self.graph))
        self.groups = fuse_cached(self.graph, self._backend[0], printed=printed)
        if self._backend[3] is not None:
            # a group of parts that share only broadcast operands: a kernel per part, whose equal parts
            # the batch compiles once (a CUDA kernel is compiled and launched per kernel: it keeps its groups)
            self.groups = [part for group in self.groups for part in independent_parts(group)]
            self.groups = softmax_prologues(self.graph, self.groups)
        self.steps = []
        self.kernels = []
        self._cache = cache
        self._wanted = self._wanted_layouts()
        if self._backend[2] is KernelStep:
            self._wanted.update(permuted_for_products(self.graph, self.groups, self._wanted))
        # the buffers laid out as eager's (see the module docstring): inputs, what eager ops write so (the
        # permuted results of `_WRITERS_LAID_OUT`), and what kernels write
        self.layouts = {v: self._wanted[v] for v in self.graph.inputs if v in self._wanted}
        self.layouts.update((g.nodes[0].outputs[0], self._wanted[g.nodes[0].outputs[0]]) for g in self.groups
                            if laid_out_writer(g) and g.nodes[0].outputs[0] in self._wanted)
        # views made by eager steps: their geometry over their root (`_static_views`), and those a CPU kernel
        # reads through their strides rather than compacted (`_note_eager_views`)
        self.view_geometry, self._eager_views = {}, {}
        requests = [(group, f"jitorch_k{i}", None, self._kernel_layouts(group)) for i, group in enumerate(self.groups)]
        self._prebuilt_sources, _codes = self._prebuilt(requests, split=True)
        self.view_geometry, self._eager_views = {}, {}  # (`_lower` records the views as they turn out)
        for i, group in enumerate(self.groups):
            self._lower(group, f"jitorch_k{i}", split=True)
        self._prebuilt_sources = {}
        if self._backend[2] is KernelStep:
            self.steps = fold_copies_into_cats(self.graph, self.steps, self.layouts)
            self.steps = read_windows_in_place(self.graph, self.steps, self.layouts)
            self.steps = fold_biases_into_products(self.graph, self.steps, self.layouts)
            self.steps = interop.pair_products(self.steps, _product_work, _movable,
                                               lambda a, b: ProductPair(a.nodes + b.nodes, "product pair"),
                                               SPLIT_MIN_WORK)
        stacked = {}
        if self._backend[2] is KernelStep:
            self.steps, stacked = fold_pieces_into_stacks(self.graph, self.steps, self.layouts)
        self.steps = checks_early(self.steps)
        self.plan = Plan(self.graph, self.steps, self.layouts, stacked)
        self._checked = self._unvouched_layouts()
        self._build_inplace_kernels()
        self._arenas = []
        self._inplace_targets = {self.plan.inplace[v] for v in self.plan.inplace}
        self._input_index = {v: i for i, v in enumerate(self.graph.inputs)}
        self._eager_steps = any(isinstance(step, EagerStep) for step in self.steps)
        self.label = "compiled graph"  # what a profile calls it (jitorch.compile: the function's name)
        self._profiled = None  # the call that reports its steps to a profiler (see `profiled_steps`)
        self.runs = None  # the steps, with runs of kernels as one `KernelRun` each: set by `_generate`
        # run(inputs): the outputs, with in-place results written back into inputs and constants
        self._body, self.run, self.source = self._generate()
        self._execute = None  # compiled from the body on the first __call__: Python's compiler is slow on it
        if self.graph.meta_warnings:
            self.run = _warning_as_traced(self.graph, self.run)

    def _wanted_layouts(self):
        """The graph's values whose buffers take eager's layout (`Graph.layouts`): those still in the graph
        after optimisation; on CUDA the results only (its inputs are compacted: kernels of a one-op graph
        read an eager operand's strides instead)."""
        defined = set(self.graph.inputs) if self._backend[2] is KernelStep else set()
        defined = defined.union(*(node.outputs for node in self.graph.nodes))
        return {v: strides for v, strides in self.graph.layouts.items() if v in defined}

    def _kernel_layouts(self, group):
        """The layouts a group's kernel reads and writes: its inputs laid out so already, and its outputs
        eager lays out so (a value an eager step made is compacted before a kernel reads it, as are the rows
        a softmax kernel reads)."""
        softmax = group.kind not in ("pointwise", "reduction", "view")
        layouts = {v: self.layouts[v] for v in group.inputs if v in self.layouts and not softmax}
        if not softmax:
            layouts.update((v, self._eager_views[v][0]) for v in group.inputs if v in self._eager_views)
        layouts.update((v, self._wanted[v]) for v in group.outputs if v in self._wanted)
        return layouts

    def _note_eager_views(self, nodes):
        """Record the views an eager step makes whose geometry over their root's buffer is known before any
        call (`_static_views`) and is not that buffer itself: a CPU kernel reads them where they lie, through
        their strides and offset (`_eager_views`), rather than from a compact copy made before each kernel
        that reads them. (DCGAN's step made one per batch norm, in NumPy's strided copy: a convolution's
        ``[C, N, H, W]`` product permuted to ``[N, C, H, W]``, a transposed convolution's output cropped.)"""
        if self._backend[2] is not KernelStep:
            return
        _static_views(nodes, self.view_geometry, self.layouts)
        for node in nodes:
            for v in node.outputs:
                root, shape, strides, offset = self.view_geometry.get(v, (None, None, None, None))
                if root is None or min(strides, default=0) < 0 or v.type.dtype is not root.type.dtype:
                    continue
                if offset or tuple(strides) != contiguous_strides(shape) or _numel(root) != _numel(v):
                    self._eager_views[v] = (tuple(strides), offset, _numel(root))

    def _unvouched_layouts(self):
        """The storages of `Graph.output_layouts` whose layout the plan does not make eager's by itself:
        all but the single outputs a kernel writes in new memory with eager's strides, each returned once."""
        leaves = tree_leaves(self.graph.outputs)
        fresh = {v: strides for step in self.steps if type(step) is KernelStep
                 for _, v, strides in step.fresh_outputs}
        returned = [leaves[k] for _, members in self.graph.output_layouts for k, _, _ in members]
        checked = []
        for size, members in self.graph.output_layouts:
            k, strides, offset = members[0]
            v = leaves[k]
            if len(members) == 1 and v in fresh and returned.count(v) == 1 and offset == 0 and size == _numel(v) \
                    and tuple(fresh[v]) == tuple(strides):
                continue
            checked.append((size, members))
        return checked

    def _prebuilt(self, requests, split=False):
        """({kernel name: (source, the layouts it was built for)}, codes) for ``requests`` ((group, name,
        aliases, layouts); kernel names as `_lower` gives them), with, where ``split``, the one-node groups of
        those the builder refuses, made into machine code together (`cpu.link_batch`) so that the kernel
        makers find them linked; the codes are to be held until they have. Where the batch fails, nothing
        is linked: each kernel is then made alone, and whichever fails is handled as `_lower` handles it."""
        link_batch = self._backend[3]
        requests = [(group, f"{name}_{group.kind}", aliases, layouts) for group, name, aliases, layouts in requests]
        sources = self._sources(requests)
        if split:
            refused = [(group, name[:-len(group.kind) - 1]) for (group, name, _, _), source in zip(requests, sources)
                       if source is None and len(group.nodes) > 1]
            self._foresee_eager_views(requests, sources)
            stale = [k for k, (group, _, _, layouts) in enumerate(requests) if self._kernel_layouts(group) != layouts]
            for k, source in zip(stale, self._sources([(requests[k][0], requests[k][1], None,
                                                        self._kernel_layouts(requests[k][0])) for k in stale])):
                requests[k], sources[k] = (*requests[k][:3], self._kernel_layouts(requests[k][0])), source
            parts = [(part, f"{base}_{j}") for group, base in refused for j, part in enumerate(split_refused(group))]
            parts = [(part, f"{base}_{part.kind}", None, self._kernel_layouts(part)) for part, base in parts]
            requests, sources = requests + parts, sources + self._sources(parts)
        built = {name: (source, layouts, group.nodes) for (group, name, _, layouts), source in zip(requests, sources)}
        if link_batch is None:
            return built, []
        try:
            return built, link_batch([s for s in sources if s is not None], self._cache)
        except (CompileError, RuntimeError) as e:
            logs.log("codegen", "kernels linked one by one: together they failed: %s", e)
            return built, []

    def _foresee_eager_views(self, requests, sources):
        """Note (`_note_eager_views`), in graph order, the views that `_lower` will make eager steps of, given
        the first sources of the groups: those of view groups that need no kernel, of groups without a kernel
        form, and the views the groups the builder refused split into (`split_refused`). The batch then
        builds the kernels that read them for the layouts `_lower` asks for (where it foresaw wrong, `_lower`
        builds the kernel alone)."""
        for (group, _, _, _), source in zip(requests, sources):
            if not _lowered(group) or (source is None and group.kind == "view"):
                self._note_eager_views(group.nodes)
            elif source is None and len(group.nodes) > 1:
                for part in split_refused(group):
                    if part.kind == "view" or not _lowered(part):
                        self._note_eager_views(part.nodes)

    def _sources(self, requests):
        """The kernel sources of ``requests`` ((group, kernel name, aliases, layouts)), None where refused."""
        target, _, _, link_batch = self._backend
        if link_batch is None:
            return [built_or_refused(request, target) for request in requests]
        return build_many(requests, self._cache)

    def _lower(self, group, name, split):
        """Append the steps of one fusion group: a kernel, or eager steps for what the code
        generator does not lower. A group the kernel builder refuses as a whole (a reduction with
        an output of another shape, a reshape of a strided value) is ``split`` into parts (`split_refused`),
        so that most of it still runs compiled. A source `_prebuilt` made is used if the layouts
        it was built for are still the group's (a group an eager step ran before reads compact inputs)."""
        target, make_kernel, step_type, _ = self._backend
        if not _lowered(group):
            step = EagerStep(group.nodes, group.kind)
            step.laid_out = {n: self.layouts[n.outputs[0]] for n in group.nodes if laid_out_writer(group)
                             and n.outputs[0] in self.layouts}
            self.steps.append(step)
            self._note_eager_views(group.nodes)
            return
        layouts = self._kernel_layouts(group)
        prebuilt, built_for, built_nodes = self._prebuilt_sources.get(f"{name}_{group.kind}", (None, None, None))
        if built_nodes != group.nodes:
            # another group's name: the batch built a refused view group's `split_refused` parts, which its
            # `copy_then_views` parts here share (a transposed window copy ran as an eager view: test_compiled_conv_model)
            prebuilt = built_for = None
        try:
            if built_for == layouts and prebuilt is None and (group.kind == "view" or split and len(group.nodes) > 1):
                # the batch (`_prebuilt`) found that the builder refuses the group for these layouts, and what
                # follows a refusal here does not read its message: building it again to be refused was 7 ms of
                # the GPT step's warm first call (180 groups: views without a copy, reductions split in parts)
                raise CompileError("the kernel builder refused the group when the graph's kernels were built")
            source = prebuilt if prebuilt is not None and built_for == layouts else \
                build_shared(group, f"{name}_{group.kind}", target, layouts=layouts)
            kernel = make_kernel(source, self._cache)
        except CompileError as e:
            parts = copy_then_views(group) if group.kind == "view" and split else None
            if parts is not None:
                for j, part in enumerate(parts):
                    self._lower(part, f"{name}_{j}", split=False)
                return
            if group.kind == "view":  # views that need no copy: tensor headers, made by an eager step
                self.steps.append(EagerStep(group.nodes, group.kind))
                self._note_eager_views(group.nodes)
                return
            if split and len(group.nodes) > 1:
                parts = split_refused(group)
                logs.log("codegen", "%s: the group is split into %d parts: %s", name, len(parts), e)
                for j, part in enumerate(parts):
                    self._lower(part, f"{name}_{j}", split=len(part.nodes) > 1)
                return
            logs.log("codegen", "%s runs eagerly: %s", name, e)
            self.steps.append(EagerStep(group.nodes, str(e)))
            return
        except RuntimeError as e:  # LLVM refused the module: a jitorch bug, but the call can still run
            warnings.warn(f"jitorch: kernel for {op_counts(group.nodes)} failed to "
                          f"compile ({e}); running these ops eagerly", RuntimeWarning, stacklevel=3)
            self.steps.append(EagerStep(group.nodes, f"LLVM error: {e}"))
            return
        self.kernels.append(kernel)
        self.layouts.update((v, layouts[v]) for v in group.outputs if v in layouts)
        step = step_type(kernel, group.nodes)
        step.group, step.name, step.layouts = group, f"{name}_{group.kind}", layouts
        step.views = {v: self._eager_views[v] for v in group.inputs if v in layouts and v in self._eager_views}
        self.steps.append(step)

    def _build_inplace_kernels(self):
        """For each step the plan computes in place, a kernel whose in-place outputs use their
        input's pointer: with two pointers LLVM must assume the arrays may overlap, and its runtime
        overlap check sends the identical arrays to the scalar loop."""
        _, make_kernel, _, _ = self._backend
        requests, steps = [], []
        for step in self.steps:
            if type(step) is not KernelStep or not step.inplace_outputs:
                continue
            aliases = {v: t for _, v, t in step.inplace_outputs if t in step.inputs}
            if aliases:
                requests.append((step.group, step.name[:-len(step.group.kind) - 1], aliases, step.layouts))
                steps.append(step)
        built, _codes = self._prebuilt(requests)
        for step, (group, _, aliases, layouts) in zip(steps, requests):
            source = built[step.name][0] or build_shared(group, step.name, self._backend[0], aliases, layouts)
            step.inplace_kernel = make_kernel(source, self._cache)

    def __call__(self, inputs):
        """(outputs pytree, mutations) on ``inputs`` (flat list in graph-input order)."""
        if self._execute is None:
            self._execute, _ = self._body.function("execute", "inputs", ["return env"])
        env = self._execute(inputs)
        mutations = [(target, env[value]) for target, value in self.graph.mutations]
        return self._outputs(env), mutations

    def _finish(self, inputs, env):
        """The end of a call that wrote into inputs or constants: the writes not made in place,
        then the outputs."""
        g = self.graph
        pending = []
        for target, value in g.mutations:
            real = inputs[self._input_index[target]] if target in self._input_index else \
                g.constant_tensors[target.name]
            if env[value] is real:  # computed in place
                real._bump_version()
            else:
                pending.append((target, env[value]))
        if pending:
            write_back(g, inputs, pending)
        return set_grads(g, inputs, self._outputs(env), True)

    def _outputs_source(self, src):
        """An expression of the call's outputs over ``env``; the leaves that are inputs or captured
        tensors, or views of them, read from those (see `Tracer.output_aliases`)."""
        aliases = self.graph.output_aliases
        leaf_index = itertools.count()  # tree_flatten's order: the keys of output_aliases

        def show(leaf):
            if isinstance(leaf, (tuple, list)) and type(leaf) in (tuple, list):
                items = ", ".join(show(x) for x in leaf) + ("," if len(leaf) == 1 and type(leaf) is tuple else "")
                return f"({items})" if type(leaf) is tuple else f"[{items}]"
            k = next(leaf_index)
            if k in aliases and (isinstance(aliases[k][0], tuple) or aliases[k][1] is not None and
                                 views_a_piece(aliases[k][1])):  # leaves sharing memory or a tensor: built together
                return "_outputs(env)"
            if k in aliases:
                return self._alias_source(src, *aliases[k])
            if isinstance(leaf, Value):
                return f"env[{src.name(leaf, 'v')}]"
            if leaf is None or isinstance(leaf, (bool, int, float, complex, str)):
                return src.name(leaf, "c")  # bound, not printed: repr(nan) is no Python expression
            return "_outputs(env)"
        text = show(self.graph.outputs)
        return "_outputs(env)" if "_outputs(env)" in text else text

    def _alias_source(self, src, owner, geometry):
        """An expression of an output leaf over an input's or captured tensor's memory."""
        real = f"inputs[{owner}]" if isinstance(owner, int) else f"_constants[{owner!r}]"
        return real if geometry is None else f"_view({real}, {src.name(geometry, 'geometry')})"

    def _profiled_run(self, inputs):
        """A call while a profiler records: the generated call with each step reporting to the recorder
        (generated at the first such call), itself one span. See `profiled_steps`."""
        recorder = profiling.RECORDER
        if self._profiled is None:
            self._profiled = self._generate(profiled=True)[1]
        return recorder.compiled_call(self, lambda: self._profiled(inputs, recorder))

    def profiled_steps(self):
        """What a profiled call reports, per step (the ``name``, ``kind`` of its span): a kernel as
        (its name as `jitorch.explain` prints it, "kernel"), one span on the calling thread from its
        arguments' patching to its end, which covers the chunks other threads ran (those are also
        reported, each as a span of kind "kernel_chunk" on its thread); an eager step's nodes each as
        (op name, "external") when the op writes into its arena buffer (a BLAS product), else (op name,
        "eager_step"), but for zeros the call does not fill (`Plan._unfilled`); a CUDA kernel as (its name, "kernel"), its time on the device where the driver's
        events time it (the host's part then a "cuda_launch" span), else the emulator's time on the host."""
        spans = []
        for step in self.steps:
            if hasattr(step, "kernel"):
                spans.append((step.kernel.name, "kernel"))
            else:
                spans.extend((n.op.name, "external" if n.outputs[0] in step.into_arena | step.into_fresh
                              else "eager_step")
                             for n in step.nodes if n.outputs[0] not in step.unfilled)
        return spans

    def _generate(self, profiled=False):
        """The call as straight-line Python (see `straightline`): inputs and captured tensors bound,
        then each step's lines, over an arena of this graph's: (that body, ``run``, its source). Two
        functions share that body: ``run`` returns the outputs, after writing back what the graph
        changed in its inputs; ``execute`` (compiled by `__call__` when first needed) the values of the
        call (a dict by graph value). ``run`` first hands the call to `_profiled_run` while a profiler
        records; ``profiled``: the call that reports its steps to the recorder ``_r``, its second argument."""
        g = self.graph
        src = Source()
        src.profiled = profiled
        if self.runs is None:
            self.runs = kernel_runs(self.steps, _joins_run, self.plan.memory)
        runs = [u for u in self.runs if type(u) is KernelRun]
        src.namespace.update(_np_empty=np.empty, _pool_empty=allocator.empty, _track=allocator.track,
                             _addressof=ctypes.addressof, _make=Tensor._make, _Storage=Storage, _address=_address, _compact=compact,
                             _fresh=_fresh, _no_grad=no_grad, _refresh=refresh_captured_state,
                             _arenas=self._arenas, _Arena=Arena, _plan=self.plan, _steps=self.steps,
                             _runs=runs, _step_program=cpu.step_program() if runs else None,
                             _num_threads=threads.get_num_threads, _hold=threads.hold, _release=threads.release,
                             _graph=g, _constants=g.constant_tensors, _unshared=self._unshared,
                             _outputs=self._outputs, _finish=self._finish, _set_grads=set_grads,
                             _view=returned_view, _laid_out=laid_out, _strided=_strided, _compute=_compute, _view_of=Tensor._view_of,
                             _compute_one=_compute_one, _compute_laid_out=_compute_laid_out, _strided_read=strided_read,
                             _compute_into_pieces=_compute_into_pieces,
                             _cat_pieces_into=cat_pieces_into, _check_gather=indexing.check_gather_index,
                             _check_values=value_checks.run_check,
                             _at_once=interop.run_products, _at_once_profiled=interop.run_products_profiled,
                             _windows_into=_windows_into,
                             _profiling=profiling, _profiled=self._profiled_run, _clock=time.perf_counter_ns)
        if g.grad_constants or g.refreshers:
            src.emit("_refresh(_graph)")
        src.emit("env = {}")
        for i, v in enumerate(g.inputs):
            # the guards made the input contiguous, or gave it the strides of the trace's (when its buffer takes
            # them, see Graph.layouts); it is copied into that layout unless it fills its memory so
            strides = self.layouts.get(v)
            relaid = "_compact(t)" if strides is None else f"_laid_out(t, {strides!r})"
            src.emit(f"t = inputs[{i}]")
            src.emit(f"env[{src.name(v, 'v')}] = t if t._offset == 0 and t._storage.size == {_numel(v)} "
                     f"and t._stride == {_strides(v, self.layouts)!r} else {relaid}")
        if len(g.constants) >= CONSTANTS_LOOP_FROM:
            # one loop over a table rather than two lines per constant (a model's parameters: hundreds)
            table = tuple((name, v, _numel(v), contiguous_strides(v.type.shape)) for name, v in g.constants.items())
            src.emit(f"for name, v, n, st in {src.name(table, 'table')}:")
            src.emit("t = _constants[name]", 2)
            src.emit("env[v] = t if t._offset == 0 and t._storage.size == n and t._stride == st else _compact(t)", 2)
        else:
            for name, v in g.constants.items():  # (the test inlines compact's: a call per constant cost more)
                src.emit(f"t = _constants[{name!r}]")
                src.emit(f"env[{src.name(v, 'v')}] = t if t._offset == 0 and t._storage.size == {_numel(v)} "
                         f"and t._stride == {contiguous_strides(v.type.shape)!r} else _compact(t)")
        # in place only into memory no other input shares (f(w, w) must not see w change midway)
        src.emit(f"inplace = {'_unshared(env)' if self._inplace_targets else 'True'}")
        src.emit("arena = _arenas.pop() if _arenas else _Arena(_plan, _steps, _runs)")
        held = self._may_fork()
        if held:  # (the workers spin across the call's serial stretches: `threads.hold`)
            src.emit("held = _hold()" if held == "kernels" else "held = _hold(products_only=True)")
        src.emit("try:")
        if self.plan.slots:
            src.emit("env.update(arena.tensors)", 2)
        indent = 2
        if self._eager_steps:
            # the graph already holds any backward it needs: its eager steps must not record another
            src.emit("with _no_grad():", 2)
            indent = 3
        if not profiled and len(self.steps) >= SHARED_STEPS_FROM:
            params = ["env", "arena", "inplace"]
            src.calls([(step.run, ()) if getattr(step, "emit", None) is None else
                       src.shared(lambda s, emit=step.emit: emit(s, 1), params) for step in self.runs], params, indent)
        else:
            self._emit_steps(src, indent)
        if not self.steps:
            src.emit("pass", indent)
        src.emit("finally:")
        src.emit("_arenas.append(arena)", 2)
        if held:
            src.emit("_release(held)", 2)
        outputs = "_outputs(env)" if self._checked else self._outputs_source(src)
        if g.mutations:
            tail = "return _finish(inputs, env)"
        elif g.grad_targets or g.geometry_changes or g.output_aliases and outputs == "_outputs(env)":
            tail = "return _set_grads(_graph, inputs, _outputs(env), True)"
        else:
            tail = f"return {outputs}"
        if profiled:
            run, text = src.function("run", "inputs, _r", [tail])
            return src, run, text
        run, text = src.function("run", "inputs", [tail], head=["if _profiling.RECORDER is not None:",
                                                                "    return _profiled(inputs)"])
        logs.log("codegen", "the call of a compiled graph, generated:\n%s", text)
        return src, run, text

    def _emit_steps(self, src, indent):
        """Each step's lines of the generated call, in order: with a profiler's spans where ``src.profiled``,
        else with runs of kernels as one native call each (`kernel_runs`)."""
        for step in self.steps if src.profiled else self.runs:
            emit = getattr(step, "emit", None)
            kernel = getattr(step, "kernel", None) if src.profiled and emit is not None else None
            if kernel is not None:
                src.emit("_s = _clock()", indent)
            if emit is not None:
                emit(src, indent)
            elif src.profiled:
                src.emit(f"_r.launch({src.name(step, 'step')}, env, arena, inplace)", indent)
            else:
                src.emit(f"{src.name(step, 'step')}.run(env, arena, inplace)", indent)
            if kernel is not None:
                args = {"ops": list(kernel.ops), "kind": kernel.source.kind}
                src.emit(f"_r.span({kernel.name!r}, 'kernel', _s, {src.name(args, 'c')})", indent)

    def _may_fork(self):
        """What of this CPU call may fork onto the thread team at more than one thread: "kernels" where a kernel
        splits, else "products" where a product splits (`linalg.SPLIT_MIN_WORK`) or a pair of products runs at
        once (both only where products split: `threads.product_parts`), else None."""
        if self._backend[2] is not KernelStep:
            return None
        if any(getattr(getattr(step, "kernel", None), "parallel", False) for step in self.steps) \
                or any(type(unit) is KernelRun and any(unit.shared) for unit in self.runs or ()):
            return "kernels"
        if any(type(step) is ProductPair or (_product_work(step) or 0) >= SPLIT_MIN_WORK for step in self.steps):
            return "products"
        return None

    def _unshared(self, env):
        """Whether no tensor the plan updates in place shares memory with another input or constant."""
        targets = {id(env[v]._storage) for v in self._inplace_targets}
        return sum(id(t._storage) in targets for t in env.values()) == len(targets)

    def _outputs(self, env):
        out = self.graph.outputs
        out = env[out] if isinstance(out, Value) else tree_map(lambda leaf: env[leaf] if isinstance(leaf, Value)
                                                               else leaf, out)
        return eager_layouts(self.graph, out, self._checked) if self._checked else out


def _device_of(graph):
    """"cuda" when the graph's tensors are CUDA tensors (it reads them, or makes them), else "cpu"."""
    return "cuda" if any(v.type.device.type == "cuda" for v in graph.values()) else "cpu"


def _backend(device):
    """(kernel builder target, kernel maker: link_kernel or ptx_kernel, step class, maker of many kernels
    at once or None) of a device type."""
    if str(device).startswith("cuda"):
        from ..backends.cuda.graph_step import CudaKernelStep
        from ..codegen.nvptx.ptx import ptx_kernel
        from ..codegen.nvptx.target import NVPTX
        return NVPTX, ptx_kernel, CudaKernelStep, None
    return None, cpu.link_kernel, KernelStep, cpu.link_batch


def kernel_cache():
    """The process's kernel cache (memory in front of the disk folder)."""
    from ..codegen.cache import default_cache
    return default_cache()
