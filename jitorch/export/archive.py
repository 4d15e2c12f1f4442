"""The export file: a zip archive with a JSON manifest, the graph's text, ``.npy`` constants and
per-target compiled artifacts (see docs/export-format.md).

Reading trusts nothing: every member's size is bounded before it is read, its
SHA-256 must match the manifest's, JSON and ``.npy`` are parsed without
running code (``allow_pickle=False``), and any damage becomes an ExportError
saying what is wrong.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import zipfile
from dataclasses import dataclass, field

import numpy as np

from ..runtime.files import atomic_write
from .errors import ExportError

FORMAT = "jitorch.export"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
GRAPH = "graph.txt"
MAX_MANIFEST = 64 << 20       # bytes: a manifest is small; a larger one is not ours
MAX_MEMBER = 16 << 30         # bytes: bounds what a forged size field can make us allocate
_MEMBER_NAME = re.compile(r"[A-Za-z0-9_./-]{1,200}")


@dataclass
class Contents:
    """What an export file holds, parsed but not yet checked against each other."""

    manifest: dict
    graph_text: str
    constants: dict                          # name -> NumPy array (bfloat16 as uint16 bits)
    artifacts: list = field(default_factory=list)  # [(target record, {key: object bytes})]


def storage_dtype(dtype):
    """The NumPy dtype a constant of ``dtype`` is stored as in ``.npy`` (bfloat16 as its uint16 bits,
    which NumPy's own format can describe)."""
    return np.dtype(np.uint16) if dtype.name == "bfloat16" else np.dtype(dtype.np)


def write(path_or_file, manifest, graph_text, constants, artifacts):
    """Write an archive. ``constants``: [(record, array)] with the record's ``member`` set;
    ``artifacts``: [(record, {key: bytes})]. Fills the manifest's member hashes."""
    members = {GRAPH: graph_text.encode("utf-8")}
    for record, arr in constants:
        buf = io.BytesIO()
        # (not np.ascontiguousarray: it turns a 0-d array into a 1-d one)
        np.save(buf, arr if arr.flags.c_contiguous else arr.copy(order="C"), allow_pickle=False)
        members[record["member"]] = buf.getvalue()
    for record, objects in artifacts:
        for kernel in record["kernels"]:
            members[kernel["member"]] = objects[kernel["key"]]
    manifest = dict(manifest, members={name: hashlib.sha256(data).hexdigest() for name, data in members.items()})
    if isinstance(path_or_file, (str, os.PathLike)):
        with atomic_write(path_or_file) as f:  # a failed save leaves the previous file as it was
            _write_zip(f, manifest, members)
    else:
        _write_zip(path_or_file, manifest, members)


def _write_zip(f, manifest, members):
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
        for name, data in members.items():
            z.writestr(name, data)


def read(path_or_file):
    """The contents of an export file; ExportError for anything that is not a whole, undamaged one."""
    try:
        z = zipfile.ZipFile(path_or_file)
    except FileNotFoundError:
        raise
    except Exception as e:  # zipfile raises many types on damaged input; all mean "not our file"
        raise ExportError(f"not a jitorch export file (not a readable zip archive): {type(e).__name__}: {e}") from None
    with z:
        reader = _Reader(z)
        manifest = reader.manifest()
        graph_text = reader.member(manifest, GRAPH).decode("utf-8", errors="strict")
        constants = {c["name"]: reader.array(manifest, c) for c in _records(manifest, "constants")}
        artifacts = [(a, {k["key"]: reader.member(manifest, k["member"]) for k in _list(a, "kernels")})
                     for a in _records(manifest, "artifacts")]
    return Contents(manifest, graph_text, constants, artifacts)


def _records(manifest, key):
    records = _list(manifest, key)
    for r in records:
        if not isinstance(r, dict):
            raise ExportError(f"manifest: entries of {key!r} must be objects, found {r!r}")
    return records


def _list(data, key):
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ExportError(f"manifest: {key!r} must be a list, found {type(value).__name__}")
    return value


class _Reader:
    def __init__(self, z):
        self.z = z

    def raw(self, name, limit):
        try:
            info = self.z.getinfo(name)
        except KeyError:
            raise ExportError(f"the archive has no member {name!r}") from None
        if info.file_size > limit:
            raise ExportError(f"member {name!r} claims {info.file_size} bytes, more than the {limit} allowed")
        try:
            with self.z.open(info) as f:
                data = f.read(limit + 1)
        except Exception as e:  # bad CRC, bad compressed stream, truncated file, ...
            raise ExportError(f"member {name!r} cannot be read (the file is damaged): {type(e).__name__}: {e}") \
                from None
        if len(data) != info.file_size:
            raise ExportError(f"member {name!r} holds {len(data)} bytes, its header says {info.file_size}")
        return data

    def manifest(self):
        data = self.raw(MANIFEST, MAX_MANIFEST)
        try:
            manifest = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise ExportError(f"{MANIFEST} is not valid JSON: {e}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            found = manifest.get("format") if isinstance(manifest, dict) else None
            raise ExportError(f"not a jitorch export file: {MANIFEST} gives format {found!r}, not {FORMAT!r}")
        version = manifest.get("format_version")
        if type(version) is not int or version < 1:
            raise ExportError(f"{MANIFEST}: bad format_version {version!r}")
        if version > FORMAT_VERSION:
            raise ExportError(f"the file has export format version {version}, newer than this jitorch "
                              f"({manifest.get('jitorch_version')!r} wrote it) can read (up to {FORMAT_VERSION}); "
                              "upgrade jitorch to load it")
        hashes = manifest.get("members")
        if not isinstance(hashes, dict):
            raise ExportError(f"{MANIFEST} lists no member hashes")
        return manifest

    def member(self, manifest, name):
        if not isinstance(name, str) or not _MEMBER_NAME.fullmatch(name) or name == MANIFEST:
            raise ExportError(f"{MANIFEST} names a bad member {name!r}")
        expected = manifest["members"].get(name)
        if not isinstance(expected, str):
            raise ExportError(f"{MANIFEST} gives no SHA-256 for member {name!r}")
        data = self.raw(name, MAX_MEMBER)
        if hashlib.sha256(data).hexdigest() != expected:
            raise ExportError(f"member {name!r} is damaged or was changed: its SHA-256 does not match the manifest")
        return data

    def array(self, manifest, record):
        from .signature import dtype_named
        name = record.get("name")
        if not isinstance(name, str):
            raise ExportError(f"{MANIFEST}: a constant without a name: {record!r}")
        data = self.member(manifest, record.get("member"))
        try:
            arr = np.load(io.BytesIO(data), allow_pickle=False)
        except Exception as e:  # a .npy header that lies, an object array, ...
            raise ExportError(f"constant {name!r} is not a readable .npy array: {type(e).__name__}: {e}") from None
        dtype = dtype_named(record.get("dtype"))
        shape = record.get("shape")
        if arr.dtype != storage_dtype(dtype):
            raise ExportError(f"constant {name!r} is stored as {arr.dtype}, but the manifest says {dtype.name}")
        if not isinstance(shape, list) or list(arr.shape) != shape:
            raise ExportError(f"constant {name!r} has shape {list(arr.shape)} in the file, but the manifest says "
                              f"{shape!r}")
        return arr
