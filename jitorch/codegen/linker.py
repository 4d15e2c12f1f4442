"""Linking object code into an ORC JIT, with every symbol accounted for before LLVM sees it.

LLVM's JIT linker reports an unresolved symbol by printing "JIT session
error" to stderr and failing late, with a message naming a library rather
than the symbol. Here each object's undefined symbols are read first (`elf`),
resolved against jitorch's builtins (`builtins`) and the process (libc, libm),
and a `CompileError` names whatever is left, before anything is linked.
"""

from __future__ import annotations

import ctypes
import functools
import threading

from . import builtins, elf
from .errors import CompileError


@functools.cache
def _process():
    return ctypes.CDLL(None)


def process_address(name: str) -> int | None:
    """The address of a symbol the running process defines (libc, libm, ...), or None."""
    try:
        return ctypes.cast(getattr(_process(), name), ctypes.c_void_p).value
    except AttributeError:
        return None


@functools.cache
def builtins_object(machine, reloc="default") -> bytes:
    """jitorch's builtins as object code for ``machine`` (a `machine.Machine`)."""
    import llvmlite.binding as llvm
    tm = machine.target_machine(opt=3, reloc=reloc)
    module = llvm.parse_assembly(builtins.module_text())
    module.triple = machine.triple
    module.data_layout = str(tm.target_data)
    module.verify()
    return tm.emit_object(module)


# What LLVM may turn kernel code into calls of, besides jitorch's builtins: the C library's memory
# functions (loop idioms) and the libm forms of the intrinsics `mathlib` allows, where the CPU has no
# instruction for them (floorf without SSE4.1, fmaf without FMA).
C_FUNCTIONS = frozenset({"memcpy", "memmove", "memset"} | {
    name + suffix for name in ("fma", "fabs", "floor", "ceil", "trunc", "rint", "nearbyint", "copysign", "sqrt",
                               "fmin", "fmax") for suffix in ("", "f")})


def kernel_imports() -> frozenset[str]:
    """Every symbol kernel object code may leave for the linker to resolve."""
    return builtins.names() | C_FUNCTIONS


def undefined_symbols(obj: bytes) -> frozenset[str]:
    """The symbols object code needs from elsewhere; CompileError if it is not an object LLVM could have made."""
    try:
        return elf.symbols(obj)[1]
    except elf.ElfError as e:
        raise CompileError(f"object code is not usable: {e}") from None


class Linker:
    """An LLJIT for one machine, with the builtins linked in once; `link` adds checked objects to it."""

    def __init__(self, machine, **options):
        import llvmlite.binding as llvm
        self.machine = machine
        self._jit = llvm.create_lljit_compiler(machine.target_machine(**options))
        self._lock = threading.Lock()
        self._count = 0
        builder = llvm.JITLibraryBuilder().add_object_img(builtins_object(machine))
        for name in builtins.names():
            builder.export_symbol(name)
        self._builtins = builder.link(self._jit, "jitorch_builtins")
        self.builtins = {name: self._builtins[name] for name in builtins.names()}

    def resolve(self, obj: bytes, imports=None) -> dict[str, int]:
        """The address of every symbol ``obj`` needs: ``imports`` (name -> address) first, then the builtins,
        then the process (`C_FUNCTIONS` only). CompileError naming the symbols nothing defines."""
        imports = dict(imports or {})
        resolved, unresolved = {}, []
        for name in sorted(undefined_symbols(obj)):
            address = imports.get(name) or self.builtins.get(name) or (
                process_address(name) if name in C_FUNCTIONS else None)
            if address:
                resolved[name] = address
            else:
                unresolved.append(name)
        if unresolved:
            raise CompileError(f"machine code for {self.machine.cpu} calls {', '.join(unresolved)}, which neither "
                               "jitorch's builtins nor the C functions kernels may call define")
        return resolved

    def link(self, obj: bytes, exports, imports=None, *, fresh=False):
        """Link ``obj`` as a new library; returns its resource tracker (index it by an exported name).

        Kernel object code must pass `elf.validate` (defining exactly ``exports``), wherever it comes
        from: LLVM never sees one that does not. ``fresh``: code this process's LLVM has just emitted
        from its own IR (the CUDA emulator's, with unwind tables and helper functions), only checked
        to be readable."""
        import llvmlite.binding as llvm
        resolved = self.resolve(obj, imports)
        if not fresh:
            try:
                elf.validate(obj, self.machine.triple.split("-")[0], exports, resolved)
            except elf.ElfError as e:
                raise CompileError(f"object code is not usable: {e}") from None
        builder = llvm.JITLibraryBuilder().add_object_img(obj)
        for name, address in resolved.items():
            builder.import_symbol(name, address)
        for name in exports:
            builder.export_symbol(name)
        with self._lock:
            self._count += 1
            return builder.link(self._jit, f"jitorch_library_{self._count}")
