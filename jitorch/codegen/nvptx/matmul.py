"""A generated tiled matrix product for CUDA: ``out[b] = a[b] @ b[b]`` with batch broadcasting.

Each block computes a ``TILE x TILE`` tile of one output matrix with 256
threads, each thread a 4 x 4 micro-tile (rows ``ty + 16 i``, columns
``tx + 16 j``: neighbouring threads read neighbouring shared-memory words).
The K dimension is walked in steps of ``DEPTH``: the block stages an A tile
(stored transposed, ``As[k][m]``) and a B tile (``Bs[k][n]``) in shared memory,
zero-filled past the matrix edges, synchronises, and accumulates with fused
multiply-adds in float32. float16 inputs are widened to float32 when staged,
and the result is rounded to the inputs' dtype once, at the end.

Shapes and strides are static: the batch index (``blockIdx.z``) is split over
the output's batch dims and each operand's batch offset uses its own strides,
with 0 for a broadcast dim, exactly as `matmul` broadcasts on the CPU. Operands
are read in place with any strides (a transposed weight needs no copy); each
tile is staged with consecutive threads on the operand's unit-stride dim, so
the loads stay coalesced whichever way round a matrix is stored.
"""

from __future__ import annotations

from math import prod

from llvmlite import ir

from ...runtime import dtypes as _dt
from ...runtime.strided import contiguous_strides
from ..emitter import llvm_type
from ..errors import CompileError
from .ptx import GeneratedKernel, ptx_of
from .target import I32, I64, SHARED, TRIPLE, _sreg, barrier, strided_loop, unflatten

TILE = 64
DEPTH = 16
THREADS = 256
MICRO = 4
F32 = ir.FloatType()
DTYPES = (_dt.float32, _dt.float16)


def _broadcast_batch(a_batch, b_batch):
    """The broadcast batch shape of two operands' leading dims (RuntimeError as matmul gives)."""
    n = max(len(a_batch), len(b_batch))
    a = (1,) * (n - len(a_batch)) + tuple(a_batch)
    b = (1,) * (n - len(b_batch)) + tuple(b_batch)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b ({y}) at "
                               f"non-singleton dimension {len(out)}")
        out.append(max(x, y))
    return tuple(out), a, b


def _batch_strides(shape, strides, space):
    """Element strides of an operand's batch dims over the broadcast batch ``space`` (0 where broadcast)."""
    pad = len(space) - len(shape)
    return [0 if n == 1 else s for n, s in zip((1,) * pad + tuple(shape), (0,) * pad + tuple(strides))]


class MatmulKernel(GeneratedKernel):
    """A generated matmul: its PTX (``asm``), LLVM IR, operand and output shapes, dtype and launch grid."""

    def __init__(self, name, shapes, dtype, grid, source_ir, ptx):
        self.name = name
        self.ops = ["matmul"]
        self.a_shape, self.b_shape, self.out_shape = shapes
        self.dtype = dtype
        self.grid3 = grid
        self.source_ir = source_ir
        self.asm = ptx
        self.mode = "tiles"

    def grid(self, multiprocessors=None):
        """((blocks x, y, z), threads per block)."""
        return self.grid3, THREADS

    def __repr__(self):
        return f"<cuda kernel {self.name}: matmul {list(self.out_shape)}>"


def matmul_kernel(a_shape, b_shape, dtype, cache=None, a_strides=None, b_strides=None):
    """The tiled kernel for ``a @ b`` with operands of at least 2 dims (element ``a_strides``/``b_strides``,
    compact by default) and ``dtype`` float32 or float16 (float32 accumulation either way)."""
    if dtype not in DTYPES:
        raise CompileError(f"matmul kernel: dtype {dtype} is not float32 or float16")
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise CompileError("matmul kernel: operands need 2 dims (reshape vectors first)")
    (m, k), (k2, n) = a_shape[-2:], b_shape[-2:]
    if k != k2:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({m}x{k} and {k2}x{n})")
    batch, _, _ = _broadcast_batch(a_shape[:-2], b_shape[:-2])
    compact = contiguous_strides(tuple(a_shape)), contiguous_strides(tuple(b_shape))
    a_strides, b_strides = (compact[i] if s is None else tuple(s) for i, s in enumerate((a_strides, b_strides)))
    layout = "" if (a_strides, b_strides) == compact else "_s" + "x".join(map(str, a_strides + b_strides))
    name = f"jitorch_matmul_{'x'.join(map(str, a_shape))}_{'x'.join(map(str, b_shape))}{layout}_{dtype.name}"
    operands = (_batch_strides(a_shape[:-2], a_strides[:-2], batch), a_strides[-2:],
                _batch_strides(b_shape[:-2], b_strides[:-2], batch), b_strides[-2:])
    text = str(_module(name, batch, operands, m, n, k, llvm_type(dtype)))
    grid = (-(-n // TILE), -(-m // TILE), max(1, prod(batch)))
    if grid[2] > 65535:
        raise CompileError(f"matmul kernel: {grid[2]} batch matrices exceed the grid's 65535 z-blocks")
    return MatmulKernel(name, (tuple(a_shape), tuple(b_shape), batch + (m, n)), dtype, grid, text,
                        ptx_of(text, name, cache))


def _shared(module, name):
    g = ir.GlobalVariable(module, ir.ArrayType(F32, DEPTH * TILE), name, addrspace=SHARED)
    g.linkage = "internal"
    g.align = 16
    g.initializer = ir.Constant(g.value_type, ir.Undefined)
    return g


def _tile_coordinates(b, idx, rows, cols, unit_rows):
    """(row, col) of the ``idx``-th element of a ``rows x cols`` tile, numbered along the operand's
    unit-stride dim (columns unless ``unit_rows``) so that neighbouring threads read neighbouring words."""
    if unit_rows:
        return b.urem(idx, I64(rows)), b.udiv(idx, I64(rows))
    return b.udiv(idx, I64(cols)), b.urem(idx, I64(cols))


def _module(name, batch, operands, m, n, k, t):
    a_batch, (a_rs, a_cs), b_batch, (b_rs, b_cs) = operands
    module = ir.Module(name=name)
    module.triple = TRIPLE
    ptr = t.as_pointer()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, ptr]), name)
    fn.calling_convention = "ptx_kernel"
    for arg in fn.args:
        arg.add_attribute("noalias")
    a, bm, c = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    a_s, b_s = _shared(module, "jitorch.tile.a"), _shared(module, "jitorch.tile.b")
    acc = [[b.alloca(F32) for _ in range(MICRO)] for _ in range(MICRO)]
    for row in acc:
        for slot in row:
            b.store(ir.Constant(F32, 0.0), slot)
    tid = _sreg(b, "tid.x")
    ty, tx = b.udiv(tid, I64(16)), b.urem(tid, I64(16))
    col0 = b.mul(_sreg(b, "ctaid.x"), I64(TILE))
    row0 = b.mul(_sreg(b, "ctaid.y"), I64(TILE))
    z = _sreg(b, "ctaid.z")
    zi = unflatten(b, z, list(batch)) if batch else []
    a_base = sum_offsets(b, zi, a_batch)
    b_base = sum_offsets(b, zi, b_batch)
    c_base = b.mul(z, I64(m * n))

    def load(base_ptr, off, ok):
        """The element at ``off`` widened to float32, or 0 where ``ok`` is false (past the edge)."""
        slot = b.alloca(F32)
        b.store(ir.Constant(F32, 0.0), slot)
        with b.if_then(ok):
            v = b.load(b.gep(base_ptr, [off]))
            b.store(v if t == F32 else b.fpext(v, F32), slot)
        return b.load(slot)

    def smem(g, idx):
        return b.gep(g, [I32(0), idx])

    def tile_step(b_, k0):
        for part in range(TILE * DEPTH // THREADS):
            idx = b.add(tid, I64(THREADS * part))
            # the A tile (TILE rows of m, DEPTH of k), stored transposed
            mm, kk = _tile_coordinates(b, idx, TILE, DEPTH, a_rs == 1 and a_cs != 1)
            r, kg = b.add(row0, mm), b.add(k0, kk)
            ok = b.and_(b.icmp_unsigned("<", r, I64(m)), b.icmp_unsigned("<", kg, I64(k)))
            va = load(a, b.add(a_base, b.add(b.mul(r, I64(a_rs)), b.mul(kg, I64(a_cs)))), ok)
            b.store(va, smem(a_s, b.add(b.mul(kk, I64(TILE)), mm)))
            # the B tile (DEPTH rows of k, TILE of n)
            kb, nn = _tile_coordinates(b, idx, DEPTH, TILE, b_rs == 1 and b_cs != 1)
            kg2, cn = b.add(k0, kb), b.add(col0, nn)
            ok2 = b.and_(b.icmp_unsigned("<", kg2, I64(k)), b.icmp_unsigned("<", cn, I64(n)))
            vb = load(bm, b.add(b_base, b.add(b.mul(kg2, I64(b_rs)), b.mul(cn, I64(b_cs)))), ok2)
            b.store(vb, smem(b_s, b.add(b.mul(kb, I64(TILE)), nn)))
        barrier(b)
        for kk in range(DEPTH):
            av = [b.load(smem(a_s, b.add(I64(kk * TILE), b.add(ty, I64(16 * i))))) for i in range(MICRO)]
            bv = [b.load(smem(b_s, b.add(I64(kk * TILE), b.add(tx, I64(16 * j))))) for j in range(MICRO)]
            for i in range(MICRO):
                for j in range(MICRO):
                    b.store(_fma(b, av[i], bv[j], b.load(acc[i][j])), acc[i][j])
        barrier(b)

    strided_loop(b, I64(0), I64(k), I64(DEPTH), tile_step)
    for i in range(MICRO):
        for j in range(MICRO):
            r, cn = b.add(row0, b.add(ty, I64(16 * i))), b.add(col0, b.add(tx, I64(16 * j)))
            ok = b.and_(b.icmp_unsigned("<", r, I64(m)), b.icmp_unsigned("<", cn, I64(n)))
            with b.if_then(ok):
                v = b.load(acc[i][j])
                b.store(v if t == F32 else b.fptrunc(v, t), b.gep(c, [b.add(c_base, b.add(b.mul(r, I64(n)), cn))]))
    b.ret_void()
    return module


def _fma(b, x, y, z):
    fn = b.module.declare_intrinsic("llvm.fma", [F32], ir.FunctionType(F32, [F32] * 3))
    return b.call(fn, [x, y, z])


def sum_offsets(b, indices, strides):
    """``sum(i * s)`` over the batch indices (constant strides)."""
    off = I64(0)
    for i, s in zip(indices, strides):
        if s:
            off = b.add(off, b.mul(i, I64(s)))
    return off
