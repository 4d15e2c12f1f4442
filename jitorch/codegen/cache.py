"""Cache of compiled kernels' object code: a bounded dict in front of a folder on disk.

A second process compiling the same kernel finds its machine code here and
skips LLVM. Entries live at ``<dir>/<key[:2]>/<key>.jitk`` (generated Python's code objects, `pycode`, at
``<key>.jitpy``); each file is a header, the entry's key, then the payload (little-endian)::

    magic b"JITK" | format version (uint32) | payload length (uint64) | SHA-256 of the payload
    | SHA-256 of the source | key length (uint16) | key (ASCII) | payload

The source is what the payload was compiled from (the kernel's LLVM IR). An
entry is used only if it is a regular file (not a FIFO, a device or a symbolic
link) and its key and source hash are the ones asked for, so an entry copied to
another key's path is a miss, not another kernel's code. Anything that does
not check out (missing, truncated, corrupted, foreign, another format version)
reads as a miss and is overwritten by the next ``put``. Writes are atomic
(`runtime.files.atomic_write`), so readers and concurrent writers only ever see
whole entries. A write that fails (read-only or full disk) skips that entry
only: the next ``put`` tries again.

The checksum guards against damage, not against an attacker: whoever can
write the cache folder can write entries that check out, and an entry holds
code that runs. So an entry is read only if it and its shard folder belong to
this user and nobody else may write them (as ssh treats its keys): another
user's entry, or one in a folder others can write, is a miss (logged under
``JITORCH_LOGS=codegen``). Folders are made owner-only. Callers also check
object code structurally before linking it (`linker.check_object`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import stat
import struct
import threading
from pathlib import Path

from ..runtime import logs
from ..runtime.files import TMP_SUFFIX as _TMP_SUFFIX, atomic_write
from ..runtime import version
from .memo import BoundedMemo

MAGIC = b"JITK"
FORMAT_VERSION = 2
_HEADER = struct.Struct("<4sIQ32s32sH")
_SUFFIX = ".jitk"
# The suffixes of every kind of entry in the folder (`clear` removes them all): object code's, and generated Python's
# code objects' (`pycode`), kept apart so that what counts or lists one kind never meets the other.
SUFFIXES = (_SUFFIX, ".jitpy")
# Keys become file names, so only lowercase hex (what `cache_key` returns) is accepted.
_KEY = re.compile(r"[0-9a-f]{4,128}")
_SHARD = re.compile(r"[0-9a-f]{2}")
# Never follow a link, and never wait for a writer at a FIFO: opening one for reading would block.
_OPEN_ENTRY = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_OPEN_SHARD = _OPEN_ENTRY | getattr(os, "O_DIRECTORY", 0)
# The in-memory layer's default budget: payloads beyond it are dropped least recently used first.
MEMORY_LIMIT = 32 << 20


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
def toolchain() -> tuple[str, ...]:
    import llvmlite

    return ("jitorch", version.__version__, "llvmlite", llvmlite.__version__)


def cache_key(*parts: str | bytes) -> str:
    """SHA-256 hex digest naming a kernel: pass its LLVM IR text, the target triple, CPU name and features.

    The versions of jitorch and llvmlite are mixed in here, so no caller can
    forget them. Each part is hashed with its type and length, so no two
    different part lists share a key (``("ab", "c")`` differs from ``("a", "bc")``).
    """
    h = hashlib.sha256(b"jitorch kernel cache\0")
    for part in (*toolchain(), *parts):
        h.update(_tagged(part, "cache_key(): parts"))
    return h.hexdigest()


def _tagged(part, what) -> bytes:
    if isinstance(part, str):
        tag, data = b"s", part.encode("utf-8")
    elif isinstance(part, (bytes, bytearray, memoryview)):
        tag, data = b"b", bytes(part)
    else:
        raise TypeError(f"{what} must be str or bytes, got {type(part).__name__}")
    return tag + len(data).to_bytes(8, "little") + data


def source_digest(source: str | bytes) -> bytes:
    """The SHA-256 an entry stores of the source its payload was compiled from."""
    return hashlib.sha256(_tagged(source, "KernelCache: source")).digest()


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    """What a `KernelCache` holds and how it has been used by this process."""

    directory: Path | None
    entries: int  # entry files on disk (valid or not)
    size_bytes: int  # their total size
    memory_entries: int
    memory_bytes: int  # payload bytes held in memory (at most the cache's memory_limit)
    memory_hits: int
    disk_hits: int
    misses: int
    writes: int  # puts that reached the disk
    write_failures: int  # puts the disk refused (each skipped that entry only)


class KernelCache:
    """Object code by key and source: `get(key, source) -> bytes | None`, `put(key, data, source)`.

    ``directory`` defaults to `cache_dir()`. ``memory_limit`` bounds the bytes
    of payloads kept in memory (least recently used dropped first; they stay on
    disk). Safe to share between threads and between processes; `get` never
    raises for bad disk content and `put` never raises for an unusable folder.
    """

    def __init__(self, directory: str | os.PathLike | None = None, memory_limit: int = MEMORY_LIMIT,
                 suffix: str = _SUFFIX):
        if suffix not in SUFFIXES:
            raise ValueError(f"KernelCache: suffix must be one of {SUFFIXES}, got {suffix!r}")
        self.directory = Path(directory) if directory is not None else cache_dir()
        self.suffix = suffix
        # key -> (payload, source digest), weighed by the payload's bytes
        self._memory = BoundedMemo(memory_limit, size=lambda entry: len(entry[0]))
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(("memory_hits", "disk_hits", "misses", "writes", "write_failures"), 0)

    def supplies_foreign(self, key: str) -> bool:
        """Whether ``key``'s code would come from outside this machine's cache (never, here; see the
        export's `ArtifactCache`)."""
        return False

    def get(self, key: str, source: str | bytes, limit: int | None = None) -> bytes | None:
        """The payload stored under ``key`` for ``source``, or None on a miss (including a damaged entry,
        another key's entry or one compiled from another source). ``limit``: a payload of more bytes is a
        miss, refused before it is read."""
        _check_key(key)
        digest = source_digest(source)
        hit = self._memory.get(key)
        if hit is not None and hit[1] == digest:
            self._count("memory_hits")
            return hit[0]
        data = _read_entry(self._path(key), key, digest, limit) if self.directory is not None else None
        if data is None:
            self._count("misses")
            return None
        self._memory.put(key, (data, digest))
        self._count("disk_hits")
        return data

    def put(self, key: str, data: bytes, source: str | bytes) -> None:
        """Store ``data``, compiled from ``source``, under ``key`` in memory and, atomically, on disk."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"KernelCache.put(): data must be bytes, got {type(data).__name__}")
        _check_key(key)
        data, digest = bytes(data), source_digest(source)
        self._memory.put(key, (data, digest))
        if self.directory is None:
            return
        try:
            _write_entry(self._path(key), key, data, digest)
        except OSError as e:
            # Read-only or full disk, a file where a folder should be: this kernel stays uncached on disk.
            self._count("write_failures")
            logs.log("codegen", "kernel cache entry %s not written to %s: %s", key, self.directory, e)
        else:
            self._count("writes")

    def clear(self) -> None:
        """Drop every entry, in memory and on disk (also temporary files left by killed writers)."""
        self._memory.clear()
        for shard in self._shards():
            for entry in _scandir(shard.path):
                if entry.name.endswith((*SUFFIXES, _TMP_SUFFIX)):
                    _remove(os.unlink, entry.path)
            _remove(os.rmdir, shard.path)  # left in place if something else lives there

    def info(self) -> CacheInfo:
        """Entry count and size on disk, with this process's hit and miss counts."""
        sizes = [_size(e) for shard in self._shards() for e in _scandir(shard.path) if e.name.endswith(self.suffix)]
        with self._lock:
            return CacheInfo(self.directory, len(sizes), sum(sizes), len(self._memory), self._memory.total,
                             **self._counts)

    @property
    def memory_limit(self) -> int:
        """The bytes of payloads kept in memory at most."""
        return self._memory.limit

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / (key + self.suffix)

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


def _read_entry(path: Path, key: str, digest: bytes, limit: int | None = None) -> bytes | None:
    """The payload of ``key``'s entry at ``path`` if it is a regular file made for ``key`` from the source of
    ``digest`` (and of at most ``limit`` bytes)."""
    fd = _open_regular(path.parent, path.name)
    if fd is None:
        return None
    with open(fd, "rb") as f:
        try:
            return _read_payload(f, key, digest, limit)
        except OSError:
            return None


def _open_regular(folder: Path, name: str) -> int | None:
    """A descriptor reading ``folder/name`` if the folder is one (not a link) and the file a regular file,
    both this user's and writable by no one else, else None. Nothing is followed or waited for: a link, a
    FIFO or a device is refused before any read."""
    try:
        shard = os.open(folder, _OPEN_SHARD)
    except OSError:
        return None
    try:
        if not _private(os.fstat(shard)):
            logs.log("codegen", "cache folder %s refused: another user's, or others may write it", folder)
            return None
        fd = os.open(name, _OPEN_ENTRY, dir_fd=shard)
    except OSError:
        return None
    finally:
        os.close(shard)
    try:
        status = os.fstat(fd)
        if stat.S_ISREG(status.st_mode):
            if _private(status):
                return fd
            logs.log("codegen", "cache entry %s refused: another user's, or others may write it", folder / name)
    except OSError:
        pass
    os.close(fd)
    return None


def _private(status) -> bool:
    """Whether a file or folder belongs to this process's user and no group or other user may write it."""
    owner = getattr(os, "geteuid", None)
    if owner is None:  # (no POSIX owners: nothing to compare)
        return True
    return status.st_uid == owner() and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _read_payload(f, key, digest, limit=None):
    expected_key = key.encode("ascii")
    header = f.read(_HEADER.size + len(expected_key))
    if len(header) != _HEADER.size + len(expected_key):
        return None
    magic, version, length, payload_digest, source, key_length = _HEADER.unpack_from(header)
    # Check everything the header claims before reading, so a large foreign file is never read whole.
    if (magic, version, key_length, source) != (MAGIC, FORMAT_VERSION, len(expected_key), digest) \
            or header[_HEADER.size:] != expected_key or os.fstat(f.fileno()).st_size != len(header) + length \
            or (limit is not None and length > limit):
        return None
    payload = f.read(length)
    if len(payload) != length or hashlib.sha256(payload).digest() != payload_digest:
        return None
    return payload


def _write_entry(path: Path, key: str, data: bytes, digest: bytes) -> None:
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, len(data), hashlib.sha256(data).digest(), digest, len(key))
    for folder in (path.parent.parent, path.parent):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    # atomic: readers see the old entry or the new one, and the last rename wins; not flushed to disk first
    # (no fsync): an entry a crash damaged fails its length or checksum and reads as a miss (`_read_entry`)
    with atomic_write(path, durable=False) as f:
        f.write(header + key.encode("ascii"))
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
