"""Atomic file writes: a reader, or a crash at any point, sees the old file or the new one, never half.

Every file jitorch writes (checkpoints, exports, kernel-cache entries, the AOT library) goes through
`atomic_write`: the bytes go to a temporary file in the target's own directory (so the final rename
never crosses a file system), are flushed to disk, and only then replace the target.
"""

from __future__ import annotations

import contextlib
import os
import secrets

TMP_SUFFIX = ".tmp"


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb", durable: bool = True):
    """Open a temporary file beside ``path`` for writing; on success it replaces ``path`` atomically.

    If the body raises (a full disk, a file-size limit, a bug in the caller), the temporary file is
    removed and ``path`` keeps its previous contents. ``mode`` is ``"wb"`` or ``"w"``. ``durable=False``
    skips flushing the bytes to disk before the rename (an fsync: ~7 ms of waiting per file here): for
    files whose reader verifies them and rebuilds a damaged one (the kernel cache's entries carry their
    length and checksum), where a crash may only cost a rebuild. Readers still see whole files.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_write: mode must be 'wb' or 'w', not {mode!r}")
    path = os.fspath(path)
    head, name = os.path.split(path)
    # Unique per process and call, so concurrent writers never share a temporary file.
    tmp = os.path.join(head, f".{name}.{os.getpid()}.{secrets.token_hex(8)}{TMP_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o644)
    try:
        with open(fd, mode) as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_to(path_or_file, write) -> None:
    """``write(f)`` into ``path_or_file``: a path is written atomically (`atomic_write`; a failed save
    leaves the previous file as it was), an open binary file as it is."""
    if isinstance(path_or_file, (str, os.PathLike)):
        with atomic_write(path_or_file) as f:
            write(f)
    else:
        write(path_or_file)
