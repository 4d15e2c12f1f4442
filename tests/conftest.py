"""Shared fixtures and the hypothesis profiles; helpers live in tests/support.py."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, settings


# Compiled kernels go to a cache of the test session's own, not the user's ~/.cache/jitorch.
if "JITORCH_CACHE_DIR" not in os.environ:
    os.environ["JITORCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitorch-test-cache-")
    atexit.register(shutil.rmtree, os.environ["JITORCH_CACHE_DIR"], True)

settings.register_profile(
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow],
    derandomize=True, print_blob=True,
)
settings.register_profile("dev", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

@pytest.fixture
def rng():
    return np.random.default_rng(0)
