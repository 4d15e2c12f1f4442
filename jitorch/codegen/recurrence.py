"""Fused cell kernels of the recurrences (jitorch/ops/recurrences.py): one time step's pointwise math of an
LSTM or GRU, forward or backward, as one generated kernel.

The loops of ``_rnn_layer`` and ``_rnn_layer_backward`` run, per time step, one BLAS product and the
cell's gate arithmetic; in NumPy that arithmetic is a dozen or more ufunc calls, each a pass over the
step's buffers with its call overhead, several times the product's time at a language model's sizes.
Here each cell is a small graph of registry ops (views of the gate columns, sigmoid, tanh, products and
sums), fused into one pointwise kernel by the usual passes and built by the usual kernel builder, so it
rounds and vectorises as a compiled graph's kernels do. The kernel reads the product and the step's
slices in place and writes the gates into the reserve (strided buffers: ``layouts``), so a step is one
kernel call between two products, as cuDNN's and torch's CPU kernels run it.

The per-step products ``h W_hh^T`` (forward) and ``d_gates W_hh`` (backward) are a generated kernel too
(`product_kernel`): NumPy's matmul repacks the weight at every call, and OpenBLAS's kernels for a batch of
a few tens of rows ran 20 x 200 @ 200 x 800 (a language model's step, float32, one AVX-512 core) in 73-100
us where MKL (torch's) takes 46-62. Here the weight is packed once per layer call into panels of two
vectors' columns, and each step is one register-blocked loop (`_PRODUCT_ROWS` rows by two vectors of
accumulators, a sum over k in order with FMAs): 50-62 us at that size, on machines with AVX-512 only
(`product_kernel`). Its sums round as any product's do: results agree with torch within float tolerances,
as NumPy's product does, not bit for bit with it.

Importing this module registers `cell_kernel` in ``ops.recurrences.CELL_KERNEL`` and `product_kernel` in
``ops.recurrences.PRODUCT_KERNEL``: the ops layer cannot import the code generator, and runs its NumPy cells
and products where no kernel is registered or one cannot be built.
"""

from __future__ import annotations


import numpy as np
from llvmlite import ir

from ..ir.fake import add_op
from ..ir.graph import Graph, TensorType
from ..ir.passes.fusion import fuse
from ..ops import recurrences
from ..runtime import dtypes as _dt
from ..runtime.device import device as _device
from . import cpu, mathlib
from .cache import default_cache
from .errors import CompileError
from .kernel import I64, KernelSource, build, counted_loop, fma_loop, kernel_body
from .machine import selected
from .memo import BuiltOnce
from .target import CPU

_CPU = _device("cpu")
# The batch the kernels are built for: their outer loop runs over the rows (the batch), whose bounds each
# call gives, and no buffer's strides depend on the batch, so one kernel serves every batch size. (Two,
# not one: the builder drops dims of size one, and the rows' loop with them.)
_ROWS = 2
# The products' register block: rows by vectors of accumulators. 20 x 200 @ 200 x 800 float32 on one AVX-512
# core: 4 x 2 62 us, 5 x 2 50, 6 x 2 53, 8 x 1 106, 3 x 4 86 (OpenBLAS 73-100); 20 x 800 @ 800 x 200: 5 x 2
# 63-71 us, 4 x 2 92 (OpenBLAS 86-106).
_PRODUCT_ROWS, _PRODUCT_VECS = 5, 2
_BYTES = 64  # one vector: an AVX-512 register (LLVM splits it for narrower targets)


class StepKernel:
    """A compiled kernel run once per time step: ``names`` are its buffers in the kernel's argument order.
    `table` lays out their addresses for every step ahead of the loop, `rows` the addresses of its rows;
    `run` then runs one step from one row, one ctypes call of about a microsecond. The kernel's outer loop
    runs over the batch's rows, whatever their number."""

    def __init__(self, compiled, names):
        self._compiled = compiled  # keeps the machine code alive
        self._fn = compiled.fn
        self.address = compiled.address  # (its entry point, for a program of calls: `threads.run_row_program`)
        self.names = names

    def table(self, columns):
        """The (steps, buffers) array of addresses: ``columns`` maps each buffer's name to its address,
        an int (the same every step) or an int64 array of one address per step."""
        steps = max((len(c) for c in columns.values() if isinstance(c, np.ndarray)), default=1)
        table = np.empty((steps, len(self.names)), np.uint64)
        for k, name in enumerate(self.names):
            table[:, k] = columns[name]
        return table

    @staticmethod
    def rows(table):
        """The address of each row of ``table`` (which the caller holds while it runs them)."""
        base = table.__array_interface__["data"][0]
        return [base + row * table.strides[0] for row in range(len(table))]

    def run(self, row, batch):
        """One step of ``batch`` rows: the kernel over the buffers whose addresses ``row`` (an address from
        `rows`) holds."""
        self._fn(row, 0, batch)


class CellKernel(StepKernel):
    """A compiled cell: one step's gate arithmetic (`cell_kernel`)."""


def cell_kernel(direction, mode, dtype, hidden, bias, ld=None):
    """The `CellKernel` of ``mode``'s ("LSTM" or "GRU") ``direction`` ("forward" or "backward") cell for
    float ``dtype`` (a NumPy dtype) and ``hidden`` units, with or without the hidden bias (forward only),
    for any batch; None where it cannot be built (the caller runs its NumPy cell). ``ld``: the row stride
    of the step's product buffer (``hh``, ``dh`` or ``prod``), which a `ProductKernel` pads to whole
    panels; None where compact. Built once per key."""
    return _kernels(direction, mode, np.dtype(dtype).name, hidden, bias, ld)


def _build(direction, mode, dtype, hidden, bias, ld=None):
    g = Graph()
    dt = _dt.from_numpy_dtype(np.dtype(dtype))
    inputs, outputs = _CELLS[direction, mode](_Cell(g, dt, _ROWS, hidden, ld), bias)
    g.outputs = tuple(v for v, _ in outputs.values())
    groups = fuse(g)
    if len(groups) != 1 or groups[0].kind != "pointwise":
        return None
    layouts = {v: strides for v, strides in [*inputs.values(), *outputs.values()] if strides is not None}
    name = f"jitorch_{mode.lower()}_{direction}_cell"
    try:
        compiled = cpu.link_kernel(build(groups[0], name, layouts=layouts), default_cache())
    except CompileError:
        return None
    if compiled.outer != _ROWS:  # (the loop nest's outer loop is not the rows: no call could size it)
        return None
    by_value = {v: n for n, (v, _) in [*inputs.items(), *outputs.items()]}
    source = compiled.source
    return CellKernel(compiled, [by_value[v] for v in [*source.inputs, *source.outputs]])


# (direction, mode, dtype name, hidden, bias) -> CellKernel, or None: not buildable
_kernels = BuiltOnce(_build)


class _Cell:
    """Builds a cell's graph: inputs (each with its strides, None where compact) and op nodes."""

    def __init__(self, g, dtype, batch, hidden, ld=None):
        self.g, self.dtype, self.batch, self.hidden, self.ld = g, dtype, batch, hidden, ld

    def input(self, width, strides=None, shape=None):
        """A buffer of ``batch`` rows of ``width`` (``shape`` instead where given), strided as ``strides``."""
        v = self.g.add_input(TensorType(shape or (self.batch, width), self.dtype, _CPU))
        return v, strides

    def product(self, width):
        """The step's product buffer of ``width`` columns, its rows ``ld`` apart where given."""
        return self.input(width, None if self.ld is None else (self.ld, 1))

    def __call__(self, name, *args):
        return add_op(self.g, name, *args)

    def gate(self, v, k):
        """Column block ``k`` (``hidden`` wide) of ``v``: a view, folded into the kernel's index maths."""
        return self("narrow", v, v.type.ndim - 1, k * self.hidden, self.hidden)

    def pre(self, hh, b, x, k):
        """Gate ``k``'s pre-activation ``(h W_hh^T + b_hh) + x W_ih^T`` (the NumPy cells' order)."""
        v = self.gate(hh, k)
        if b is not None:
            v = self("add", v, self.gate(b, k))
        return self("add", v, self.gate(x, k))

    def one_minus(self, v):
        return self("rsub", v, 1)


def _lstm_forward(c, bias):
    h = c.hidden
    reserve = (5 * h, 1)  # the gates i, f, g, o and the cell of a step, side by side in the reserve
    hh, x, cp = c.product(4 * h), c.input(4 * h), c.input(h, reserve)
    b = c.input(0, shape=(4 * h,)) if bias else (None, None)
    i, f, g, o = (c(act, c.pre(hh[0], b[0], x[0], k))
                  for k, act in enumerate(("sigmoid", "sigmoid", "tanh", "sigmoid")))
    cell = c("add", c("mul", f, cp[0]), c("mul", i, g))
    out = c("mul", o, c("tanh", cell))
    inputs = {"hh": hh, "x": x, "c_prev": cp}
    if bias:
        inputs["b"] = b
    return inputs, {"i": (i, reserve), "f": (f, reserve), "g": (g, reserve), "o": (o, reserve),
                    "c": (cell, reserve), "h": (out, None)}


def _lstm_backward(c, bias):
    """``dh`` (the product of the next step's gate gradients, or ``grad_hy``) plus the step's output
    gradient, through ``h = o tanh(c)`` and ``c = f c_prev + i g`` to the pre-activations' gradients."""
    h = c.hidden
    reserve = (5 * h, 1)
    dh, go, dc = c.product(h), c.input(h), c.input(h)
    i, f, g, o, cell, cp = (c.input(h, reserve) for _ in range(6))
    ds = c("add", dh[0], go[0])
    tc = c("tanh", cell[0])
    d_o = c("mul", c("mul", ds, tc), c("mul", o[0], c.one_minus(o[0])))
    dcc = c("add", dc[0], c("mul", ds, c("mul", o[0], c.one_minus(c("mul", tc, tc)))))
    d_i = c("mul", dcc, c("mul", g[0], c("mul", i[0], c.one_minus(i[0]))))
    d_f = c("mul", dcc, c("mul", cp[0], c("mul", f[0], c.one_minus(f[0]))))
    d_g = c("mul", dcc, c("mul", i[0], c.one_minus(c("mul", g[0], g[0]))))
    gates = (4 * h, 1)
    return ({"dh": dh, "go": go, "dc": dc, "i": i, "f": f, "g": g, "o": o, "c": cell, "c_prev": cp},
            {"d_i": (d_i, gates), "d_f": (d_f, gates), "d_g": (d_g, gates), "d_o": (d_o, gates),
             "dc_out": (c("mul", dcc, f[0]), None)})


def _gru_forward(c, bias):
    h = c.hidden
    reserve = (4 * h, 1)  # r, z, n and W_hn h + b_hn of a step
    hh, x, hp = c.product(3 * h), c.input(3 * h), c.input(h)
    b = c.input(0, shape=(3 * h,)) if bias else (None, None)
    r = c("sigmoid", c.pre(hh[0], b[0], x[0], 0))
    z = c("sigmoid", c.pre(hh[0], b[0], x[0], 1))
    # (without a bias, a product by one: the reserve needs the column block written, not a view of it)
    h_n = c("add", c.gate(hh[0], 2), c.gate(b[0], 2)) if bias else c("mul", c.gate(hh[0], 2), 1)
    n = c("tanh", c("add", c.gate(x[0], 2), c("mul", r, h_n)))
    out = c("add", n, c("mul", c("sub", hp[0], n), z))  # torch's form of (1 - z) n + z h, and its rounding
    inputs = {"hh": hh, "x": x, "h_prev": hp}
    if bias:
        inputs["b"] = b
    return inputs, {"r": (r, reserve), "z": (z, reserve), "n": (n, reserve), "h_n": (h_n, reserve),
                    "h": (out, None)}


def _gru_backward(c, bias):
    """``dh = carry + prod + go`` (the part of the next step's gradient through ``z h``, through
    ``W_hh``, and the step's output gradient) to the gradients of ``W_hh h + b_hh``'s gates and of the
    input projection's n gate, and the next carry ``dh z``."""
    h = c.hidden
    reserve = (4 * h, 1)
    carry, prod, go, hp = c.input(h), c.product(h), c.input(h), c.input(h)
    r, z, n, h_n = (c.input(h, reserve) for _ in range(4))
    dh = c("add", c("add", carry[0], prod[0]), go[0])
    d_z = c("mul", dh, c("mul", c("sub", hp[0], n[0]), c("mul", z[0], c.one_minus(z[0]))))
    d_xn = c("mul", dh, c("mul", c.one_minus(z[0]), c.one_minus(c("mul", n[0], n[0]))))
    d_r = c("mul", d_xn, c("mul", h_n[0], c("mul", r[0], c.one_minus(r[0]))))
    gates = (3 * h, 1)
    return ({"carry": carry, "prod": prod, "go": go, "h_prev": hp, "r": r, "z": z, "n": n, "h_n": h_n},
            {"d_r": (d_r, gates), "d_z": (d_z, gates), "d_n": (c("mul", d_xn, r[0]), gates),
             "d_xn": (d_xn, gates), "carry_out": (c("mul", dh, z[0]), None)})


_CELLS = {("forward", "LSTM"): _lstm_forward, ("backward", "LSTM"): _lstm_backward,
          ("forward", "GRU"): _gru_forward, ("backward", "GRU"): _gru_backward}

class ProductKernel(StepKernel):
    """A compiled product ``out = a @ w`` for one (k, n) weight ``w`` and any number of rows: `pack` lays
    ``w`` out in panels once, then each call (`run`, from a `table` row of the buffers "a", "w" and "out")
    writes ``ld`` columns per row of ``out``: the n columns, then zeros up to the end of the last panel.
    ``a``'s rows are k apart, ``out``'s ``ld``. The panels are `_PRODUCT_VECS` vectors wide but the last,
    which is one vector wide where the columns left fit in one (`panel_widths`)."""

    def __init__(self, compiled, k, n, panel, itemsize):
        super().__init__(compiled, ["a", "w", "out"])
        self.k, self.n, self.panel, self.itemsize = k, n, panel, itemsize
        self.widths = panel_widths(n, panel)
        self.ld = sum(self.widths)
        self.block = _PRODUCT_ROWS  # rows per register block (fewer run as a slower block of their own)

    def serves(self, rows):
        """Whether this kernel runs a product of ``rows`` rows faster than NumPy's: it reads a panel from
        memory once per block of rows, with no blocking of k, so for many rows of a long k NumPy's BLAS
        (which blocks k) wins: 64 x 2048 @ 2048 x 512 float32 ran 1.13 times NumPy's CPU time (median of
        9), where 64 x 512 @ 512 x 2048 ran 0.93, 32 x 1024 @ 1024 x 4096 0.92, 20 x 800 @ 800 x 200 0.81."""
        return rows <= 32 or self.k * self.panel * self.itemsize <= 128 * 1024

    def pack(self, w):
        """``w`` (k, n, any strides) in the kernel's layout: each panel's (k, width) columns in turn, zero past
        column n. The whole panels are one copy (a view of ``w`` as (panels, k, width)), the last narrower or
        padded one a second: an LSTM's W_hh^T (200 x 800, read through the transpose of W_hh) packed in 57 us,
        where a copy per panel took 88 and making the transpose contiguous first 76 more."""
        k, n, panel = self.k, self.n, self.panel
        packed = np.empty(k * self.ld, w.dtype)
        whole = n // panel
        cut = whole * panel
        if whole:
            np.copyto(packed[:k * cut].reshape(whole, k, panel), w[:, :cut].reshape(k, whole, panel).transpose(1, 0, 2))
        if self.ld > cut:
            last = packed[k * cut:].reshape(k, self.ld - cut)
            last[:, :n - cut] = w[:, cut:]
            last[:, n - cut:] = 0
        return packed


def panel_widths(n, panel):
    """The widths of the panels of ``n`` columns: whole panels, then one of the columns left, a vector (half a
    panel) wide where they fit in one. 20 x 800 @ 800 x 200 float32 (an LSTM's backward step, 200 columns = six
    panels of 32 and 8) ran 62.6 us in seven whole panels, 12% of them padding."""
    whole, left = divmod(n, panel)
    vector = panel // _PRODUCT_VECS
    return [panel] * whole + ([] if left == 0 else [vector] if left <= vector else [panel])


def product_kernel(dtype, k, n):
    """The `ProductKernel` of a (rows, ``k``) by (``k``, ``n``) product of float ``dtype`` (a NumPy
    dtype), or None where it cannot be built or the selected machine has no AVX-512 (the caller runs
    NumPy's). Built once per key.

    Its register block takes 10 of AVX-512's 32 vector registers; split for narrower targets it spills,
    and ran 1.0-3.1 times NumPy's time made for x86-64-v3 and 2.6-5.2 times for x86-64-v2 (this machine,
    whose OpenBLAS kept its AVX-512 kernels)."""
    if "avx512f" not in selected().required():
        return None
    return _products(np.dtype(dtype).name, k, n)


def _build_product(dtype, k, n):
    if k == 0 or n == 0:  # (the k loop runs at least once: it would read past an empty operand)
        return None
    t = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    item = np.dtype(dtype).itemsize
    width = _BYTES // item
    panel = width * _PRODUCT_VECS
    widths = panel_widths(n, panel)
    name = f"jitorch_rnn_product_{dtype}_{k}x{n}"
    module, body, b = kernel_body(name, t, 3)
    _Product(b, ir.VectorType(t, width), item, k, sum(widths)).emit(*body.args, widths)
    b.ret_void()
    CPU.add_entry(module, body, [0, 1, 2], 0, "thread")
    source = KernelSource(name, "recurrence", ["mm"], [0, 1], [2], 0, 0)
    source.llvm_ir = str(module)
    try:
        compiled = cpu.link_kernel(source, default_cache())
    except CompileError:
        return None
    return ProductKernel(compiled, k, n, panel, item)


# (dtype name, k, n) -> ProductKernel, or None: not buildable
_products = BuiltOnce(_build_product)


class _Product:
    """Emits a product's loops: panels of `_PRODUCT_VECS` vectors' columns (the last maybe of one vector:
    `panel_widths`), in each the rows by blocks of `_PRODUCT_ROWS` (then one block of the rows left), each block
    one loop over k carrying its accumulators in registers. Every element of ``out`` is the same chain of FMAs
    over k in order whatever its panel's width."""

    def __init__(self, b, vt, item, k, ld):
        self.b, self.vt, self.item, self.k, self.ld = b, vt, item, k, ld
        self.panel = vt.count * _PRODUCT_VECS
        self._kept = None  # the loop metadata of `kept`

    def emit(self, start, stop, a, w, out, widths):
        """Rows ``start`` to ``stop`` of ``out = a @ w`` (``w`` packed as `ProductKernel.pack` lays it in panels of
        ``widths``)."""
        b = self.b

        def panel(b, p, vecs=_PRODUCT_VECS):
            rest = b.urem(b.sub(stop, start), I64(_PRODUCT_ROWS))
            full = b.sub(stop, rest)
            counted_loop(b, start, full, I64(_PRODUCT_ROWS),
                         lambda b, r: self.block(_PRODUCT_ROWS, vecs, a, w, out, r, p), "rows")
            # the rows left, fewer than a block, as one block of their number (one by one, a batch of 4 ran
            # 1.4 times slower than NumPy's product)
            done = b.function.append_basic_block("rest.end")
            switch = b.switch(rest, done)
            for rows in range(1, _PRODUCT_ROWS):
                switch.add_case(I64(rows), b.function.append_basic_block(f"rest{rows}"))
                b.position_at_end(switch.cases[-1][1])
                self.block(rows, vecs, a, w, out, full, p)
                b.branch(done)
            b.position_at_end(done)
        whole = sum(width == self.panel for width in widths)
        if whole:
            counted_loop(b, I64(0), I64(whole), I64(1), panel, "panel")
        if whole < len(widths):  # (the last panel, one vector wide)
            panel(b, I64(whole), 1)

    def block(self, rows, vecs, a, w, out, r0, p):
        """``out[r0 + r, p * panel + c] = sum over k in order of a[r0 + r, k] * w[k, p * panel + c]`` for the
        ``vecs`` vectors of panel ``p`` (every panel before it a whole one)."""
        b, vt = self.b, self.vt
        a = b.gep(a, [b.mul(r0, I64(self.k))])
        w = b.gep(w, [b.mul(p, I64(self.k * self.panel))])
        stride = vecs * vt.count

        def operands(b, k):
            w_k = b.gep(w, [b.mul(k, I64(stride))])
            a_k = b.gep(a, [k])
            return ([self.broadcast(b.load(b.gep(a_k, [I64(r * self.k)]))) for r in range(rows)],
                    [self.load(b.gep(w_k, [I64(v * vt.count)])) for v in range(vecs)])
        new, latch = fma_loop(b, I64(0), I64(self.k), mathlib.splat(vt, 0.0), rows, vecs, operands)
        latch.set_metadata("llvm.loop", self.kept())
        first = b.gep(out, [b.add(b.mul(r0, I64(self.ld)), b.mul(p, I64(self.panel)))])
        for r in range(rows):
            for v, value in enumerate(new[r]):
                b.store(value, b.bitcast(b.gep(first, [I64(r * self.ld + v * vt.count)]), vt.as_pointer()),
                        align=self.item)

    def kept(self):
        """Loop metadata: not unrolled (LLVM's unrolling of the k loops took the kernels' compile from 49-56 to
        60-73 ms CPU, and ran them no faster)."""
        if self._kept is None:
            module = self.b.module
            self._kept = module.add_metadata([])
            self._kept.operands = (self._kept, module.add_metadata([ir.MetaDataString(module,
                                                                                      "llvm.loop.unroll.disable")]))
        return self._kept

    def load(self, p):
        return self.b.load(self.b.bitcast(p, self.vt.as_pointer()), align=self.item)

    def broadcast(self, x):
        b, vt = self.b, self.vt
        v = b.insert_element(mathlib.splat(vt, 0.0), x, ir.IntType(32)(0))
        zeros = ir.Constant(ir.VectorType(ir.IntType(32), vt.count), [0] * vt.count)
        return b.shuffle_vector(v, mathlib.splat(vt, 0.0), zeros)


recurrences.CELL_KERNEL = cell_kernel
recurrences.PRODUCT_KERNEL = product_kernel
