"""Running a compiled graph: its kernels and external ops in order, with fresh outputs.

`CompiledGraph(graph)` optimises the graph, partitions it into fusion groups
and compiles each pointwise or reduction group to a CPU kernel. Groups the
code generator cannot lower (matmul, sorting, indexing, half types, ...) run
their nodes with the eager kernels, as the interpreter does. Every call
allocates fresh output buffers, so two calls never return the same memory.
"""

from __future__ import annotations

import ctypes
import warnings

import numpy as np

from ..autograd.grad_mode import no_grad
from ..ir.graph import Value, iter_values
from ..ir.passes import optimize
from ..ir.passes.fusion import fuse
from ..jit import logs
from ..jit.compile import set_grads, write_back
from ..ops import registry
from ..runtime import allocator
from ..runtime.storage import Storage
from ..runtime.strided import contiguous_strides
from ..tensor import Tensor
from ..utils.pytree import tree_map
from . import cpu, mathlib  # noqa: F401  (mathlib: loaded with the backend, not on the first call)
from .kernel import CompileError, build, is_row_softmax


def _compact(t):
    """A tensor with ``t``'s values that fills its own storage contiguously (``t`` if it does)."""
    if t._offset == 0 and t._storage.size == t.numel() and t.is_contiguous():
        return t
    return t.contiguous() if not t.is_contiguous() else t.clone()


def _address(arr):
    """A fresh writable array's address; ``c_char.from_buffer`` is the cheapest way to it."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(arr))
    except (TypeError, ValueError):  # empty arrays
        return arr.__array_interface__["data"][0]


class KernelStep:
    """One compiled kernel: reads its input values, writes fresh buffers for its outputs."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.inputs = kernel.source.inputs
        self.outputs = kernel.source.outputs
        self.args_type = ctypes.c_void_p * (len(self.inputs) + len(self.outputs))
        self.pooled = set()  # outputs whose buffers come from the graph's pool (see CompiledGraph._plan)
        self.strides = [contiguous_strides(v.type.shape) for v in self.outputs]

    def reads(self):
        return self.inputs

    def run(self, env, pool):
        split = self.kernel.source.split
        if split is not None:
            return self._run_split(env, split)
        outs, bufs = [], []
        for v in self.outputs:
            if v in self.pooled:
                outs.append(_take(pool, v))
                bufs.append(None)
            else:  # a buffer that may leave the call: from the caching allocator
                a, buf = allocator.empty(v.type.shape, v.type.dtype.np)
                outs.append(a)
                bufs.append(buf)
        # inputs are compact (offset 0): their address is their storage's, which is cached
        self.kernel(self.args_type(*[env[v]._storage.data_ptr() for v in self.inputs],
                                   *[_address(a) for a in outs]))
        for v, a, buf, strides in zip(self.outputs, outs, bufs, self.strides):
            t = env[v] = Tensor._make(Storage(a, v.type.dtype), v.type.shape, strides, 0, a)  # fresh and compact
            if buf is not None:
                allocator.track(t._storage, buf)

    def _run_split(self, env, split):
        """A full reduction computed in parts: combine the partial results here."""
        parts, name, count, acc_dtype = split
        partials = np.empty(parts, acc_dtype.np)
        self.kernel(self.args_type(*[env[v]._storage.data_ptr() for v in self.inputs], _address(partials)))
        total = _COMBINE[name](partials)
        if name == "mean":
            total = total / acc_dtype.np.type(count)
        (out,) = self.outputs
        env[out] = Tensor._from_array(np.asarray(total).astype(out.type.dtype.np).reshape(out.type.shape),
                                      out.type.dtype)

    def __repr__(self):
        return repr(self.kernel)


# How the parts of a split full reduction combine (NaN propagates through max and min, as in the kernel).
_COMBINE = {"sum": np.add.reduce, "mean": np.add.reduce, "prod": np.multiply.reduce, "amax": np.maximum.reduce,
            "amin": np.minimum.reduce, "max": np.maximum.reduce, "min": np.minimum.reduce}


class EagerStep:
    """Nodes run with the eager kernels (what the code generator does not lower)."""

    def __init__(self, nodes, reason):
        self.nodes = nodes
        self.reason = reason

    def reads(self):
        return [v for node in self.nodes for v in iter_values(node.args)]

    def run(self, env, pool):
        for node in self.nodes:
            args = [_substitute(a, env, node.op.view is not None) for a in node.args]
            # a graph node's arguments were checked when it was traced: skip to the eager kernel
            result = registry.execute(node.op, args)
            results = list(result) if isinstance(result, (tuple, list)) else [result]
            for v, r in zip(node.outputs, results):
                env[v] = r

    def __repr__(self):
        return f"<eager {' '.join(n.op.name for n in self.nodes)}>"


def _take(pool, value):
    """A buffer for ``value`` from the pool (reused across calls: no page faults), else a new one."""
    free = pool.get((value.type.shape, value.type.dtype))
    return free.pop() if free else np.empty(value.type.shape, value.type.dtype.np)


def _substitute(arg, env, compact):
    if isinstance(arg, Value):
        t = env[arg]
        return _compact(t) if compact else t
    if isinstance(arg, (list, tuple)) and any(isinstance(a, Value) for a in arg):
        return type(arg)(_substitute(a, env, compact) for a in arg)
    return arg


class CompiledGraph:
    """A graph's groups as kernels and eager steps, ready to run on input tensors."""

    def __init__(self, graph, cache=None):
        self.graph = optimize(graph)
        self.groups = fuse(self.graph)
        self.steps = []
        self.kernels = []
        for i, group in enumerate(self.groups):
            if group.kind in ("pointwise", "reduction") or (
                    len(group.nodes) == 1 and is_row_softmax(group.nodes[0])):
                try:
                    kernel = cpu.compile_kernel(build(group, f"jitorch_k{i}_{group.kind}"), cache)
                except CompileError as e:
                    logs.log("codegen", "group %d runs eagerly: %s", i, e)
                    self.steps.append(EagerStep(group.nodes, str(e)))
                    continue
                except RuntimeError as e:  # LLVM refused the module: a jitorch bug, but the call can still run
                    warnings.warn(f"jitorch: kernel for {', '.join(n.op.name for n in group.nodes)} failed to "
                                  f"compile ({e}); running these ops eagerly", RuntimeWarning, stacklevel=2)
                    self.steps.append(EagerStep(group.nodes, f"LLVM error: {e}"))
                    continue
                self.kernels.append(kernel)
                self.steps.append(KernelStep(kernel))
            else:
                self.steps.append(EagerStep(group.nodes, group.kind))
        self.pool: dict = {}
        self.release = self._plan()

    def _plan(self):
        """Buffer planning: an intermediate that only kernels read (kernels never alias) goes back
        to the pool after its last reader, for later kernels of this call and for the next calls.
        Returns, per step, the values whose buffers are free after it."""
        readers = {}
        for j, step in enumerate(self.steps):
            for v in step.reads():
                readers.setdefault(v, []).append(j)
        escaping = set(self.graph.output_values()) | {v for _, v in self.graph.mutations}
        release = [[] for _ in self.steps]
        for step in self.steps:
            if not isinstance(step, KernelStep):
                continue
            for v in step.outputs:
                uses = readers.get(v, [])
                if v not in escaping and uses and all(isinstance(self.steps[u], KernelStep) for u in uses):
                    step.pooled.add(v)
                    release[max(uses)].append(v)
        return release

    def __call__(self, inputs):
        """(outputs pytree, mutations) on ``inputs`` (flat list in graph-input order)."""
        env = self._execute(inputs)
        mutations = [(target, env[value]) for target, value in self.graph.mutations]
        return self._outputs(env), mutations

    def run(self, inputs):
        """The outputs on ``inputs``, with in-place results written back into inputs and constants."""
        env = self._execute(inputs)
        if self.graph.mutations:
            write_back(self.graph, inputs, [(t, env[v]) for t, v in self.graph.mutations])
        return set_grads(self.graph, inputs, self._outputs(env))

    def _execute(self, inputs):
        g = self.graph
        env = {v: _compact(t) for v, t in zip(g.inputs, inputs)}
        for name, v in g.constants.items():
            env[v] = _compact(g.constant_tensors[name])
        pool = self.pool
        # the graph already holds any backward it needs: its eager steps must not record another
        with no_grad():
            for step, free in zip(self.steps, self.release):
                step.run(env, pool)
                for v in free:
                    pool.setdefault((v.type.shape, v.type.dtype), []).append(env.pop(v)._array())
        return env

    def _outputs(self, env):
        out = self.graph.outputs
        if isinstance(out, Value):
            return env[out]
        return tree_map(lambda leaf: env[leaf] if isinstance(leaf, Value) else leaf, out)


def kernel_cache():
    """The process's kernel cache (memory in front of the disk folder)."""
    from .cache import default_cache
    return default_cache()
