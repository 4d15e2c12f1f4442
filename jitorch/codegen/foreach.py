"""Optimizer steps over all of a group's parameters in one generated kernel (the optimizers' ``foreach`` and
``fused`` paths: `jitorch.optim.foreach` calls them).

An eager Adam or SGD step on NumPy arrays made about ten NumPy passes per parameter, each through memory,
with two scratch arrays allocated per parameter (fresh pages on large ones): on a 10M-parameter GPT the step
took 72 ms against torch's 55. Here one kernel call updates every parameter: its outer loop runs over
blocks (a parameter's elements split into blocks of at most `BLOCK`, so that the thread team shares out a
few large parameters evenly), and each block's inner loop reads the parameter, its gradient and its state
once and writes them once.

Each element goes through the same IEEE operations, in the same order and with the same float32 (or
float64) roundings, as the NumPy passes the ops' CPU kernels make (`jitorch.optim.optimizer`'s
``moment_passes``, ``add_passes``, ``lerp_passes``): no fused multiply-add (the IR has no ``contract``
flags) and no reassociation, so the values are those of the per-op step bit for bit. The step's numbers
(learning rate, betas, bias corrections, which change between steps and between parameters) are per-block
float64 rows the kernel rounds to the element type as NumPy rounds a Python float; only the options that
change which operations run (``maximize``, weight decay on or off, ``amsgrad``, the form of the lerp,
momentum, Nesterov, RMSprop's centering, RAdam's rectification) are in the kernel, so a scheduler's new
learning rate reuses it. Every optimizer's kernel is one element function over the shared operations
(`_step_grad`, `_lerp`, `_second_moment`...) in `_ELEMENTS`, built by `step_kernel`.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from . import cpu
from .cache import default_cache
from .errors import CompileError
from .kernel import I64, KernelSource, counted_loop
from .memo import BuiltOnce
from .target import CPU

__all__ = ["BLOCK", "step_kernel", "sum_squares_kernel",
           "run_blocks", "StepKernel"]

# A block's elements at most: 64K float32 are 256 KB per operand, and GPT-sized steps have tens of blocks
# to share among threads.
BLOCK = 1 << 16


class StepKernel:
    """A compiled step kernel over blocks: `run` calls it."""

    def __init__(self, compiled, roles, scalars):
        self._compiled = compiled  # keeps the machine code alive
        self._fn = compiled.fn
        self.roles, self.scalars = roles, scalars

    def run(self, tables, sizes, rows, work):
        """The kernel over the blocks described by ``tables`` (per role, a uint64 array of each block's first
        element address), ``sizes`` (int64 elements per block) and ``rows`` (float64, `scalars` per block; the
        sum-of-squares kernel writes one per block there), ``work`` elements in all, split into chunks of blocks
        as `cpu.run_split` splits. Each element's value does not depend on the split."""
        blocks = len(sizes)
        arrays = [*tables, sizes, rows]
        args = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        cpu.run_split(self._fn, self._compiled.address, args, blocks, work)


def run_blocks(kernel, operands, rows):
    """Run ``kernel`` over the parameters' ``operands`` (per parameter, its C-contiguous arrays in the
    kernel's role order) with their float64 ``rows`` of numbers (each a sequence of the kernel's ``scalars``):
    each parameter split into blocks of at most `BLOCK` elements, each block a row of the kernel's tables.
    Returns the blocks' rows (float64, one row per block, in parameter order: where the sum-of-squares
    kernel writes each block's sum) and the index of each block's parameter."""
    sizes = np.fromiter((arrays[0].size for arrays in operands), np.int64, len(operands))
    counts = -(-sizes // BLOCK)
    which = np.repeat(np.arange(len(operands)), counts)
    block_rows = np.ascontiguousarray(np.asarray(rows, np.float64).reshape(len(operands), kernel.scalars)[which])
    if not len(which):
        return block_rows, which
    start = (np.arange(len(which)) - (np.cumsum(counts) - counts)[which]) * BLOCK
    offsets = (start * operands[0][0].itemsize).astype(np.uint64)
    tables = [np.fromiter((cpu.address(arrays[r]) for arrays in operands), np.uint64, len(operands))[which] + offsets
              for r in range(kernel.roles)]
    kernel.run(tables, np.minimum(sizes[which] - start, BLOCK), block_rows, int(sizes.sum()))
    return block_rows, which


def step_kernel(kind, dtype, flags):
    """The step kernel of optimizer ``kind`` ("adam", "sgd", "adadelta", "rmsprop", "adagrad", "adamax",
    "nadam", "radam") for float ``dtype`` (a NumPy dtype name, "float32" or "float64") with the options
    ``flags`` (booleans, in the order of the kind's element function: `_adam_element`...), or None where it
    cannot be built. Its roles are the parameter, its gradient, then the state buffers in the order the
    optimizer's NumPy step lists them; each block's row holds the numbers that element function unpacks."""
    return _kernels(kind, dtype, tuple(bool(f) for f in flags))


def sum_squares_kernel(dtype):
    """The kernel that writes each block's sum of squares, in float64, into its row (one number), or None
    where it cannot be built. Role: the tensor read. Each element is widened to float64 before it is
    squared (exact for float32) and the block's sum is taken in a fixed order (`_sum_squares_module`), so it
    does not depend on the thread count: clip_grad_norm_'s per-gradient norms (`jitorch.nn.utils.clip_grad`),
    more accurate than torch's float32 sums."""
    return _kernels("sum_squares", dtype, ())


def _build(kind, dtype, flags):
    t = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    if kind == "sum_squares":
        name = f"jitorch_sum_squares_{dtype}"
        source = KernelSource(name, "foreach", ["sum_squares"], [0, 1, 2], [], 0, 0)
        source.llvm_ir = _sum_squares_module(name, t)
        try:
            compiled = cpu.link_kernel(source, default_cache())
        except CompileError:
            return None
        return StepKernel(compiled, 1, 1)
    roles, element, scalars = _ELEMENTS[kind](*flags)
    name = f"jitorch_{kind}_step_{dtype}_{''.join('01'[f] for f in flags)}"
    source = KernelSource(name, "foreach", [f"{kind}_step"], list(range(roles + 2)), [], 0, 0)
    source.llvm_ir = _module(name, t, roles, scalars, element)
    try:
        compiled = cpu.link_kernel(source, default_cache())
    except CompileError:
        return None
    return StepKernel(compiled, roles, scalars)


# (kind, dtype name, flags) -> StepKernel, or None
_kernels = BuiltOnce(_build)


def _module(name, t, roles, scalars, element):
    """``name``'s module: ``body(lo, hi, tables..., sizes, rows)`` loops over blocks lo..hi, calling the
    element loop (``element``'s per-element operations) on each block's operands, which it declares
    ``noalias``: distinct parameters and state never share memory (the caller checks), so LLVM vectorises
    the loop without run-time overlap checks."""
    module = ir.Module(name=name)
    module.triple = CPU.triple
    ptr = t.as_pointer()
    f64 = ir.DoubleType()
    inner = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64] + [ptr] * roles + [t] * scalars), name + "_block")
    inner.linkage = "internal"
    inner.attributes.add("alwaysinline")
    for arg in inner.args[1:1 + roles]:
        arg.add_attribute("noalias")
    b = ir.IRBuilder(inner.append_basic_block("entry"))
    n, ptrs, values = inner.args[0], inner.args[1:1 + roles], inner.args[1 + roles:]
    math = _Math(module, t)

    def each(b, i):
        addresses = [b.gep(p, [i]) for p in ptrs]
        loaded = [b.load(a) for a in addresses]
        for index, value in element(b, t, math, loaded, values).items():
            b.store(value, addresses[index])
    counted_loop(b, I64(0), n, I64(1), each, "e")
    b.ret_void()

    body = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64] + [ptr.as_pointer()] * roles
                                               + [I64.as_pointer(), f64.as_pointer()]), name + "_body")
    body.linkage = "internal"
    body.attributes.add("alwaysinline")
    b = ir.IRBuilder(body.append_basic_block("entry"))
    tables, sizes, rows = body.args[2:2 + roles], body.args[2 + roles], body.args[3 + roles]

    def block(b, k):
        row = b.mul(k, I64(scalars))
        numbers = [b.load(b.gep(rows, [b.add(row, I64(j))])) for j in range(scalars)]
        if t != f64:  # (round to nearest, as NumPy converts a Python float to float32)
            numbers = [b.fptrunc(x, t) for x in numbers]
        b.call(inner, [b.load(b.gep(sizes, [k]))] + [b.load(b.gep(table, [k])) for table in tables] + numbers)
    counted_loop(b, body.args[0], body.args[1], I64(1), block, "k")
    b.ret_void()
    CPU.add_entry(module, body, list(range(roles + 2)), 0, "thread")
    return str(module)


_ACCUMULATORS, _LANES = 4, 8  # a sum of squares' float64 accumulators: four vectors of 8 (AVX-512 registers)


def _sum_squares_module(name, t):
    """``name``'s module: ``body(lo, hi, table, sizes, rows)`` writes each block's sum of squares into its
    row: each element widened to float64 and squared, added into `_ACCUMULATORS` vectors of `_LANES` float64
    lanes (element ``i`` of each whole group of 32 into accumulator ``i // 8``, lane ``i % 8``), which are
    then summed lane by lane as a tree, plus the tail's squares summed in order. (Written as vectors because
    LLVM keeps a scalar float sum in order, one addition at a time; each vector loaded by itself so that
    the load folds into the conversion.) A NaN's sign is left as the squares make it: the caller clears it."""
    module = ir.Module(name=name)
    module.triple = CPU.triple
    f64 = ir.DoubleType()
    vt, vd = ir.VectorType(t, _LANES), ir.VectorType(f64, _LANES)
    group = _ACCUMULATORS * _LANES
    body = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, t.as_pointer().as_pointer(),
                                                               I64.as_pointer(), f64.as_pointer()]), name + "_body")
    body.linkage = "internal"
    body.attributes.add("alwaysinline")
    b = ir.IRBuilder(body.append_basic_block("entry"))
    table, sizes, rows = body.args[2:]
    accumulators = [b.alloca(vd) for _ in range(_ACCUMULATORS)]
    tail = b.alloca(f64)

    def widen(b, x, to):
        return x if t == f64 else b.fpext(x, to)

    def block(b, k):
        n, base = b.load(b.gep(sizes, [k])), b.load(b.gep(table, [k]))
        for acc in accumulators:
            b.store(ir.Constant(vd, None), acc)
        b.store(ir.Constant(f64, 0.0), tail)
        whole = b.and_(n, I64(-group))

        def vectors(b, i):
            for j, acc in enumerate(accumulators):
                # (aligned as one element: a block starts anywhere in its tensor)
                address = b.bitcast(b.gep(base, [b.add(i, I64(j * _LANES))]), vt.as_pointer())
                x = widen(b, b.load(address, align=4 if t != f64 else 8), vd)
                b.store(b.fadd(b.load(acc), b.fmul(x, x)), acc)
        counted_loop(b, I64(0), whole, I64(group), vectors, "v")

        def scalar(b, i):
            x = widen(b, b.load(b.gep(base, [i])), f64)
            b.store(b.fadd(b.load(tail), b.fmul(x, x)), tail)
        counted_loop(b, whole, n, I64(1), scalar, "s")
        parts = [b.extract_element(b.load(acc), I64(j)) for acc in accumulators for j in range(_LANES)]
        while len(parts) > 1:
            parts = [b.fadd(parts[j], parts[j + 1]) for j in range(0, len(parts), 2)]
        b.store(b.fadd(parts[0], b.load(tail)), b.gep(rows, [k]))
    counted_loop(b, body.args[0], body.args[1], I64(1), block, "k")
    b.ret_void()
    CPU.add_entry(module, body, [0, 1, 2], 0, "thread")
    return str(module)


class _Math:
    """The intrinsics an element's operations call, declared in the kernel's module on first use."""

    def __init__(self, module, t):
        self._module, self._t, self._declared = module, t, {}

    def _call(self, b, name, x):
        if name not in self._declared:
            self._declared[name] = self._module.declare_intrinsic(name, [self._t], ir.FunctionType(self._t, [self._t]))
        return b.call(self._declared[name], [x])

    def sqrt(self, b, x):
        return self._call(b, "llvm.sqrt", x)

    def fabs(self, b, x):  # (NumPy's abs clears the sign bit, a NaN's too)
        return self._call(b, "llvm.fabs", x)


# The operations that several optimizers' NumPy passes share, each as those passes compute it.

def _step_grad(b, param, grad, decay, maximize, weight_decay, decoupled=False):
    """`optimizer.numpy_grad`: ``(param, grad)`` after maximize's negation and the weight decay (L2:
    ``grad + param * decay``; decoupled: ``param * decay``, decay being ``1 - lr * weight_decay``)."""
    if maximize:
        grad = b.fneg(grad)
    if weight_decay:
        if decoupled:
            param = b.fmul(param, decay)
        else:
            grad = b.fadd(grad, b.fmul(param, decay))
    return param, grad


def _lerp(b, start, end, factor, low):
    """`optimizer.lerp_passes`: ``start + d * w`` (``low``) or ``end - d * (1 - w)``, ``d = end - start``,
    ``factor`` being ``w`` or ``1 - w`` (computed in the dtype) by the form."""
    d = b.fsub(end, start)
    return b.fadd(start, b.fmul(d, factor)) if low else b.fsub(end, b.fmul(d, factor))


def _scaled_add(b, a, x, alpha):
    """`optimizer.add_passes`' ``a + x * alpha`` (where the passes skip a product by alpha 1, multiplying by
    1 changes no bit)."""
    return b.fadd(a, b.fmul(x, alpha))


def _second_moment(b, avg, grad, beta, one_minus_beta):
    """``avg * beta + (grad * grad) * (1 - beta)`` (`optimizer.moment_passes`' second moment)."""
    return _scaled_add(b, b.fmul(avg, beta), b.fmul(grad, grad), one_minus_beta)


def _maximum(b, first, second):
    """NumPy's maximum: the first unless it is below the second (NaN from either side)."""
    keep = b.or_(b.fcmp_ordered(">=", first, second), b.fcmp_unordered("uno", first, first))
    return b.select(keep, first, second)


def _adam_element(maximize, weight_decay, decoupled, amsgrad, lerp_low):
    """The per-element operations of Adam's NumPy passes (`optimizer.numpy_grad`, ``moment_passes``, then
    the denominator and ``addcdiv_``'s three passes): loaded values -> {role index: value stored}. Roles:
    param, grad, exp_avg, exp_avg_sq (and max_exp_avg_sq under ``amsgrad``). ``weight_decay``: whether it is
    nonzero; ``decoupled``: AdamW's; ``lerp_low``: whether the lerp weight ``1 - beta1`` is below 0.5 in
    magnitude (its first form). Row: the decay factor (decoupled: ``1 - lr * weight_decay``, else
    ``weight_decay``), the lerp's factor (``w`` or ``1 - w`` by the lerp's form, ``w = 1 - beta1``),
    ``beta2``, ``1 - beta2``, ``sqrt(1 - beta2 ** t)``, ``eps``, ``-lr / (1 - beta1 ** t)``."""

    def element(b, t, math, loaded, s):
        decay, lerp, beta2, one_minus_beta2, correction2, eps, neg_step = s
        param, grad = _step_grad(b, *loaded[:2], decay, maximize, weight_decay, decoupled)
        exp_avg = _lerp(b, loaded[2], grad, lerp, lerp_low)
        exp_avg_sq = _second_moment(b, loaded[3], grad, beta2, one_minus_beta2)
        out = {2: exp_avg, 3: exp_avg_sq}
        second = exp_avg_sq
        if amsgrad:
            second = out[4] = _maximum(b, loaded[4], exp_avg_sq)
        denom = b.fadd(b.fdiv(math.sqrt(b, second), correction2), eps)
        out[0] = b.fadd(param, b.fdiv(b.fmul(neg_step, exp_avg), denom))
        return out
    return element


def _adadelta_element(maximize, weight_decay):
    """The per-element operations of Adadelta's NumPy passes (`jitorch.optim.adadelta.Adadelta._numpy_update`).
    Roles: param, grad, square_avg, acc_delta. Row: ``weight_decay``, ``rho``, ``1 - rho``, ``eps``, ``-lr``."""

    def element(b, t, math, loaded, s):
        decay, rho, one_minus_rho, eps, neg_lr = s
        param, grad = _step_grad(b, *loaded[:2], decay, maximize, weight_decay)
        square_avg = _second_moment(b, loaded[2], grad, rho, one_minus_rho)
        acc_delta = loaded[3]
        std = math.sqrt(b, b.fadd(square_avg, eps))
        delta = b.fmul(b.fdiv(math.sqrt(b, b.fadd(acc_delta, eps)), std), grad)
        acc_delta = _second_moment(b, acc_delta, delta, rho, one_minus_rho)
        return {0: _scaled_add(b, param, delta, neg_lr), 2: square_avg, 3: acc_delta}
    return element


def _sgd_element(maximize, weight_decay, momentum, nesterov):
    """The per-element operations of SGD's NumPy passes (`jitorch.optim.sgd.SGD._numpy_update`). Roles: param,
    grad (and the momentum buffer with ``momentum``, which must hold its first step's value already). Row:
    ``weight_decay``, ``momentum``, ``1 - dampening``, ``-lr``."""

    def element(b, t, math, loaded, s):
        decay, mom, one_minus_dampening, neg_lr = s
        param, grad = _step_grad(b, *loaded[:2], decay, maximize, weight_decay)
        out = {}
        if momentum:
            buf = out[2] = _scaled_add(b, b.fmul(loaded[2], mom), grad, one_minus_dampening)
            grad = _scaled_add(b, grad, buf, mom) if nesterov else buf
        out[0] = _scaled_add(b, param, grad, neg_lr)
        return out
    return element


def _rmsprop_element(maximize, weight_decay, momentum, centered, lerp_low):
    """The per-element operations of RMSprop's NumPy passes (`jitorch.optim.rmsprop.RMSprop._numpy_update`).
    Roles: param, grad, square_avg, then momentum_buffer and grad_avg where they are on."""

    def element(b, t, math, loaded, s):
        decay, alpha, one_minus_alpha, lerp, eps, mom, neg_lr = s
        param, grad = _step_grad(b, *loaded[:2], decay, maximize, weight_decay)
        square_avg = _second_moment(b, loaded[2], grad, alpha, one_minus_alpha)
        out = {2: square_avg}
        if centered:
            index = 3 + momentum
            grad_avg = out[index] = _lerp(b, loaded[index], grad, lerp, lerp_low)
            avg = math.sqrt(b, b.fsub(square_avg, b.fmul(grad_avg, grad_avg)))
        else:
            avg = math.sqrt(b, square_avg)
        avg = b.fadd(avg, eps)
        update = b.fdiv(grad, avg)
        if momentum:
            update = out[3] = b.fadd(b.fmul(loaded[3], mom), update)
        out[0] = _scaled_add(b, param, update, neg_lr)
        return out
    return element


def _adagrad_element(maximize, weight_decay):
    """The per-element operations of Adagrad's NumPy passes (`jitorch.optim.adagrad.Adagrad._numpy_update`)."""

    def element(b, t, math, loaded, s):
        decay, eps, clr = s
        param, grad = _step_grad(b, *loaded[:2], decay, maximize, weight_decay)
        state_sum = b.fadd(loaded[2], b.fmul(grad, grad))
        std = b.fadd(math.sqrt(b, state_sum), eps)
        return {0: b.fsub(param, b.fmul(b.fdiv(grad, std), clr)), 2: state_sum}
    return element


def _adamax_element(maximize, weight_decay, lerp_low):
    """The per-element operations of Adamax's NumPy passes (`jitorch.optim.adamax.Adamax._numpy_update`)."""

    def element(b, t, math, loaded, s):
        decay, lerp, beta2, eps, clr = s
        param, grad = _step_grad(b, *loaded[:2], decay, maximize, weight_decay)
        exp_avg = _lerp(b, loaded[2], grad, lerp, lerp_low)
        exp_inf = _maximum(b, b.fmul(loaded[3], beta2), b.fadd(math.fabs(b, grad), eps))
        return {0: b.fsub(param, b.fmul(b.fdiv(exp_avg, exp_inf), clr)), 2: exp_avg, 3: exp_inf}
    return element


def _nadam_element(maximize, weight_decay, decoupled, lerp_low):
    """The per-element operations of NAdam's NumPy passes (`jitorch.optim.nadam.NAdam._numpy_update`)."""

    def element(b, t, math, loaded, s):
        decay, lerp, beta2, one_minus_beta2, correction2, eps, grad_factor, avg_factor = s
        param, grad = _step_grad(b, *loaded[:2], decay, maximize, weight_decay, decoupled)
        exp_avg = _lerp(b, loaded[2], grad, lerp, lerp_low)
        exp_avg_sq = _second_moment(b, loaded[3], grad, beta2, one_minus_beta2)
        denom = b.fadd(math.sqrt(b, b.fdiv(exp_avg_sq, correction2)), eps)
        param = b.fsub(param, b.fmul(b.fdiv(grad, denom), grad_factor))
        param = b.fsub(param, b.fmul(b.fdiv(exp_avg, denom), avg_factor))
        return {0: param, 2: exp_avg, 3: exp_avg_sq}
    return element


def _radam_element(maximize, weight_decay, decoupled, lerp_low, rectified):
    """The per-element operations of RAdam's NumPy passes (`jitorch.optim.radam.RAdam._numpy_update`);
    ``rectified``: whether the step's ``rho_t`` is above 5 (the adaptive term's passes run)."""

    def element(b, t, math, loaded, s):
        decay, lerp, beta2, one_minus_beta2, correction1, eps, adaptive_factor, lr = s
        param, grad = _step_grad(b, *loaded[:2], decay, maximize, weight_decay, decoupled)
        exp_avg = _lerp(b, loaded[2], grad, lerp, lerp_low)
        exp_avg_sq = _second_moment(b, loaded[3], grad, beta2, one_minus_beta2)
        update = b.fdiv(exp_avg, correction1)
        if rectified:
            adaptive = b.fdiv(ir.Constant(t, 1.0), b.fadd(math.sqrt(b, exp_avg_sq), eps))
            update = b.fmul(update, b.fmul(adaptive, adaptive_factor))
        param = b.fsub(param, b.fmul(update, lr))
        return {0: param, 2: exp_avg, 3: exp_avg_sq}
    return element


# kind -> flags -> (roles, the per-element operations, numbers per row)
_ELEMENTS = {
    "adam": lambda *flags: (4 + flags[3], _adam_element(*flags), 7),
    "sgd": lambda *flags: (2 + flags[2], _sgd_element(*flags), 4),
    "adadelta": lambda *flags: (4, _adadelta_element(*flags), 5),
    "rmsprop": lambda *flags: (3 + flags[2] + flags[3], _rmsprop_element(*flags), 7),
    "adagrad": lambda *flags: (3, _adagrad_element(*flags), 3),
    "adamax": lambda *flags: (4, _adamax_element(*flags), 5),
    "nadam": lambda *flags: (4, _nadam_element(*flags), 8),
    "radam": lambda *flags: (4, _radam_element(*flags), 8),
}
