"""Running generated CUDA kernels: device memory for outputs, launches on the current stream.

A compiled graph's CUDA steps and an eager op's one-op graph kernel run here. Device memory and launches go
through the current device interface (runtime/cuda_backend.py), so they run on the real driver or on a
test's fake device.
"""

from __future__ import annotations

from ...runtime import cuda_backend
from ...runtime.cuda_memory import canonical, non_blocking
from .copies import address as _address
from .copies import empty, upload
from .kernels import combining_kernel


class CudaKernelStep:
    """One PTX kernel of a compiled graph: fresh device outputs, one launch on the current stream."""

    def __init__(self, kernel, nodes, layouts=None):
        self.kernel = kernel
        self.nodes = nodes
        self.inputs = kernel.source.inputs
        self.outputs = kernel.source.outputs
        # in a compiled graph: inputs an eager step made, views of any layout (a one-op graph of an eager
        # CUDA op instead has a kernel for its operands' strides), and inputs laid out as eager's that this
        # kernel reads compact (see the executor's Plan)
        self.eager_made = set()
        self.compacted = set()
        # value -> strides of a buffer the kernel reads or writes that is not compact (eager's layout of a
        # result, `Graph.layouts`)
        self.layouts = layouts or {}

    def reads(self):
        return self.inputs

    def writes(self):
        return self.outputs

    def run(self, env, arena, inplace):
        """Launch on the inputs in ``env`` (compact, laid out as `layouts` says, or views whose address is
        their first element; an eager step's views of other layouts, and the `compacted` ones, are copied
        contiguous first); the outputs in new memory, laid out as `layouts` says."""
        backend = cuda_backend.current()
        device = canonical(self.outputs[0].type.device)
        split = self.kernel.source.split
        if split is None:
            outs = [empty(v.type.shape, v.type.dtype, device, self.layouts.get(v)) for v in self.outputs]
        else:
            outs = [empty((split.parts,), split.dtype, device)]
        ins = [_on_device(env[v].contiguous() if v in self.eager_made or v in self.compacted else env[v], device)
               for v in self.inputs]
        pointers = [_address(t) for t in ins + outs]
        backend.launch(self.kernel, pointers, device.index or 0)
        if split is not None:
            self._combine(env, split, outs[0], device)
            return
        for v, t in zip(self.outputs, outs):
            env[v] = t

    def _combine(self, env, split, partial, device):
        """A full reduction's per-block partial results, combined on the device by a second kernel (one block:
        no copy to the host, so the stream keeps going)."""
        (out,) = self.outputs
        kernel, group = combining_kernel(split, out.type.dtype, device)
        step = CudaKernelStep(kernel, group.nodes)
        parts = {step.inputs[0]: partial}
        step.run(parts, None, False)
        env[out] = parts[step.outputs[0]].reshape(out.type.shape)

    def __repr__(self):
        return repr(self.kernel)


def _on_device(t, device):
    """A kernel operand in device memory: a 0-d CPU tensor (torch lets one join CUDA operands; an optimizer's
    learning rate in a compiled step is one) is copied up, queued on the stream like the launch; its block
    returns to the stream's pool when the copy is dropped, after the kernel in stream order."""
    if t._storage.on_device:
        return t
    with non_blocking():
        return upload(t._array(), t.dtype, device)

