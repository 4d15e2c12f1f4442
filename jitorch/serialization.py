"""``jitorch.save`` / ``jitorch.load``: tensors and nested containers in a zip archive, without pickle.

The archive holds ``manifest.json``::

    {"format": "jitorch.save", "version": 1,
     "storages": {"0": {"dtype": "float32", "size": 12, "device": "cpu"}, ...},
     "structure": <the object as a JSON tree>}

and one ``data/<key>.npy`` member per tensor storage (the whole flat buffer,
bfloat16 stored as its uint16 bits; ``meta`` storages have none). Tensors in the tree reference a storage
with their shape, strides and offset, so views that share a storage are
saved once and come back sharing it. A tensor object met again is saved as
``{"type": "tensor_ref", "index": i}``, the i-th tensor record in encoding
(depth-first) order, and loads as that same object, as pickle's memo makes
torch.load do. Containers are tagged so that lists,
tuples, dicts with non-string keys and OrderedDicts keep their type.

Reading never runs code: JSON and ``.npy`` headers parsed as literals only,
and every member is checked against the manifest. The archive is read through
`runtime.zipfiles.BoundedZip`: sizes are checked before anything is inflated,
within a budget proportional to the file (``max_bytes`` raises it), each
storage's data goes straight into its array, and the zip's CRC-32 check
catches damaged members. Any damage is reported as ``SerializationError`` (a
``RuntimeError``). An archive whose manifest gives another registered format
(``"jitorch.export"``: an exported program) goes to that format's loader.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import math
import os
import zipfile

import numpy as np

from .runtime import dtypes as _dtypes
from .runtime.device import device as _device
from .runtime.files import write_to
from .runtime.storage import Storage
from .runtime.zipfiles import ArchiveError, open_archive, text_limit
from .tensor import Size, Tensor

__all__ = ["save", "load", "SerializationError", "add_safe_globals", "clear_safe_globals", "get_safe_globals",
           "safe_globals"]

FORMAT = "jitorch.save"
VERSION = 1
MANIFEST = "manifest.json"


class SerializationError(RuntimeError):
    """A file that ``jitorch.load`` cannot read: not a jitorch archive, damaged, or from a newer version."""


def _storage_np_dtype(dtype):
    # .npy has no bfloat16: its bits travel as uint16.
    return np.dtype(np.uint16) if dtype is _dtypes.bfloat16 else np.dtype(dtype.np)


# Saving ---------------------------------------------------------------------------------------

class _Writer:
    """Encodes an object tree into JSON, collecting the storages of the tensors it meets."""

    def __init__(self):
        self.storages = {}     # id(storage) -> (key, storage)
        self.tensors = {}      # id(tensor) -> its record's index, so a repeated tensor loads as one object
        self._active = set()   # ids of the containers being encoded, to refuse cycles

    def encode(self, obj):
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int):
            return obj
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else {"type": "float", "value": repr(obj)}
        if isinstance(obj, Tensor):
            return self._tensor(obj)
        if isinstance(obj, _dtypes.dtype):
            return {"type": "dtype", "name": obj.name}
        if isinstance(obj, _device):
            return {"type": "device", "name": str(obj)}
        if isinstance(obj, Size):
            return {"type": "Size", "items": list(obj)}
        if isinstance(obj, (list, tuple, dict)):
            return self._container(obj)
        if callable(getattr(obj, "state_dict", None)):  # a module, an optimizer, a scheduler, a scaler
            raise TypeError(f"jitorch.save cannot save a whole {type(obj).__qualname__}: jitorch saves data, never "
                            "objects (no pickle). Save its state_dict() instead, jitorch.save(obj.state_dict(), f), "
                            "and restore it into a new object with obj.load_state_dict(jitorch.load(f))")
        raise TypeError(f"jitorch.save cannot save an object of type {type(obj).__module__}.{type(obj).__qualname__}: "
                        "only tensors, numbers, strings, None, bools, dtypes, devices and lists, tuples and "
                        "dicts of them are supported")

    def _container(self, obj):
        if id(obj) in self._active:
            raise ValueError(f"jitorch.save cannot save a {type(obj).__name__} that contains itself")
        self._active.add(id(obj))
        try:
            if isinstance(obj, dict):
                kind = "OrderedDict" if isinstance(obj, collections.OrderedDict) else "dict"
                if type(obj) not in (dict, collections.OrderedDict):
                    raise TypeError(f"jitorch.save cannot save a dict subclass {type(obj).__qualname__}")
                return {"type": kind, "items": [[self.encode(k), self.encode(v)] for k, v in obj.items()]}
            if type(obj) not in (list, tuple):
                raise TypeError(f"jitorch.save cannot save a {type(obj).__qualname__} (a {type(obj).__base__.__name__} "
                                "subclass); convert it to a plain list, tuple or dict")
            return {"type": type(obj).__name__, "items": [self.encode(v) for v in obj]}
        finally:
            self._active.discard(id(obj))

    def _tensor(self, t):
        if id(t) in self.tensors:
            return {"type": "tensor_ref", "index": self.tensors[id(t)]}
        self.tensors[id(t)] = len(self.tensors)
        storage = t._storage
        entry = self.storages.get(id(storage))
        if entry is None:
            entry = self.storages[id(storage)] = (str(len(self.storages)), storage)
        record = {"type": "tensor", "storage": entry[0], "shape": list(t.shape), "stride": list(t._stride),
                  "offset": t._offset, "requires_grad": t.requires_grad}
        if type(t) is not Tensor:
            record["class"] = type(t).__name__
        return record

    def storage_table(self):
        return {key: {"dtype": st.dtype.name, "size": st.size, "device": str(st.device)}
                for key, st in self.storages.values()}


def _storage_array(storage):
    """The storage's elements as a flat host array in its .npy dtype."""
    if storage.device.type == "cpu":
        flat = storage.data
    else:
        flat = Tensor._make(storage, (storage.size,), (1,), 0).cpu()._array()
    return np.ascontiguousarray(flat).view(_storage_np_dtype(storage.dtype))


def save(obj, f):
    """Save ``obj`` (tensors, numbers, strings, None, bools and lists/tuples/dicts of them) to ``f``.

    ``f`` is a path or a binary file object opened for writing. The format is
    described in ``jitorch/serialization.py``; no pickle is involved.
    """
    writer = _Writer()
    manifest = {"format": FORMAT, "version": VERSION, "structure": writer.encode(obj)}
    manifest["storages"] = writer.storage_table()
    write_to(f, lambda fh: _write_archive(fh, manifest, writer))


def _write_archive(fh, manifest, writer):
    with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr(MANIFEST, json.dumps(manifest, allow_nan=False))
        for key, storage in writer.storages.values():
            if storage.device.type == "meta":  # shapes and dtypes only: nothing to write
                continue
            buf = io.BytesIO()
            np.save(buf, _storage_array(storage), allow_pickle=False)
            z.writestr(f"data/{key}.npy", buf.getvalue())


# Loading --------------------------------------------------------------------------------------

def _bad(what):
    if len(what) > 1000:  # a value from the file quoted in the message: keep the message readable
        what = what[:700] + " ... " + what[-200:]
    return SerializationError(f"jitorch.load: {what}")


def _expect(cond, what):
    if not cond:
        raise _bad(f"bad manifest: {what}")


def _hashable(x):
    try:
        hash(x)
    except TypeError:
        return False
    return True


def _dtype_named(name):
    """The dtype a manifest names, or None (for any value that names none)."""
    return _dtypes._NAMES.get(name) if isinstance(name, str) else None


def _is_int(x, low=0):
    return isinstance(x, int) and not isinstance(x, bool) and x >= low


class _Reader:
    """Decodes the manifest's tree, loading each storage once from its .npy member."""

    def __init__(self, zf, manifest, map_location):
        self.zf = zf
        self.table = manifest.get("storages")
        _expect(isinstance(self.table, dict), "'storages' must be an object")
        self.map_location = map_location
        self.loaded = {}
        self.tensors = []  # decoded tensor records in order, for tensor_ref

    def decode(self, node):
        if node is None or isinstance(node, (bool, int, str)):
            return node
        if isinstance(node, float):
            return node
        _expect(isinstance(node, dict) and isinstance(node.get("type"), str),
                f"expected a value or a tagged object, found {str(node)[:80]!r}")
        kind = node["type"]
        decoder = _DECODERS.get(kind)
        _expect(decoder is not None, f"unknown object type {kind!r}")
        return decoder(self, node)

    def _items(self, node):
        items = node.get("items")
        _expect(isinstance(items, list), f"{node['type']} needs a list of 'items'")
        return items

    def decode_sequence(self, node):
        items = [self.decode(v) for v in self._items(node)]
        return {"list": list, "tuple": tuple, "Size": Size}[node["type"]](items)

    def decode_mapping(self, node):
        out = collections.OrderedDict() if node["type"] == "OrderedDict" else {}
        for pair in self._items(node):
            _expect(isinstance(pair, list) and len(pair) == 2, "dict items must be [key, value] pairs")
            key = self.decode(pair[0])
            _expect(not isinstance(key, Tensor) and _hashable(key), f"unusable dict key {str(key)[:80]!r}")
            out[key] = self.decode(pair[1])
        return out

    def decode_float(self, node):
        value = node.get("value")
        _expect(value in ("nan", "inf", "-inf"), f"bad float {value!r}")
        return float(value)

    def decode_dtype(self, node):
        dtype = _dtype_named(node.get("name"))
        _expect(dtype is not None, f"unknown dtype {node.get('name')!r}")
        return dtype

    def decode_device(self, node):
        try:
            return _device(node.get("name"))
        except (RuntimeError, TypeError) as e:
            raise _bad(f"bad manifest: bad device {node.get('name')!r}") from e

    def decode_tensor(self, node):
        key = node.get("storage")
        storage = self.storage(key)
        shape, stride, offset = node.get("shape"), node.get("stride"), node.get("offset")
        _expect(isinstance(shape, list) and isinstance(stride, list) and len(shape) == len(stride)
                and all(_is_int(n) for n in shape) and all(_is_int(s) for s in stride) and _is_int(offset),
                f"tensor of storage {key!r} needs non-negative integer shape, stride (of equal length) and offset")
        if math.prod(shape):
            end = offset + sum((n - 1) * s for n, s in zip(shape, stride))
            _expect(end < storage.size, f"tensor of shape {shape} with stride {stride} and offset {offset} reaches "
                                        f"past the end of storage {key!r} of {storage.size} elements")
        t = Tensor._make(storage, tuple(shape), tuple(stride), offset)
        requires_grad = node.get("requires_grad")
        _expect(isinstance(requires_grad, bool), "a tensor's 'requires_grad' must be true or false")
        _expect(not requires_grad or storage.dtype.is_floating_point,
                f"a {storage.dtype} tensor cannot require grad")
        if node.get("class") == "Parameter":
            from .nn.parameter import Parameter
            t = Parameter(t, requires_grad=requires_grad)
        else:
            t.requires_grad_(requires_grad)
        self.tensors.append(t)
        return t

    def decode_tensor_ref(self, node):
        index = node.get("index")
        _expect(_is_int(index) and index < len(self.tensors),
                f"tensor_ref index {index!r} does not name an earlier tensor")
        return self.tensors[index]

    def storage(self, key):
        """Storage ``key``, read once and then shared by every tensor that views it."""
        entry = self.table.get(key) if isinstance(key, str) else None
        _expect(isinstance(entry, dict), f"tensor references unknown storage {key!r}")
        if key in self.loaded:
            return self.loaded[key]
        dtype = _dtype_named(entry.get("dtype"))
        size = entry.get("size")
        _expect(dtype is not None, f"storage {key!r} has unknown dtype {entry.get('dtype')!r}")
        _expect(_is_int(size), f"storage {key!r} needs a non-negative integer size")
        try:
            saved_device = _device(entry.get("device", "cpu"))
        except (RuntimeError, TypeError) as e:
            raise _bad(f"bad manifest: storage {key!r} has a bad device {entry.get('device')!r}") from e
        if saved_device.type == "meta":
            self.loaded[key] = Storage.empty(size, dtype, saved_device)
            return self.loaded[key]
        arr = self._member_array(key, dtype, size)
        flat = Tensor._from_array(arr.view(dtype.np) if dtype is _dtypes.bfloat16 else arr, dtype)
        target = _map_device(saved_device, self.map_location)
        if target.type != "cpu":
            flat = _to_device(flat, target)
        self.loaded[key] = flat._storage
        return flat._storage

    def _member_array(self, key, dtype, size):
        name = f"data/{key}.npy"
        if name not in self.zf.members:
            raise _bad(f"member {name!r} listed in the manifest is missing from the archive")
        try:
            return self.zf.read_npy(name, _storage_np_dtype(dtype), (size,))
        except ArchiveError as e:
            raise _bad(f"storage {key!r} ({dtype.name}, {size} elements): {e}") from None


_DECODERS = {
    "list": _Reader.decode_sequence, "tuple": _Reader.decode_sequence, "Size": _Reader.decode_sequence,
    "dict": _Reader.decode_mapping, "OrderedDict": _Reader.decode_mapping,
    "float": _Reader.decode_float, "dtype": _Reader.decode_dtype, "device": _Reader.decode_device,
    "tensor": _Reader.decode_tensor, "tensor_ref": _Reader.decode_tensor_ref,
}


def _map_device(saved, map_location):
    """Where a storage saved on ``saved`` goes under ``map_location`` (None, a device, a str or a dict)."""
    if map_location is None:
        return saved
    if isinstance(map_location, dict):
        mapped = map_location.get(str(saved))
        return saved if mapped is None else _device(mapped)
    return _device(map_location)


def _to_device(flat, target):
    if target.type == "cuda":
        from . import cuda
        if not cuda.is_available():
            raise SerializationError("Attempting to deserialize object on a CUDA device but "
                                     "jitorch.cuda.is_available() is "
                               "False. If you are running on a CPU-only machine, please use jitorch.load with "
                               "map_location=jitorch.device('cpu') to map your storages to the CPU.")
    return flat.to(target)


def _read_manifest(zf):
    if MANIFEST not in zf.members:
        raise _bad(f"not a jitorch file (the archive has no {MANIFEST})")
    try:
        raw = zf.read(MANIFEST, min(text_limit(zf.size), zf.budget))
    except ArchiveError as e:
        raise _bad(f"not a jitorch file ({e})") from None
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _bad(f"bad manifest: {MANIFEST} is not valid JSON ({e})") from None
    _expect(isinstance(manifest, dict), f"{MANIFEST} must hold a JSON object")
    return manifest


def _check_version(manifest):
    fmt = manifest.get("format")
    if fmt != FORMAT:
        raise _bad(f"unknown format {fmt!r} (expected {' or '.join(map(repr, [FORMAT, *_FORMAT_LOADERS]))})")
    version = manifest.get("version")
    _expect(_is_int(version, 1), f"'version' must be a positive integer, found {version!r}")
    if version > VERSION:
        raise _bad(f"the file has format version {version}, newer than this jitorch reads ({VERSION}); "
                   "upgrade jitorch")
    _expect("structure" in manifest, "no 'structure'")


# Loaders of other formats in the same kind of archive, by the manifest's "format" (jitorch.export
# registers the exported program's: a higher layer, so it registers itself rather than being imported).
_FORMAT_LOADERS = {}


def register_format(name, loader):
    """Make `load` hand files whose manifest gives format ``name`` to ``loader(f, trust_object_code=...,
    max_bytes=...)``."""
    _FORMAT_LOADERS[name] = loader


def load(f, map_location=None, pickle_module=None, *, weights_only=True, mmap=None, trust_object_code=False,
         max_bytes=None, **pickle_load_args):
    """Load an object saved by ``jitorch.save`` (or an exported program) from a path or binary file object.

    ``map_location`` moves storages: a device or string for all of them, or a
    dict mapping saved device names to new ones. ``weights_only`` is always
    in effect whatever its value (nothing but data is ever read);
    ``pickle_module`` must be None; ``mmap`` is accepted and the file is read
    into memory. ``max_bytes``: what the file's members may declare in all
    (default: proportional to the file's size, see `runtime.zipfiles`; a
    larger file is refused before anything is inflated). ``trust_object_code``
    applies to exported programs (see `jitorch.export.load`).

    Any file that cannot be loaded raises SerializationError (ExportError, a
    subclass, for an exported program found to be bad).
    """
    if pickle_module is not None or pickle_load_args:
        raise TypeError("jitorch.load reads no pickle: pickle_module and pickle load arguments are not accepted")
    if callable(map_location):
        raise TypeError("jitorch.load: map_location must be None, a device, a string or a dict, not a function")
    kind, value = _load_from(f, map_location, max_bytes)
    if kind == "object":
        return value
    if not isinstance(f, (str, os.PathLike)):
        f.seek(0)
    return _FORMAT_LOADERS[kind](f, trust_object_code=trust_object_code, max_bytes=max_bytes)


def _load_from(f, map_location, max_bytes):
    with open_archive(f, max_bytes, _bad, "jitorch file") as zf:
        manifest = _read_manifest(zf)
        fmt = manifest.get("format")
        if isinstance(fmt, str) and fmt in _FORMAT_LOADERS:
            return fmt, None
        _check_version(manifest)
        try:
            return "object", _Reader(zf, manifest, map_location).decode(manifest["structure"])
        except RecursionError:
            raise _bad("bad manifest: the structure is nested too deeply") from None
        except _MALFORMED as e:  # what the checks above missed: still a bad file, not a crash
            raise _bad(f"bad manifest ({type(e).__name__}: {e})") from None


# torch.serialization's allowlist for weights_only unpickling. jitorch.load never unpickles (it makes only
# tensors, numbers, strings and containers), so the list is kept for torch's API and changes what loads in no way.
_safe_globals: list = []


def add_safe_globals(safe_globals):
    """Add classes and functions (or ``(obj, "module.name")`` pairs) to the allowlist `get_safe_globals`
    returns. Nothing needs it: `load` reads data only, whatever the list holds."""
    _safe_globals.extend(safe_globals)


def get_safe_globals():
    """The objects `add_safe_globals` added, in a new list."""
    return list(_safe_globals)


def clear_safe_globals():
    """Empty the allowlist."""
    _safe_globals.clear()


@contextlib.contextmanager
def safe_globals(safe_globals):
    """Add ``safe_globals`` to the allowlist inside the block only."""
    before = list(_safe_globals)
    add_safe_globals(safe_globals)
    try:
        yield
    finally:
        _safe_globals[:] = before


# Errors that decoding a manifest's fields can raise on input no check anticipated.
_MALFORMED = (KeyError, TypeError, ValueError, IndexError, OverflowError, UnicodeError)
