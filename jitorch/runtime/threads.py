"""Process-wide settings torch exposes as functions: thread counts and warn-always.

``set_num_threads`` governs how many threads a compiled CPU kernel splits its work across
(`codegen.cpu`: kernels of at least ``PARALLEL_MIN_WORK`` elements run in chunks on `pool`, of that many
threads) and how many parts a large matrix product splits into (`ops.linalg`: eager and compiled products
run their parts on the same pool, each part a one-thread BLAS call). It sets NumPy's BLAS pool (through
threadpoolctl, which finds the BLAS library NumPy loaded whichever it is) to one thread: OpenBLAS's own
threads spin-wait at the barriers of each product, so on cores that other work shares, a product on two of
them took 5 to 7 times the CPU time of one thread (a GPT training step: 534 ms of CPU against 85), and they
spun against the kernels' pool as well. Until ``set_num_threads`` is called, products do not split and BLAS
keeps its own thread count. Other eager ops run NumPy on the calling thread. jitorch has no inter-op
pool (torch's, for ``torch.jit.fork``): ``set_num_interop_threads`` records its number, once, under torch's
rule, and nothing reads it. ``set_warn_always`` makes the warnings jitorch gives
once per compiled function (the recompile limit) come at each occurrence, as torch's TORCH_WARN_ONCE does.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_settings = {"threads": None, "interop": None, "interop_fixed": False, "warn_always": False,
             "split_products": False}
_pools: dict = {}  # thread count -> its pool
_pools_lock = threading.Lock()
# A forked child (a DataLoader worker) has none of its parent's pool threads: work queued there would wait forever
os.register_at_fork(after_in_child=_pools.clear)


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
    """Let compiled CPU kernels and large matrix products use ``n`` threads (a positive int), on one pool; NumPy's
    BLAS gets one thread (see the module docstring)."""
    _settings["threads"] = _positive("set_num_threads", n)
    # BLAS threads spin against the rest of the process (see the module docstring): products split on `pool`
    from threadpoolctl import threadpool_limits
    threadpool_limits(limits=1, user_api="blas")
    _settings["split_products"] = True


def product_parts() -> int:
    """How many parts a large matrix product splits into on `pool`: 1 until ``set_num_threads`` has set
    NumPy's BLAS to one thread (before that, BLAS splits products with threads of its own)."""
    return get_num_threads() if _settings["split_products"] else 1


def pool() -> ThreadPoolExecutor:
    """The pool of ``get_num_threads()`` threads that compiled kernels' chunks and matrix products' parts
    run on (calls through ctypes and NumPy's matmul release the GIL)."""
    n = get_num_threads()
    found = _pools.get(n)
    if found is None:
        with _pools_lock:
            found = _pools.get(n)
            if found is None:
                found = _pools[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="jitorch")
    return found


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
