"""Kernels written directly rather than built from a graph: one grid-stride loop over a static space.

`LoopKernel` carries what a launch and the fake device need (name, op, space, spec, PTX, grid); `grid_stride`
and `offset` are the loop and the index maths that the indexing and copy kernels share, `symbol` their
names.
"""

from __future__ import annotations

import re
from math import prod
from typing import NamedTuple

from llvmlite import ir

from .ptx import GeneratedKernel
from .target import BLOCK, I64, TRIPLE, _sreg, strided_loop, unflatten


class LoopKernel(GeneratedKernel):
    """A generated kernel of ``op`` over the points of ``space`` (its loop space): PTX (``asm``), LLVM IR,
    grid. ``spec``: what it was generated from, a NamedTuple of its generator (`copy.CopySpec`, ...), which
    the fake device reads. ``mode`` "thread" gives each point a thread, "block" a block."""

    def __init__(self, name, op, space, spec, source_ir, ptx, mode="thread"):
        self.name = name
        self.ops = [op]
        self.spec = spec
        self.space = tuple(space)
        self.source_ir = source_ir
        self.asm = ptx
        self.mode = mode

    def grid(self, multiprocessors=132):
        """(blocks, threads per block): a thread (or a block) per point, up to 32 blocks per multiprocessor
        (the grid-stride loop does the rest)."""
        points = prod(self.space)
        return max(1, min(points if self.mode == "block" else -(-points // BLOCK), 32 * multiprocessors)), BLOCK

    def __repr__(self):
        return f"<cuda kernel {self.name}: {self.ops[0]}>"


class LineSpec(NamedTuple):
    """What a kernel along lines of a tensor (a scan, a sort, a merge) was generated from: the ``dim`` its
    lines run along, the tensor's ``shape`` and its source's (dtype, strides); the rest as the kernel has
    them (None where it has not)."""

    dim: int
    shape: tuple
    src: tuple
    out_dtype: object = None
    compute: object = None
    phase: str = None
    chunk: int = None
    descending: bool = None
    run: int = None
    width: int = None


def symbol(text):
    """``text`` as a kernel name NVPTX accepts: a minus sign becomes ``m``, any other character outside
    ``[A-Za-z0-9_]`` an underscore (LLVM aborts the process on others)."""
    return re.sub(r"\W", "_", text.replace("-", "m"))


def entry(name, params):
    """A module holding kernel ``name`` taking ``params`` (LLVM types): (module, function)."""
    module = ir.Module(name=name)
    module.triple = TRIPLE
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), params), name)
    fn.calling_convention = "ptx_kernel"
    return module, fn


def lines_of(shape, dim, *strides):
    """The lines along ``dim`` of ``shape``: the sizes of the other dims, then each of ``strides`` without
    its ``dim`` entry (a line's start is their dot product with a point of the other dims)."""
    return (tuple(n for d, n in enumerate(shape) if d != dim),) + tuple(
        [s for d, s in enumerate(st) if d != dim] for st in strides)


def grid_stride(b, space, body):
    """``body(b, flat, point)`` for every point of ``space``, spread over the grid's threads."""
    first = b.add(b.mul(_sreg(b, "ctaid.x"), _sreg(b, "ntid.x")), _sreg(b, "tid.x"))
    step = b.mul(_sreg(b, "nctaid.x"), _sreg(b, "ntid.x"))
    strided_loop(b, first, I64(prod(space)), step, lambda b, flat: body(b, flat, unflatten(b, flat, list(space))))


def offset(b, point, strides, skip=None):
    """``sum(point[d] * strides[d])`` over the dims other than ``skip`` (constant strides)."""
    off = I64(0)
    for d, (i, s) in enumerate(zip(point, strides)):
        if s and d != skip:
            off = b.add(off, b.mul(i, I64(s)))
    return off
