"""Shared fixtures and the hypothesis profiles; helpers live in tests/support.py."""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import sys
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


# Byte code is cached even where the environment says PYTHONDONTWRITEBYTECODE=1 (these machines do): each
# xdist worker collects the whole suite, and pytest's assertion rewriting of the test modules, which it
# caches only when sys.dont_write_bytecode is false, was half of a worker's collection (12.6 of 24 s of CPU);
# jitorch's own modules, compiled by a worker once, are then read by the suite's fresh Python processes
# (ranks, examples, README blocks, scripts), which compiled all of jitorch in 1.0 s of CPU each, 0.3 s from
# pycs (tests/test_readme.py's 36 processes: 45 s of CPU, 28 s). pytest and Python check each cached file
# against its source before using it.
sys.dont_write_bytecode = False

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


def pytest_collection_finish(session):
    """Collection's objects (the test modules, their parameters, torch's and jitorch's modules) live until the
    end: after one last collection of its garbage they are frozen out of the cyclic collector, whose full
    collections (tests call gc.collect() to see a buffer or a kernel freed) then no longer walk them."""
    gc.collect()
    gc.freeze()
