"""Running compiled CUDA kernels: device memory for outputs, launches on the current stream.

Device memory and launches go through the current backend (cuda_backend), so a
compiled graph's CUDA steps run on the real driver or on a test's fake device.
"""

from __future__ import annotations

import numpy as np

from . import cuda_backend
from .cuda_tensor import address as _address
from .cuda_tensor import empty, upload


class CudaKernelStep:
    """One PTX kernel of a compiled graph: fresh device outputs, one launch on the current stream."""

    def __init__(self, kernel, nodes):
        self.kernel = kernel
        self.nodes = nodes
        self.inputs = kernel.source.inputs
        self.outputs = kernel.source.outputs

    def reads(self):
        return self.inputs

    def writes(self):
        return self.outputs

    def run(self, env, arena, inplace):
        """Launch on the inputs in ``env`` (compact, or views whose address is their first element)."""
        backend = cuda_backend.current()
        device = env[self.inputs[0]].device if self.inputs else self.outputs[0].type.device
        split = self.kernel.source.split
        if split is None:
            outs = [empty(v.type.shape, v.type.dtype, device) for v in self.outputs]
        else:
            outs = [empty((split[0],), split[3], device)]
        pointers = [_address(env[v]) for v in self.inputs] + [_address(t) for t in outs]
        backend.launch(self.kernel, pointers, device.index or 0)
        if split is not None:
            self._combine(env, split, outs[0], device)
            return
        for v, t in zip(self.outputs, outs):
            env[v] = t

    def _combine(self, env, split, partial, device):
        """A full reduction's per-block partial results, combined on the host (a few hundred values)."""
        from ..codegen.executor import _COMBINE
        from .cuda_tensor import download
        parts, name, count, acc_dtype = split
        total = _COMBINE[name](download(partial))
        if name == "mean":
            total = total / acc_dtype.np.type(count)
        (out,) = self.outputs
        env[out] = upload(np.asarray(total).reshape(out.type.shape), out.type.dtype, device)

    def __repr__(self):
        return repr(self.kernel)
