"""safetensors files, as the ``safetensors`` package's torch API (``safetensors.torch``) reads and writes them.

A file is an 8-byte little-endian header size N, N bytes of JSON (``{"name": {"dtype": "F32", "shape": [2, 3],
"data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}``, padded with spaces so the data starts at a
multiple of 8), then the tensors' bytes, little-endian and C-contiguous, back to back in offset order. The
files written here are byte for byte the package's (tensors ordered by dtype, largest first, then by name).

Files are untrusted input: nothing in them is run, the header is capped at 100 MB as the package caps it, and
every rule the package checks (offsets in range, contiguous and non-overlapping, the whole file covered, each
span exactly dtype size x element count, no duplicate names) is checked before any tensor is made; a
violation is a `SafetensorError`. Files are memory-mapped copy-on-write: opening one reads only the header,
`safe_open().get_tensor` and ``get_slice`` read only the pages they need, and tensors can be written to
without touching the file. Writes are atomic.

The ``safetensors`` package itself is not needed (the tests use it as the reference).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import sys

import numpy as np

from .runtime import dtypes as _dt
from .runtime.files import write_to
from .serialization import SerializationError
from .tensor import Tensor

__all__ = ["SafetensorError", "save", "save_file", "load", "load_file", "safe_open"]

MAX_HEADER_SIZE = 100_000_000  # the package's limit on the JSON header, in bytes
METADATA_KEY = "__metadata__"

# The package's dtypes, in the order of its Dtype enum (a file lays tensors out by it, largest first), with
# their widths in bits; jitorch has a dtype for the ones in _JITORCH.
_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
         "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32,
         "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64}
_ORDER = {name: i for i, name in enumerate(_BITS)}
_JITORCH = {"BOOL": _dt.bool, "U8": _dt.uint8, "I8": _dt.int8, "I16": _dt.int16, "U16": _dt.uint16,
            "F16": _dt.float16, "BF16": _dt.bfloat16, "I32": _dt.int32, "U32": _dt.uint32, "F32": _dt.float32,
            "F64": _dt.float64, "I64": _dt.int64, "U64": _dt.uint64}
_NAMES = {d: name for name, d in _JITORCH.items()}


class SafetensorError(SerializationError):
    """A safetensors file (or bytes) that does not follow the format, or that holds a dtype jitorch lacks."""


def _bad(what):
    return SafetensorError(f"Error while deserializing: {what}")


# Reading ------------------------------------------------------------------------------------------------------

class _Entry:
    """One tensor of a file: its dtype name, shape and where its bytes are (from the start of the data)."""

    __slots__ = ("name", "dtype", "shape", "begin", "end")


def _no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise _bad(f"duplicate key {dup!r} in the header")
    return dict(pairs)


def _non_negative_ints(value):
    return isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)


def _parse(buffer):
    """The entries and metadata of a safetensors file in ``buffer`` (bytes, mmap, memoryview), checked as the
    package checks them; also the offset where the data starts."""
    size = len(buffer)
    if size < 8:
        raise _bad("header too small")
    (n,) = struct.unpack("<Q", buffer[:8])
    if n > MAX_HEADER_SIZE:
        raise _bad(f"header too large ({n} bytes; the limit is {MAX_HEADER_SIZE})")
    if 8 + n > size:
        raise _bad(f"invalid header length ({n} bytes of header in a file of {size} bytes)")
    try:
        text = bytes(buffer[8:8 + n]).decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad(f"invalid UTF-8 in header: {e}") from None
    try:
        header = json.loads(text, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as e:
        if isinstance(e, SafetensorError):
            raise
        raise _bad(f"invalid JSON in header: {e}") from None
    if not isinstance(header, dict):
        raise _bad(f"invalid JSON in header: expected an object, got {type(header).__name__}")
    metadata = header.pop(METADATA_KEY, None)
    if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise _bad("invalid JSON in header: __metadata__ must map strings to strings")
    entries = []
    for name, info in header.items():
        if not isinstance(info, dict):
            raise _bad(f"invalid JSON in header: tensor `{name}` is not an object")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in _BITS:
            raise _bad(f"invalid JSON in header: unknown dtype {dtype!r} of tensor `{name}` (the format has "
                       f"{', '.join(_BITS)})")
        if not _non_negative_ints(shape):
            raise _bad(f"invalid JSON in header: the shape of tensor `{name}` is not a list of non-negative "
                       f"integers: {shape!r}")
        if not (_non_negative_ints(offsets) and len(offsets) == 2):
            raise _bad(f"invalid JSON in header: the data_offsets of tensor `{name}` are not two non-negative "
                       f"integers: {offsets!r}")
        entry = _Entry()
        entry.name, entry.dtype, entry.shape, (entry.begin, entry.end) = name, dtype, tuple(shape), offsets
        entries.append(entry)
    data_size = size - 8 - n
    start = 0
    for entry in sorted(entries, key=lambda e: (e.begin, e.end)):
        if entry.begin != start or entry.end < entry.begin:
            raise _bad(f"invalid offset for tensor `{entry.name}` (data_offsets [{entry.begin}, {entry.end}]: "
                       "the tensors' bytes must follow each other without gaps or overlaps)")
        span = entry.end - entry.begin
        if span > data_size:
            raise _bad(f"invalid offset for tensor `{entry.name}` (data_offsets [{entry.begin}, {entry.end}] "
                       f"beyond the {data_size} bytes of data)")
        bits = _BITS[entry.dtype] * _count(entry.shape, span * 8 + 1)
        if bits % 8 or bits // 8 != span:
            raise _bad(f"invalid shape, data type, or offset for tensor `{entry.name}` ({entry.dtype} "
                       f"{list(entry.shape)} does not fill data_offsets [{entry.begin}, {entry.end}])")
        start = entry.end
    if start != data_size:
        raise _bad(f"incomplete metadata, file not fully covered (the tensors cover {start} of the {data_size} "
                   "bytes of data)")
    return {e.name: e for e in entries}, metadata, 8 + n


def _count(shape, cap):
    """The element count of ``shape``, or any number above ``cap`` once it is certain to exceed it (a hostile
    shape of huge dimensions stops there instead of growing a huge integer)."""
    if 0 in shape:
        return 0
    count = 1
    for n in shape:
        count *= n
        if count > cap:
            return cap + 1
    return count


def _dtype_of(entry):
    dtype = _JITORCH.get(entry.dtype)
    if dtype is None:
        raise SafetensorError(f"tensor `{entry.name}` has dtype {entry.dtype}, which jitorch does not have "
                              f"(it reads {', '.join(_JITORCH)})")
    return dtype


def _array(buffer, data_start, entry, copy):
    """The elements of ``entry`` as a NumPy array over ``buffer`` (a copy when ``copy``, when the file leaves
    them misaligned for their dtype, or on a big-endian host, which swaps the format's little-endian bytes)."""
    dtype = _dtype_of(entry)
    count = (entry.end - entry.begin) // dtype.itemsize
    if count == 0:
        return np.empty(entry.shape, dtype.np)
    offset = data_start + entry.begin
    arr = np.frombuffer(buffer, dtype=dtype.np, count=count, offset=offset)
    if sys.byteorder == "big":
        arr = arr.byteswap()
    elif copy or offset % dtype.itemsize:
        arr = arr.copy()
    return arr.reshape(entry.shape)


def _as_tensor(arr, dtype, device):
    t = Tensor._from_array(arr, dtype)
    return t if device is None or str(device) == "cpu" else t.to(device)


_FRAMEWORKS = {"pt": "pt", "torch": "pt", "pytorch": "pt", "jitorch": "pt", "np": "np", "numpy": "np"}


class safe_open:
    """An open safetensors file, read lazily (memory-mapped): ``keys()``, ``metadata()``, ``get_tensor(name)``
    and ``get_slice(name)``, as the package's ``safe_open``. ``framework="pt"`` (or ``"jitorch"``) gives
    jitorch tensors, ``"np"`` NumPy arrays; ``device`` is where tensors go. Usable as a context manager."""

    def __init__(self, filename, framework="pt", device="cpu"):
        if framework not in _FRAMEWORKS:
            raise SafetensorError(f"framework {framework} is invalid")
        self._framework = _FRAMEWORKS[framework]
        self._device = f"cuda:{device}" if isinstance(device, int) else device
        with open(filename, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise _bad("header too small")
            # copy-on-write: tensors may be written to, the file never is
            self._buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        self._entries, self._metadata, self._data_start = _parse(self._buffer)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def keys(self):
        """The tensors' names, sorted."""
        return sorted(self._entries)

    def offset_keys(self):
        """The tensors' names in the order of their bytes in the file."""
        return [e.name for e in sorted(self._entries.values(), key=lambda e: e.begin)]

    def metadata(self):
        """The file's ``__metadata__`` (a dict of strings), or None."""
        return None if self._metadata is None else dict(self._metadata)

    def _entry(self, name):
        try:
            return self._entries[name]
        except KeyError:
            raise SafetensorError(f"File does not contain tensor {name}") from None

    def _convert(self, arr, entry):
        return arr if self._framework == "np" else _as_tensor(arr, _dtype_of(entry), self._device)

    def get_tensor(self, name):
        """The tensor ``name``, sharing the file's (copy-on-write) pages."""
        entry = self._entry(name)
        return self._convert(_array(self._buffer, self._data_start, entry, copy=False), entry)

    def get_tensors(self):
        """Every tensor, by name, in file order."""
        return {name: self.get_tensor(name) for name in self.offset_keys()}

    def get_slice(self, name):
        """A `TensorSlice` of ``name``: its shape and dtype, and indexing that reads only what it selects."""
        return TensorSlice(self, self._entry(name))


class TensorSlice:
    """A tensor of an open file, not yet read: ``get_shape()``, ``get_dtype()`` and ``[index]`` (basic
    indexing: integers, slices with steps, ``...``), which copies only the selected elements out of the map."""

    def __init__(self, file, entry):
        self._file, self._entry = file, entry

    def get_shape(self):
        return list(self._entry.shape)

    def get_dtype(self):
        return self._entry.dtype

    def __getitem__(self, index):
        f = self._file
        view = _array(f._buffer, f._data_start, self._entry, copy=False)[index]
        return f._convert(np.array(view), self._entry)


def load_file(filename, device="cpu"):
    """Every tensor of a safetensors file, by name (in file order), on ``device``; memory-mapped
    copy-on-write, so pages are read when first used."""
    return safe_open(filename, framework="pt", device=device).get_tensors()


def load(data):
    """Every tensor of a safetensors file given as bytes, by name (CPU tensors that own their memory)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"load() expects the bytes of a safetensors file, not {type(data).__name__}")
    entries, _, start = _parse(data)
    return {name: _as_tensor(_array(data, start, entry, copy=True), _dtype_of(entry), None)
            for name, entry in sorted(entries.items(), key=lambda item: item[1].begin)}


# Writing ------------------------------------------------------------------------------------------------------

def _check_tensors(tensors):
    """The package's checks before a save: a dict of tensors, none sharing memory with another."""
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    for k, v in tensors.items():
        if not isinstance(k, str):
            raise TypeError(f"tensor names must be strings, got {k!r}")
        if k == METADATA_KEY:
            raise ValueError(f"`{METADATA_KEY}` is the header's metadata, not a name a tensor can have")
        if not isinstance(v, Tensor):
            raise ValueError(f"Key `{k}` is invalid, expected torch.Tensor but received {type(v)}")
        if v.device.type == "meta":
            raise ValueError(f"Key `{k}` is a meta tensor: it has no data to save")
    failing = [names for names in _shared_groups(tensors) if len(names) > 1]
    if failing:
        raise RuntimeError(
            f"Some tensors share memory, this will lead to duplicate memory on disk and potential differences when "
            f"loading them again: {failing}. Save one of them, or a `.clone()` of each.")
    for k, v in tensors.items():
        if not v.is_contiguous():
            raise ValueError(
                f"You are trying to save a non contiguous tensor: `{k}` which is not allowed. It either means you "
                "are trying to save tensors which are reference of each other in which case it's recommended to "
                "save only the full tensors, and reslice at load time, or simply call `.contiguous()` on your "
                "tensor to pack it before saving.")


def _shared_groups(tensors):
    """Names whose bytes overlap on one device (the package's test, which looks within one storage; here any
    two tensors over the same memory count, and an area is checked against the furthest end before it, where
    the package only compares with the previous area's end). Empty tensors share nothing."""
    areas = sorted((str(t.device), t.data_ptr(), t.data_ptr() + t.nbytes, name)
                   for name, t in tensors.items() if t.nbytes)
    groups, last = [], ("", 0)
    for device, start, stop, name in areas:
        if (device, start) < last:
            groups[-1].add(name)
        else:
            groups.append({name})
        last = max(last, (device, stop))
    return groups


def _header(tensors, metadata):
    """The header bytes (padded) and the tensors in the order their bytes follow it."""
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                     for k, v in metadata.items()):
            raise TypeError(f"metadata must be a dict of strings to strings, got {metadata!r}")
    order = sorted(tensors, key=lambda name: (-_ORDER[_NAMES[tensors[name].dtype]], name))
    header = {} if metadata is None else {METADATA_KEY: metadata}
    offset = 0
    for name in order:
        t = tensors[name]
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, order


def _bytes_of(t):
    """A tensor's elements as little-endian bytes (a buffer; a host copy of a CUDA tensor's)."""
    arr = np.ascontiguousarray(t.detach()._host_array())
    if sys.byteorder == "big":
        arr = arr.view(f"u{arr.itemsize}").astype(f"<u{arr.itemsize}")
    return memoryview(arr.reshape(-1).view(np.uint8))


def _write(tensors, metadata, f):
    _check_tensors(tensors)
    header, order = _header(tensors, metadata)
    f.write(header)
    for name in order:
        f.write(_bytes_of(tensors[name]))


class _Collect:
    """A file-like list of the byte blocks written."""

    def __init__(self):
        self.parts = []

    def write(self, b):
        self.parts.append(bytes(b))


def save(tensors, metadata=None):
    """The bytes of a safetensors file holding ``tensors`` (a dict of contiguous tensors, none sharing memory)
    and ``metadata`` (a dict of strings)."""
    out = _Collect()
    _write(tensors, metadata, out)
    return b"".join(out.parts)


def save_file(tensors, filename, metadata=None):
    """Write ``tensors`` (a dict of contiguous tensors, none sharing memory) and ``metadata`` (a dict of
    strings) to ``filename`` as a safetensors file, atomically: a failed save leaves the old file."""
    _check_tensors(tensors)  # before the file is touched
    write_to(os.fspath(filename), lambda f: _write(tensors, metadata, f))
