"""A generated strided copy for CUDA: ``dst[p] = src[p]`` over a static shape, each side with its own
strides (0 where ``src`` broadcasts), converting the dtype as ``Tensor.to`` does.

It is how a write lands in a CUDA view that is not one compact run of memory (``x[:, 1] = v``, an in-place
op on a transposed tensor, ``cat`` along an inner dim): one launch, in place, where the alternative is a
round trip through the host.
"""

from __future__ import annotations

from typing import NamedTuple

from llvmlite import ir

from ..emitter import Emitter, llvm_type
from .ptx import ptx_of
from .loop_kernel import LoopKernel, entry, grid_stride, offset, symbol


class CopySpec(NamedTuple):
    """What a copy kernel was generated from: the (dtype, strides) of its destination and source."""

    dst: tuple
    src: tuple


def copy_kernel(shape, dst, src, cache=None):
    """The kernel writing ``src`` into ``dst`` over ``shape``; each is (dtype, element strides over shape).
    Pointers: (src, dst), each at its first element."""
    layout = "_".join("x".join(map(str, s)) for s in (shape, dst[1], src[1]))
    name = symbol(f"jitorch_copy_{layout}_{src[0].name}_to_{dst[0].name}")
    module, fn = entry(name, [llvm_type(src[0]).as_pointer(), llvm_type(dst[0]).as_pointer()])
    src_ptr, dst_ptr = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    e = Emitter(b)

    def body(b, flat, point):
        value = e.load(b.gep(src_ptr, [offset(b, point, src[1])]), src[0])
        e.store(e.cast(value, dst[0]), b.gep(dst_ptr, [offset(b, point, dst[1])]))

    grid_stride(b, shape, body)
    b.ret_void()
    text = str(module)
    return LoopKernel(name, "copy", shape, CopySpec(dst, src), text, ptx_of(text, name, cache))
