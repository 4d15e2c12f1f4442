"""The warm first call of a large compiled graph (session 48): work a warm cache makes unnecessary is skipped, and
what it still checks is checked (the GPT step's first call in a fresh process with the kernel cache filled)."""

import weakref

import numpy as np
import pytest

import jitorch as jt
from jitorch.codegen import cpu
from jitorch.jit import executor, kernel_runs
from jitorch.jit.kernel_runs import KernelRun

needs_programs = pytest.mark.skipif(cpu.step_program() is None, reason="no native code for programs here")


def sgd_chain(w, x):
    """Kernels back to back, then an in-place update (tests/jit/test_kernel_runs.py's chain)."""
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
