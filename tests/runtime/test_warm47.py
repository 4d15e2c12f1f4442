"""NumPy's OpenBLAS found in its wheel's library folder (`blas_library._openblas_gemms`), not through threadpoolctl's
scan of every library the process loaded (5-7 ms of the first product where MKL is chosen)."""

import ctypes
import os

import numpy as np
import pytest

from jitorch.runtime import blas_library


def test_the_openblas_gemms_are_those_of_the_library_threadpoolctl_says_numpy_uses():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    home = os.path.dirname(os.path.realpath(np.__file__))
    wheel = [os.path.realpath(info["filepath"]) for info in threadpoolctl.threadpool_info()
             if info.get("internal_api") == "openblas" and os.path.dirname(os.path.realpath(info["filepath"]))
             in (home + ".libs", os.path.join(home, ".dylibs"))]
    found = blas_library._openblas_gemms()
    if not wheel:
        assert found is None
        return
    lib = ctypes.CDLL(wheel[0])
    expected = next((getattr(lib, p + "cblas_sgemm64_"), getattr(lib, p + "cblas_dgemm64_")) for p in ("scipy_", "")
                    if hasattr(lib, p + "cblas_sgemm64_"))
    address = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    assert [address(f) for f in found] == [address(f) for f in expected]


def test_no_openblas_where_numpy_has_no_library_folder(monkeypatch, tmp_path):
    """A NumPy built against another BLAS (no ``numpy.libs`` nor ``.dylibs`` beside it): None, and the products run
    as NumPy's matmul."""
    (tmp_path / "numpy").mkdir()
    monkeypatch.setattr(np, "__file__", str(tmp_path / "numpy" / "__init__.py"))
    assert blas_library._openblas_gemms() is None
