"""Independent products of a compiled call run at once, each on one thread (`jit.interop`): which steps pair, which
thread runs each product, errors raised from the worker, and bits that do not depend on the thread count."""

import contextlib
import hashlib
import threading
from pathlib import Path

import numpy as np
import pytest

import jitorch as jt
from jitorch.jit import executor, interop
from jitorch.profiler import profile
from jitorch.runtime import blas_calls, threads
from tests.support import load_script

MODELS = Path(__file__).parents[2] / "benchmarks" / "models.py"


def _two_products(x, a, b):
    # (each product read by a kernel: both results live in the arena)
    return (x @ a).relu() + (x @ b).sigmoid()


def _operands(n=64):
    rng = np.random.default_rng(0)
    return [jt.tensor(rng.standard_normal((n, n)).astype(np.float32)) for _ in range(3)]


@contextlib.contextmanager
def _built():
    """The compiled graphs built inside the block, in a list."""
    built = []
    original = executor.CompiledGraph.__init__

    def capture(self, *a, **k):
        original(self, *a, **k)
        built.append(self)
    executor.CompiledGraph.__init__ = capture
    try:
        yield built
    finally:
        executor.CompiledGraph.__init__ = original


def _steps(fn, *args):
    """The steps of the compiled graph that ``jt.compile(fn)(*args)`` runs."""
    with _built() as built:
        compiled = jt.compile(fn)
        compiled(*args)
    (graph,) = built
    return compiled, graph.steps


def _rendezvous(monkeypatch, fail_second=False):
    """Replace the paired products' computation by one that records its thread, and whose first call waits until
    the second has started (a worker claims the second while the first waits: a product the worker has not claimed
    would be run by the calling thread after its own); where ``fail_second``, the second raises. The products run as
    Python parts (`interop._whole`): the native gemm calls that plain products run as (`interop._run_native`) are
    turned off."""
    monkeypatch.setattr(interop, "_run_native", lambda products: False)
    ran, started = [], threading.Event()
    whole = interop._whole

    def product(a, b, out):
        if threading.current_thread() is not threading.main_thread():
            started.set()
            ran.append(threading.current_thread().name)
            if fail_second:
                raise ValueError("the second product failed")
        else:
            ran.append(threading.current_thread().name)
            assert started.wait(30), "the second product never started"
        whole(a, b, out)
    monkeypatch.setattr(interop, "_whole", product)
    return ran


def test_two_independent_products_are_one_step(two_threads):
    _, steps = _steps(_two_products, *_operands())
    pairs = [s for s in steps if isinstance(s, executor.ProductPair)]
    assert len(pairs) == 1 and [n.op.name for n in pairs[0].nodes] == ["matmul", "matmul"]
    assert not any(type(s) is executor.EagerStep and s.nodes[0].op.name == "matmul" for s in steps)


def test_a_product_reading_the_other_is_not_paired(two_threads):
    def chained(x, a, b):
        return ((x @ a).relu() @ b).sigmoid()
    _, steps = _steps(chained, *_operands())
    assert not any(isinstance(s, executor.ProductPair) for s in steps)


def test_small_products_are_not_paired(two_threads):
    _, steps = _steps(_two_products, *_operands(8))  # (8x8x8: below PAIR_MIN_WORK)
    assert not any(isinstance(s, executor.ProductPair) for s in steps)


def test_the_pair_runs_on_the_calling_thread_and_a_worker(two_threads, monkeypatch):
    args = _operands()
    compiled = jt.compile(_two_products)
    monkeypatch.setattr(threads, "INTEROP", False)
    expected = compiled(*args)  # (one after the other)
    monkeypatch.setattr(threads, "INTEROP", True)
    ran = _rendezvous(monkeypatch)
    forks = threads.counters["forks"]
    y = compiled(*args)
    assert sorted(ran) == sorted([threading.current_thread().name, "jitorch-1"])
    assert threads.counters["forks"] == forks + 1
    assert np.array_equal(y.numpy(), expected.numpy())


def test_a_pair_of_plain_products_runs_as_native_gemm_calls_on_the_team(two_threads, monkeypatch):
    """Each product of the pair is one gemm call NumPy's matmul would make: both go to the team as native BLAS calls
    in one fork (no GIL hand-over), none as a Python part, with the bits of the products run one after the other."""
    args = _operands()
    compiled = jt.compile(_two_products)
    monkeypatch.setattr(threads, "INTEROP", False)
    expected = compiled(*args)
    monkeypatch.setattr(threads, "INTEROP", True)
    monkeypatch.setattr(interop, "_whole", lambda *a: pytest.fail("a product ran as a Python part"))
    forks, parts, gemms = threads.counters["forks"], threads.counters["parts"], blas_calls.counters["gemm calls"]
    y = compiled(*args)
    assert (threads.counters["forks"], threads.counters["parts"]) == (forks + 1, parts + 1)
    assert blas_calls.counters["gemm calls"] == gemms + 2
    assert y.numpy().tobytes() == expected.numpy().tobytes()


def test_a_profile_shows_each_product_on_its_thread(two_threads, monkeypatch):
    args = _operands()
    compiled = jt.compile(_two_products)
    compiled(*args)
    ran = _rendezvous(monkeypatch)
    with profile() as prof:
        compiled(*args)
    spans = [e for e in prof.events() if e.name == "matmul" and e.kind == "external"]
    assert len(spans) == 2 and len({e.thread for e in spans}) == 2
    assert len(ran) == 2


def test_interop_off_runs_the_pair_one_after_the_other(two_threads, monkeypatch):
    args = _operands()
    compiled = jt.compile(_two_products)
    expected = compiled(*args).numpy()
    monkeypatch.setattr(threads, "INTEROP", False)
    ran = []
    alone = interop.gemm_words.product  # (each product as it runs alone: kept gemm words, or split)

    def product(a, b, out):
        ran.append(threading.current_thread().name)
        alone(a, b, out)
    monkeypatch.setattr(interop.gemm_words, "product", product)
    assert np.array_equal(compiled(*args).numpy(), expected)
    assert ran == [threading.current_thread().name] * 2


@pytest.mark.parametrize("off", [("interop", 1), ("threads", 1), ("split_products", False)])
def test_interop_is_off_at_one_interop_thread_one_thread_or_products_unsplit(two_threads, monkeypatch, off):
    assert threads.interop_enabled()
    monkeypatch.setitem(threads._settings, *off)  # (unsplit: BLAS has its own threads, set_num_threads never called)
    assert not threads.interop_enabled()


def test_an_error_in_the_workers_product_is_raised_by_the_call(two_threads, monkeypatch):
    args = _operands()
    compiled = jt.compile(_two_products)
    expected = compiled(*args).numpy()
    _rendezvous(monkeypatch, fail_second=True)
    with pytest.raises(ValueError, match="the second product failed"):
        compiled(*args)
    monkeypatch.undo()
    with pytest.MonkeyPatch.context() as m:  # the team and the arena are free again
        m.setitem(threads._settings, "threads", 2)
        m.setitem(threads._settings, "split_products", True)
        assert np.array_equal(compiled(*args).numpy(), expected)


class _Fake:
    """A step as `pair_products` sees it."""

    def __init__(self, name, reads, writes, work=None, movable=True):
        self.name, self._reads, self._writes, self.work, self.movable = name, reads, writes, work, movable

    def reads(self):
        return self._reads

    def writes(self):
        return self._writes


def _paired(steps):
    def pair(a, b):
        return _Fake(f"{a.name}+{b.name}", a.reads() + b.reads(), a.writes() + b.writes())
    return interop.pair_products(steps, lambda s: s.work, lambda s: s.movable, pair, 1 << 22)


def test_the_second_product_moves_up_with_the_views_it_reads_and_other_steps_keep_their_order():
    w = 1 << 20
    steps = [_Fake("p", ["g", "w"], ["dx"], w),
             _Fake("rng", ["dx"], ["mask"], movable=False),  # (reads the first's result: stays after the pair)
             _Fake("view", ["g"], ["gT"]),
             _Fake("q", ["gT", "x"], ["dw"], w),
             _Fake("after", ["dw", "mask"], ["y"])]
    assert [s.name for s in _paired(steps)] == ["view", "p+q", "rng", "after"]


def test_a_product_needing_an_unmovable_step_or_the_first_result_stays():
    w = 1 << 20
    steps = [_Fake("p", ["g"], ["dx"], w), _Fake("rng", [], ["r"], movable=False), _Fake("q", ["r"], ["dw"], w)]
    assert [s.name for s in _paired(steps)] == ["p", "rng", "q"]
    steps = [_Fake("p", ["g"], ["dx"], w), _Fake("view", ["dx"], ["v"]), _Fake("q", ["v"], ["dw"], w)]
    assert [s.name for s in _paired(steps)] == ["p", "view", "q"]


def test_unequal_large_products_are_not_paired():
    assert interop.worth_pairing(1 << 23, 1 << 23, 1 << 22)
    assert not interop.worth_pairing(1 << 21, 1 << 23, 1 << 22)  # (split, the larger alone takes as long)
    assert interop.worth_pairing(1 << 18, 1 << 21, 1 << 22)  # (neither splits: at once is the larger's time)
    assert not interop.worth_pairing(1 << 10, 1 << 10, 1 << 22)


def _parameters_after_steps(bench, name, n_threads):
    """(a digest of model ``name``'s parameters after two compiled steps at ``n_threads``, its product pairs, the
    products' native gemm calls)."""
    jt.set_num_threads(n_threads)
    gemms, part_calls = blas_calls.counters["gemm calls"], blas_calls.counters["part calls"]
    try:
        w = bench.workload(jt, name, True)
        with _built() as built:
            step = bench.whole_step(jt, w)
            for _ in range(2):  # (Adam's second call traces again: the step it compiles then runs)
                step()
    finally:
        jt.set_num_threads(1)
    digest = hashlib.sha1()
    for net in w.nets:
        for p in net.parameters():
            digest.update(p.detach().numpy().tobytes())
    pairs = sum(isinstance(s, executor.ProductPair) for g in built for s in g.steps)
    return (digest.hexdigest(), pairs, blas_calls.counters["gemm calls"] - gemms,
            blas_calls.counters["part calls"] - part_calls)


@pytest.mark.parametrize("name", ["gpt-4x128", "lstm", "dcgan", "cnn"])
def test_model_steps_at_two_threads_equal_one_thread_bit_for_bit(name, monkeypatch):
    monkeypatch.setattr(interop, "PAIR_MIN_WORK", 0)  # (the quick sizes' products are small: pair them all the same)
    monkeypatch.setattr(threads, "INTEROP", True)
    bench = load_script(MODELS, "models_benchmark")
    one, _, one_gemms, _ = _parameters_after_steps(bench, name, 1)
    two, pairs, two_gemms, two_part_calls = _parameters_after_steps(bench, name, 2)
    assert pairs > 0
    assert one == two
    # at one thread no product runs as a native gemm call on the team; at two, the pairs of plain products do (the
    # convolutions' products too: batches of one matrix), or where MKL runs them, their fixed parts
    # (`linalg.mkl_parts`, at any thread count)
    assert one_gemms == 0 and (two_gemms > 0 or two_part_calls > 0)
