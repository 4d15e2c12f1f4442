"""Per-target compiled artifacts: each kernel's CPU object code or CUDA PTX, reused where it matches.

Stored code is used only when the caller trusts the file (``trust_object_code``);
otherwise every kernel is rebuilt from the graph. A kernel's artifact is named by
the kernel cache's key, a hash of its LLVM IR,
the target (triple, CPU and features; for CUDA the SM and PTX ISA, which
LLVM's NVPTX target takes as its CPU and features) and the versions of jitorch
and llvmlite. On load the graph is compiled again from the IR; for every
kernel whose key is in the file, LLVM is skipped and the stored code is used
instead (object code linked, PTX handed to the driver), so code built for
another machine, target or toolchain is never used: its keys do not match and
those kernels are rebuilt.

Each kernel goes into the record of the target it was compiled for: a program
on CUDA inputs has PTX kernels, one on CPU inputs object code.
"""

from __future__ import annotations

import re

from .errors import ExportError

_KEY = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,200}")
# What a record must match, field by field, to be used on this machine.
_MATCHED = ("kind", "triple", "cpu", "features", "toolchain")


def host_target():
    """The CPU target this process compiles for (``JITORCH_CPU``, checked to run here), as recorded in
    files: triple, CPU name, its explicit features, toolchain."""
    from ..codegen.cache import toolchain
    from ..codegen.machine import selected
    machine = selected()
    return {"kind": "cpu", "triple": machine.triple, "cpu": machine.cpu, "features": machine.features,
            "toolchain": list(toolchain())}


def cuda_target():
    """The CUDA target this jitorch generates PTX for (the same on every machine, GPU or not): the
    NVPTX triple, the SM as ``cpu``, the PTX ISA as ``features`` (LLVM's names), the toolchain."""
    from ..codegen.cache import toolchain
    from ..codegen.nvptx.ptx import PTX_ISA, SM
    from ..codegen.nvptx.target import TRIPLE
    return {"kind": "cuda", "triple": TRIPLE, "cpu": SM, "features": PTX_ISA, "toolchain": list(toolchain())}


def _cpu_artifact(kernel):
    from ..codegen import cpu
    from ..codegen.cache import cache_key, default_cache
    key = cache_key(kernel.source.llvm_ir, cpu.target_id())
    obj = default_cache().get(key, kernel.source.llvm_ir)
    return key, obj if obj is not None else cpu.emit_object(kernel.source)


def _cuda_artifact(kernel):
    from ..codegen.cache import cache_key
    from ..codegen.nvptx.ptx import target_id
    # the PTX cache holds exactly these bytes under this key
    return cache_key(kernel.source.llvm_ir, target_id()), kernel.asm.encode()


# target kind -> (its record's target fields, (key, bytes) of a kernel, member suffix)
TARGETS = {"cpu": (host_target, _cpu_artifact, "o"), "cuda": (cuda_target, _cuda_artifact, "ptx")}


def kernel_target(kernel):
    """The target kind a compiled kernel was built for."""
    from ..codegen.nvptx.ptx import PtxKernel
    return "cuda" if isinstance(kernel, PtxKernel) else "cpu"


def target_records(compiled, targets):
    """[(target record, {key: bytes})] for the kernels of a `CompiledGraph`, one record per target kind
    in ``targets`` that has kernels; ValueError for a kind that is not a target."""
    targets = (targets,) if isinstance(targets, str) else tuple(targets)
    for kind in targets:
        if kind not in TARGETS:
            raise ValueError(f"artifacts_for: unknown target {kind!r}; the targets are {', '.join(map(repr, TARGETS))}")
    records = []
    for kind in dict.fromkeys(targets):
        describe, artifact, suffix = TARGETS[kind]
        data, kernels = {}, []
        for k in compiled.kernels:
            if kernel_target(k) != kind:
                continue
            key, blob = artifact(k)
            if key not in data:
                data[key] = blob
                kernels.append({"name": k.name, "key": key, "member": f"artifacts/{kind}/{key}.{suffix}"})
        if kernels:
            records.append((dict(describe(), kernels=kernels), data))
    return records


def check_record(record, data):
    """A target record from a file and its members (key -> bytes; empty where the code was not
    read), checked enough to be shown and matched; PTX must be text declaring the record's SM and
    each kernel's entry."""
    kernels = record.get("kernels")
    if not isinstance(kernels, list) or not all(isinstance(k, dict) and isinstance(k.get("key"), str)
                                               and _KEY.fullmatch(k["key"]) for k in kernels):
        raise ExportError(f"an artifact record lists bad kernels: {kernels!r}")
    for field in ("kind", "triple", "cpu", "features"):
        if not isinstance(record.get(field), str):
            raise ExportError(f"an artifact record has no {field!r}")
    for k in kernels:
        name = k.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ExportError(f"an artifact record has a kernel with a bad entry name: {name!r}")
    if record["kind"] == "cuda" and data:
        for k in kernels:
            _check_ptx(record, k, data[k["key"]])
    return record


def _check_ptx(record, kernel, ptx):
    name = kernel["name"]
    where = f"PTX member {kernel.get('member')!r} (kernel {name})"
    if not ptx.isascii():
        raise ExportError(f"{where} is not ASCII text")
    text = ptx.decode("ascii")
    if not re.search(rf"^\s*\.target\s+{re.escape(record['cpu'])}\b", text, re.M):
        raise ExportError(f"{where} does not declare .target {record['cpu']}, the SM of its record")
    if not re.search(rf"\.entry\s+{name}\s*\(", text):
        raise ExportError(f"{where} has no .entry {name}")


class ArtifactCache:
    """The kernel cache seen through a file's artifacts: `get` serves their object code or PTX
    first, then the process's cache; counts how many kernels came from the file and how many were
    rebuilt."""

    def __init__(self, objects):
        from ..codegen.cache import default_cache
        self.objects = objects
        self.fallback = default_cache()
        self.used = 0
        self.rebuilt = 0

    def supplies_foreign(self, key):
        """Whether ``key``'s code comes from the file (which the caller trusted), not from this machine."""
        return key in self.objects

    def get(self, key, source):
        data = self.objects.get(key)
        if data is not None:
            self.used += 1
            return data
        self.rebuilt += 1
        return self.fallback.get(key, source)

    def put(self, key, data, source):
        self.fallback.put(key, data, source)


def _missing_features(record):
    """The features a CPU record's code may use that this machine lacks ([] for CUDA records)."""
    from ..codegen.machine import Machine, missing_features
    if record["kind"] != "cpu":
        return []
    return missing_features(Machine(record["triple"], record["cpu"], record["features"]))


def ignored(records):
    """A line per record of a file whose code is not trusted, saying it is not used."""
    return [f"{r.get('kind')} {r.get('triple')} {r.get('cpu')}: {len(r['kernels'])} kernels, ignored: code from "
            "a file runs only with trust_object_code=True (--trust-object-code); rebuilt from the graph"
            for r, _ in records]


def _check_object(record, kernel, obj):
    """CPU object code must be what the JIT makes for this kernel (`elf.validate`) before LLVM sees it."""
    from ..codegen import elf
    from ..codegen.linker import kernel_imports
    try:
        elf.validate(obj, record["triple"].split("-")[0], [kernel["name"]], kernel_imports())
    except elf.ElfError as e:
        raise ExportError(f"object code {kernel.get('member')!r} (kernel {kernel['name']}) is not what jitorch "
                          f"makes for a kernel: {e}") from None


def matching_objects(records):
    """The code of the records made for this machine's targets and this toolchain (key -> bytes), and
    a line per record saying whether it matches. Code is only used where it was made for the CPU this
    process compiles for, which runs here; code for features this CPU lacks would die of SIGILL.
    Object code that is used is validated first (ExportError where it fails)."""
    here = {}
    objects, notes = {}, []
    for record, objs in records:
        kind = record.get("kind")
        if kind in TARGETS and kind not in here:
            here[kind] = TARGETS[kind][0]()
        missing = _missing_features(record) if kind in here else []
        same = kind in here and all(record.get(f) == here[kind][f] for f in _MATCHED) and not missing
        if same:
            verdict = "used"
        elif missing:
            verdict = f"built for features this CPU lacks ({', '.join(missing)}): rebuilt from the IR"
        else:
            verdict = "built for another target or toolchain: rebuilt from the IR"
        notes.append(f"{kind} {record.get('triple')} {record.get('cpu')}: {len(objs)} kernels, {verdict}")
        if same:
            for k in record["kernels"] if kind == "cpu" else []:
                _check_object(record, k, objs[k["key"]])
            objects.update(objs)
    return objects, notes
