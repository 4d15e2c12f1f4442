"""Shared fixtures and the hypothesis profiles; helpers live in tests/support.py."""

from __future__ import annotations

import atexit
import fnmatch
import gc
import os
import pathlib
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


def _rewritten_files(config):
    """The test modules and conftest files under the run's arguments, whose asserts pytest rewrites."""
    patterns = [*config.getini("python_files"), "conftest.py"]
    found = []
    for arg in config.args:
        path = pathlib.Path(config.invocation_params.dir, arg.split("::")[0])
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
        found += [f for f in files if any(fnmatch.fnmatch(f.name, p) for p in patterns)]
    return found


def pytest_collection(session):
    """Under xdist, each worker first rewrites its share of the test modules (every n-th) into pytest's cache,
    so that the two workers, which both import every module, rewrite each once between them instead of
    each rewriting all (a fresh tree's collection by `pytest -n 2`: 55, 45 and 40 s of CPU with
    neither cache, with pytest's own and with this). pytest's own loader then reads the cached
    files, after checking them against the sources, and rewrites any module not yet cached itself."""
    # pytest's own rewrite functions (private: the calls are the same in pytest 8.0, the oldest tested, and 9.2)
    from _pytest.assertion import rewrite
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    state = session.config.stash.get(rewrite.assertstate_key, None)  # None under --assert=plain
    if worker is None or state is None:
        return
    index, count = int(worker.removeprefix("gw")), int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    for source in _rewritten_files(session.config)[index::count]:
        cache_dir = rewrite.get_cache_dir(source)
        pyc = cache_dir / (source.name[:-3] + rewrite.PYC_TAIL)
        if rewrite.try_makedirs(cache_dir) and rewrite._read_pyc(source, pyc, state.trace) is None:
            try:
                stamp, code = rewrite._rewrite_test(source, session.config)
            except (SyntaxError, ValueError):  # left to pytest's import, which reports it as that module's error
                continue
            rewrite._write_pyc(state, code, stamp, pyc)


def pytest_collection_finish(session):
    """Collection's objects (the test modules, their parameters, torch's and jitorch's modules) live until the
    end: after one last collection of its garbage they are frozen out of the cyclic collector, whose full
    collections (tests call gc.collect() to see a buffer or a kernel freed) then no longer walk them."""
    gc.collect()
    gc.freeze()
