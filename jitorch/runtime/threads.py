"""Process-wide settings torch exposes as functions: thread counts and warn-always.

``set_num_threads`` governs how many threads a compiled CPU kernel splits its work across
(`codegen.cpu`: kernels of at least ``PARALLEL_MIN_WORK`` elements run in chunks on a pool of that many
threads) and the size of NumPy's BLAS pool, which eager and compiled matrix products run on (set through
threadpoolctl, which finds the BLAS library NumPy loaded whichever it is). Other eager ops run NumPy on the
calling thread. jitorch has no inter-op
pool (torch's, for ``torch.jit.fork``): ``set_num_interop_threads`` records its number, once, under torch's
rule, and nothing reads it. ``set_warn_always`` makes the warnings jitorch gives
once per compiled function (the recompile limit) come at each occurrence, as torch's TORCH_WARN_ONCE does.
"""

from __future__ import annotations

import os

_settings = {"threads": None, "interop": None, "interop_fixed": False, "warn_always": False}


def _positive(name, n):
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise RuntimeError(f"{name} expects a positive integer")
    return n


def get_num_threads() -> int:
    """Threads a compiled CPU kernel may use: what ``set_num_threads`` gave, else ``JITORCH_NUM_THREADS``,
    else the number of cores."""
    if _settings["threads"] is not None:
        return _settings["threads"]
    value = os.environ.get("JITORCH_NUM_THREADS")
    return max(1, int(value)) if value else (os.cpu_count() or 1)


def set_num_threads(n) -> None:
    """Let compiled CPU kernels and matrix products (NumPy's BLAS) use ``n`` threads (a positive int)."""
    _settings["threads"] = _positive("set_num_threads", n)
    # A BLAS pool larger than the threads asked for spins against the rest of the process: OpenBLAS with two
    # threads on two busy cores ran a 256x784x256 product 8x slower than with one.
    from threadpoolctl import threadpool_limits
    threadpool_limits(limits=n, user_api="blas")


def init_num_threads() -> None:
    """torch's per-thread initialisation of its thread pools: jitorch's pool needs none."""


def get_num_interop_threads() -> int:
    """The inter-op thread count (torch's default: the number of cores)."""
    return _settings["interop"] or os.cpu_count() or 1


def set_num_interop_threads(n) -> None:
    """Record the inter-op thread count: allowed once (RuntimeError after, as torch)."""
    n = _positive("set_num_interop_threads", n)
    if _settings["interop_fixed"]:
        raise RuntimeError("Error: cannot set number of interop threads after parallel work has started or "
                           "set_num_interop_threads called")
    _settings["interop"], _settings["interop_fixed"] = n, True


def is_warn_always_enabled() -> bool:
    """Whether once-only warnings are given every time."""
    return _settings["warn_always"]


def set_warn_always(b) -> None:
    """Give once-only warnings every time (``b`` True) or once (False)."""
    _settings["warn_always"] = bool(b)
