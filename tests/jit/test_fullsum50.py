"""A full reduction split in parts combines its partial results in machine code (`codegen.split_combine`): the
result's dtype, shape and value as torch's, the kernel's partials folded left to right, the same bits at one and
two threads, and calls at once keeping their own partials (they are their arena's)."""

import threading

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.codegen.target import CpuTarget

N = (1 << 18) + 5  # split (`kernel.SPLIT_MIN_WORK`), the last part shorter


def _executable(compiled):
    (entry,) = compiled._fast.values()
    return entry.executable


def _split_kernel(compiled, x):
    """The split of the graph's split reduction kernel (None without one)."""
    return next((k._kernel.source.split for k in compiled.lower(x).kernels if k._kernel.source.split), None)


CASES = [
    ("sum", lambda t: t.sum()), ("mean", lambda t: t.mean()), ("prod", lambda t: (t * 0.01 + 1).prod()),
    ("amax", lambda t: t.amax()), ("amin", lambda t: t.amin()), ("max", lambda t: t.max()),
    ("min", lambda t: t.min()), ("sum keepdim", lambda t: t.sum(0, keepdim=True)),
    ("mean keepdim", lambda t: t.mean(0, keepdim=True)), ("sum dtype float64", lambda t: t.sum(dtype=jt.float64
                                                                                           if isinstance(t, jt.Tensor)
                                                                                           else torch.float64)),
]


# (a float16 product with its prologue is no split kernel: the graph rounds the factors in a kernel of their own)
FLOAT_CASES = [(name, fn, dtype) for name, fn in CASES for dtype in (np.float32, np.float64, np.float16)
               if not (name == "prod" and dtype is np.float16)]


@pytest.mark.parametrize("name, fn, dtype", FLOAT_CASES, ids=[f"{c[0]}-{c[2].__name__}" for c in FLOAT_CASES])
def test_split_full_reduction_has_torchs_dtype_shape_and_value(name, fn, dtype):
    values = (np.random.default_rng(5).standard_normal(N) * 0.1).astype(dtype)
    x, tx = jt.tensor(values), torch.from_numpy(values)
    compiled = jt.compile(fn)
    assert _split_kernel(compiled, x) is not None
    got, eager, want = compiled(x), fn(x), fn(tx)
    assert got.dtype == eager.dtype and str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert tuple(got.shape) == tuple(want.shape) == tuple(eager.shape)
    rtol = {np.float16: 2e-2, np.float32: 1e-4, np.float64: 1e-10}[dtype]
    np.testing.assert_allclose(got.double().numpy(), want.double().numpy(), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(got.double().numpy(), eager.double().numpy(), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_, np.uint8], ids=str)
def test_split_integer_and_bool_sums_are_int64_and_exact(dtype):
    rng = np.random.default_rng(6)
    values = rng.random(N) < 0.5 if dtype is np.bool_ else rng.integers(0, 255 if dtype is np.uint8 else 2**31 - 1,
                                                                         N).astype(dtype)
    x, tx = jt.tensor(values), torch.from_numpy(values)
    compiled = jt.compile(lambda t: t.sum())
    assert _split_kernel(compiled, x) is not None
    got, want = compiled(x), tx.sum()
    assert got.dtype == jt.int64 and want.dtype == torch.int64 and got.shape == ()
    assert got.item() == want.item()


def _pairwise(partials):
    """NumPy's pairwise sum of 16 values (what np.add.reduce gave the partials before), step by step."""
    lanes = [partials[j] + partials[j + 8] for j in range(8)]
    while len(lanes) > 1:
        lanes = [lanes[j] + lanes[j + 1] for j in range(0, len(lanes), 2)]
    return lanes[0]


def _left_to_right(partials):
    total = partials[0]
    for p in partials[1:]:
        total = total * p
    return total


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=str)
def test_split_sum_folds_the_kernels_partials_in_numpys_pairwise_order(threads, dtype, monkeypatch):
    """The defined order: the kernel's fixed parts, then their partials as NumPy's pairwise sum adds 16 (the bits
    the NumPy combine gave), the mean dividing that total by the count; a product's partials left to right."""
    monkeypatch.setenv("JITORCH_NUM_THREADS", threads)
    values = np.random.default_rng(7).standard_normal(N).astype(dtype)
    x = jt.tensor(values * 1000)
    for fn, order, divide in ((lambda t: t.sum(), _pairwise, False), (lambda t: t.mean(), _pairwise, True),
                              (lambda t: (t * 1e-6 + 1).prod(), _left_to_right, False)):
        compiled = jt.compile(fn)
        got = compiled(x).numpy()
        (arena,) = _executable(compiled)._arenas
        partials = arena.buffers[-1]
        assert partials.shape == (CpuTarget.split_parts,) == (16,) and partials.dtype == dtype
        total = order(list(partials))
        if divide:
            total = total / dtype(N)
        assert got.tobytes() == np.asarray(total, dtype).tobytes()


def test_split_reductions_have_the_same_bits_at_one_and_two_threads(monkeypatch):
    values = np.random.default_rng(8).standard_normal(N).astype(np.float32)
    values[N // 3] = np.nan
    x = jt.tensor(values)
    fns = [lambda t: t.sum(), lambda t: t.mean(), lambda t: (t * 0.001 + 1).prod(), lambda t: t[1:].amax(),
           lambda t: t.nan_to_num().sum(), lambda t: t.nan_to_num().amin()]
    results = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("JITORCH_NUM_THREADS", threads)
        results[threads] = [jt.compile(f)(x).numpy().tobytes() for f in fns]
    assert results["1"] == results["2"]


def test_calls_at_once_of_a_split_sum_keep_their_own_partials():
    """Each in-flight call takes an arena of its own, and with it the partials its kernel writes."""
    rng = np.random.default_rng(9)
    arrays = [rng.standard_normal(N).astype(np.float32) + k for k in range(4)]
    compiled = jt.compile(lambda t: t.sum())
    inputs = [jt.tensor(a) for a in arrays]
    want = [compiled(x).item() for x in inputs]
    errors = []

    def work(k):
        for _ in range(20):
            got = compiled(inputs[k]).item()
            if got != want[k]:
                errors.append((k, got, want[k]))

    workers = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert len(_executable(compiled)._arenas) >= 1


@pytest.mark.parametrize("fn, atol", [(lambda x, y: (x @ y).sum(), 0.1), (lambda x, y: (x @ y).t().sum(), 0.1),
                                      (lambda x, y: (x @ y).reshape(-1)[7:].mean(), 1e-6)],
                         ids=["product", "transposed", "view"])
def test_split_sum_of_an_eager_steps_result_reads_it_compact(fn, atol):
    """The split kernel's argument patching is any kernel's: a product's result (an eager step's, or a view of it)
    is made compact before the kernel reads it."""
    rng = np.random.default_rng(10)
    a, b = rng.standard_normal((512, 64)).astype(np.float32), rng.standard_normal((64, 1024)).astype(np.float32)
    compiled = jt.compile(fn)
    got = compiled(jt.tensor(a), jt.tensor(b))
    steps = [s for s in _executable(compiled).steps if getattr(s, "combine", None) is not None]
    assert len(steps) == 1 and steps[0].eager_made
    # (2**19 products of about 8 in size summed to about 100 in float32, in other orders: atol, no rtol)
    want = fn(torch.from_numpy(a).double(), torch.from_numpy(b).double()).numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=atol)
    np.testing.assert_allclose(got.numpy(), fn(jt.tensor(a), jt.tensor(b)).numpy(), rtol=0, atol=atol)
