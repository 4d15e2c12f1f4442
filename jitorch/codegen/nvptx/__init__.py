"""The NVPTX code generator: the shared kernel builder with a CUDA target, PTX emission, tiled matmul.

`NVPTX` is the target object the kernel builder takes (``build(group, name, NVPTX)``);
`compile_kernel` turns a kernel source into a `PtxKernel` (PTX plus its launch shape);
`matmul_kernel` generates a tiled matrix product. Nothing here needs a GPU.
"""

from .compile import PtxKernel, compile_kernel
from .target import NVPTX

__all__ = ["NVPTX", "PtxKernel", "compile_kernel"]
