"""The passes' fixed-point entries (`plan_cache.optimize_cached`) are keyed by the code generator's sources too."""

from jitorch.codegen.cache import KernelCache
from jitorch.ir.printer import print_graph
from jitorch.jit import plan_cache
from tests.jit.test_plan_cache import _traced


def test_a_fixed_point_written_by_another_build_of_the_passes_is_not_taken(tmp_path, monkeypatch):
    """An entry says the second round rewrote nothing under the passes that wrote it; a build whose passes differ
    (session 45's `sums` pass, whose rewrites another build's second round would not make) runs its second round.
    Before, the key was the first round's text and jitorch's version alone."""
    before = plan_cache.info()
    expected, _ = plan_cache.optimize_cached(_traced(), KernelCache(tmp_path))
    assert plan_cache.info()["fixed_point_writes"] == before["fixed_point_writes"] + 1
    monkeypatch.setattr(plan_cache, "generator_fingerprint", lambda: "another build's passes")
    again, _ = plan_cache.optimize_cached(_traced(), KernelCache(tmp_path))
    info = plan_cache.info()
    assert info["fixed_point_hits"] == before["fixed_point_hits"]
    assert info["fixed_point_writes"] == before["fixed_point_writes"] + 2
    assert print_graph(again, canonical=True) == print_graph(expected, canonical=True)
    monkeypatch.undo()
    plan_cache.optimize_cached(_traced(), KernelCache(tmp_path))
    assert plan_cache.info()["fixed_point_hits"] == before["fixed_point_hits"] + 1
