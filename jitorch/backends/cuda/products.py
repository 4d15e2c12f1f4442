"""Matrix products on CUDA through the tiled matmul kernel (codegen/nvptx/matmul.py): matmul, mm, bmm, mv,
dot and vdot, addmm and baddbmm (the product, then the scalings), and einsum of one or two operands.
"""

from __future__ import annotations

from ...codegen.errors import CompileError
from ...codegen.nvptx.matmul import DTYPES, matmul_kernel
from ...ops.linalg import einsum_plan
from ...runtime import cuda_backend
from ...runtime.grad_mode import no_grad
from .copies import address, empty
from .kernels import cached

_MATMULS: dict = {}     # (a shape, a strides, b shape, b strides, dtype) -> MatmulKernel (operands read in place)
MATMUL_OPS = ("matmul", "mm", "bmm", "mv", "dot", "vdot")


def _matmul(op, args, spec):
    """``matmul``/``mm``/``bmm``/``mv``/``dot`` through the tiled kernel (float32 and float16, non-empty),
    else NotImplemented. 1-D operands act as a row or a column, as on the CPU."""
    a, b = args
    if a.dtype not in DTYPES or b.dtype is not a.dtype or not a.ndim or not b.ndim or 0 in a._shape or \
            0 in b._shape:
        return NotImplemented
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    key = (a2._shape, a2._stride, b2._shape, b2._stride, a.dtype)
    try:
        kernel = cached(_MATMULS, key, lambda: matmul_kernel(a2._shape, b2._shape, a.dtype, a_strides=a2._stride,
                                                              b_strides=b2._stride))
    except CompileError:  # more batch matrices than one grid holds
        return NotImplemented
    out = empty(kernel.out_shape, a.dtype, a.device)
    cuda_backend.current().launch(kernel, [address(a2), address(b2), address(out)], a.device.index)
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    return out


def _scaled_product(op, args, spec):
    """addmm and baddbmm: ``beta * self + alpha * product`` as the CPU computes it (the product through the
    tiled kernel, then the scalings; ``self`` ignored, NaNs included, when beta is 0)."""
    inp, m1, m2, beta, alpha = args
    product = _matmul(op, (m1, m2), spec)
    if product is NotImplemented:
        return NotImplemented
    with no_grad():
        out = product if alpha == 1 else product.mul(alpha)
        return out if beta == 0 else out.add(inp if beta == 1 else inp.mul(beta))


def _einsum(op, args, spec):
    """einsum of one or two operands without repeated labels in an operand: labels only one side has and
    the output lacks are summed first, then the two operands are permuted to (batch, kept, contracted) and
    (batch, contracted, kept), multiplied by the tiled matmul (float32, float16) and permuted to the output's
    order; one operand is a sum and a permutation. Diagonals and three or more operands stay on the host."""
    equation, tensors = args
    tensors = list(tensors)
    plan = einsum_plan(equation, tuple(t._shape for t in tensors))
    if len(tensors) > 2 or any(len(set(labels)) != len(labels) for labels in plan.operands) or \
            spec.dtype.name not in ("float32", "float16") or not all(t.numel() for t in tensors):
        return NotImplemented
    sizes = dict(zip(plan.out, plan.shape))
    for labels, (full, _) in zip(plan.operands, plan.numpy_operands):
        sizes.update(zip(labels, full))
    with no_grad():
        operands = []
        for t, labels, (full, _) in zip(tensors, plan.operands, plan.numpy_operands):
            t = t.to(spec.dtype).expand(full)
            others = set().union(*(set(o) for o in plan.operands if o is not labels)) if len(tensors) > 1 else set()
            alone = [d for d, x in enumerate(labels) if x not in plan.out and x not in others]
            if alone:  # a label only this operand has and the output drops: sum it now
                t = t.sum(alone)
                labels = tuple(x for d, x in enumerate(labels) if d not in alone)
            operands.append((t, labels))
        if len(operands) == 1:
            t, labels = operands[0]
            return t.permute([labels.index(x) for x in plan.out]).contiguous() if labels else t.clone()
        (a, la), (b, lb) = operands
        batch = [x for x in plan.out if x in la and x in lb]
        left = [x for x in la if x not in lb]
        right = [x for x in lb if x not in la]
        contracted = [x for x in la if x in lb and x not in plan.out]

        def count(labels):
            n = 1
            for x in labels:
                n *= sizes[x]
            return n
        a = a.permute([la.index(x) for x in batch + left + contracted]).reshape(
            count(batch), count(left), count(contracted))
        b = b.permute([lb.index(x) for x in batch + contracted + right]).reshape(
            count(batch), count(contracted), count(right))
        product = (a @ b).reshape(tuple(sizes[x] for x in batch + left + right))
        order = batch + left + right
        return product.permute([order.index(x) for x in plan.out]).contiguous()


IMPLEMENTATIONS = {**dict.fromkeys(MATMUL_OPS, _matmul), "addmm": _scaled_product, "baddbmm": _scaled_product,
                   "einsum": _einsum}
