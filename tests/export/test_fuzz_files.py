"""A seeded, bounded fuzz campaign over both file formats (see fuzz_files): no mutant crashes or hangs a
loading process, raises anything but ExportError or SerializationError, or writes outside its folder."""

from __future__ import annotations

from .fuzz_files import FAILURES, campaign


def test_mutated_exports_and_checkpoints_fail_cleanly(tmp_path):
    counts, findings = campaign(200, seed=0, target=str(tmp_path))
    failures = [f for f in findings if f[2].startswith(FAILURES)]
    assert not failures, failures
    for kind in ("export", "checkpoint"):
        outcomes = {k: v for k, v in counts[kind].items() if " -> " not in k}
        assert sum(outcomes.values()) == 200
        # both ends are exercised: files refused, and mutants that still load (and run)
        assert outcomes.get("loaded", 0) > 20 and outcomes.get("ExportError", outcomes.get("SerializationError")) > 100
    assert counts["export"]["mutate_object_code -> loaded"] > 0  # trusted object code that validated, linked
