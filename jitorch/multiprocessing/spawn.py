"""``spawn`` and ``start_processes``: run ``fn(i, *args)`` in ``nprocs`` processes, as torch.multiprocessing.

A process that raises writes its traceback to a file of its own (atomically: a reader never sees half of it)
and exits with code 1. ``ProcessContext.join`` waits for any process to end; the first that failed makes it
terminate the others and raise, in the parent, ``ProcessRaisedException`` with the child's traceback, or
``ProcessExitedException`` when the child died without one (killed by a signal, or ``sys.exit(n)``).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import traceback
import warnings

__all__ = ["ProcessContext", "ProcessException", "ProcessExitedException", "ProcessRaisedException", "spawn",
           "start_processes"]


class ProcessException(Exception):
    """A process of ``spawn`` failed: ``error_index`` is its index, ``pid`` its process id."""

    def __init__(self, msg, error_index, pid):
        super().__init__(msg)
        self.msg = msg
        self.error_index = error_index
        self.pid = pid

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid)


class ProcessRaisedException(ProcessException):
    """A process raised an exception; the message holds its traceback."""


class ProcessExitedException(ProcessException):
    """A process exited without raising: with a non-zero ``exit_code``, or killed by ``signal_name``."""

    def __init__(self, msg, error_index, error_pid, exit_code, signal_name=None):
        super().__init__(msg, error_index, error_pid)
        self.exit_code = exit_code
        self.signal_name = signal_name

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid, self.exit_code, self.signal_name)


def _write_atomically(path, text):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _wrap(fn, i, args, error_file):
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass  # the parent's SIGINT: it reports why the processes stopped
    except Exception:
        _write_atomically(error_file, traceback.format_exc())
        sys.exit(1)


class ProcessContext:
    """The processes of one ``start_processes`` call; ``join`` waits for them and raises the first failure."""

    def __init__(self, processes, error_files):
        self.processes = processes
        self.error_files = error_files
        self.sentinels = {process.sentinel: index for index, process in enumerate(processes)}

    def pids(self):
        """The processes' ids, by index."""
        return [int(process.pid) for process in self.processes]

    def join(self, timeout=None, grace_period=None):
        """Wait up to ``timeout`` seconds for a process to end; True when all have ended successfully.

        When one failed, the others are terminated (after ``grace_period`` seconds, SIGTERM then SIGKILL) and
        the failure is raised as ``ProcessRaisedException`` or ``ProcessExitedException``.
        """
        if not self.sentinels:
            return True
        ready = multiprocessing.connection.wait(self.sentinels.keys(), timeout=timeout)
        failed = None
        for sentinel in ready:
            index = self.sentinels.pop(sentinel)
            process = self.processes[index]
            process.join()
            if process.exitcode != 0:
                failed = index
                break
        if failed is None:
            return not self.sentinels
        self._terminate_others(grace_period)
        self._cleanup_files(keep=failed)
        process = self.processes[failed]
        error_file = self.error_files[failed]
        if not os.path.exists(error_file):
            code = process.exitcode
            if code < 0:
                name = signal.Signals(-code).name
                raise ProcessExitedException(f"process {failed} terminated with signal {name}", failed, process.pid,
                                             code, name)
            raise ProcessExitedException(f"process {failed} terminated with exit code {code}", failed, process.pid,
                                         code)
        with open(error_file, encoding="utf-8") as f:
            original = f.read()
        os.unlink(error_file)
        raise ProcessRaisedException(f"\n\n-- Process {failed} terminated with the following error:\n{original}",
                                     failed, process.pid)

    def _terminate_others(self, grace_period):
        alive = [p for p in self.processes if p.is_alive()]
        for p in alive:
            p.terminate()
        deadline_each = grace_period if grace_period is not None else None
        for p in alive:
            p.join(deadline_each)
            if p.is_alive():
                p.kill()
                p.join()
        self.sentinels.clear()

    def _cleanup_files(self, keep=None):
        for index, path in enumerate(self.error_files):
            if index != keep and os.path.exists(path):
                os.unlink(path)


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """Start ``nprocs`` processes running ``fn(i, *args)`` with ``start_method`` ("spawn", "fork" or
    "forkserver"); wait for them when ``join``, else return their `ProcessContext`."""
    from .reductions import init_reductions  # tensors among ``args`` go as shared-memory handles

    init_reductions()
    context = multiprocessing.get_context(start_method)
    processes, error_files = [], []
    for i in range(nprocs):
        fd, error_file = tempfile.mkstemp(prefix="jitorch-spawn-", suffix=".err")
        os.close(fd)
        os.unlink(error_file)  # its existence is the signal: it appears only when the child raised
        process = context.Process(target=_wrap, args=(fn, i, args, error_file), daemon=daemon)
        process.start()
        processes.append(process)
        error_files.append(error_file)
    result = ProcessContext(processes, error_files)
    if not join:
        return result
    finished = False
    while not finished:  # each join returns when a process ends: True once all have, raising on a failure
        finished = result.join()
    return None


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """`start_processes` with the "spawn" start method (another method is used, with a warning, as torch)."""
    if start_method != "spawn":
        warnings.warn(f"This method only supports start_method=spawn (got: {start_method}).\n"
                      "To use a different start_method use:\n\t\t jitorch.multiprocessing.start_processes(...)",
                      FutureWarning, stacklevel=2)
    return start_processes(fn, args, nprocs, join, daemon, start_method)
