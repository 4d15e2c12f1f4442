"""Per-target compiled artifacts: the CPU object code of each kernel, reused on a matching machine.

A kernel's object code is named by the kernel cache's key, a hash of its LLVM
IR, the target (triple, CPU, features) and the versions of jitorch and
llvmlite. On load the graph is compiled again from the IR; for every kernel
whose key is in the file, LLVM is skipped and the stored object code is linked
instead, so code built for another machine or toolchain is never used: its
keys do not match and those kernels are rebuilt.
"""

from __future__ import annotations

import re

from .errors import ExportError

_KEY = re.compile(r"[0-9a-f]{64}")


def host_target():
    """This machine's CPU target, as recorded in files: triple, CPU name, features, toolchain."""
    import llvmlite.binding as llvm

    from ..codegen import cpu
    from ..codegen.cache import _toolchain
    cpu.target_id()  # initialises LLVM's native target
    return {"kind": "cpu", "triple": llvm.get_process_triple(), "cpu": llvm.get_host_cpu_name(),
            "features": llvm.get_host_cpu_features().flatten(), "toolchain": list(_toolchain())}


def cpu_artifacts(compiled):
    """(target record, {key: object bytes}) for the kernels of a `CompiledGraph`."""
    from ..codegen import cpu
    from ..codegen.cache import cache_key, default_cache
    objects, kernels = {}, []
    for k in compiled.kernels:
        key = cache_key(k.source.llvm_ir, cpu.target_id())
        if key in objects:
            continue
        obj = default_cache().get(key)
        objects[key] = obj if obj is not None else cpu.emit_object(k.source)
        kernels.append({"name": k.name, "key": key, "member": f"artifacts/cpu/{key}.o"})
    return dict(host_target(), kernels=kernels), objects


def check_record(record):
    """A target record from a file, checked enough to be shown and matched."""
    kernels = record.get("kernels")
    if not isinstance(kernels, list) or not all(isinstance(k, dict) and isinstance(k.get("key"), str)
                                               and _KEY.fullmatch(k["key"]) for k in kernels):
        raise ExportError(f"an artifact record lists bad kernels: {kernels!r}")
    for field in ("kind", "triple", "cpu", "features"):
        if not isinstance(record.get(field), str):
            raise ExportError(f"an artifact record has no {field!r}")
    return record


class ArtifactCache:
    """The kernel cache seen through a file's artifacts: `get` serves their object code first, then
    the process's cache; counts how many kernels came from the file and how many were rebuilt."""

    def __init__(self, objects):
        from ..codegen.cache import default_cache
        self.objects = objects
        self.fallback = default_cache()
        self.used = 0
        self.rebuilt = 0

    def get(self, key):
        data = self.objects.get(key)
        if data is not None:
            self.used += 1
            return data
        self.rebuilt += 1
        return self.fallback.get(key)

    def put(self, key, data):
        self.fallback.put(key, data)


def matching_objects(records):
    """The object code of the records made for this machine and toolchain (key -> bytes), and a line
    per record saying whether it matches."""
    host = host_target()
    objects, notes = {}, []
    for record, objs in records:
        same = all(record.get(f) == host[f] for f in ("kind", "triple", "cpu", "features", "toolchain"))
        notes.append(f"{record.get('kind')} {record.get('triple')} {record.get('cpu')}: "
                     f"{len(objs)} kernels, {'used' if same else 'not this machine: rebuilt from the IR'}")
        if same:
            objects.update(objs)
    return objects, notes
