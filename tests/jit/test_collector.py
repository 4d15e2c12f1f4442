"""The cyclic garbage collector is paused while a graph is traced and compiled (`jit.collector`), and
left as it was found."""

from __future__ import annotations

import gc

import pytest

import jitorch as jt
from jitorch.jit.collector import collector_paused


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_tracing_and_compiling_run_without_the_collector_and_restore_it(collector_on, monkeypatch):
    from jitorch.jit import executor
    seen = []
    real = executor.optimize_cached
    monkeypatch.setattr(executor, "optimize_cached", lambda g: seen.append(("compile", gc.isenabled())) or real(g))

    def f(x):
        seen.append(("trace", gc.isenabled()))
        return x * 2 + 1

    assert jt.compile(f)(jt.ones(3)).tolist() == [3.0, 3.0, 3.0]
    assert seen == [("trace", False), ("compile", False)] and gc.isenabled()


def test_a_collector_the_caller_disabled_stays_disabled(collector_on):
    gc.disable()
    jt.compile(lambda x: x.exp())(jt.ones(2))
    assert not gc.isenabled()


def test_nested_pauses_restore_on_the_outermost_exit_even_after_an_error(collector_on):
    with pytest.raises(ValueError):
        with collector_paused():
            with collector_paused():
                pass
            assert not gc.isenabled()
            raise ValueError
    assert gc.isenabled()
