"""The recorder a profile installs in `jitorch.runtime.profiling`: it times what the lower layers hand it.

Spans are tuples ``(name, kind, thread, start_ns, end_ns, args)`` appended to one list (``list.append`` is
atomic in CPython, so kernel chunks on the pool's threads append beside the calling thread); memory
events are ``(time_ns, thread, bytes, address, device)``, ``bytes`` negative for a free. Times are
``time.perf_counter_ns``; threads are native thread ids, as the operating system (and Perfetto) shows them,
or ``("cuda", device index, stream handle)`` for a kernel's time on a GPU.

Kinds of span: "cpu_op" (an op dispatched by the registry, named ``aten::<op>`` as torch names them),
"traced_op" (an op a tracer recorded while `jitorch.compile` traced a function: nothing computed),
"user_annotation" (`record_function`), "backward" (an autograd node), "compiled_call" (one call of a
compiled graph), and inside it "kernel" (a generated kernel, named as `jitorch.explain` prints it; on a
GPU timed with CUDA events on its stream), "kernel_chunk" (the part of a CPU kernel's outer loop one
thread ran), "external" (an eager step writing into its arena buffer: a BLAS product), "eager_step"
(any other node a compiled graph runs with the eager kernels), "cuda_launch" (the host side of a CUDA
kernel's launch, whose device time is its "kernel" span).
"""

from __future__ import annotations

import sys
import threading
import time
import weakref

from ..jit.tracer import current_tracer
from ..ops import registry
from ..runtime import profiling
from ..runtime.hooks import _in_jitorch
from ..tensor import Tensor

_clock = time.perf_counter_ns
_thread = threading.get_native_id


class _PassOn(registry.DispatchHook):
    """A dispatch hook that takes no call: while installed, the eager fast paths step aside (see
    `registry.DISPATCH_HOOKS`), so every op comes through `registry.call` to the recorder; what asks
    whether a tracer is on (`registry.hooks_take_calls`) reads it as absent."""

    passes_on = True


def _shapes(args):
    """torch's ``input_shapes``: per argument, a tensor's shape, a list of tensors' shapes, else []."""
    shapes = []
    for a in args:
        if isinstance(a, Tensor):
            shapes.append(list(a.shape))
        elif isinstance(a, (list, tuple)) and a and all(isinstance(t, Tensor) for t in a):
            shapes.append([list(t.shape) for t in a])
        else:
            shapes.append([])
    return shapes


def _user_stack(limit=16):
    """The caller's Python frames outside jitorch, innermost first, as torch's ``with_stack`` shows them."""
    frame = sys._getframe(2)
    stack = []
    while frame is not None and len(stack) < limit:
        code = frame.f_code
        if not _in_jitorch(code.co_filename):
            stack.append(f"{code.co_filename}({frame.f_lineno}): {code.co_name}")
        frame = frame.f_back
    return stack


def _freed(recorder_ref, nbytes, address, device):
    recorder = recorder_ref()
    if recorder is not None and recorder.recording:
        recorder.memory.append((_clock(), _thread(), -nbytes, address, device))


class Recorder:
    """What one recording collects (see the module docstring)."""

    def __init__(self, record_shapes=False, profile_memory=False, with_stack=False, cuda=False):
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.cuda = cuda
        self.spans = []
        self.memory = []
        self.cuda_pending = []  # (name, start event, end event, stream, args): resolved when recording stops
        self.cuda_origin = None  # (an event recorded at the start, its host time)
        self.recording = False
        self.start_ns = self.end_ns = None
        self.thread_names = {}
        self._hook = _PassOn()
        self._finalizers = []
        self._graph = {}  # thread -> label of the compiled graph it is running: tags that graph's kernel spans

    # installing ----------------------------------------------------------------------------------

    def install(self):
        if profiling.RECORDER is not None:
            raise RuntimeError("Profiler is already enabled: one profile records at a time")
        self.recording = True
        self.start_ns = _clock()
        registry.DISPATCH_HOOKS.append(self._hook)
        profiling.RECORDER = self

    def uninstall(self):
        if profiling.RECORDER is self:
            profiling.RECORDER = None
        if self._hook in registry.DISPATCH_HOOKS:
            registry.DISPATCH_HOOKS.remove(self._hook)
        self.recording = False
        self.end_ns = _clock()
        for f in self._finalizers:  # frees after the recording are not its business
            f.detach()
        self._finalizers.clear()
        self._resolve_cuda()
        self.thread_names = {t.native_id: t.name for t in threading.enumerate()}

    # what the lower layers report ----------------------------------------------------------------

    def op(self, op, args, run, inplace=False):
        """An op through the registry (``inplace``: its in-place form, ``x.op_()``): ``run()`` performs it."""
        name = f"aten::{op.public_name}_" if inplace and not op.public_name.endswith("_") else \
            f"aten::{op.public_name}"
        return self.function(name, args, run)

    def function(self, name, args, run):
        """A call recorded as one op named ``name``: a registry op's (`op`), or a library function's that is no op
        of the registry (``aten::gelu``: `nn.functional.gelu`), computed as it is unprofiled; ``run()`` performs
        it."""
        args_info = {}
        if self.record_shapes:
            args_info["Input Dims"] = _shapes(args)
        if self.with_stack:
            args_info["Call stack"] = _user_stack()
        kind = "cpu_op" if current_tracer() is None else "traced_op"  # a trace records it: nothing computed
        start = _clock()
        try:
            return run()
        finally:
            self.spans.append((name, kind, _thread(), start, _clock(), args_info))

    def backward(self, node, run):
        """An autograd node's evaluation (``run()`` computes its gradients, or a leaf's accumulation), named
        as torch's engine names it."""
        name = node.name()
        start = _clock()
        try:
            return run()
        finally:
            self.spans.append((f"autograd::engine::evaluate_function: {name}", "backward", _thread(), start,
                               _clock(), {}))

    def allocated(self, storage):
        """A new storage: its bytes now, and their free when the storage dies (while still recording)."""
        if not self.profile_memory:
            return
        nbytes = storage.nbytes()
        address = storage.data_ptr()
        device = str(storage.device)
        self.memory.append((_clock(), _thread(), nbytes, address, device))
        self._finalizers.append(weakref.finalize(storage, _freed, weakref.ref(self), nbytes, address, device))

    def compiled_call(self, graph, run):
        """One call of a compiled graph (``run()``: its profiled call, which reports its steps)."""
        thread = _thread()
        outer = self._graph.get(thread)
        self._graph[thread] = graph.label
        start = _clock()
        try:
            return run()
        finally:
            self._graph[thread] = outer
            self.spans.append((f"compiled: {graph.label}", "compiled_call", thread, start, _clock(),
                               {"steps": len(graph.steps), "kernels": len(graph.kernels)}))

    def span(self, name, kind, start, args=None):
        """A step of a compiled call that started at ``start`` (ns) and ends now; a kernel's span names
        its graph (``args["graph"]``, the compiled graph's label)."""
        thread = _thread()
        args = args or {}
        if kind == "kernel":
            args = dict(args, graph=self._graph.get(thread))
        self.spans.append((name, kind, thread, start, _clock(), args))

    def cpu_kernel(self, kernel, args_array):
        """A CPU kernel that splits its outer loop across threads: each chunk a span on its thread."""
        name, fn, spans = kernel.name, kernel.fn, self.spans

        def timed(a, lo, hi):
            start = _clock()
            fn(a, lo, hi)
            spans.append((name, "kernel_chunk", _thread(), start, _clock(), {"outer": [lo, hi]}))
        kernel.run_chunks(timed, args_array)

    def launch(self, step, env, arena, inplace):
        """A step that runs itself (a CUDA kernel): on the real driver, CUDA events around the launch time
        it on the device, beside a "cuda_launch" span for the host; otherwise (the fake device's emulator
        runs it on the host) the host span is the kernel's."""
        name = step.kernel.name
        args = {"ops": list(step.kernel.ops), "graph": self._graph.get(_thread())}
        from ..runtime import cuda_backend  # (here: `import jitorch` loads none of the CUDA runtime)
        backend = cuda_backend.current()
        start = _clock()
        if self.cuda and isinstance(backend, cuda_backend.DriverBackend):
            from ..cuda import Event, current_stream
            if self.cuda_origin is None:
                origin = Event(enable_timing=True)
                origin.record()
                self.cuda_origin = (origin, _clock())
            before, after = Event(enable_timing=True), Event(enable_timing=True)
            before.record()
            step.run(env, arena, inplace)
            after.record()
            stream = current_stream()
            self.cuda_pending.append((name, before, after, (stream.device_index, int(stream.handle)), args))
            self.span(name, "cuda_launch", start, args)
            return
        step.run(env, arena, inplace)
        self.span(name, "kernel", start, dict(args, device="cuda (emulated on the host)"))

    def _resolve_cuda(self):
        """The device spans of the CUDA kernels timed with events, placed on the host's clock by an event
        recorded when the first was launched."""
        if not self.cuda_pending:
            return
        origin, origin_ns = self.cuda_origin
        for name, before, after, stream, args in self.cuda_pending:
            after.synchronize()
            start = origin_ns + int(origin.elapsed_time(before) * 1e6)
            end = origin_ns + int(origin.elapsed_time(after) * 1e6)
            self.spans.append((name, "kernel", ("cuda",) + stream, start, end, dict(args, device="cuda")))
        self.cuda_pending.clear()
