"""Shared fixtures and the hypothesis profiles; helpers live in tests/support.py."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# pytest -n 2 runs a worker per core: BLAS threads of their own would oversubscribe the cores, and
# OpenBLAS's spinning threads then make a small matmul a hundred times slower. Set before NumPy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# torch, the oracle, likewise: its intra-op pool (OpenMP, one thread per core) spin-waits against the other
# worker. torch.nn.functional.pad of a 2x3x4x3 tensor took 1.5 ms of CPU with two threads, 0.02 ms with one.
# Set before torch loads; jitorch's own kernels take JITORCH_NUM_THREADS, not this.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402


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
