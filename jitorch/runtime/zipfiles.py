"""Reading zip archives that may be hostile: bounded, each member read once, nothing inflated unchecked.

Checkpoints (`jitorch.save`) and exported programs are zip archives of JSON,
text and ``.npy`` members. A file from elsewhere can lie in its zip directory
(a member "of 16 GiB" that inflates from a few bytes), in its ``.npy`` headers
or in its sizes. `BoundedZip` refuses before inflating anything:

- every member's declared size must be possible (deflate expands at most
  1032 times; a stored member is as large as its bytes) and lie in the file;
- the declared sizes together must fit a budget proportional to the file's
  size (`default_budget`), which the caller can raise (``max_bytes``);
- a member yields exactly its declared size (zipfile stops there, and checks
  the CRC, so a stream that inflates further is damaged), and is read once
  (a second request is an error: a file that names one member twice is not
  one jitorch wrote);
- a ``.npy`` member is parsed without pickle, its header checked against the
  dtype and shape the caller expects and against the member's size before its
  array is allocated, and its data read in chunks straight into that array.

So loading never needs much more memory than the tensor bytes a file declares,
and declarations beyond the file's plausible size are refused first. Every
failure is an `ArchiveError` saying what is wrong; callers turn it into their
own error type.
"""

from __future__ import annotations

import math
import os
import struct
import tokenize
import zipfile
import zlib

import numpy as np

FLOOR = 64 << 20              # bytes any file may declare, however small
RATIO = 16                    # and this many times its size (exports deflate their text members)
TEXT_FLOOR = 1 << 20          # JSON and graph text take many times their size as Python objects:
TEXT_RATIO = 4                # they get a budget of their own, proportional to the file
MAX_DEFLATE_RATIO = 1032      # the most deflate can expand: a member claiming more is lying
MAX_NPY_HEADER = 10000        # numpy's own limit on a .npy header
_CHUNK = 1 << 20

# What the zip, zlib and npy readers raise on damaged input (zipfile raises RuntimeError for members
# whose damaged flags say "encrypted", NotImplementedError for unknown compressions).
READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError, struct.error,
               NotImplementedError, RuntimeError, UnicodeDecodeError, OverflowError)
# What numpy's .npy header parser raises on a header that is not a plain literal dict.
_HEADER_ERRORS = (ValueError, SyntaxError, TypeError, KeyError, RecursionError, OverflowError,
                  UnicodeDecodeError, tokenize.TokenError, EOFError)


class ArchiveError(ValueError):
    """A zip archive, or one of its members, that is damaged, impossible or over its budget."""


class NotAnArchive(ArchiveError):
    """Bytes that zipfile cannot read as a zip archive at all."""


def default_budget(file_size: int) -> int:
    """The bytes an archive of ``file_size`` bytes may declare in all, unless the caller allows more."""
    return FLOOR + RATIO * file_size


def text_limit(file_size: int) -> int:
    """The most bytes a JSON or text member of an archive of ``file_size`` bytes may hold."""
    return TEXT_FLOOR + TEXT_RATIO * file_size


class BoundedZip:
    """A zip archive opened for bounded reading (see the module docstring); a context manager.

    ``file``: a path or a seekable binary file object. ``max_bytes``: the budget for all members'
    declared sizes together (default: `default_budget` of the file's size). FileNotFoundError
    passes through; anything wrong with the archive is an `ArchiveError`.
    """

    def __init__(self, file, max_bytes=None):
        self.size = _file_size(file)
        if max_bytes is not None and (type(max_bytes) is not int or max_bytes < 0):
            raise TypeError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
        self.budget = default_budget(self.size) if max_bytes is None else max_bytes
        try:
            self.zip = zipfile.ZipFile(file)
        except FileNotFoundError:
            raise
        except Exception as e:  # zipfile raises many types on damaged input; all mean "not an archive"
            raise NotAnArchive(f"not a readable zip archive: {type(e).__name__}: {e}") from None
        try:
            self.members = self._directory()
        except ArchiveError:
            self.zip.close()
            raise
        self._taken = set()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.zip.close()

    def _directory(self):
        members, total = {}, 0
        for info in self.zip.infolist():
            name = info.filename
            if name in members:
                raise ArchiveError(f"the archive lists member {name!r} twice")
            if info.flag_bits & 1:
                raise ArchiveError(f"member {name!r} is encrypted")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise ArchiveError(f"member {name!r} uses compression method {info.compress_type}, not stored "
                                   "or deflate")
            if info.header_offset + info.compress_size > self.size:
                raise ArchiveError(f"member {name!r} lies outside the file")
            most = info.compress_size if info.compress_type == zipfile.ZIP_STORED else \
                MAX_DEFLATE_RATIO * info.compress_size + 64
            if info.file_size > most:
                raise ArchiveError(f"member {name!r} claims {info.file_size} bytes from {info.compress_size} "
                                   "stored bytes, more than its compression can produce")
            members[name] = info
            total += info.file_size
        if total > self.budget:
            raise ArchiveError(f"the archive's members declare {total} bytes in all, more than the {self.budget} "
                               f"allowed for a file of {self.size} bytes (pass a larger max_bytes to load it)")
        return members

    def _take(self, name, limit):
        info = self.members.get(name)
        if info is None:
            raise ArchiveError(f"the archive has no member {name!r}")
        if name in self._taken:
            raise ArchiveError(f"member {name!r} is named twice by the file")
        self._taken.add(name)
        if info.file_size > limit:
            raise ArchiveError(f"member {name!r} holds {info.file_size} bytes, more than the {limit} allowed")
        return info

    def read(self, name, limit=None, hasher=None):
        """The bytes of member ``name`` (at most ``limit``, default the budget); ``hasher`` (a hashlib
        object) is updated with them."""
        info = self._take(name, self.budget if limit is None else limit)
        with self._open(info, hasher) as f:
            return f.read_exact(info.file_size)

    def read_npy(self, name, dtype, shape, hasher=None):
        """The array in ``.npy`` member ``name``, which must hold ``dtype`` (a NumPy dtype) in ``shape``
        (a tuple) and nothing else; writable, C-contiguous and owned. ``hasher`` is updated with the
        member's bytes."""
        info = self._take(name, self.budget)
        with self._open(info, hasher) as f:
            found_dtype, found_shape, fortran = _npy_header(f, name)
            if found_dtype != dtype or found_shape != tuple(shape):
                raise ArchiveError(f"member {name!r} holds a {found_dtype} array of shape {list(found_shape)}, "
                                   f"not {dtype} of shape {list(shape)}")
            nbytes = math.prod(shape) * dtype.itemsize
            if f.position + nbytes != info.file_size:
                raise ArchiveError(f"member {name!r} holds {info.file_size} bytes, but its header describes "
                                   f"{f.position + nbytes}")
            arr = np.empty(shape[::-1] if fortran else shape, dtype)
            f.read_into(memoryview(arr.reshape(-1).view(np.uint8)))
        return np.ascontiguousarray(arr.T) if fortran else arr

    def _open(self, info, hasher=None):
        try:
            return _Member(self.zip.open(info), info, hasher)
        except READ_ERRORS as e:
            raise _damaged(info, e) from None


class _Member:
    """A member being read: counts and hashes its bytes, and turns the readers' errors into ArchiveError."""

    def __init__(self, stream, info, hasher):
        self.stream = stream
        self.info = info
        self.hasher = hasher
        self.position = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stream.close()

    def read(self, n=-1):
        """Up to ``n`` more bytes, never past the declared size (numpy's header parser reads through this)."""
        left = self.info.file_size - self.position
        n = left if n is None or n < 0 else min(n, left)
        try:
            data = self.stream.read(n)
        except READ_ERRORS as e:
            raise _damaged(self.info, e) from None
        self.position += len(data)
        if self.hasher is not None:
            self.hasher.update(data)
        return data

    def read_exact(self, n):
        data = self.read(n)
        if len(data) != n:
            raise ArchiveError(f"member {self.info.filename!r} ends after {self.position} of its "
                               f"{self.info.file_size} bytes")
        return data

    def read_into(self, view):
        for start in range(0, len(view), _CHUNK):
            chunk = self.read_exact(min(_CHUNK, len(view) - start))
            view[start:start + len(chunk)] = chunk


def _damaged(info, e):
    return ArchiveError(f"member {info.filename!r} cannot be read (the file is damaged): {type(e).__name__}: {e}")


def _npy_header(f, name):
    """(dtype, shape, fortran order) of a .npy stream positioned at its start; ArchiveError otherwise."""
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f, max_header_size=MAX_NPY_HEADER)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f, max_header_size=MAX_NPY_HEADER)
        else:
            raise ValueError(f"unsupported .npy format version {version}")
    except ArchiveError:
        raise
    except _HEADER_ERRORS as e:
        raise ArchiveError(f"member {name!r} is not a readable .npy array: {type(e).__name__}: {e}") from None
    if dtype.hasobject:
        raise ArchiveError(f"member {name!r} holds Python objects, which are never loaded (no pickle)")
    if not all(type(n) is int and n >= 0 for n in shape):
        raise ArchiveError(f"member {name!r} has a bad .npy shape {shape!r}")
    return dtype, tuple(shape), bool(fortran)


def _file_size(file):
    if isinstance(file, (str, os.PathLike)):
        return os.stat(file).st_size
    try:
        here = file.tell()
        size = file.seek(0, os.SEEK_END)
        file.seek(here)
    except (OSError, AttributeError, ValueError) as e:
        raise NotAnArchive(f"the file cannot be read as an archive (it must be seekable): {e}") from None
    return size


def open_archive(file, max_bytes, error, what):
    """`BoundedZip` of ``file``, its refusals raised as ``error`` (the caller's own type): "not a
    ``what`` (...)" for a file that is no archive, the archive's message for anything else."""
    try:
        return BoundedZip(file, max_bytes)
    except NotAnArchive as e:
        raise error(f"not a {what} ({e})") from None
    except ArchiveError as e:
        raise error(str(e)) from None
