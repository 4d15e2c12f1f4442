"""The warm first call of a large compiled graph (session 48): work a warm cache makes unnecessary is skipped, and
what it still checks is checked (the GPT step's first call in a fresh process with the kernel cache filled)."""

import weakref

import numpy as np
import pytest

import jitorch as jt
from jitorch.codegen import cpu
from jitorch.jit import executor, kernel_runs
from jitorch.jit.kernel_runs import KernelRun
from tests.jit.test_kernel_runs import make, sgd_chain

needs_programs = pytest.mark.skipif(cpu.step_program() is None, reason="no native code for programs here")


def executed(compiled):
    """The compiled graph that ``compiled``'s calls ran (one)."""
    (graph,) = {id(e.executable): e.executable for e in compiled.cache.values() if e.executable is not None}.values()
    return graph


@needs_programs
def test_a_run_patched_by_shared_functions_gives_the_bits_of_the_inline_run(monkeypatch):
    """In a call of shared functions (a large graph's), each kernel of a run is patched by a shared function called
    from a table (one per distinct patching, not a run's lines written out: an optimizer's run made one function of
    900 lines); four in-place steps give the losses and parameter bits of the same graph's inline call."""
    monkeypatch.setattr(kernel_runs, "MIN_RUN", 2)
    out = {}
    for shared_from in (10**9, 1):
        monkeypatch.setattr(executor, "SHARED_STEPS_FROM", shared_from)
        w, x = make()
        compiled = jt.compile(sgd_chain)
        out[shared_from] = [compiled(w, x).numpy().copy() for _ in range(4)] + [w.detach().numpy().copy()]
        ex = executed(compiled)
        runs = [u for u in ex.runs if type(u) is KernelRun]
        assert runs
        assert ex.source.count("_kept = [_f(env, arena, inplace, *_a) for _f, _a in") == (shared_from == 1) * len(
            [r for r in runs if any(s.dynamic_inputs or s.fresh_outputs or s.inplace_outputs for s in r.steps)])
    for a, b in zip(out[1], out[10**9]):
        assert a.tobytes() == b.tobytes()


@needs_programs
def test_a_shared_patchings_compact_copy_lives_until_the_runs_program_ran(monkeypatch):
    """A kernel of a run that reads a compact copy of a permuted input (the softmax's rows) gets it from its shared
    patching function, which returns it: the copy is still alive when the run's program runs (freed before, its
    memory could hold another tensor by then), and the result is eager's."""
    monkeypatch.setattr(kernel_runs, "MIN_RUN", 2)
    monkeypatch.setattr(executor, "SHARED_STEPS_FROM", 1)
    x, y = jt.randn(16, 8).t(), jt.randn(8, 16)
    compiled = jt.compile(lambda x, y: ((y * 3 + 1).exp(), x.softmax(-1)))
    ex = compiled.lower(x, y).executable
    (run,) = [u for u in ex.runs if type(u) is KernelRun]
    assert any(s.compacted for s in run.steps) and "return (held" in ex.source
    namespace = ex.run.__globals__
    copies, alive_at_program = [], []
    compact, step_program = namespace["_compact"], namespace["_step_program"]

    def tracked_compact(t):
        made = compact(t)
        copies.append(weakref.ref(made))
        return made

    def checked_program(*args):
        alive_at_program.append([c() is not None for c in copies])
        return step_program(*args)

    monkeypatch.setitem(namespace, "_compact", tracked_compact)
    monkeypatch.setitem(namespace, "_step_program", checked_program)
    exp, soft = compiled(x, y)
    assert alive_at_program == [[True]]
    np.testing.assert_allclose(soft.numpy(), x.softmax(-1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(exp.numpy(), (y * 3 + 1).exp().numpy(), rtol=1e-6)


def _scatter_kernel_built(monkeypatch, folder):
    """(the scatter-add kernel of float32 made as a new process makes it, with the kernel cache in ``folder``,
    the dtypes whose IR it built with llvmlite)."""
    from jitorch.codegen import scatter
    from jitorch.codegen.cache import KernelCache
    monkeypatch.setattr(scatter, "default_cache", lambda: KernelCache(folder))
    built, module = [], scatter._module
    monkeypatch.setattr(scatter, "_module", lambda dtype, name: built.append(dtype) or module(dtype, name))
    return scatter._build("float32"), built


def _added(kernel):
    rng = np.random.default_rng(0)
    out, values = np.zeros((5, 40), np.float32), rng.standard_normal((30, 40)).astype(np.float32)
    idx = rng.integers(0, 5, 30).astype(np.int64)
    kernel(out, idx, values)
    expected = np.zeros((5, 40), np.float32)
    np.add.at(expected, idx, values)
    assert out.tobytes() == expected.tobytes()
    return out


def test_a_new_process_takes_the_scatter_kernels_ir_from_the_cache_and_rebuilds_a_damaged_one(monkeypatch, tmp_path):
    """The rows' scatter-add (an embedding's backward) built its LLVM IR with llvmlite in every process, 10-13 ms
    of the GPT step's warm first call: a later process takes the IR from the kernel cache and builds none; an
    entry damaged on disk, or one that checks out but holds no UTF-8, is a miss that is built again, and every
    kernel adds in np.add.at's order (its bits)."""
    from jitorch.codegen import cpu, kernel
    from jitorch.codegen.cache import KernelCache, cache_key
    first, built = _scatter_kernel_built(monkeypatch, tmp_path)
    assert first is not None and built == ["float32"]
    again, built = _scatter_kernel_built(monkeypatch, tmp_path)
    assert built == [] and again._compiled.source.llvm_ir == first._compiled.source.llvm_ir
    assert _added(first).tobytes() == _added(again).tobytes()
    text = repr(("scatter rows", cpu.target_id(), "float32", "jitorch_scatter_rows_float32"))
    key = cache_key("scatter rows kernel IR", kernel.generator_fingerprint(), text)
    (entry,) = tmp_path.glob(f"*/{key}.jitk")
    data = bytearray(entry.read_bytes())
    data[-20] ^= 0xFF  # a byte of the IR: the payload's checksum fails
    entry.write_bytes(bytes(data))
    damaged, built = _scatter_kernel_built(monkeypatch, tmp_path)
    assert built == ["float32"] and damaged._compiled.source.llvm_ir == first._compiled.source.llvm_ir
    KernelCache(tmp_path).put(key, b"\xff\xfe not UTF-8", text)
    undecodable, built = _scatter_kernel_built(monkeypatch, tmp_path)
    assert built == ["float32"] and undecodable._compiled.source.llvm_ir == first._compiled.source.llvm_ir
    _added(undecodable)


@pytest.fixture
def collections():
    """The generations the cyclic collector collects while the test runs (collector on)."""
    import gc
    was, seen = gc.isenabled(), []

    def record(phase, info):
        if phase == "start":
            seen.append(info["generation"])
    gc.enable()
    gc.callbacks.append(record)
    yield seen
    gc.callbacks.remove(record)
    (gc.enable if was else gc.disable)()


class _Cycle:
    def __init__(self):
        self.me = self


def _allocate_in_pause(n):
    """(a weak reference to a cycle made in a collector pause in which ``n`` more container objects stay alive
    until its end)."""
    from jitorch.jit.collector import collector_paused
    with collector_paused():
        cycle = _Cycle()
        ref = weakref.ref(cycle)
        del cycle
        kept = [[] for _ in range(n)]
    del kept
    return ref


def test_a_long_pause_ends_with_one_collection_of_the_young_generations_that_frees_its_cycles(collections):
    """A pause that put off `YOUNG_BACKLOG` collections of the youngest generation or more ends with one collection
    of the two young ones (the youngest's pass and the middle one's, which went over the compile's survivors again:
    13 ms of the GPT step's warm first call): the cycle made in it is freed at once."""
    import gc
    from jitorch.jit import collector
    ref = _allocate_in_pause(collector.YOUNG_BACKLOG * gc.get_threshold()[0] + 1000)
    assert collections[:1] == [1] and ref() is None


def test_a_short_pause_or_a_collector_the_caller_disabled_is_left_to_collect_as_it_would(collections):
    """Below the backlog the collector runs as it would have (no collection on leaving the pause); a collector
    the caller disabled collects nothing, whatever the pause put off."""
    import gc
    from jitorch.jit import collector
    gc.collect()
    collections.clear()
    _allocate_in_pause(10)
    assert collections == []
    backlog = collector.YOUNG_BACKLOG * gc.get_threshold()[0] + 1000
    gc.disable()
    _allocate_in_pause(backlog)
    assert collections == [] and not gc.isenabled()


def test_a_pause_leaves_automatic_collection_off_where_the_threshold_turns_it_off(collections):
    """``gc.set_threshold(0)`` turns automatic collection off (a program's way to collect only when it says so):
    however many collections a pause would have put off, leaving it collects nothing."""
    import gc
    from jitorch.jit import collector
    thresholds = gc.get_threshold()
    backlog = collector.YOUNG_BACKLOG * thresholds[0] + 1000
    gc.set_threshold(0)
    try:
        _allocate_in_pause(backlog)
    finally:
        gc.set_threshold(*thresholds)
    assert collections == []


def _gpt_step(monkeypatch, prebuilt=True):
    """(losses of two steps, the compiled graph, the groups `_lower` built kernels for itself) of benchmarks/models.py's
    GPT at --quick sizes from seed 0; ``prebuilt=False``: with no kernel built together beforehand (`_prebuilt`), so
    that `_lower` builds or refuses each group itself."""
    from pathlib import Path
    from tests.support import load_script
    bench = load_script(Path(__file__).parents[2] / "benchmarks" / "models.py", "models_benchmark")
    built, real = [], executor.build_shared
    monkeypatch.setattr(executor, "build_shared", lambda group, *a, **k: built.append(group) or real(group, *a, **k))
    if not prebuilt:  # (the in-place kernels' batch, not `_lower`'s, stays)
        batch = executor.CompiledGraph._prebuilt
        monkeypatch.setattr(executor.CompiledGraph, "_prebuilt", lambda self, requests, split=False:
                            ({}, []) if split else batch(self, requests))
    jt.manual_seed(0)
    w = bench.workload(jt, "gpt-2x32", True)
    call = bench.whole_step(jt, w)
    losses = [call().detach().numpy().copy() for _ in range(2)]
    monkeypatch.undo()
    return losses, executed(call.__closure__[0].cell_contents), built


def _described_steps(ex):
    return [(type(s).__name__, getattr(s, "reason", None), [n.op.name for n in s.nodes]) for s in ex.steps]


def test_a_group_the_kernel_batch_refused_is_not_built_again_and_lowers_as_when_built_alone(monkeypatch):
    """The groups the builder refuses (views that need no copy, reductions split into parts) were built again by
    `_lower` after the batch of the graph's kernels had found them refused (180 builds, 7 ms of the GPT step's warm
    first call): now no group whose source the batch made or refused for its layouts is built again, and the steps
    (eager ones with their reasons) and the losses' bits are those of a compile whose `_lower` builds each group."""
    losses, ex, built = _gpt_step(monkeypatch)
    alone_losses, alone, _ = _gpt_step(monkeypatch, prebuilt=False)
    assert any(s.reason == "view" for s in ex.steps if type(s) is executor.EagerStep)
    assert not [g for g in built if g in ex.groups]
    assert _described_steps(ex) == _described_steps(alone)
    for a, b in zip(losses, alone_losses):
        assert a.tobytes() == b.tobytes()


def test_a_node_lowers_only_where_every_dtype_it_reads_or_writes_is_a_kernels(monkeypatch):
    """`lowering.can_lower`'s dtype check, written without building the list of the node's dtypes: a node an
    argument, or an output, of a dtype outside `lowering.DTYPES` is external, the same node of dtypes in it lowers;
    a value in a list argument (cat's pieces; no op with a lowering takes one yet) counts as the others."""
    from jitorch.codegen import lowering
    from jitorch.jit.tracer import trace_with_inputs
    graph, _ = trace_with_inputs(lambda a, b: (b * 2, a.double(), jt.where(a > 0, a, b), jt.cat([a, b])),
                                 (jt.ones(2, dtype=jt.float32), jt.ones(2, dtype=jt.float64)), {})
    # mul(f64) -> f64, _to_copy(f32) -> f64, gt(f32) -> bool, where(bool, f32, f64) -> f64, cat([f32, f64]) -> f64
    assert [n.op.name for n in graph.nodes] == ["mul", "_to_copy", "gt", "where.self", "cat"]
    *pointwise, cat = graph.nodes
    everything = lowering.DTYPES
    for left_out, kinds, cat_lowers in [(None, ["pointwise"] * 4, True),
                                        (jt.float32, ["pointwise", "external", "external", "external"], False),
                                        (jt.float64, ["external", "external", "pointwise", "external"], False),
                                        (jt.bool, ["pointwise", "pointwise", "external", "external"], True)]:
        monkeypatch.setattr(lowering, "DTYPES", everything - {left_out})
        assert [lowering.kind_of(n) for n in pointwise] == kinds, left_out
        assert lowering._dtypes_lower(cat) is cat_lowers
