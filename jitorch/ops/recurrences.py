"""Fused recurrences: one layer and direction of an Elman RNN, LSTM or GRU over a whole sequence as
one op, with its backward (backpropagation through time) as a second op.

``nn.RNN``/``LSTM``/``GRU`` compute the input projection ``x @ W_ih.T + b_ih`` of every time step as
one matmul and hand it to ``_rnn_layer``, whose NumPy loop over time runs one matmul ``h @ W_hh.T``
and the gate arithmetic (ufuncs into preallocated buffers) per step. Eager autograd then records one
node per layer instead of a dozen per step, and a traced graph holds one node instead of the
unrolled loop. The gates follow torch's order and formulas: LSTM i, f, g, o (with the optional
projection ``W_hr`` of ``proj_size``); GRU r, z, n with ``b_hn`` inside the reset product.

The forward returns, besides output, h_n and c_n, a ``reserve`` of what the backward reads, as
cuDNN's reserve space: LSTM's gate activations and cell states, GRU's gates and ``W_hn h + b_hn``, in
the compute dtype, stored as bytes (uint8) so that, as torch's reserve, it carries no gradient.
``_rnn_layer_backward`` has no derivative of its own: a double backward raises, as torch's cuDNN RNN.

LSTM and GRU steps (without LSTM's projection) run their gate arithmetic as one generated kernel per
step where the code generator has registered ``CELL_KERNEL`` (jitorch/codegen/recurrence.py, loaded with
the compiler): the loop is then one product and one kernel call per step, the kernel reading and writing
the step's slices in place through addresses laid out for every step ahead of the loop. Where the code
generator has also registered ``PRODUCT_KERNEL``, the step's product is a generated kernel too, the weight
packed for it once per call (faster than NumPy's BLAS at a few tens of rows; its sums round otherwise, within
float tolerances). The batch's rows are then independent recurrences, each row's product and cell reading only
that row: the whole loop runs as one program of kernel calls over ranges of rows, split across the threads
(`_run_steps`), each row's values the same whichever thread runs it. Elsewhere (no code generator, or a cell it
cannot build) the NumPy cells and products below run.
"""

from __future__ import annotations

import numpy as np

from ..runtime import dtypes as _dt
from ..runtime import threads
from .linalg import SPLIT_MIN_WORK, _matmul, array_product
from .meta import opmath
from .registry import TensorSpec, defop, scalar_name

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}
_RESERVED = {"RNN_TANH": 0, "RNN_RELU": 0, "LSTM": 5, "GRU": 4}  # reserve width in units of hidden_size

# (direction, mode, NumPy dtype, hidden, bias) -> a compiled cell for any batch (codegen/recurrence.py's
# `CellKernel`: ``names``, ``table(columns)``, ``rows(table)``, ``run(row, batch)``, ``address``: its entry
# point) or None; set by the code generator
CELL_KERNEL = None
# (NumPy dtype, k, n) -> a compiled product of a (rows, k) by a (k, n) operand for any rows
# (codegen/recurrence.py's `ProductKernel`: as a `CellKernel`, with ``pack(w)``, ``serves(rows)``, ``k``, ``n``,
# ``block`` (rows per register block) and ``ld``, the row stride of its output) or None; set by the code generator
PRODUCT_KERNEL = None


def _layer_meta(mode, x, hx, cx, w_hh, b_hh, w_hr, reverse):
    if mode not in _GATES:
        raise RuntimeError(f"_rnn_layer: unknown mode '{mode}'")
    if x.ndim != 3:
        raise RuntimeError(f"_rnn_layer: expected a 3-D input projection (L, N, gates), got {list(x.shape)}")
    length, batch, width = x.shape
    hidden = width // _GATES[mode]
    out_size = hidden if w_hr is None else w_hr.shape[0]
    expected = {"w_hh": (w_hh, (width, out_size)), "hx": (hx, (batch, out_size))}
    if b_hh is not None:
        expected["b_hh"] = (b_hh, (width,))
    if mode == "LSTM":
        expected["cx"] = (cx, (batch, hidden))
    elif cx is not None or w_hr is not None:
        raise RuntimeError(f"_rnn_layer: a cell state or projection is LSTM's only, not {mode}'s")
    if w_hr is not None:
        expected["w_hr"] = (w_hr, (out_size, hidden))
    for name, (t, shape) in expected.items():
        if t is None or tuple(t.shape) != shape:
            got = None if t is None else list(t.shape)
            raise RuntimeError(f"_rnn_layer: expected {name} of shape {list(shape)} for an input projection of "
                               f"shape {list(x.shape)}, got {got}")
        if t.dtype is not x.dtype:  # (torch's GRU: its product h @ W_hh.T refuses the states' dtype)
            raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got {scalar_name(t.dtype)} and "
                               f"{scalar_name(x.dtype)}")
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"_rnn_layer: expected a floating input projection, got {x.dtype}")

    def spec(*shape):
        return TensorSpec(shape, x.dtype, x.device, opmath(x.dtype))
    cell = (batch, hidden) if mode == "LSTM" else (0,)
    reserved = _RESERVED[mode] * hidden * opmath(x.dtype).np.itemsize
    return (spec(length, batch, out_size), spec(batch, out_size), spec(*cell),
            TensorSpec((length, batch, reserved), _dt.uint8, x.device))


def _sigmoid_(a):
    """``a`` replaced by ``1 / (1 + exp(-a))`` in place."""
    np.negative(a, out=a)
    np.exp(a, out=a)
    a += 1
    np.reciprocal(a, out=a)


def _steps(length, reverse):
    return range(length - 1, -1, -1) if reverse else range(length)


def _cell(direction, mode, dtype, batch, hidden, bias, k, n):
    """(the registered compiled cell for these sizes or None (the NumPy cell runs), the registered
    product kernel of the step's (k, n) weight or None (NumPy's product runs)). The cell reads the product
    with the rows the product kernel writes."""
    if CELL_KERNEL is None or batch == 0 or mode not in ("LSTM", "GRU"):
        return None, None
    product = None if PRODUCT_KERNEL is None else PRODUCT_KERNEL(dtype, k, n)
    if product is not None and not product.serves(batch):
        product = None
    kernel = CELL_KERNEL(direction, mode, dtype, hidden, bias, None if product is None else product.ld)
    if kernel is None or product is None:
        return kernel, None
    return kernel, product


def _product_buffer(batch, n, dtype, product, fill=None):
    """The buffer a step's product of ``n`` columns is written into: ``product``'s rows (``ld`` apart)
    where a product kernel writes it; ``fill`` (an array, or 0) its first value."""
    out = np.zeros((batch, n if product is None else product.ld), dtype)
    if fill is not None:
        out[:, :n] = fill
    return out


def _products(product, w, a, out):
    """The rows of `ProductKernel` calls ``out = a[k] @ w`` (``a``: an address per step) and what they
    read, which the caller holds while it runs them."""
    packed = product.pack(w)
    table = product.table({"a": a, "w": _address(packed), "out": _address(out)})
    return product.rows(table), (packed, table)


def _address(a):
    return a.__array_interface__["data"][0]


def _run_steps(batch, product, *calls):
    """Per time step, each ``(kernel, rows)`` of ``calls`` in turn (a `StepKernel` and its `rows`, one per step)
    over the ``batch`` rows. Every call reads and writes only its rows' slices, so the batch splits in ranges of
    rows, each running the whole loop on one thread (`threads.run_row_program`): where the loop's products
    (``product``'s, once per step) hold `linalg.SPLIT_MIN_WORK` multiply-adds per range or more, as a product that
    large splits, and each range a register block of the product's rows or more. A step's product on one AVX-512 core takes 50 to 70 µs at a language model's sizes (see
    codegen/recurrence.py); split per step, each step's hand-over and join would cost a tenth of that."""
    steps = len(calls[0][1])
    program = np.empty(1 + 2 * steps * len(calls), np.uint64)
    program[0] = steps * len(calls)
    body = program[1:].reshape(steps, len(calls), 2)
    for k, (kernel, rows) in enumerate(calls):
        body[:, k, 0] = kernel.address
        body[:, k, 1] = rows
    parts = min(threads.get_num_threads(), batch // product.block,
                batch * steps * product.k * product.n // SPLIT_MIN_WORK)
    if threads.run_row_program(program, batch, parts):
        return
    for step in zip(*(rows for _, rows in calls)):
        for (kernel, _), row in zip(calls, step):
            kernel.run(row, batch)


def _per_step(a, order, offset=0):
    """The address of ``a[t]`` (plus ``offset`` elements) for each step ``t`` of ``order``."""
    return _address(a) + (order * a.strides[0] + offset * a.itemsize).astype(np.uint64)


def _after(a, first, order, offset=0):
    """Per step of ``order``, the address of the previous step's ``a[t]`` (``first`` for the first step)."""
    addresses = np.empty(len(order), np.uint64)
    addresses[0] = _address(first)
    addresses[1:] = _per_step(a, order[:-1], offset)
    return addresses


def _blocks(names, a, order, width, start=0):
    """{name: addresses per step} of column blocks ``width`` wide of ``a[t]``, the k-th named from column
    ``start + k * width``."""
    return {name: _per_step(a, order, start + k * width) for k, name in enumerate(names)}


def _hidden_product(h, w_t, b_hh, out):
    """``out = h @ w_t + b_hh``, ``w_t`` being ``W_hh.T`` made contiguous (NumPy's matmul of a transposed
    operand runs about half as fast at these sizes) and ``out`` contiguous."""
    _matmul(h, w_t, out)
    if b_hh is not None:
        out += b_hh


def _simple_forward(mode, x, h, w_t, b_hh, output, reverse):
    for t in _steps(len(x), reverse):
        out = output[t]
        _hidden_product(h, w_t, b_hh, out)
        out += x[t]
        if mode == "RNN_TANH":
            np.tanh(out, out=out)
        else:
            np.maximum(out, 0, out=out)
        h = out


def _lstm_forward(x, h, c, w_t, b_hh, w_hr_t, output, reserve, reverse):
    hidden = reserve.shape[-1] // 5
    shaped = np.empty((x.shape[1], hidden), output.dtype)
    hh = np.empty((x.shape[1], 4 * hidden), output.dtype)
    for t in _steps(len(x), reverse):
        gates, cell = reserve[t, :, :4 * hidden], reserve[t, :, 4 * hidden:]
        _hidden_product(h, w_t, b_hh, hh)
        np.add(hh, x[t], out=gates)
        i, f, g, o = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
        _sigmoid_(gates[:, :2 * hidden])
        np.tanh(g, out=g)
        _sigmoid_(o)
        np.multiply(f, c, out=cell)
        np.multiply(i, g, out=shaped)
        cell += shaped
        np.tanh(cell, out=shaped)
        if w_hr_t is None:
            np.multiply(o, shaped, out=output[t])
        else:
            shaped *= o
            _matmul(shaped, w_hr_t, output[t])
        h, c = output[t], cell
    return c


def _lstm_forward_cells(kernel, product, x, h, c, w_t, b_hh, output, reserve, reverse):
    """`_lstm_forward` (no projection) with the compiled cell: per step, a product into ``hh``, then the
    kernel from ``hh``, ``x[t]`` and the previous cell to the reserve's gates and cell and ``output[t]``."""
    batch, hidden = x.shape[1], reserve.shape[-1] // 5
    order = np.fromiter(_steps(len(x), reverse), np.int64)
    first = np.empty((batch, 5 * hidden), output.dtype)  # cx, strided as the reserve's cells
    first[:, 4 * hidden:] = c
    _forward_steps(kernel, product, {"c_prev": _after(reserve, first[:, 4 * hidden:], order, 4 * hidden),
                                     **_blocks("ifgoc", reserve, order, hidden)}, x, h, w_t, b_hh, output, order)
    return reserve[order[-1], :, 4 * hidden:]


def _forward_steps(kernel, product, columns, x, h, w_t, b_hh, output, order):
    """The forward loop of a compiled cell: per step of ``order``, ``hh = h W_hh^T`` (by ``product`` where
    given, else NumPy), then the kernel on ``columns`` (the cell's own buffers) and the buffers every cell
    reads: ``hh``, ``x[t]``, ``b_hh``, and ``output[t]``, the next step's ``h`` (``h``: C-contiguous)."""
    hh = _product_buffer(len(h), w_t.shape[1], output.dtype, product)
    columns.update(hh=_address(hh), x=_per_step(x, order), h=_per_step(output, order))
    if b_hh is not None:
        columns["b"] = _address(b_hh)
    table = kernel.table(columns)
    rows = kernel.rows(table)  # (addresses in ``table``, held until the loop ends)
    if product is not None:
        products, held = _products(product, w_t, _after(output, h, order), hh)
        _run_steps(len(hh), product, (product, products), (kernel, rows))
        return
    for row, t in zip(rows, order.tolist()):
        _matmul(h, w_t, hh)
        kernel.run(row, len(hh))
        h = output[t]


def _gru_forward_cells(kernel, product, x, h, w_t, b_hh, output, reserve, reverse):
    """`_gru_forward` with the compiled cell: per step, a product into ``hh``, then the kernel from
    ``hh``, ``x[t]`` and the previous output to the reserve's r, z, n, W_hn h + b_hn and ``output[t]``."""
    batch, hidden = x.shape[1], reserve.shape[-1] // 4
    order = np.fromiter(_steps(len(x), reverse), np.int64)
    _forward_steps(kernel, product, {"h_prev": _after(output, h, order),
                                     **_blocks(("r", "z", "n", "h_n"), reserve, order, hidden)},
                   x, h, w_t, b_hh, output, order)


def _gru_forward(x, h, w_t, b_hh, output, reserve, reverse):
    hidden = reserve.shape[-1] // 4
    hh = np.empty((x.shape[1], 3 * hidden), output.dtype)
    for t in _steps(len(x), reverse):
        r, z, n, h_n = (reserve[t, :, k * hidden:(k + 1) * hidden] for k in range(4))
        _hidden_product(h, w_t, b_hh, hh)
        np.add(x[t, :, :2 * hidden], hh[:, :2 * hidden], out=reserve[t, :, :2 * hidden])
        _sigmoid_(reserve[t, :, :2 * hidden])
        h_n[...] = hh[:, 2 * hidden:]
        np.multiply(r, h_n, out=n)
        n += x[t, :, 2 * hidden:]
        np.tanh(n, out=n)
        # torch's form of (1 - z) * n + z * h, rounded as torch rounds it
        out = output[t]
        np.subtract(h, n, out=out)
        out *= z
        out += n
        h = out


def _layer_cpu(spec, mode, x, hx, cx, w_hh, b_hh, w_hr, reverse):
    ct = spec[0].compute.np
    x, hx, w_t = x.astype(ct, copy=False), hx.astype(ct, copy=False), w_hh.T.astype(ct, copy=False)
    b_hh = None if b_hh is None else b_hh.astype(ct, copy=False)
    output = np.empty(spec[0].shape, ct)
    length, batch, reserved = spec[3].shape
    reserve = np.empty((length, batch, reserved // np.dtype(ct).itemsize), ct)
    c_n = np.empty(spec[2].shape, ct)
    if x.shape[0] == 0:
        return output, hx.copy(), (cx.astype(ct) if mode == "LSTM" else c_n), reserve.view(np.uint8)
    kernel, product = (None, None) if w_hr is not None else _cell("forward", mode, ct, batch, w_hh.shape[1],
                                                                  b_hh is not None, *w_t.shape)
    if product is None:  # (the product kernel packs W_hh^T where it lies; NumPy's matmul wants it contiguous)
        w_t = np.ascontiguousarray(w_t)
    if kernel is not None:
        x, b_hh = np.ascontiguousarray(x), None if b_hh is None else np.ascontiguousarray(b_hh)
        hx = np.ascontiguousarray(hx)  # (the kernels read its rows by address; held while they run)
    if mode == "LSTM" and kernel is not None:
        c_n[...] = _lstm_forward_cells(kernel, product, x, hx, cx.astype(ct, copy=False), w_t, b_hh, output, reserve,
                                       reverse)
    elif mode == "LSTM":
        w_hr_t = None if w_hr is None else np.ascontiguousarray(w_hr.T, ct)
        c_n[...] = _lstm_forward(x, hx, cx.astype(ct, copy=False), w_t, b_hh, w_hr_t, output, reserve, reverse)
    elif mode == "GRU" and kernel is not None:
        _gru_forward_cells(kernel, product, x, hx, w_t, b_hh, output, reserve, reverse)
    elif mode == "GRU":
        _gru_forward(x, hx, w_t, b_hh, output, reserve, reverse)
    else:
        _simple_forward(mode, x, hx, w_t, b_hh, output, reverse)
    return output, output[-1 if not reverse else 0].copy(), c_n, reserve.view(np.uint8)


defop("_rnn_layer(str mode, Tensor input, Tensor hx, Tensor? cx, Tensor w_hh, Tensor? b_hh, Tensor? w_hr, "
      "bool reverse) -> (Tensor output, Tensor h_n, Tensor c_n, Tensor reserve)",
      meta=_layer_meta, cpu=_layer_cpu, kind="recurrence", variants=(),
      doc="One layer and direction of an RNN (``mode`` RNN_TANH, RNN_RELU, LSTM or GRU) over the input "
          "projection ``input`` (L, N, gates * hidden) from state ``hx`` (and LSTM's ``cx``); ``reverse`` runs "
          "from the last step. ``reserve`` holds what ``_rnn_layer_backward`` reads.")


# Backward ------------------------------------------------------------------------------------------

def _backward_meta(mode, grad_output, grad_hy, grad_cy, hx, cx, w_hh, w_hr, output, reserve, reverse):
    length, batch, _ = output.shape
    width = w_hh.shape[0]

    def spec(*shape):
        return TensorSpec(shape, output.dtype, output.device, opmath(output.dtype))
    return (spec(length, batch, width), spec(*hx.shape), spec(*(cx.shape if cx is not None else (0,))),
            spec(*w_hh.shape), spec(width), spec(*(w_hr.shape if w_hr is not None else (0,))))


def _previous(output, hx, reverse):
    """The state each step started from: ``hx``, then the outputs shifted by one step (C-contiguous, as the
    compiled cells read a step's rows by address)."""
    prev = np.empty(output.shape, output.dtype)
    if reverse:
        prev[:-1], prev[-1] = output[1:], hx
    else:
        prev[1:], prev[0] = output[:-1], hx
    return prev


def _simple_backward(mode, grad_output, grad_hy, w_hh, output, reverse):
    """Gradients of the pre-activations (those of the input projection and of ``h W_hh^T + b_hh``
    alike) and of ``hx``."""
    slope = 1 - output * output if mode == "RNN_TANH" else (output > 0).astype(output.dtype)
    d_pre = np.empty_like(output)
    dh = grad_hy.copy()
    for t in _steps(len(output), not reverse):
        dh += grad_output[t]
        np.multiply(dh, slope[t], out=d_pre[t])
        _matmul(d_pre[t], w_hh, dh)
    return d_pre, d_pre, dh


def _lstm_backward(grad_output, grad_hy, grad_cy, cx, w_hh, w_hr, reserve, reverse):
    """Gradients of the gate pre-activations (both products share them), of ``hx`` and ``cx``, and the
    gradient reaching each step's output (for ``W_hr``'s). What does not depend on the incoming gradient
    (the activations' derivatives) is computed for every step at once, ahead of the loop."""
    length, batch = reserve.shape[:2]
    hidden = reserve.shape[-1] // 5
    i, f, g, o, c = np.moveaxis(reserve.reshape(length, batch, 5, hidden), 2, 0)
    tc = np.tanh(c)
    # d_gates[t] = [dc * by_cell (i, f, g: three blocks), ds * by_output (o)]
    by_cell = np.empty((length, batch, 3, hidden), reserve.dtype)
    np.multiply(g, i * (1 - i), out=by_cell[:, :, 0])
    np.multiply(_previous(c, cx, reverse), f * (1 - f), out=by_cell[:, :, 1])
    np.multiply(i, 1 - g * g, out=by_cell[:, :, 2])
    by_output = tc * (o * (1 - o))
    output_to_cell = o * (1 - tc * tc)
    d_gates = np.empty((length, batch, 4, hidden), reserve.dtype)
    d_out = np.empty((length,) + grad_hy.shape, reserve.dtype) if w_hr is not None else None
    dh = grad_hy.copy()
    dc = grad_cy.copy()
    tmp = np.empty((batch, hidden), reserve.dtype)
    for t in _steps(length, not reverse):
        dh += grad_output[t]
        if w_hr is None:
            ds = dh
        else:
            d_out[t] = dh
            ds = dh @ w_hr
        np.multiply(ds, by_output[t], out=d_gates[t, :, 3])
        np.multiply(ds, output_to_cell[t], out=tmp)
        dc += tmp
        np.multiply(dc[:, None], by_cell[t], out=d_gates[t, :, :3])
        dc *= f[t]
        _matmul(d_gates[t].reshape(batch, 4 * hidden), w_hh, dh)
    return d_gates.reshape(length, batch, 4 * hidden), dh, dc, d_out


def _lstm_backward_cells(kernel, product, grad_output, grad_hy, grad_cy, cx, w_hh, reserve, reverse):
    """`_lstm_backward` (no projection) with the compiled cell: per step, the kernel from the product
    ``dh``, ``grad_output[t]``, the cell gradient and the reserve to ``d_gates[t]`` and the previous cell
    gradient, then the product ``dh = d_gates[t] W_hh`` (by ``product`` where given, else NumPy)."""
    length, batch = reserve.shape[:2]
    hidden = reserve.shape[-1] // 5
    order = np.fromiter(_steps(length, not reverse), np.int64)
    before = order[::-1]  # the steps in the forward's order, whose previous cells the kernel reads
    first = np.empty((batch, 5 * hidden), reserve.dtype)  # cx, strided as the reserve's cells
    first[:, 4 * hidden:] = cx
    c_prev = _after(reserve, first[:, 4 * hidden:], before, 4 * hidden)[::-1]
    d_gates = np.empty((length, batch, 4 * hidden), reserve.dtype)
    dh = _product_buffer(batch, hidden, reserve.dtype, product, grad_hy)
    dc = (np.array(grad_cy, order="C"), np.empty((batch, hidden), reserve.dtype))  # cell gradient, in and out by turns
    grad_output = np.ascontiguousarray(grad_output)
    table = kernel.table({"dh": _address(dh), "go": _per_step(grad_output, order), "c_prev": c_prev,
                          "dc": np.array([_address(dc[k % 2]) for k in range(length)], np.uint64),
                          "dc_out": np.array([_address(dc[(k + 1) % 2]) for k in range(length)], np.uint64),
                          **_blocks("ifgoc", reserve, order, hidden),
                          **_blocks(("d_i", "d_f", "d_g", "d_o"), d_gates, order, hidden)})
    if product is not None:
        products, held = _products(product, w_hh, _per_step(d_gates, order), dh)
        _run_steps(batch, product, (kernel, kernel.rows(table)), (product, products))
        return d_gates, np.ascontiguousarray(dh[:, :hidden]), dc[length % 2], None
    for row, t in zip(kernel.rows(table), order.tolist()):
        kernel.run(row, batch)
        _matmul(d_gates[t], w_hh, dh)
    return d_gates, dh, dc[length % 2], None


def _gru_backward_cells(kernel, product, grad_output, grad_hy, w_hh, reserve, prev, reverse):
    """`_gru_backward` with the compiled cell: per step, the kernel from the carry ``dh z``, the product
    ``prod`` and ``grad_output[t]`` to the gate gradients and the next carry, then the product
    ``prod = d_hh[t] W_hh`` (by ``product`` where given, else NumPy)."""
    length, batch = reserve.shape[:2]
    hidden = reserve.shape[-1] // 4
    order = np.fromiter(_steps(length, not reverse), np.int64)
    d_x = np.empty((length, batch, 3 * hidden), reserve.dtype)
    d_hh = np.empty_like(d_x)
    carry = (np.array(grad_hy, order="C"), np.empty((batch, hidden), reserve.dtype))
    prod = _product_buffer(batch, hidden, reserve.dtype, product, 0)
    grad_output = np.ascontiguousarray(grad_output)
    table = kernel.table({"prod": _address(prod), "go": _per_step(grad_output, order), "h_prev": _per_step(prev, order),
                          "carry": np.array([_address(carry[k % 2]) for k in range(length)], np.uint64),
                          "carry_out": np.array([_address(carry[(k + 1) % 2]) for k in range(length)], np.uint64),
                          "d_xn": _per_step(d_x, order, 2 * hidden),
                          **_blocks(("r", "z", "n", "h_n"), reserve, order, hidden),
                          **_blocks(("d_r", "d_z", "d_n"), d_hh, order, hidden)})
    if product is not None:
        products, held = _products(product, w_hh, _per_step(d_hh, order), prod)
        _run_steps(batch, product, (kernel, kernel.rows(table)), (product, products))
    else:
        for row, t in zip(kernel.rows(table), order.tolist()):
            kernel.run(row, batch)
            _matmul(d_hh[t], w_hh, prod)
    d_x[:, :, :2 * hidden] = d_hh[:, :, :2 * hidden]
    return d_x, d_hh, carry[length % 2] + prod[:, :hidden]


def _gru_backward(grad_output, grad_hy, w_hh, output, reserve, prev, reverse):
    """Gradients of the input projection and of ``h W_hh^T + b_hh``, and of ``hx``; the activations'
    derivatives are computed for every step at once, ahead of the loop."""
    length, batch = output.shape[:2]
    hidden = reserve.shape[-1] // 4
    r, z, n, h_n = np.moveaxis(reserve.reshape(length, batch, 4, hidden), 2, 0)
    by_z = (prev - n) * (z * (1 - z))
    by_n = (1 - z) * (1 - n * n)
    by_r = h_n * (r * (1 - r))
    d_x = np.empty((length, batch, 3, hidden), output.dtype)
    d_hh = np.empty_like(d_x)
    dh = grad_hy.copy()
    tmp = np.empty_like(dh)
    for t in _steps(length, not reverse):
        dh += grad_output[t]
        np.multiply(dh, by_z[t], out=d_hh[t, :, 1])
        np.multiply(dh, by_n[t], out=d_x[t, :, 2])
        np.multiply(d_x[t, :, 2], by_r[t], out=d_hh[t, :, 0])
        np.multiply(d_x[t, :, 2], r[t], out=d_hh[t, :, 2])
        dh *= z[t]
        dh += _matmul(d_hh[t].reshape(batch, 3 * hidden), w_hh, tmp)
    d_x[:, :, :2] = d_hh[:, :, :2]
    return d_x.reshape(length, batch, 3 * hidden), d_hh.reshape(length, batch, 3 * hidden), dh


def _flat_product(a, b):
    """``sum over t of a[t].T @ b[t]`` as one matmul."""
    return array_product(a.reshape(-1, a.shape[-1]).T, b.reshape(-1, b.shape[-1]))


def _backward_cpu(spec, mode, grad_output, grad_hy, grad_cy, hx, cx, w_hh, w_hr, output, reserve, reverse):
    ct = spec[0].compute.np
    grad_output, grad_hy, hx, output = (a.astype(ct, copy=False) for a in (grad_output, grad_hy, hx, output))
    w_hh = np.ascontiguousarray(w_hh, ct)  # (a transposed operand halves the speed of the per-step products)
    reserve = np.ascontiguousarray(reserve).view(ct)
    grad_cx = np.zeros(spec[2].shape, ct)
    grad_w_hr = np.zeros(spec[5].shape, ct)
    if output.shape[0] == 0:
        return (np.zeros(spec[0].shape, ct), grad_hy.copy(), grad_cy.astype(ct), np.zeros(spec[3].shape, ct),
                np.zeros(spec[4].shape, ct), grad_w_hr)
    prev = _previous(output, hx, reverse)
    length, batch = output.shape[:2]
    kernel, product = (None, None) if w_hr is not None else _cell("backward", mode, ct, batch, w_hh.shape[1],
                                                                  False, *w_hh.shape)
    if mode == "LSTM" and kernel is not None:
        d_x, grad_hx, grad_cx, _ = _lstm_backward_cells(kernel, product, grad_output, grad_hy,
                                                        grad_cy.astype(ct, copy=False), cx.astype(ct, copy=False),
                                                        w_hh, reserve, reverse)
        d_hh = d_x
    elif mode == "LSTM":
        w_hr = None if w_hr is None else np.ascontiguousarray(w_hr, ct)
        d_x, grad_hx, grad_cx, d_out = _lstm_backward(grad_output, grad_hy, grad_cy.astype(ct, copy=False),
                                                         cx.astype(ct, copy=False), w_hh, w_hr, reserve, reverse)
        d_hh = d_x
        if w_hr is not None:
            hidden = reserve.shape[-1] // 5
            shaped = np.tanh(reserve[..., 4 * hidden:]) * reserve[..., 3 * hidden:4 * hidden]
            grad_w_hr = _flat_product(d_out, shaped)
    elif mode == "GRU" and kernel is not None:
        d_x, d_hh, grad_hx = _gru_backward_cells(kernel, product, grad_output, grad_hy, w_hh, reserve, prev, reverse)
    elif mode == "GRU":
        d_x, d_hh, grad_hx = _gru_backward(grad_output, grad_hy, w_hh, output, reserve, prev, reverse)
    else:
        d_x, d_hh, grad_hx = _simple_backward(mode, grad_output, grad_hy, w_hh, output, reverse)
    return d_x, grad_hx, grad_cx, _flat_product(d_hh, prev), d_hh.sum((0, 1)), grad_w_hr


defop("_rnn_layer_backward(str mode, Tensor grad_output, Tensor grad_hy, Tensor grad_cy, Tensor hx, Tensor? cx, "
      "Tensor w_hh, Tensor? w_hr, Tensor output, Tensor reserve, bool reverse) -> (Tensor grad_input, "
      "Tensor grad_hx, Tensor grad_cx, Tensor grad_w_hh, Tensor grad_b_hh, Tensor grad_w_hr)",
      meta=_backward_meta, cpu=_backward_cpu, kind="recurrence", variants=(),
      doc="Backpropagation through time of ``_rnn_layer``: the gradients of its input projection, states and "
          "weights from those of its output and final states, its ``output`` and ``reserve``.")
