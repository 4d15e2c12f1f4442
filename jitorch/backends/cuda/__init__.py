"""The CUDA backend: eager ops on CUDA tensors, their kernels' launches, and a fake device to run them on.

Where the CUDA code is:

- ``runtime/cuda_*.py`` (below the ops): the driver, the caching allocator, the device interface that
  everything above talks to (memory, copies, launches), device storage and copies of its bytes, the error
  word;
- ``codegen/nvptx/`` (below this package): what makes PTX: the kernel builder's CUDA target and the kernels
  written directly (matmul, indexing, copies, scans, sorts, merges, factories);
- here: `backend` (what the layers below call), `dispatch` (where an eager op runs), the ops' CUDA
  implementations (`factories`, `products`, `indexing`, `lines`, `composites`), `generated` (an op through its
  one-op graph's kernel, else on the host), `copies` (new tensors, writes, copies), `kernels` (kernels made
  from small graphs, the kernel caches), `graph_step` (a generated kernel's launch, in a compiled graph or for
  an eager op), and `fake` with `emulator` (CUDA without a GPU);
- ``jitorch.cuda`` (a library): the torch.cuda API (devices, streams, events, memory statistics).

`backend` registers the backend for device type "cuda" (``runtime.device.DEVICE_BACKENDS``, which `Storage`,
the op registry and `Tensor` call); ``import jitorch`` imports it.

This package is also ``torch.backends.cuda``'s place: `matmul`'s switches and `is_built`.
"""

from __future__ import annotations

from ..flags import Flag, _matmul_precision


class _MatmulFlags:
    """``jitorch.backends.cuda.matmul``: cuBLAS's switches in torch. They are recorded and change no result:
    jitorch's CUDA matmul kernels compute float32 products in IEEE float32 (no TensorFloat-32) and accumulate
    float16 and bfloat16 products in float32 (no reduced-precision reduction)."""

    allow_fp16_reduced_precision_reduction = Flag(True, "allow_fp16_reduced_precision_reduction",
                                                  "Whether float16 matmuls may accumulate in float16 (no effect).")
    allow_bf16_reduced_precision_reduction = Flag(True, "allow_bf16_reduced_precision_reduction",
                                                  "Whether bfloat16 matmuls may accumulate in bfloat16 (no effect).")

    @property
    def allow_tf32(self):
        """Whether float32 matmuls may use TensorFloat-32: the float32 matmul precision is not "highest" (see
        ``jitorch.set_float32_matmul_precision``; no effect)."""
        return _matmul_precision[0] != "highest"

    @allow_tf32.setter
    def allow_tf32(self, value):
        if not isinstance(value, bool):
            raise RuntimeError(f"set_allow_tf32_cublas expects a bool, but got {type(value).__name__}")
        _matmul_precision[0] = "high" if value else "highest"

    def __setattr__(self, name, value):
        if not hasattr(type(self), name):
            raise AttributeError(f"Unknown attribute {name}")
        object.__setattr__(self, name, value)


matmul = _MatmulFlags()


def is_built():
    """Whether jitorch can run CUDA: always (its CUDA backend is Python over the driver); whether a device is
    there to run on is ``jitorch.cuda.is_available()``."""
    return True
