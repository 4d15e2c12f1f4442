"""NCCL's C API through ctypes: the library, communicators, and the watchdog that keeps collectives from hanging.

The library is loaded at the first NCCL use, never at ``import jitorch``: from the ``nvidia-nccl-cu12`` or
``nvidia-nccl-cu13`` wheel's package directory (``nvidia/nccl/lib/libnccl.so.2``), else through the system's
loader (``libnccl.so.2``); without either, `library()` raises RuntimeError("NCCL is not available: ...").

Everything jitorch calls is in `SIGNATURES`, each function's C prototype. A `Library` is a table of those
functions: `Library.load` binds them from the shared library with these prototypes, `Library.from_python` wraps
Python functions in the same prototypes (``ctypes.CFUNCTYPE``), so a stand-in is called through the same ctypes
conversions as the real library; `use_library` installs one (the test suite's fake NCCL on its fake CUDA
driver). On a machine without a GPU the real library answers ``ncclGetVersion``, ``ncclGetErrorString``,
``ncclGetLastError`` and ``ncclGetUniqueId``, and ``ncclCommInitRank`` fails with ncclUnhandledCudaError; the
collectives themselves run only on a GPU, where ``python -m jitorch.cuda.selftest`` checks them.

A `Communicator` is one rank's ``ncclComm_t`` on one device. Collectives are queued on a CUDA stream and the host
goes on; a `Watchdog` thread follows each one's CUDA event, asks NCCL for the communicator's asynchronous error,
and once an error shows or the group's timeout passes, aborts the communicator (``ncclCommAbort`` makes its
kernels return, so nothing waiting on the stream hangs) and keeps the error, which the communicator's next use and
every wait raise.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import threading
import time

UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES
MIN_VERSION = 21000    # 2.10: ncclAvg and ncclBfloat16


class UniqueId(ctypes.Structure):
    """``ncclUniqueId``: 128 opaque bytes that rank 0 makes and every rank passes to ncclCommInitRank."""

    _fields_ = [("internal", ctypes.c_ubyte * UNIQUE_ID_BYTES)]


RESULTS = ("ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError", "ncclInvalidArgument",
           "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress", "ncclTimeout")
SUCCESS, IN_PROGRESS = 0, 7

# ncclRedOp_t and ncclDataType_t (nccl.h)
OPS = {"SUM": 0, "PRODUCT": 1, "MAX": 2, "MIN": 3, "AVG": 4}
DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5, "float16": 6, "float32": 7,
          "float64": 8, "bfloat16": 9, "bool": 1}
UINT8 = DTYPES["uint8"]

_P, _INT, _SIZE = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
# name -> (restype, argtypes): comms, streams and buffers are pointers; enums are ints; strings come back as
# addresses (read with ctypes.string_at), so a Python stand-in can return them too
SIGNATURES = {
    "ncclGetVersion": (_INT, [ctypes.POINTER(_INT)]),
    "ncclGetUniqueId": (_INT, [ctypes.POINTER(UniqueId)]),
    "ncclGetErrorString": (_P, [_INT]),
    "ncclGetLastError": (_P, [_P]),
    "ncclCommInitRank": (_INT, [ctypes.POINTER(_P), _INT, UniqueId, _INT]),
    "ncclCommDestroy": (_INT, [_P]),
    "ncclCommAbort": (_INT, [_P]),
    "ncclCommGetAsyncError": (_INT, [_P, ctypes.POINTER(_INT)]),
    # send, recv, count, datatype, op, comm, stream
    "ncclAllReduce": (_INT, [_P, _P, _SIZE, _INT, _INT, _P, _P]),
    # send, recv, count, datatype, root, comm, stream
    "ncclBroadcast": (_INT, [_P, _P, _SIZE, _INT, _INT, _P, _P]),
    # send, recv, count, datatype, op, root, comm, stream
    "ncclReduce": (_INT, [_P, _P, _SIZE, _INT, _INT, _INT, _P, _P]),
    # send, recv, sendcount, datatype, comm, stream
    "ncclAllGather": (_INT, [_P, _P, _SIZE, _INT, _P, _P]),
    # send, recv, recvcount, datatype, op, comm, stream
    "ncclReduceScatter": (_INT, [_P, _P, _SIZE, _INT, _INT, _P, _P]),
    # buffer, count, datatype, peer, comm, stream
    "ncclSend": (_INT, [_P, _SIZE, _INT, _INT, _P, _P]),
    "ncclRecv": (_INT, [_P, _SIZE, _INT, _INT, _P, _P]),
    "ncclGroupStart": (_INT, []),
    "ncclGroupEnd": (_INT, []),
}


def prototype(name):
    """The ctypes function type of NCCL function ``name`` (its C prototype)."""
    restype, argtypes = SIGNATURES[name]
    return ctypes.CFUNCTYPE(restype, *argtypes)


class NcclError(RuntimeError):
    """An NCCL call that returned an error; ``code`` is its ncclResult_t."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


class Library:
    """The NCCL functions jitorch calls, as attributes named as in nccl.h, each called with its C prototype
    (`SIGNATURES`); ``origin`` says where they came from, ``version`` is NCCL's version code (2.32.3: 23203)."""

    def __init__(self, functions, origin):
        missing = sorted(set(SIGNATURES) - set(functions))
        if missing:
            raise RuntimeError(f"NCCL is not available: {origin} lacks {', '.join(missing)}")
        self.functions = dict(functions)  # also keeps ctypes callbacks alive
        for name, fn in functions.items():
            setattr(self, name, fn)
        self.origin = origin
        version = ctypes.c_int()
        self.check(self.ncclGetVersion(ctypes.byref(version)), "ncclGetVersion")
        self.version = version.value
        if self.version < MIN_VERSION:
            raise RuntimeError(f"NCCL is not available: {origin} is NCCL {self.version_string()}, jitorch needs "
                               "2.10 or newer (ncclAvg, bfloat16)")

    @classmethod
    def load(cls, path):
        """The functions of the shared library at ``path`` (OSError when it cannot be loaded)."""
        shared = ctypes.CDLL(path)
        functions = {}
        for name, (restype, argtypes) in SIGNATURES.items():
            try:
                fn = getattr(shared, name)
            except AttributeError:
                continue  # reported by the constructor, with every other missing name
            fn.restype, fn.argtypes = restype, argtypes
            functions[name] = fn
        return cls(functions, path)

    @classmethod
    def from_python(cls, functions, origin):
        """Python functions, each wrapped in its C prototype: ctypes converts their arguments and results as it
        does the real library's (a stand-in must take and return what the C functions do)."""
        return cls({name: prototype(name)(fn) for name, fn in functions.items()}, origin)

    def version_string(self):
        """``major.minor.patch`` of `version`."""
        return f"{self.version // 10000}.{self.version // 100 % 100}.{self.version % 100}"

    def error_string(self, code):
        """``ncclGetErrorString(code)``."""
        address = self.ncclGetErrorString(code)
        return ctypes.string_at(address).decode(errors="replace") if address else RESULTS[code]

    def last_error(self, comm=None):
        """``ncclGetLastError(comm)``: NCCL's message about its last failure ("" when none)."""
        address = self.ncclGetLastError(comm)
        return ctypes.string_at(address).decode(errors="replace") if address else ""

    def check(self, result, what, comm=None):
        """Raise `NcclError` naming ``what``, the result and NCCL's last message unless ``result`` is success."""
        if result != SUCCESS:
            name = RESULTS[result] if 0 <= result < len(RESULTS) else str(result)
            detail = self.last_error(comm) if self.functions.get("ncclGetLastError") else ""
            raise NcclError(f"NCCL error in {what}: {name}: {self.error_string(result)}"
                            + (f" ({detail})" if detail else ""), result)

    def unique_id(self):
        """A new ``ncclUniqueId``'s 128 bytes (rank 0 makes it; it also starts NCCL's bootstrap listener)."""
        uid = UniqueId()
        self.check(self.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        return bytes(uid)


def candidates():
    """Where libnccl.so.2 is looked for, in order: the NCCL wheel's lib directory, then the system's loader."""
    paths = []
    try:
        spec = importlib.util.find_spec("nvidia.nccl")  # both wheels install the nvidia.nccl namespace package
    except (ImportError, ValueError):
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        paths.append(os.path.join(folder, "lib", "libnccl.so.2"))
    paths.append("libnccl.so.2")
    return paths


_lock = threading.Lock()
_loaded: dict = {}   # "library" or "error" once the first look has been made
_installed: list = []


def library():
    """The NCCL library in use (`use_library`'s, else the real one, loaded at the first call); RuntimeError
    "NCCL is not available: ..." when it cannot be loaded."""
    if _installed:
        return _installed[-1]
    if not _loaded:
        with _lock:
            if not _loaded:
                _loaded.update(_load())
    if "error" in _loaded:
        raise RuntimeError(_loaded["error"])
    return _loaded["library"]


def _load():
    reasons = []
    for path in candidates():
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            return {"library": Library.load(path)}
        except OSError as error:  # a file there that does not load (its message names it); else none there
            if os.sep in path:
                reasons.append(str(error))
        except RuntimeError as error:
            return {"error": str(error)}
    if reasons:
        return {"error": f"NCCL is not available: libnccl.so.2 cannot be loaded: {'; '.join(reasons)}"}
    return {"error": "NCCL is not available: no libnccl.so.2 in an nvidia-nccl-cu12/cu13 wheel or on the system's "
                     "library path (pip install 'jitorch[nccl]')"}


def is_available():
    """Whether the NCCL library can be loaded."""
    try:
        library()
    except RuntimeError:
        return False
    return True


@contextlib.contextmanager
def use_library(lib):
    """Use ``lib`` (a `Library`) for NCCL inside the block: the test suite's fake NCCL."""
    _installed.append(lib)
    try:
        yield lib
    finally:
        _installed.remove(lib)


class Communicator:
    """This rank's ``ncclComm_t`` in a group of ``size`` ranks, on CUDA device ``device``.

    ``error`` is the RuntimeError that broke it (an asynchronous NCCL error or a timeout, after which it was
    aborted); `call` raises it rather than queue more work on a broken communicator."""

    def __init__(self, lib, handle, device, rank, size, timeout):
        self.lib, self.handle, self.device, self.rank, self.size, self.timeout = lib, handle, device, rank, size, \
            timeout
        self.error = None
        self._lock = threading.Lock()

    def call(self, name, *args):
        """``name(*args)`` of the library, NcclError on a failure (the comm's last error in the message)."""
        self.raise_if_broken()
        self.lib.check(getattr(self.lib, name)(*args), name, self.handle)

    def raise_if_broken(self):
        if self.error is not None:
            raise self.error

    def async_error(self):
        """``ncclCommGetAsyncError``: the result of the communicator's work so far (ncclSuccess while fine, and
        once it is aborted or destroyed: its `error` tells then). Under the lock `abort` takes, so the watchdog
        and a waiting thread never ask a communicator that the other is freeing."""
        code = ctypes.c_int()
        with self._lock:
            if self.handle is None:
                return SUCCESS
            self.lib.check(self.lib.ncclCommGetAsyncError(self.handle, ctypes.byref(code)), "ncclCommGetAsyncError",
                           self.handle)
        return code.value

    def check_async(self, what):
        """Abort, and raise, when NCCL reports an asynchronous error of the communicator (after ``what``)."""
        code = self.async_error()
        if code not in (SUCCESS, IN_PROGRESS):
            self.abort(f"jitorch.distributed: NCCL {what} failed on rank {self.rank}: {RESULTS[code]}: "
                       f"{self.lib.error_string(code)}; the communicator was aborted")
            self.raise_if_broken()

    def abort(self, message):
        """``ncclCommAbort``: the communicator's kernels return and it is freed; ``message`` becomes the error
        every later use raises."""
        with self._lock:
            if self.handle is None:
                return
            handle, self.handle = self.handle, None
            self.error = RuntimeError(message)
        self.lib.ncclCommAbort(handle)

    def destroy(self):
        """``ncclCommDestroy`` (after its queued work); a broken communicator was freed by its abort."""
        with self._lock:
            handle, self.handle = self.handle, None
        if handle is not None:
            self.lib.check(self.lib.ncclCommDestroy(handle), "ncclCommDestroy")
            self.error = self.error or RuntimeError("NCCL communicator was destroyed with its process group")


def init_rank(lib, uid, size, rank, device, timeout, activate):
    """``ncclCommInitRank`` for ``rank`` of ``size`` on ``device`` (``activate(device)`` makes its CUDA context
    current first), as a `Communicator`. The call blocks until every rank has called it, so it runs in a helper
    thread: RuntimeError once ``timeout`` seconds pass (the helper stays blocked in NCCL)."""
    result, done = [], threading.Event()
    handle = ctypes.c_void_p()
    uid_struct = UniqueId.from_buffer_copy(uid)

    def run():
        try:
            activate(device)
            result.append(lib.ncclCommInitRank(ctypes.byref(handle), size, uid_struct, rank))
        except Exception as error:  # raised again on the calling thread
            result.append(error)
        finally:
            done.set()

    threading.Thread(target=run, name=f"ncclCommInitRank-{rank}", daemon=True).start()
    if not done.wait(timeout):
        raise RuntimeError(f"jitorch.distributed: NCCL communicator of {size} ranks not formed after {timeout:.0f} s "
                           f"(rank {rank} on cuda:{device}): a rank died, or did not call the same collective")
    if isinstance(result[0], Exception):
        raise result[0]
    lib.check(result[0], f"ncclCommInitRank(rank {rank} of {size}, cuda:{device})")
    return Communicator(lib, handle.value, device, rank, size, timeout)


class Pending:
    """A collective the watchdog follows: its communicator, the event recorded after it, the time by which it must
    finish, its name, the tensors kept alive until then, and ``done`` once the event was seen complete."""

    __slots__ = ("comm", "event", "deadline", "what", "keep", "done")

    def __init__(self, comm, event, what, keep):
        self.comm, self.event, self.what, self.keep = comm, event, what, keep
        self.deadline = time.monotonic() + comm.timeout
        self.done = False


class Watchdog:
    """One thread per process following the NCCL work queued on streams: every ``POLL`` seconds it asks each
    pending collective's event whether it finished, and its communicator for an asynchronous error; on an error,
    or once the collective is older than its group's timeout, it aborts the communicator (`Communicator.abort`).
    The thread runs while work is pending, and ends when none has come for `LINGER` seconds.

    It also keeps the events: a collective takes one with `event`, and once the watchdog has seen it complete it
    is recorded again by a later collective, so a training run does not make an event per collective (jitorch's
    events are never destroyed). ``make_event()`` makes a new one."""

    POLL = 0.01
    LINGER = 1.0  # seconds the thread waits for more work before it ends (not a new thread per collective)

    def __init__(self, activate, make_event):
        self.activate, self.make_event = activate, make_event
        self.pending = []  # `Pending` collectives not yet seen done
        self.free = {}     # device -> events whose last recording completed
        self.lock = threading.Lock()
        self.thread = None

    def event(self, device):
        """An event for a collective on ``device``: a completed one again, or a new one."""
        with self.lock:
            free = self.free.get(device)
            if free:
                return free.pop()
        return self.make_event()

    def watch(self, comm, event, what, keep):
        """Follow ``event`` (recorded after collective ``what`` on ``comm``), keeping ``keep`` (its tensors)
        alive until it has finished; returns its `Pending`, whose deadline `NcclWork.wait` may bring forward."""
        entry = Pending(comm, event, what, keep)
        with self.lock:
            self.pending.append(entry)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="jitorch-nccl-watchdog", daemon=True)
                self.thread.start()
        return entry

    def events(self, comm):
        """The events of ``comm``'s work still followed."""
        with self.lock:
            return [e.event for e in self.pending if e.comm is comm]

    def forget(self, comm):
        """Stop following ``comm``'s work (it is being destroyed)."""
        with self.lock:
            self.pending = [e for e in self.pending if e.comm is not comm]

    def _run(self):
        idle_since = time.monotonic()
        while True:
            with self.lock:
                entries = list(self.pending)
                if entries:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > self.LINGER:
                    self.thread = None
                    return
            finished = [e for e in entries if self._finished(e)]
            with self.lock:
                # an entry forgotten while its event was queried belongs to a destroyed communicator: its event
                # is not offered again (its context may be gone with it)
                followed = [e for e in finished if any(e is p for p in self.pending)]
                self.pending = [e for e in self.pending if not any(e is f for f in finished)]
                for e in followed:
                    if e.done:
                        e.keep = None
                        self.free.setdefault(e.comm.device, []).append(e.event)
            time.sleep(self.POLL)

    def _finished(self, entry):
        """Whether ``entry`` needs no more watching: its event completed (``done``), or its communicator is
        broken (now)."""
        comm = entry.comm
        if comm.error is not None or comm.handle is None:
            return True
        try:
            self.activate(comm.device)
            comm.check_async(entry.what)
            if entry.event.query():
                entry.done = True
                return True
        except Exception as error:  # an NCCL error (now aborted), or a CUDA one: the communicator is done
            comm.abort(f"jitorch.distributed: NCCL {entry.what} failed: {error}")
            return True
        if time.monotonic() > entry.deadline:
            comm.abort(f"jitorch.distributed: NCCL {entry.what} timed out after {comm.timeout:.0f} s: a rank died, or "
                       "did not call the same collective with the same tensors; the communicator was aborted")
            return True
        return False
