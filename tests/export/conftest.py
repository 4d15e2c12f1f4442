"""Fixtures of the export tests."""

from __future__ import annotations

import pytest

from .helpers import small_program


@pytest.fixture
def saved(tmp_path):
    """(path of a saved small program, its example inputs, the expected outputs as arrays)."""
    f, args, ep = small_program()
    path = tmp_path / "small.jtx"
    ep.save(path)
    return path, args, [t.numpy() for t in f(*args)]
