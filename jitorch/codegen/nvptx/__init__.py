"""The NVPTX code generator: the shared kernel builder with a CUDA target, PTX emission, and the kernels
written directly (matmul, indexing, copies, scans, sorts, merges, factories).

`target.NVPTX` is the target object the kernel builder takes (``build(group, name, NVPTX)``);
`ptx.ptx_kernel` turns a kernel source into a `ptx.PtxKernel` (PTX plus its launch shape);
`matmul.matmul_kernel` generates a tiled matrix product. Nothing here needs a GPU. (This file imports none
of its modules, which import each other.)
"""
