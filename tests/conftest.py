"""Shared fixtures and the hypothesis profiles; helpers live in tests/support.py."""

from __future__ import annotations

import atexit
import fnmatch
import gc
import importlib
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

# pytest -n 2 runs a worker per core: BLAS threads of their own would oversubscribe the cores, and
# OpenBLAS's spinning threads then make a small matmul a hundred times slower. Set before NumPy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# torch, the oracle, likewise: its intra-op pool (OpenMP, one thread per core) spin-waits against the other
# worker. torch.nn.functional.pad of a 2x3x4x3 tensor took 1.5 ms of CPU with two threads, 0.02 ms with one.
# Set before torch loads; jitorch's own kernels take JITORCH_NUM_THREADS, not this.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Byte code is cached even where the environment says PYTHONDONTWRITEBYTECODE=1 (these machines do): each
# xdist worker collects the whole suite, and pytest's assertion rewriting of the test modules, which it
# caches only when sys.dont_write_bytecode is false, was half of a worker's collection (12.6 of 24 s of CPU);
# jitorch's own modules, compiled by a worker once, are then read by the suite's fresh Python processes
# (ranks, examples, README blocks, scripts), which compiled all of jitorch in 1.0 s of CPU each, 0.3 s from
# pycs (tests/test_readme.py's 36 processes: 45 s of CPU, 28 s). pytest and Python check each cached file
# against its source before using it. Set before hypothesis loads: pytest rewrites the asserts of a plugin's
# package too (hypothesis's 82 modules, 1.2 s of CPU in each of the run's three pytest processes).
sys.dont_write_bytecode = False

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


@pytest.fixture
def quiet_warnings():
    """Warnings ignored for the test (the fuzz regressions' programs, whose ops warn as torch's do)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# sys.modules' size when the heap was last frozen; a test that imports this many modules more is followed by a
# freeze: torch's OpInfo database (tests/ops/opinfo_sweep.py: 1620 modules, 278k objects) made each later full
# collection 0.15-0.3 s slower, and tests/runtime/test_allocator.py's 8 tests that collect (20 times) took 5.9 s
# after it in one process, 0.1 s with the freeze.
_FROZEN_MODULES = [0]
_IMPORTS_BEFORE_A_FREEZE = 100


# Full collections every 100th middle-generation one, not every 10th: each walks what is alive and not frozen (the
# kernels, graphs and modules the tests left cached), and in 2,879 tests of five in-process files on two workers
# their 40 took 2.9 s of the collector's 5.3 s of CPU; at this threshold 8 took 1.1 of 3.4 (the young
# generations' collections, which find most garbage, run as often as before).
gc.set_threshold(*gc.get_threshold()[:2], 100)


def _freeze():
    gc.collect()
    gc.freeze()
    _FROZEN_MODULES[0] = len(sys.modules)


class _NoStack:
    """Stands for the traceback module in torch's device modules: see _untraced_lazy_device_seeding."""

    @staticmethod
    def format_stack():
        return []


def _untraced_lazy_device_seeding():
    """torch.manual_seed (which torch's OpInfo sample generators call before every sample) queues a seeding of
    each device torch has not initialised (CUDA, XPU, MTIA), with traceback.format_stack() of the caller kept
    for the message of a failed device initialisation, which a CPU-only torch never reports: three formatted
    stacks of a pytest call, 7 ms, per seed. It was 30.7 of the 85 s of CPU of five of
    tests/ops/test_opinfo47.py's tests. The seeds are still queued; only the unused stacks are not formatted."""
    for name in ("torch.cuda", "torch.xpu", "torch.mtia"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "traceback", None) is not None:
            module.traceback = _NoStack


def pytest_collection_finish(session):
    """Collection's objects (the test modules, their parameters, torch's and jitorch's modules) live until the
    end: after one last collection of its garbage they are frozen out of the cyclic collector, whose full
    collections (tests call gc.collect() to see a buffer or a kernel freed) then no longer walk them."""
    _untraced_lazy_device_seeding()
    _freeze()


def pytest_runtest_logfinish(nodeid, location):
    """Modules a test imported (a library loaded on first use: torch's OpInfo database, torch._dynamo) live
    until the end as well: once a test has imported many, the heap is collected and frozen again."""
    if len(sys.modules) > _FROZEN_MODULES[0] + _IMPORTS_BEFORE_A_FREEZE:
        _freeze()


def _test_modules(config):
    """The dotted names of the test modules the session's arguments name, in a fixed order (those in packages:
    the suite's are, as pytest then imports them under these names)."""
    patterns = config.getini("python_files")
    files = set()
    for arg in config.args:
        path = Path(arg.split("::")[0])
        found = path.rglob("*.py") if path.is_dir() else [path]
        files.update(f.resolve() for f in found if any(fnmatch.fnmatch(f.name, p) for p in patterns))
    names = []
    for f in sorted(files):
        package = f.parent
        parts = [f.stem]
        while (package / "__init__.py").is_file():
            parts.append(package.name)
            package = package.parent
        if len(parts) > 1:
            names.append(".".join(reversed(parts)))
    return names


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """In each of n xdist workers, first import every n-th test module (this worker's share) before collecting.

    Every worker collects the whole suite, and importing a test module for the first time has pytest rewrite
    its asserts, which it then caches beside the module: in a fresh clone that was 16 of a worker's 25 s of
    collection CPU, done by both workers for every module. Imported in turn, each module is rewritten by one
    worker, and the other reads the cache its collection finds (pytest checks it against the source). Inside
    the collection hook, so that warnings of the imports are reported as collection's are.

    The cyclic collector is off meanwhile: collection only adds objects that live until the end (modules, torch,
    the items), which its full collections walked again and again as the heap grew (a collect-only run of the
    suite: 9.5 s of CPU with it, 7.8 s without); `pytest_collection_finish` collects once and freezes them."""
    gc.disable()
    try:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        worker = os.environ.get("PYTEST_XDIST_WORKER", "").removeprefix("gw")
        if count > 1 and worker.isdigit():  # (``-n N``'s workers are gw0...; a --tx spec may name its own)
            for name in _test_modules(session.config)[int(worker)::count]:
                try:
                    importlib.import_module(name)
                except (Exception, pytest.skip.Exception):
                    # the collection imports the module again and reports its error or skip as it does any module's
                    continue
        return (yield)
    finally:
        gc.enable()
