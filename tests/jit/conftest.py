"""Fixtures of the jit tests."""

import pytest

from jitorch.runtime import threads


@pytest.fixture
def two_threads(monkeypatch):
    """Two threads with products split and inter-op on (as ``set_num_threads(2)`` leaves them), restored after."""
    monkeypatch.setitem(threads._settings, "threads", 2)
    monkeypatch.setitem(threads._settings, "split_products", True)
    monkeypatch.setattr(threads, "INTEROP", True)
