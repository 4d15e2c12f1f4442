"""Runs of consecutive kernel steps, patched first and then run by one native call (`jit.kernel_runs`): which steps
join a run, what the generated call runs, and that the results are the bits the steps compute one by one."""

import re
from pathlib import Path

import numpy as np
import pytest

import jitorch as jt
from jitorch.codegen import cpu
from jitorch.jit import kernel_runs
from jitorch.jit.executor import KernelStep
from jitorch.jit.kernel_runs import KernelRun
from tests.support import load_script

pytestmark = pytest.mark.skipif(cpu.step_program() is None, reason="no native code for programs here")


def sgd_chain(w, x):
    """Kernels back to back: two reductions and pointwise groups between them (no fusion across a full reduction's
    result read by a pointwise op of another shape), then an in-place update."""
    h = (x * w).tanh()
    s = h.sum()
    y = (h - s).exp()
    m = y.mean(dim=1, keepdim=True)
    loss = ((y / m) ** 2).sum()
    loss.backward()
    with jt.no_grad():
        w.sub_(0.01 * w.grad)
        w.grad = None
    return loss.detach()


def make(seed=0, n=64):
    g = jt.Generator().manual_seed(seed)
    return jt.randn(n, n, generator=g, requires_grad=True), jt.randn(n, n, generator=g)


def run_steps(fn, args, steps, min_run, monkeypatch):
    """(losses, the arguments' values after ``steps`` calls, the executable) of ``fn`` compiled with runs from
    ``min_run`` kernels."""
    monkeypatch.setattr(kernel_runs, "MIN_RUN", min_run)
    compiled = jt.compile(fn)
    losses = [compiled(*args).detach().numpy().copy() for _ in range(steps)]
    return losses, [a.detach().numpy().copy() for a in args], executed(compiled)


def executed(compiled):
    """The compiled graph that ``compiled``'s calls ran (one)."""
    (graph,) = {id(e.executable): e.executable for e in compiled.cache.values() if e.executable is not None}.values()
    return graph


def assert_same_bits(a, b):
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def test_consecutive_kernels_run_as_one_native_call_with_the_bits_of_one_by_one(monkeypatch):
    """The chain's kernels form runs: fewer Python-level units than steps, each run one `_step_program` call in the
    generated source; over four in-place steps the losses and the parameter are the bits of the same graph run a
    kernel at a time (runs off), and the eager step's values."""
    alone = run_steps(sgd_chain, make(), 4, 10**9, monkeypatch)
    runs = run_steps(sgd_chain, make(), 4, 2, monkeypatch)
    ex = runs[2]
    in_runs = [s for u in ex.runs if type(u) is KernelRun for s in u.steps]
    assert in_runs and all(type(s) is KernelStep for s in in_runs)
    assert len(ex.runs) == len(ex.steps) - len(in_runs) + sum(type(u) is KernelRun for u in ex.runs)
    assert len(ex.runs) < len(ex.steps)
    assert ex.source.count("programs = arena.programs[") == sum(type(u) is KernelRun for u in ex.runs)
    assert ex.source.count("_step_program(programs[0], 0, 0)") == sum(type(u) is KernelRun for u in ex.runs)
    assert not any(type(u) is KernelRun for u in alone[2].runs) and "_step_program" not in alone[2].source
    # the runs hold the kernels in the steps' order
    assert [s for u in ex.runs for s in (u.steps if type(u) is KernelRun else [u])] == ex.steps
    assert_same_bits(runs[0] + runs[1], alone[0] + alone[1])
    w, x = make()
    for loss in runs[0]:
        np.testing.assert_allclose(loss, sgd_chain(w, x).item(), rtol=1e-5)
    counts = [len(u.steps) for u in ex.runs if type(u) is KernelRun]
    assert (f"{sum(counts)} of its kernels run in {len(counts)} runs, one native call each (jit.kernel_runs): "
            f"{len(ex.runs)} Python-level steps for {len(ex.steps)}") in str(jt.explain(sgd_chain, *make()))


def test_a_run_keeps_in_place_updates_in_place(monkeypatch):
    """A run whose kernel writes a parameter in place runs the in-place kernel (the parameter's memory, its version
    bumped), the program for ``inplace`` False another (the update into fresh memory, written back)."""
    w, x = make()
    losses, _, ex = run_steps(sgd_chain, (w, x), 1, 2, monkeypatch)
    assert ex.plan.inplace
    updating = [s for u in ex.runs if type(u) is KernelRun for s in u.steps if s.inplace_outputs]
    assert updating and all(s.inplace_kernel is not None for s in updating)
    arena = ex._arenas[0]
    for run in (u for u in ex.runs if type(u) is KernelRun and any(s in updating for s in u.steps)):
        plain, inplace = (np.ctypeslib.as_array(p[0]) for p in arena.programs[run])
        k = next(i for i, s in enumerate(run.steps) if s in updating)
        assert inplace[1 + 4 * k] == run.steps[k].inplace_kernel.address
        assert plain[1 + 4 * k] == run.steps[k].kernel.address
    ptr, version = w.untyped_storage().data_ptr(), w._version
    jt.compile(sgd_chain)(w, x)
    assert w.untyped_storage().data_ptr() == ptr and w._version > version


def test_gather_checks_stay_out_of_runs_and_still_raise_before_writing(monkeypatch):
    """A kernel that checks its gather's indices runs alone (the indices are read before any kernel of a run runs);
    an index out of range raises torch's error (gather's RuntimeError) and leaves the parameter unwritten."""
    def step(w, idx):
        loss = (w.tanh().gather(0, idx) * 2).exp().sum()
        loss.backward()
        with jt.no_grad():
            w.sub_(0.1 * w.grad)
            w.grad = None
        return loss.detach()

    monkeypatch.setattr(kernel_runs, "MIN_RUN", 2)
    w = jt.randn(8, 4, requires_grad=True)
    compiled = jt.compile(step)
    compiled(w, jt.tensor([[1, 2, 3, 0]]))
    ex = executed(compiled)
    checking = [s for s in ex.steps if type(s) is KernelStep and s.checks]
    assert checking and all(s in ex.runs for s in checking)
    before = w.detach().numpy().copy()
    with pytest.raises(RuntimeError, match="index 30 is out of bounds for dimension 0 with size 8"):
        compiled(w, jt.tensor([[1, 2, 30, 0]]))
    np.testing.assert_array_equal(w.detach().numpy(), before)


def test_a_run_with_a_split_kernel_calls_that_kernel_alone_on_more_threads(monkeypatch):
    """A run holding a kernel that splits across threads runs its whole program only at one thread (the source's
    ``_num_threads() == 1`` branch), else that kernel alone, split as a step would, and the kernels between such
    kernels in programs of their own (`KernelRun.segments`); the bits are those of runs off at one and at two
    threads."""
    n = 256  # (64K elements: above PARALLEL_MIN_WORK)
    results, saved = {}, jt.get_num_threads()
    try:
        for count in (1, 2):
            jt.set_num_threads(count)
            for min_run in (10**9, 2):
                losses, values, ex = run_steps(sgd_chain, make(n=n), 3, min_run, monkeypatch)
                results[count, min_run] = losses + values
                if min_run == 2:
                    parallel = [u for u in ex.runs if type(u) is KernelRun and u.parallel]
                    assert parallel and "if _num_threads() == 1:" in ex.source
                    for run in parallel:
                        assert [s for seg in run.segments for s in seg] == run.steps
                        assert all(len(seg) == 1 or not any(s.kernel.parallel for s in seg) for seg in run.segments)
    finally:
        jt.set_num_threads(saved)
    for count in (1, 2):
        assert_same_bits(results[count, 2], results[count, 10**9])


def test_a_profiled_call_reports_each_kernel_of_a_run(monkeypatch):
    """Under the profiler each kernel is a span of its own, runs or not."""
    monkeypatch.setattr(kernel_runs, "MIN_RUN", 2)
    w, x = make()
    compiled = jt.compile(sgd_chain)
    compiled(w, x)
    ex = executed(compiled)
    assert any(type(u) is KernelRun for u in ex.runs)
    with jt.profiler.profile() as prof:
        compiled(w, x)
    kernels = [e for e in prof.events() if e.kind == "kernel"]
    assert len(kernels) == sum(type(s) is KernelStep for s in ex.steps)


MODELS = Path(__file__).parents[2] / "benchmarks" / "models.py"


@pytest.mark.parametrize("name", ["gpt-2x32", "lstm", "cnn"])
def test_model_steps_are_bit_identical_with_runs(name, monkeypatch):
    """benchmarks/models.py's whole training steps at --quick sizes (forward, backward, optimizer as one compiled
    call), four steps each from seed 0: losses and every parameter the same bits with runs as without."""
    bench = load_script(MODELS, "models_benchmark")
    out = {}
    for min_run in (10**9, 2):
        monkeypatch.setattr(kernel_runs, "MIN_RUN", min_run)
        jt.manual_seed(0)
        w = bench.workload(jt, name, True)
        call = bench.whole_step(jt, w)
        losses = [call().detach().numpy().copy() for _ in range(4)]
        out[min_run] = losses + [p.detach().numpy().copy() for net in w.nets for p in net.parameters()]
        if min_run == 2:
            assert any(type(u) is KernelRun for u in executed(call.__closure__[0].cell_contents).runs)
    assert_same_bits(out[2], out[10**9])


def test_a_kernel_copying_a_value_written_earlier_in_the_run_starts_a_new_run():
    """The grouping rule on steps as `kernel_runs` reads them: a step that does not join ends the run before it; one
    whose compact copy (`KernelStep.compacted`) is of a value an earlier kernel of the run writes starts a new run
    (the copy is made while patching, before that kernel runs); a run of one kernel stays a step."""
    from types import SimpleNamespace

    def kernel(name, writes, copies=()):
        return SimpleNamespace(name=name, outputs=list(writes), compacted=set(copies),
                               kernel=SimpleNamespace(parallel=False))

    a, b, c, d, e, f = (kernel("a", ["va"]), kernel("b", ["vb"]), kernel("c", ["vc"], copies=["vb"]),
                        kernel("d", ["vd"], copies=["vx"]), SimpleNamespace(name="eager"), kernel("f", ["vf"]))
    units = kernel_runs.kernel_runs([a, b, c, d, e, f], lambda step: step.name != "eager")
    assert [u.steps if type(u) is KernelRun else u for u in units] == [[a, b], [c, d], e, f]


def test_the_step_program_is_read_from_the_kernel_cache_and_a_bad_entry_is_made_again(tmp_path):
    """`cpu.link_step_program`: the first process makes the program's object code with LLVM and stores it; a new
    process (a new cache over the same folder) links the stored code; a damaged entry, or one whose code checks out
    as an entry but defines another function, is a miss that LLVM's code replaces (nothing unchecked is linked)."""
    import llvmlite.binding as llvm
    from jitorch.codegen.cache import KernelCache, cache_key
    from jitorch.codegen.machine import selected
    from jitorch.runtime.threads import STEP_PROGRAM_IR

    def new_process():
        cache = KernelCache(tmp_path)
        code = cpu.link_step_program(cache)
        info = cache.info()
        return code, (info.disk_hits, info.misses, info.writes)

    made, counts = new_process()
    assert counts == (0, 1, 1) and made.address
    (entry,) = tmp_path.rglob("*.jitk")
    stored = entry.read_bytes()
    assert new_process()[1] == (1, 0, 0)
    entry.write_bytes(stored[:-8] + b"\0" * 8)  # damaged: its checksum fails
    assert new_process()[1] == (0, 1, 1) and entry.read_bytes() == stored
    host = selected()
    other = llvm.parse_assembly("define void @not_the_step_program() nounwind {\n  ret void\n}\n")
    other.triple = host.triple
    KernelCache(tmp_path).put(cache_key("step program", STEP_PROGRAM_IR, cpu.target_id()),
                              host.target_machine(opt=0, codemodel="jitdefault").emit_object(other), STEP_PROGRAM_IR)
    assert new_process()[1] == (1, 0, 1) and entry.read_bytes() == stored  # read, refused, made and stored again
