"""Large eager ufunc passes on the thread team (`runtime.ufunc_parts`): NumPy's own loops on each thread's
range give the single call's bits, and what cannot split says so without writing anything."""

import numpy as np
import pytest

from jitorch.ops import erf_float32
from jitorch.runtime import threads, ufunc_parts

N = ufunc_parts.SPLIT_MIN + 4099  # (the parts' bound falls mid-array; the last SIMD vector is partial)


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.setitem(threads._settings, "threads", 2)
    # every call asks the team, even where a loaded machine's workers came late to the last one
    monkeypatch.setattr(ufunc_parts, "BACKOFF", 0)
    monkeypatch.setitem(ufunc_parts._backoff, "calls", 0)
    yield


def _values(dtype, n=N, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        a = (rng.standard_normal(n) * 30).astype(dtype)
        a[:6] = [np.nan, np.inf, -np.inf, -0.0, 0.0, np.finfo(dtype).tiny / 4]  # (a subnormal)
        return a
    return rng.integers(-1000, 1000, n).astype(dtype)


CALLS = [
    (np.add, 2), (np.subtract, 2), (np.multiply, 2), (np.true_divide, 2), (np.maximum, 2), (np.greater, 2),
    (np.exp, 1), (np.tanh, 1), (np.log, 1), (np.sqrt, 1), (np.negative, 1), (np.absolute, 1), (np.sin, 1),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ufunc,nin", CALLS, ids=[u.__name__ for u, _ in CALLS])
def test_a_split_call_gives_numpys_bits(two_threads, ufunc, nin, dtype):
    x, y = _values(dtype), _values(dtype, seed=1)
    with np.errstate(all="ignore"):
        for operands in ([x, y][:nin], [x, dtype(0.75)][:nin]):
            want = ufunc(*operands)
            out = np.empty_like(want)
            forks, parts = threads.counters["forks"], threads.counters["parts"]
            assert ufunc_parts.split_call(ufunc, operands, out)
            assert (threads.counters["forks"], threads.counters["parts"]) == (forks + 1, parts + 1)
            assert out.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_integer_calls_split_too(two_threads, dtype):
    x, y = _values(dtype), _values(dtype, seed=1)
    for ufunc in (np.add, np.multiply, np.maximum):
        out = np.empty_like(x)
        assert ufunc_parts.split_call(ufunc, [x, y], out)
        assert out.tobytes() == ufunc(x, y).tobytes()


def test_an_in_place_call_splits(two_threads):
    x, y = _values(np.float32), _values(np.float32, seed=1)
    want = x * y
    assert ufunc_parts.split_call(np.multiply, [x, y], x)
    assert x.tobytes() == want.tobytes()


def test_what_does_not_split_writes_nothing(two_threads, monkeypatch):
    x = _values(np.float32)
    out = np.full_like(x, 7.0)
    small = np.ones(ufunc_parts.SPLIT_MIN - 1, np.float32)
    forks = threads.counters["forks"]
    refused = [
        (np.add, [small, small], np.empty_like(small)),  # below the threshold
        (np.add, [x, x.astype(np.float64)], out),  # NumPy would cast an operand
        (np.add, [x[::-1], x], out),  # not C-contiguous
        (np.add, [x[:-1], x[1:]], out[:-1].copy()[:-1]),  # sizes differ
        (np.add, [x.astype(object), x.astype(object)], np.empty(N, object)),  # a loop that needs the GIL
    ]
    for ufunc, operands, into in refused:
        assert not ufunc_parts.split_call(ufunc, operands, into)
    monkeypatch.setitem(threads._settings, "threads", 1)
    assert not ufunc_parts.split_call(np.add, [x, x], out)  # one thread
    assert threads.counters["forks"] == forks and (out == 7.0).all()


def test_a_call_inside_a_part_runs_its_parts_inline(two_threads):
    x, y = _values(np.float32), _values(np.float32, seed=1)
    outs = [np.empty_like(x), np.empty_like(x)]
    inline = threads.counters["inline"]
    threads.run_parts(lambda i: ufunc_parts.split_call(np.multiply, [x, y], outs[i]), [(0,), (1,)])
    assert threads.counters["inline"] == inline + 2  # the team was busy: each ran both its parts itself
    assert outs[0].tobytes() == outs[1].tobytes() == (x * y).tobytes()


def test_a_program_of_chunked_passes_with_scratch_gives_the_loops_bits(two_threads):
    # erf: 21 passes, three scratch buffers per part, 32k-element chunks; against erf_into on one chunk
    x = _values(np.float32)[:N] / 10
    forks = threads.counters["forks"]
    got = erf_float32.erf(x)
    assert threads.counters["forks"] == forks + 1
    want = np.empty_like(x)
    erf_float32.erf_into(x, want, *(np.empty_like(x) for _ in range(3)))
    assert got.tobytes() == want.tobytes()


def test_a_program_refuses_arrays_of_other_dtypes_or_sizes(two_threads):
    program = ufunc_parts.Program([(np.add, (("arg", 0), np.float32(1), ("arg", 1)))], (np.float32, np.float32))
    x = _values(np.float32)
    out = np.zeros_like(x)
    assert not program.run(N, x.astype(np.float64), out)
    assert not program.run(N, x[:-1], out)
    assert not (out != 0).any()
    assert program.run(N, x, out) and out.tobytes() == (x + np.float32(1)).tobytes()


def test_calls_after_one_no_worker_came_to_run_here_for_a_while(two_threads, monkeypatch):
    monkeypatch.setattr(ufunc_parts, "BACKOFF", 3)

    def late(parts, entry):  # the workers asleep or off the cores: the calling thread took every part back
        run = threads.KERNEL_ENTRY(entry)
        for address, lo, hi in parts:
            run(address, lo, hi)
        threads.counters["taken back"] += len(parts) - 1
        return True
    x = _values(np.float32)
    out = np.empty_like(x)
    forked = []
    monkeypatch.setattr(threads, "_forked", lambda parts, entry: forked.append(1) or late(parts, entry))
    # asks, then 3 calls leave it to the caller (False: nothing written), then asks again
    split = []
    for _ in range(5):
        out[:] = 0
        split.append(ufunc_parts.split_call(np.exp, [x], out))
        assert out.tobytes() == (np.exp(x) if split[-1] else np.zeros_like(x)).tobytes()
    assert split == [True, False, False, False, True]
    assert len(forked) == 2 and ufunc_parts._backoff["calls"] == 3
