"""Which BLAS runs jitorch's float products: Intel's MKL where its wheel is installed and the CPU is Intel's,
else the OpenBLAS that NumPy's wheel carries.

On this project's Intel Xeon, OpenBLAS's sgemm took 1.05-1.25x the thread CPU time of MKL's (one thread, the
GPT, LSTM and convolution models' shapes; benchmarks/products.py), and MKL's was within 0-7% of torch's (torch
links its own MKL). MKL's code paths on other vendors' CPUs were not measured, so it is chosen on a GenuineIntel
CPU only. ``JITORCH_BLAS=mkl`` or ``openblas`` forces one; the choice is made once per process, at its first
product (never at ``import jitorch``: MKL's library is over 100 MB to map). Where MKL is chosen, a rule on a
product's shape, dtype and operands' transposes (`mkl_shape`) still gives OpenBLAS the small products and the
classes of shapes where its gemm was the faster.

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
# ... and so do two classes of float32 products where OpenBLAS's sgemm was the faster (benchmarks/blas_shapes.py's
# sweeps, one thread, thread CPU, whole calls, the machine shared with other work: load 10-13 on 2 cores):
# - a transposed ``a`` (laid out in columns: NumPy passes it as "T") of at least `TRANSPOSED_A_MIN_AREA` elements,
#   and `TRANSPOSED_A_MIN_COLS` to `TRANSPOSED_A_MAX_COLS` result columns: MKL took 1.18-1.46x OpenBLAS's time
#   (m 1024-4096, k 2048-8192, n 64 and 128, "TN" and "TT", also at load 2-4); at n 16-48, 192-256, or an ``a`` of
#   2M elements or fewer, MKL's was 0.73-1.09x OpenBLAS's, under 1.0 for most; with ``a`` in rows MKL's is the
#   faster in every such shape (0.59-0.96x). float64 differed less (TN 1.00-1.09x, TT 1.18-1.30x at n 128).
# - `FEW_ROWS_MIN` to `FEW_ROWS_MAX` rows times a ``b`` in rows ("NN", "TN") of `FEW_ROWS_MIN_SUM` rows or more and
#   `FEW_ROWS_MIN_COLS` columns or more (DCGAN's 128x1024 @ 1024x4096, its largest product): MKL took 0.94-1.86x
#   OpenBLAS's time, over 1.08x in 30 of 36 shapes (m 96-160, k 1024 and 4096, n 2048 and 4096); at m 64, 192 and
#   256, or ``b`` transposed, 0.77-0.93x. On the machine at load 1-4 the two were level there (128x1024x4096 and
#   128x4096x1024: 0.96-1.01x), so OpenBLAS is the faster or level.
TRANSPOSED_A_MIN_AREA = 1 << 22
TRANSPOSED_A_MIN_COLS, TRANSPOSED_A_MAX_COLS = 64, 128
FEW_ROWS_MIN, FEW_ROWS_MAX, FEW_ROWS_MIN_SUM, FEW_ROWS_MIN_COLS = 96, 160, 1024, 2048
_FLOAT32 = np.dtype(np.float32)


def mkl_shape(dtype, m, k, n, a_transposed, b_transposed):
    """Whether the rule above gives MKL's gemm an ``(m, k) @ (k, n)`` product of ``dtype`` (a NumPy dtype) whose
    operands NumPy passes transposed or not (``a_transposed``, ``b_transposed``) where MKL is chosen: at least
    `MKL_MIN_WORK` multiply-adds and none of the shapes where OpenBLAS is the faster. A function of the shape alone:
    a product's bits must not depend on anything measured while it runs."""
    if m * k * n < MKL_MIN_WORK:
        return False
    if dtype != _FLOAT32:
        return True
    transposed_a = (a_transposed and m * k >= TRANSPOSED_A_MIN_AREA
                    and TRANSPOSED_A_MIN_COLS <= n <= TRANSPOSED_A_MAX_COLS)
    few_rows = (not b_transposed and FEW_ROWS_MIN <= m <= FEW_ROWS_MAX and k >= FEW_ROWS_MIN_SUM
                and n >= FEW_ROWS_MIN_COLS)
    return not (transposed_a or few_rows)


def runs_mkl(dtype, m, k, n, a_transposed, b_transposed):
    """Whether an ``(m, k) @ (k, n)`` product of ``dtype`` (a NumPy dtype, its operands passed transposed or not:
    ``a_transposed``, ``b_transposed``) that NumPy would make as one gemm call runs as MKL's: MKL chosen, and
    `mkl_shape`."""
    return mkl_shape(dtype, m, k, n, a_transposed, b_transposed) and chosen() == MKL


@functools.cache
def _functions():
    """{dtype: (OpenBLAS's gemm or None, MKL's gemm or None)} addresses, MKL's only where it is chosen."""
    openblas = _openblas_gemms() or (None, None)
    mkl = (mkl_library().cblas_sgemm_64, mkl_library().cblas_dgemm_64) if chosen() == MKL else (None, None)
    address = lambda f: None if f is None else ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    return {np.dtype(dt): (address(o), address(m)) for dt, o, m in zip((np.float32, np.float64), openblas, mkl)}


def gemm_function(dtype, mkl):
    """The address of the cblas gemm (64-bit integers) of ``dtype`` (a NumPy dtype): MKL's where ``mkl`` (what
    `runs_mkl` gave the whole product a call is part of) and it is chosen, else the OpenBLAS of NumPy's wheel; None
    where that is to be NumPy's matmul (no such OpenBLAS, or another dtype)."""
    functions = _functions().get(dtype)
    if functions is None:
        return None
    return functions[1] if mkl and functions[1] is not None else functions[0]
