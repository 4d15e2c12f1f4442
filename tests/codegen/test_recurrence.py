"""The fused cell kernels of LSTM and GRU and their per-step product kernels (jitorch/codegen/recurrence.py):
values and gradients against torch and against the NumPy cells and products, eager and compiled, and what
runs per time step."""

import numpy as np
import pytest

import jitorch as jt
from jitorch.codegen import recurrence
from jitorch.jit import gemm_words
from jitorch.ops import linalg, recurrences
from jitorch.runtime import threads

torch = pytest.importorskip("torch")
# the layers' products run as generated kernels where the selected machine has AVX-512 (JITORCH_CPU)
AVX512 = recurrence.product_kernel("float32", 2, 2) is not None

# (mode, layers, bidirectional, batch_first, bias)
CASES = [("LSTM", 2, False, False, True), ("LSTM", 2, True, True, False), ("LSTM", 1, True, False, True),
         ("GRU", 2, False, True, True), ("GRU", 2, True, False, False), ("GRU", 1, False, False, True)]


def _count(monkeypatch, kind, key):
    """{key(kernel): steps run} of the ``kind`` kernels (`CellKernel` or `ProductKernel`) while the test runs,
    counted through their ``run`` and through the row programs that run a whole loop's calls
    (`threads.run_row_program`: per call an entry point and its arguments)."""
    counts = {}
    run = kind.run

    def counting(self, row, batch):
        counts[key(self)] = counts.get(key(self), 0) + 1
        run(self, row, batch)
    monkeypatch.setattr(kind, "run", counting)
    program = threads.run_row_program

    def counting_program(calls, rows, parts):
        kernels = {k.address: k for _, k in [*recurrence._kernels.items(), *recurrence._products.items()]
                   if isinstance(k, kind)}
        for entry in calls[1::2][:int(calls[0])].tolist():
            if entry in kernels:
                counts[key(kernels[entry])] = counts.get(key(kernels[entry]), 0) + 1
        return program(calls, rows, parts)
    monkeypatch.setattr(threads, "run_row_program", counting_program)
    return counts


@pytest.fixture
def counted(monkeypatch):
    """{(mode, direction): kernel steps run} while the test runs."""
    return _count(monkeypatch, recurrence.CellKernel,
                  lambda kernel: next(k[1::-1] for k, v in recurrence._kernels.items() if v is kernel))


@pytest.fixture
def products(monkeypatch):
    """{(k, n): product kernel steps run} while the test runs."""
    return _count(monkeypatch, recurrence.ProductKernel, lambda kernel: (kernel.k, kernel.n))


def _modules(mode, layers, bidirectional, batch_first, bias, dtype):
    """A jitorch module and its torch twin with the same weights."""
    kwargs = dict(num_layers=layers, bidirectional=bidirectional, batch_first=batch_first, bias=bias)
    t = getattr(torch.nn, mode)(3, 5, dtype=getattr(torch, dtype), **kwargs)
    m = getattr(jt.nn, mode)(3, 5, dtype=getattr(jt, dtype), **kwargs)
    for name, p in t.named_parameters():
        getattr(m, name).data.copy_(jt.tensor(p.detach().numpy()))
    return m, t


def _loss_and_grads(lib, module, mode, x, states, weight, step=None):
    """(output, final states, gradients of input, states and parameters) of a weighted sum of the outputs
    and the squares of the final states; ``step``: the function to run it (a compiled one)."""
    xs = lib.tensor(x, requires_grad=True)
    hs = [lib.tensor(s, requires_grad=True) for s in states]

    def loss_of(xs, *hs):
        out, final = module(xs, tuple(hs) if mode == "LSTM" else hs[0])
        final = final if mode == "LSTM" else (final,)
        return (out * lib.tensor(weight)).sum() + sum((f * f).sum() for f in final), out, final
    loss, out, final = (step or loss_of)(xs, *hs)
    loss.backward()
    grads = [xs.grad, *(h.grad for h in hs), *(p.grad for p in module.parameters())]
    return [v.detach().numpy() for v in (out, *final, *grads)]


def _inputs(rng, mode, layers, bidirectional, batch_first, dtype, length=6, batch=4):
    dirs = 2 if bidirectional else 1
    x = rng.normal(size=(batch, length, 3) if batch_first else (length, batch, 3)).astype(dtype)
    states = [rng.normal(size=(layers * dirs, batch, 5)).astype(dtype) for _ in range(2 if mode == "LSTM" else 1)]
    weight = rng.normal(size=x.shape[:2] + (dirs * 5,)).astype(dtype)
    return x, states, weight


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode,layers,bidirectional,batch_first,bias", CASES)
def test_fused_cells_match_torch_eager_and_compiled(mode, layers, bidirectional, batch_first, bias, dtype, rng,
                                                     counted, products):
    m, t = _modules(mode, layers, bidirectional, batch_first, bias, dtype)
    x, states, weight = _inputs(rng, mode, layers, bidirectional, batch_first, dtype)
    expected = _loss_and_grads(torch, t, mode, x, states, weight)
    tol = dict(rtol=1e-9, atol=1e-11) if dtype == "float64" else dict(rtol=2e-5, atol=2e-6)
    eager = _loss_and_grads(jt, m, mode, x, states, weight)
    for g, e in zip(eager, expected, strict=True):
        np.testing.assert_allclose(g, e, **tol)
    # one kernel call per time step, layer and direction, forward and backward
    calls = x.shape[0 if not batch_first else 1] * layers * (2 if bidirectional else 1)
    assert counted == {(mode, "forward"): calls, (mode, "backward"): calls}
    # and one product kernel call each: h W_hh^T (k hidden, n gates), d_gates W_hh (k gates, n hidden)
    width = (4 if mode == "LSTM" else 3) * 5
    assert products == ({(5, width): calls, (width, 5): calls} if AVX512 else {})
    if dtype == "float64":  # (the compiled graphs run the same op as eager: once is enough)
        return
    m.zero_grad()
    compiled = jt.compile(lambda xs, *hs: _compiled_loss(m, mode, xs, hs, weight))
    got = _loss_and_grads(jt, m, mode, x, states, weight, compiled)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, **tol)
    # the compiled graphs run the same cells (a first call may also run the function eagerly while tracing)
    assert counted[mode, "backward"] == 2 * calls and counted[mode, "forward"] in (2 * calls, 3 * calls)


def _compiled_loss(m, mode, xs, hs, weight):
    out, final = m(xs, tuple(hs) if mode == "LSTM" else hs[0])
    final = final if mode == "LSTM" else (final,)
    return (out * jt.tensor(weight)).sum() + sum((f * f).sum() for f in final), out, final


@pytest.mark.parametrize("numpy_products", [False, True])
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
@pytest.mark.parametrize("reverse,batch", [(False, 3), (True, 1), (False, 17)])
def test_fused_cells_match_the_numpy_cells(mode, reverse, batch, numpy_products, rng, monkeypatch):
    """The layer op and its backward, with the compiled cells and products (or the compiled cells and
    NumPy's products) and with NumPy's cells, in float64; one kernel serves every batch size (its outer
    loop runs over the rows the call names)."""
    gates, hidden, length = (4 if mode == "LSTM" else 3), 6, 5
    x, hx, cx, w_hh, b_hh, g_out, g_hy, g_cy = (jt.tensor(rng.normal(size=s)) for s in [
        (length, batch, gates * hidden), (batch, hidden), (batch, hidden), (gates * hidden, hidden),
        (gates * hidden,), (length, batch, hidden), (batch, hidden), (batch, hidden)])
    cx = cx if mode == "LSTM" else None
    ops = jt.ops.registry.OPS

    def run():
        output, h_n, c_n, reserve = ops["_rnn_layer"](mode, x, hx, cx, w_hh, b_hh, None, reverse)
        grads = ops["_rnn_layer_backward"](mode, g_out, g_hy, g_cy, hx, cx, w_hh, None, output, reserve, reverse)
        return [v.numpy() for v in (output, h_n, c_n, *grads)]
    if numpy_products:
        monkeypatch.setattr(recurrences, "PRODUCT_KERNEL", None)
    fused = run()
    ld = None if numpy_products or not AVX512 else recurrence.product_kernel("float64", hidden, gates * hidden).ld
    assert recurrence._kernels[("forward", mode, "float64", hidden, True, ld)] is not None
    monkeypatch.setattr(recurrences, "CELL_KERNEL", None)
    for got, expected in zip(fused, run(), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)


def test_compiled_lstm_step_runs_one_product_and_one_kernel_per_time_step(monkeypatch, counted, products):
    """The structure of a compiled LSTM training step: the input projections of all time steps are one
    product per layer ahead of the recurrence, each layer one ``_rnn_layer`` node, and inside it one
    product kernel and one cell kernel per time step (no unrolled loop, no per-step ufuncs)."""
    m = jt.nn.LSTM(4, 8, 2)
    x = jt.randn(7, 3, 4)
    matmuls = []
    matmul = np.matmul

    def counting(a, b, *args, **kwargs):
        matmuls.append((a.shape, b.shape))
        return matmul(a, b, *args, **kwargs)
    step = jt.compile(lambda x: m(x)[0].pow(2).sum())
    step(x).backward()  # (compiled and linked before counting)
    nodes = [n.op.name for n in step.lower(x).graph.nodes]
    assert nodes.count("_rnn_layer") == 2 and nodes.count("matmul") == 2
    counted.clear()
    products.clear()
    monkeypatch.setattr(recurrences.np, "matmul", counting)
    # (the input projections through `array_product`, whose NumPy matmul this counts, rather than the gemm call
    # kept for their operands, jit/gemm_words.py: the same operands reach BLAS either way)
    monkeypatch.setattr(gemm_words, "product", lambda a, b, out: linalg.array_product(a, b, out))
    step(x)
    assert counted == {("LSTM", "forward"): 14}
    # each layer's input projection x W_ih^T for all steps through NumPy, h W_hh^T per step by the kernel
    # (by NumPy without AVX-512)
    if AVX512:
        assert matmuls == [((21, 4), (4, 32)), ((21, 8), (8, 32))] and products == {(8, 32): 14}
    else:
        steps = [((3, 8), (8, 32))] * 7
        assert matmuls == [((21, 4), (4, 32))] + steps + [((21, 8), (8, 32))] + steps
        assert products == {}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("k,n", [(200, 800), (7, 33), (24, 6), (1, 1)])
def test_product_kernel_matches_numpy(dtype, k, n, rng):
    """`ProductKernel` against NumPy's product (float64 sums of the float32 operands as the oracle) for
    rows in whole register blocks and not, columns in whole panels and not; the padding columns it
    writes are zeros and it writes nothing past them. (Built for any machine here: the layers use it only
    with AVX-512.)"""
    kernel = recurrence._products(dtype, k, n)
    w = rng.normal(size=(n, k)).astype(dtype).T  # (a transposed view, as W_hh^T: packing reads any strides)
    packed = kernel.pack(w)
    assert kernel.ld == sum(recurrence.panel_widths(n, kernel.panel)) and kernel.ld - kernel.panel < n <= kernel.ld
    for rows in (1, 4, 5, 7, 23):
        a = rng.normal(size=(rows, k)).astype(dtype)
        out = np.full((rows + 1, kernel.ld), 7.0, dtype)  # (one row more: must stay untouched)
        table = kernel.table({"a": recurrences._address(a), "w": recurrences._address(packed),
                              "out": recurrences._address(out)})
        kernel.run(kernel.rows(table)[0], rows)
        expected = a.astype(np.float64) @ w.astype(np.float64)
        tol = dict(rtol=1e-12, atol=1e-12) if dtype == "float64" else dict(rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out[:rows, :n], expected, **tol)
        assert (out[:rows, n:] == 0).all() and (out[rows:] == 7).all()


def test_no_product_kernel_for_an_empty_operand():
    """A product with k or n zero is left to NumPy (the kernel's k loop would read an element)."""
    assert recurrence._products("float32", 0, 8) is None and recurrence._products("float64", 8, 0) is None


def test_many_rows_of_a_long_weight_keep_numpys_product(rng, products, counted):
    """A batch of more than 32 rows whose backward product has a long k (4 x 300 = 1200: 150 KB panels)
    runs that product through NumPy (`ProductKernel.serves`) and the forward's through the kernel; the cells
    then read compact and padded product rows, and values and gradients still match torch."""
    t = torch.nn.LSTM(3, 300)
    m = jt.nn.LSTM(3, 300)
    for name, p in t.named_parameters():
        getattr(m, name).data.copy_(jt.tensor(p.detach().numpy()))
    x, states, weight = _inputs(rng, "LSTM", 1, False, False, "float32", length=3, batch=40)
    states = [rng.normal(size=(1, 40, 300)).astype("float32") for _ in range(2)]
    weight = rng.normal(size=(3, 40, 300)).astype("float32")
    expected = _loss_and_grads(torch, t, "LSTM", x, states, weight)
    got = _loss_and_grads(jt, m, "LSTM", x, states, weight)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5)
    assert products == ({(300, 1200): 3} if AVX512 else {})
    assert counted == {("LSTM", "forward"): 3, ("LSTM", "backward"): 3}


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
@pytest.mark.parametrize("batch", [10, 13])
def test_a_layers_rows_split_across_threads_give_the_one_thread_bits(mode, batch, rng, monkeypatch):
    """A layer's batch rows are independent recurrences: at two threads each range of rows (at least a register
    block of the product's rows) runs the whole loop of product and cell kernels on its own thread (one fork per
    layer and direction, forward and backward, `recurrences._run_steps`), and every value and gradient has the
    one-thread bits (13 rows: ranges of 7 and 6, not whole blocks). Without AVX-512 the products are NumPy's,
    per step, and nothing forks."""
    monkeypatch.setattr(recurrences, "SPLIT_MIN_WORK", 1)  # (split however small)
    m, _ = _modules(mode, 2, True, False, True, "float32")
    x, states, weight = _inputs(rng, mode, 2, True, False, "float32", batch=batch)
    before = jt.get_num_threads()
    try:
        jt.set_num_threads(1)
        one = _loss_and_grads(jt, m, mode, x, states, weight)
        jt.set_num_threads(2)
        for p in m.parameters():
            p.grad = None
        forks, parts = threads.counters["forks"], threads.counters["parts"]
        two = _loss_and_grads(jt, m, mode, x, states, weight)
    finally:
        jt.set_num_threads(before)
    assert [a.tobytes() for a in one] == [b.tobytes() for b in two]
    layer_calls = 2 * 2 * 2  # layers, directions, forward and backward
    if AVX512:
        assert threads.counters["forks"] - forks >= layer_calls and threads.counters["parts"] - parts >= layer_calls
