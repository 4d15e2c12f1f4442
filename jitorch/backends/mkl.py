"""``jitorch.backends.mkl``: whether Intel's MKL runs jitorch's float matrix products (`runtime.blas_library`):
where the ``mkl`` wheel is installed (``pip install "jitorch[mkl]"``) and the CPU is Intel's, unless
``JITORCH_BLAS=openblas``; otherwise the OpenBLAS that NumPy's wheel carries runs them."""

from __future__ import annotations

from ..runtime import blas_library


def is_available():
    """Whether MKL runs the float matrix products in this process (torch's name: whether torch was built with
    MKL). Asking makes the process's choice (`runtime.blas_library.chosen`), loading MKL where it is chosen."""
    return blas_library.chosen() == blas_library.MKL
