"""The CUDA backend's entry points for the layers below it, registered for device type "cuda" when imported.

Importing this module loads nothing else of CUDA: the modules that do the work (and the driver) load on the
first CUDA call, so ``import jitorch`` stays light on machines without CUDA.
"""

from __future__ import annotations

from ...runtime.device import DEVICE_BACKENDS


class CudaBackend:
    """What `Storage`, the op registry and `Tensor` call for tensors in CUDA memory (see
    ``jitorch.runtime.device.DEVICE_BACKENDS``)."""

    def empty_storage(self, n, dtype, device):
        """A storage of ``n`` elements in the device's memory (see `cuda_memory.empty_storage`)."""
        from ...runtime.cuda_memory import empty_storage
        return empty_storage(n, dtype, device)

    def execute(self, op, args, spec, strides=None):
        """Run ``op`` eagerly on the device, its result written with ``strides`` (see `dispatch.execute`)."""
        from .dispatch import execute
        return execute(op, args, spec, strides)

    def laid_out(self, t, strides):
        """CUDA tensor ``t`` with ``strides`` from its storage's start (see `dispatch.laid_out`)."""
        from .dispatch import laid_out
        return laid_out(t, strides)

    def write(self, dst, src):
        """Write ``src`` into CUDA tensor ``dst``, broadcast and cast (see `copies.write`)."""
        from .copies import write
        write(dst, src)

    def copy_values(self, t):
        """A compact copy of CUDA tensor ``t``'s values."""
        from .copies import copy_values
        return copy_values(t)


DEVICE_BACKENDS["cuda"] = CudaBackend()
