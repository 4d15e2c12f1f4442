"""Which BLAS runs jitorch's float products: Intel's MKL where its wheel is installed and the CPU is Intel's,
else the OpenBLAS that NumPy's wheel carries.

On this project's Intel Xeon, OpenBLAS's sgemm took 1.05-1.25x the thread CPU time of MKL's (one thread, the
GPT, LSTM and convolution models' shapes; benchmarks/products.py), and MKL's was within 0-7% of torch's (torch
links its own MKL). MKL's code paths on other vendors' CPUs were not measured, so it is chosen on a GenuineIntel
CPU only. ``JITORCH_BLAS=mkl`` or ``openblas`` forces one; the choice is made once per process, at its first
product (never at ``import jitorch``: MKL's library is over 100 MB to map).

MKL comes from the ``mkl`` wheel (``pip install "jitorch[mkl]"``): its ``libmkl_rt`` (the single dynamic
library that picks its threading and integer layers at run time) is loaded with ctypes, and its threading
layer is set to SEQUENTIAL before any other call into it: jitorch's own thread team splits large products
(`ops.linalg.array_product`), so MKL must never start threads of its own, nor load intel-openmp. Its gemm is
called through the ``cblas_?gemm_64`` entry points (64-bit integers, the ones `threads.gemm_entry` passes, as
OpenBLAS's ``cblas_?gemm64_`` take); the library's interface layer stays LP64 for any other call.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys

import numpy as np

MKL, OPENBLAS = "mkl", "openblas"
ENV = "JITORCH_BLAS"
_SEQUENTIAL, _LP64 = 1, 0  # MKL_THREADING_SEQUENTIAL, MKL_INTERFACE_LP64 (mkl_service.h)


def intel_cpu():
    """Whether the CPU's vendor is GenuineIntel (``/proc/cpuinfo``, else ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo") as f:
            vendors = [line.split(":", 1)[1].strip() for line in f if line.startswith("vendor_id")]
    except OSError:  # (no /proc: another system)
        vendors = []
    return vendors[0] == "GenuineIntel" if vendors else "GenuineIntel" in platform.processor()


def _mkl_candidates():
    """Paths of ``libmkl_rt``, in the order tried: the environment's ``lib`` folder (where the ``mkl`` wheel puts
    it), then the files the installed ``mkl`` distribution records (read only where the folder has none: parsing
    that wheel's file list costs 20 ms, half of MKL's whole load)."""
    import glob  # (here: ``import jitorch`` does not need it)
    seen = set()
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        for pattern in (os.path.join(prefix, "lib", "libmkl_rt.so*"), os.path.join(prefix, "Library", "bin",
                                                                                 "mkl_rt*.dll")):
            for path in sorted(glob.glob(pattern)):
                if os.path.isfile(path) and os.path.realpath(path) not in seen:
                    seen.add(os.path.realpath(path))
                    yield path
    try:
        from importlib import metadata
        files = metadata.distribution("mkl").files or []
    except Exception:  # (no such distribution, or metadata without a file list)
        files = []
    for f in files:
        path = str(f.locate())
        if os.path.basename(path).startswith("libmkl_rt.") and os.path.isfile(path) \
                and os.path.realpath(path) not in seen:
            seen.add(os.path.realpath(path))
            yield path


@functools.cache
def mkl_library():
    """The loaded ``libmkl_rt`` (ctypes), its threading layer set to SEQUENTIAL and its interface layer to
    LP64, or None where no ``mkl`` wheel is installed or none loads."""
    for path in _mkl_candidates():
        try:
            lib = ctypes.CDLL(path)
            threading, interface = lib.MKL_Set_Threading_Layer, lib.MKL_Set_Interface_Layer
            lib.cblas_sgemm_64, lib.cblas_dgemm_64  # (older MKLs lack the 64-bit-integer entry points)
        except (OSError, AttributeError):
            continue
        threading.argtypes = interface.argtypes = [ctypes.c_int]
        threading.restype = interface.restype = ctypes.c_int
        # (the first call into MKL: the layers are fixed once any other function ran)
        if threading(_SEQUENTIAL) != _SEQUENTIAL or interface(_LP64) != _LP64:
            continue
        return lib
    return None


def mkl_version():
    """MKL's version string (``MKL_Get_Version_String``), or None without MKL."""
    lib = mkl_library()
    if lib is None:
        return None
    text = ctypes.create_string_buffer(256)
    lib.MKL_Get_Version_String(text, len(text))
    return text.value.decode()


@functools.cache
def chosen():
    """The BLAS that runs the float products in this process, read once: `MKL` or `OPENBLAS`. ``JITORCH_BLAS``
    forces one (RuntimeError where it names MKL and MKL cannot be loaded, ValueError for another name);
    otherwise MKL where it loads on a GenuineIntel CPU."""
    forced = os.environ.get(ENV, "").strip().lower()
    if forced not in ("", MKL, OPENBLAS):
        raise ValueError(f"{ENV}={os.environ[ENV]!r}: expected 'mkl' or 'openblas'")
    if forced == OPENBLAS:
        return OPENBLAS
    if forced == MKL:
        if mkl_library() is None:
            raise RuntimeError(f"{ENV}=mkl, but no MKL library loads: install it with pip install \"jitorch[mkl]\"")
        return MKL
    return MKL if intel_cpu() and mkl_library() is not None else OPENBLAS


def _openblas_gemms():
    """(sgemm, dgemm) addresses of the OpenBLAS that NumPy's wheel carries (64-bit integers: the ``64_``
    symbols), or None where NumPy uses another BLAS. The library is looked for in the wheel's own library folder
    (``numpy.libs``, ``numpy/.dylibs``), where NumPy loaded it from: asking threadpoolctl which libraries the
    process loaded took 5-7 ms of the first product (it makes a controller of each of them)."""
    import glob  # (here: ``import jitorch`` does not need it)
    home = os.path.dirname(os.path.realpath(np.__file__))
    for folder in (home + ".libs", os.path.join(home, ".dylibs")):
        for path in sorted(glob.glob(os.path.join(glob.escape(folder), "*openblas*"))):
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for prefix in ("scipy_", ""):
                try:
                    return getattr(lib, prefix + "cblas_sgemm64_"), getattr(lib, prefix + "cblas_dgemm64_")
                except AttributeError:
                    continue
    return None


# Products of fewer multiply-adds run as OpenBLAS's gemm where MKL is chosen: a call of MKL's costs about 4 µs more
# (its checks and arguments in Python, where NumPy's matmul makes its call in C), which MKL's faster kernels
# do not win back below about 2M multiply-adds (float32, one thread, thread CPU time: 128x64x128 1.03x, 128x128x128
# 0.97x, 64x128x384 1.09x, 256x128x128 1.04x NumPy's time over MKL's; 64x64x64 0.43x).
MKL_MIN_WORK = 1 << 21


@functools.cache
def _functions():
    """{dtype: (OpenBLAS's gemm or None, MKL's gemm or None)} addresses, MKL's only where it is chosen."""
    openblas = _openblas_gemms() or (None, None)
    mkl = (mkl_library().cblas_sgemm_64, mkl_library().cblas_dgemm_64) if chosen() == MKL else (None, None)
    address = lambda f: None if f is None else ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    return {np.dtype(dt): (address(o), address(m)) for dt, o, m in zip((np.float32, np.float64), openblas, mkl)}


def gemm_function(dtype, work):
    """The address of the cblas gemm (64-bit integers) of ``dtype`` (a NumPy dtype) that runs a product of
    ``work`` multiply-adds (that of the whole product a call is part of): MKL's where it is chosen and the
    product has at least `MKL_MIN_WORK`, else the OpenBLAS of NumPy's wheel; None where that is to be NumPy's
    matmul (no such OpenBLAS, or another dtype)."""
    functions = _functions().get(dtype)
    if functions is None:
        return None
    return functions[1] if functions[1] is not None and work >= MKL_MIN_WORK else functions[0]


def runs_mkl(work):
    """Whether a product of ``work`` multiply-adds that NumPy would make as one gemm call runs as MKL's."""
    return work >= MKL_MIN_WORK and chosen() == MKL
