"""``jitorch.backends.cudnn``: torch's cuDNN switches. jitorch does not use cuDNN (its CUDA convolutions are
its own kernels), so `is_available` is False, `version` None, and the flags are recorded for scripts that set
them and change nothing; deterministic results are `jitorch.use_deterministic_algorithms`'s."""

from __future__ import annotations

import sys

from . import flags as _flags


def is_available():
    """Whether cuDNN can be used: never, jitorch does not call it."""
    return False


def version():
    """cuDNN's version: None, as torch reports without cuDNN."""
    return None


def is_acceptable(tensor):
    """Whether cuDNN would accept ``tensor``: never."""
    return False


def flags(enabled=False, benchmark=False, benchmark_limit=10, deterministic=False, allow_tf32=True):
    """Set the flags inside the block (torch's defaults when not given), then back to what they were."""
    return _flags.flags(sys.modules[__name__], enabled=enabled, benchmark=benchmark,
                        benchmark_limit=benchmark_limit, deterministic=deterministic, allow_tf32=allow_tf32)


class _CudnnModule(_flags.FlagModule):
    enabled = _flags.Flag(True, "set_enabled_cudnn", "Whether cuDNN may be used (no effect: it never is).")
    benchmark = _flags.Flag(False, "set_benchmark_cudnn", "Whether cuDNN benchmarks its algorithms (no effect).")
    deterministic = _flags.Flag(False, "set_deterministic_cudnn",
                                "Whether cuDNN picks deterministic algorithms only (no effect).")
    allow_tf32 = _flags.Flag(True, "set_allow_tf32_cublas",  # torch names cuBLAS in this message too
                             "Whether cuDNN convolutions may use TensorFloat-32 (no effect).")


benchmark_limit = None  # how many cuDNN algorithms benchmark mode tries: None without cuDNN, as in torch
sys.modules[__name__].__class__ = _CudnnModule
