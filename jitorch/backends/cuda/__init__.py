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
"""
