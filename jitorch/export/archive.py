"""The export file: a zip archive with a JSON manifest, the graph's text, ``.npy`` constants and
per-target compiled artifacts (see docs/export-format.md).

Reading trusts nothing: members are read through `runtime.zipfiles.BoundedZip`
(sizes checked against the zip directory, the data and a budget before anything
is inflated, each member once), each one's SHA-256 must match the manifest's,
JSON and ``.npy`` are parsed without running code, and any damage becomes an
ExportError saying what is wrong. Object code is only read when the caller
trusts it (see `program.load`).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from dataclasses import dataclass, field

import numpy as np

from ..runtime.files import write_to
from ..runtime.zipfiles import ArchiveError, open_archive, text_limit
from .errors import ExportError

FORMAT = "jitorch.export"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
GRAPH = "graph.txt"
MAX_MANIFEST = 16 << 20       # bytes: a manifest is small; a larger one is not ours
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
    write_to(path_or_file, lambda f: _write_zip(f, manifest, members))


def _write_zip(f, manifest, members):
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
        for name, data in members.items():
            # arrays are stored as they are: a file then declares no more bytes than it holds, so
            # loading fits its default budget however well the weights (zeros, say) would compress
            z.writestr(name, data, compress_type=zipfile.ZIP_STORED if name.endswith(".npy") else None)


def read(path_or_file, object_code=False, max_bytes=None):
    """The contents of an export file; ExportError for anything that is not a whole, undamaged one.

    ``object_code``: also read the artifacts' object code and PTX (otherwise their records come with
    no bytes). ``max_bytes``: what the file's members may declare in all (see `runtime.zipfiles`)."""
    with open_archive(path_or_file, max_bytes, ExportError, "jitorch export file") as z:
        try:
            return _read_contents(_Reader(z), object_code)
        except ArchiveError as e:
            raise ExportError(str(e)) from None


def _read_contents(reader, object_code):
    manifest = reader.manifest()
    graph_text = reader.text(manifest, GRAPH)
    records = _records(manifest, "constants")
    names = [r.get("name") for r in records]
    if not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
        raise ExportError(f"{MANIFEST}: constants need distinct names, found {names!r}")
    constants = {r["name"]: reader.array(manifest, r) for r in records}
    artifacts = [(a, {k["key"]: reader.member(manifest, k.get("member")) for k in _kernels(a)} if object_code else {})
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


def _kernels(record):
    kernels = _list(record, "kernels")
    if not all(isinstance(k, dict) and isinstance(k.get("key"), str) for k in kernels):
        raise ExportError(f"an artifact record lists bad kernels: {kernels!r}")
    return kernels


class _Reader:
    def __init__(self, z):
        self.z = z
        self.text_limit = min(text_limit(z.size), z.budget)

    def manifest(self):
        data = self.z.read(MANIFEST, min(MAX_MANIFEST, self.text_limit))
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

    def _hashed(self, manifest, name, read):
        """``read(name, hasher)``'s result for member ``name``, its SHA-256 checked against the manifest's."""
        if not isinstance(name, str) or not _MEMBER_NAME.fullmatch(name) or name == MANIFEST:
            raise ExportError(f"{MANIFEST} names a bad member {name!r}")
        expected = manifest["members"].get(name)
        if not isinstance(expected, str):
            raise ExportError(f"{MANIFEST} gives no SHA-256 for member {name!r}")
        hasher = hashlib.sha256()
        result = read(name, hasher)
        if hasher.hexdigest() != expected:
            raise ExportError(f"member {name!r} is damaged or was changed: its SHA-256 does not match the manifest")
        return result

    def member(self, manifest, name):
        return self._hashed(manifest, name, lambda n, h: self.z.read(n, hasher=h))

    def text(self, manifest, name):
        data = self._hashed(manifest, name, lambda n, h: self.z.read(n, self.text_limit, h))
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ExportError(f"member {name!r} is not UTF-8 text: {e}") from None

    def array(self, manifest, record):
        from .signature import dtype_named
        name = record["name"]
        dtype = dtype_named(record.get("dtype"))
        shape = record.get("shape")
        if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
            raise ExportError(f"constant {name!r}: bad shape {shape!r} in {MANIFEST}")
        try:
            return self._hashed(manifest, record.get("member"),
                                lambda n, h: self.z.read_npy(n, storage_dtype(dtype), tuple(shape), h))
        except ArchiveError as e:
            raise ExportError(f"constant {name!r}: {e}") from None
