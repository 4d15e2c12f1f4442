"""Cache of compiled kernels' object code: a dict in front of a folder on disk.

A second process compiling the same kernel finds its machine code here and
skips LLVM. Entries live at ``<dir>/<key[:2]>/<key>.jitk``; each file is a
48-byte little-endian header followed by the payload::

    magic b"JITK" | format version (uint32) | payload length (uint64) | SHA-256 of the payload

Anything that does not check out (missing, truncated, corrupted, foreign, another
format version) reads as a miss and is overwritten by the next ``put``. Writes
go to a uniquely named temporary file in the same folder and are renamed into
place, so readers and concurrent writers only ever see whole entries. When the
folder cannot be created or written, the disk layer switches itself off: a
read-only home must not break compilation, and entries already there are still read.

The checksum guards against damage, not against an attacker: whoever can
write the cache folder can run code in every process that reads it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import struct
import threading
from pathlib import Path

from ..jit import logs
from ..runtime.files import TMP_SUFFIX as _TMP_SUFFIX, atomic_write

MAGIC = b"JITK"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sIQ32s")
_SUFFIX = ".jitk"
# Keys become file names, so only lowercase hex (what `cache_key` returns) is accepted.
_KEY = re.compile(r"[0-9a-f]{4,128}")
_SHARD = re.compile(r"[0-9a-f]{2}")


def cache_dir() -> Path | None:
    """The cache folder: ``$JITORCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/jitorch``, else ``~/.cache/jitorch``.

    Only resolves the path; the folder is created by the first write. Returns
    None when there is no home directory to put it in.
    """
    explicit = os.environ.get("JITORCH_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG spec says to ignore relative paths
        return Path(xdg) / "jitorch"
    try:
        return Path.home() / ".cache" / "jitorch"
    except (RuntimeError, KeyError):  # no $HOME and no passwd entry
        return None


@functools.cache
def _toolchain() -> tuple[str, ...]:
    import llvmlite

    import jitorch

    return ("jitorch", jitorch.__version__, "llvmlite", llvmlite.__version__)


def cache_key(*parts: str | bytes) -> str:
    """SHA-256 hex digest naming a kernel: pass its LLVM IR text, the target triple, CPU name and features.

    The versions of jitorch and llvmlite are mixed in here, so no caller can
    forget them. Each part is hashed with its type and length, so no two
    different part lists share a key (``("ab", "c")`` differs from ``("a", "bc")``).
    """
    h = hashlib.sha256(b"jitorch kernel cache\0")
    for part in (*_toolchain(), *parts):
        if isinstance(part, str):
            tag, data = b"s", part.encode("utf-8")
        elif isinstance(part, (bytes, bytearray, memoryview)):
            tag, data = b"b", bytes(part)
        else:
            raise TypeError(f"cache_key(): parts must be str or bytes, got {type(part).__name__}")
        h.update(tag + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    """What a `KernelCache` holds and how it has been used by this process."""

    directory: Path | None
    writable: bool  # False once a write failed: entries on disk are still read
    entries: int  # entry files on disk (valid or not)
    size_bytes: int  # their total size
    memory_entries: int
    memory_hits: int
    disk_hits: int
    misses: int
    writes: int  # puts that reached the disk


class KernelCache:
    """Object code by key: `get(key) -> bytes | None`, `put(key, data)`.

    ``directory`` defaults to `cache_dir()`. Safe to share between threads and
    between processes; `get` never raises for bad disk content and `put` never
    raises for an unusable folder (writing to disk turns off instead).
    """

    def __init__(self, directory: str | os.PathLike | None = None):
        self.directory = Path(directory) if directory is not None else cache_dir()
        self._writable = self.directory is not None
        self._memory: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(("memory_hits", "disk_hits", "misses", "writes"), 0)

    @property
    def writable(self) -> bool:
        """Whether `put` still writes to disk."""
        return self._writable

    def get(self, key: str) -> bytes | None:
        """The payload stored under ``key``, or None on a miss (including a damaged or foreign entry)."""
        _check_key(key)
        data = self._memory.get(key)
        if data is not None:
            self._count("memory_hits")
            return data
        data = _read_entry(self._path(key)) if self.directory is not None else None
        if data is None:
            self._count("misses")
            return None
        with self._lock:
            self._memory[key] = data
        self._count("disk_hits")
        return data

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` in memory and, atomically, on disk."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"KernelCache.put(): data must be bytes, got {type(data).__name__}")
        _check_key(key)
        data = bytes(data)
        with self._lock:
            self._memory[key] = data
        if not self._writable:
            return
        try:
            _write_entry(self._path(key), data)
        except OSError as e:
            # Read-only or full disk, a file where a folder should be: keep compiling, uncached.
            self._writable = False
            logs.log("codegen", "kernel cache at %s no longer written: %s", self.directory, e)
        else:
            self._count("writes")

    def clear(self) -> None:
        """Drop every entry, in memory and on disk (also temporary files left by killed writers)."""
        with self._lock:
            self._memory.clear()
        for shard in self._shards():
            for entry in _scandir(shard.path):
                if entry.name.endswith((_SUFFIX, _TMP_SUFFIX)):
                    _remove(os.unlink, entry.path)
            _remove(os.rmdir, shard.path)  # left in place if something else lives there

    def info(self) -> CacheInfo:
        """Entry count and size on disk, with this process's hit and miss counts."""
        sizes = [_size(e) for shard in self._shards() for e in _scandir(shard.path) if e.name.endswith(_SUFFIX)]
        with self._lock:
            return CacheInfo(self.directory, self._writable, len(sizes), sum(sizes), len(self._memory), **self._counts)

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / (key + _SUFFIX)

    def _shards(self):
        if self.directory is None:
            return []
        return [e for e in _scandir(self.directory) if _SHARD.fullmatch(e.name) and e.is_dir(follow_symlinks=False)]

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1


@functools.cache
def default_cache() -> KernelCache:
    """The process-wide cache, built from the environment on first use."""
    return KernelCache()


def _check_key(key) -> None:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ValueError(f"KernelCache: a key is 4 to 128 lowercase hex digits (see cache_key), got {key!r}")


def _read_entry(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            header = f.read(_HEADER.size)
            if len(header) != _HEADER.size:
                return None
            magic, version, length, digest = _HEADER.unpack(header)
            # Check the size before reading, so a large foreign file is never read whole.
            if magic != MAGIC or version != FORMAT_VERSION or os.fstat(f.fileno()).st_size != _HEADER.size + length:
                return None
            payload = f.read(length)
    except OSError:
        return None
    if len(payload) != length or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


def _write_entry(path: Path, data: bytes) -> None:
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, len(data), hashlib.sha256(data).digest())
    path.parent.mkdir(parents=True, exist_ok=True)
    # atomic: readers see the old entry or the new one, and the last rename wins
    with atomic_write(path) as f:
        f.write(header)
        f.write(data)


def _scandir(path) -> list:
    try:
        with os.scandir(path) as it:
            return list(it)
    except OSError:
        return []


def _size(entry) -> int:
    try:
        return entry.stat(follow_symlinks=False).st_size
    except OSError:  # removed by a concurrent clear
        return 0


def _remove(remove, path) -> None:
    try:
        remove(path)
    except OSError:
        pass
