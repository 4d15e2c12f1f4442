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

from ..runtime import logs
from . import builtins, elf
from .cache import KernelCache, cache_key
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


@functools.cache
def builtins_cache() -> KernelCache:
    """Where `jit_builtins_object` keeps the builtins: the kernel cache's folder, through a cache of its
    own, so that `default_cache`'s counts stay the kernels'."""
    return KernelCache()


@functools.cache
def jit_builtins_object(machine) -> bytes:
    """`builtins_object` for a JIT on ``machine``, from the kernel cache where an earlier process made it
    (checked as cached kernels are: it defines exactly the builtins and calls nothing), else made and
    cached: emitting it is a fixed cost of every process's first compile."""
    text = builtins.fingerprint()
    key = cache_key("builtins", text, machine.id())
    cache = builtins_cache()
    obj = cache.get(key, text)
    if obj is not None:
        try:
            elf.validate(obj, machine.triple.split("-")[0], builtins.names(), frozenset())
            return obj
        except elf.ElfError as e:
            logs.log("codegen", "cached object code of the builtins rejected, compiling them again: %s", e)
    obj = builtins_object(machine)
    cache.put(key, obj, text)
    return obj


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


class Library:
    """Object code linked into a JIT: index it by an exported name for that symbol's address. The
    machine code stays while this object lives and is removed from the JIT when it goes."""

    __slots__ = ("_tracker", "_jit")

    def __init__(self, tracker, jit):
        self._tracker = tracker
        self._jit = jit  # the JIT and the builtins this code calls into outlive it

    def __getitem__(self, name: str) -> int:
        return self._tracker[name]


class _Jit:
    """One LLJIT with jitorch's builtins linked in, and how many libraries it has been given."""

    def __init__(self, machine, options):
        import llvmlite.binding as llvm
        self.lljit = llvm.create_lljit_compiler(machine.target_machine(**options))
        builder = llvm.JITLibraryBuilder().add_object_img(jit_builtins_object(machine))
        for name in builtins.names():
            builder.export_symbol(name)
        self.builtins_library = builder.link(self.lljit, "jitorch_builtins")
        self.builtins = {name: self.builtins_library[name] for name in builtins.names()}
        self.libraries = 0


class Linker:
    """LLJITs for one machine, with the builtins linked in each; `link` adds checked objects to one.

    Removing a library frees its code, but LLVM keeps an empty JITDylib (about 8 KB) for every library
    a JIT was ever given. So after `LIBRARIES_PER_JIT` libraries, new ones go to a fresh JIT; an old
    JIT, dylibs and all, is freed with the last `Library` linked into it.
    """

    LIBRARIES_PER_JIT = 256

    def __init__(self, machine, **options):
        self.machine = machine
        self._options = options
        self._lock = threading.Lock()
        self._jit = _Jit(machine, options)

    def check_object(self, obj: bytes, exports, imports=None) -> None:
        """CompileError unless ``obj`` is object code the JIT could have made for a kernel on this machine
        (`elf.validate`): ELF structure, sections, relocation kinds, and global symbols that are exactly
        the functions ``exports`` plus undefined names among ``imports`` (default: `kernel_imports`).
        LLVM aborts the process on malformed objects, so none reaches it unchecked."""
        allowed = kernel_imports() if imports is None else imports
        try:
            elf.validate(obj, self.machine.triple.split("-")[0], exports, allowed)
        except elf.ElfError as e:
            raise CompileError(f"object code is not usable: {e}") from None

    def resolve(self, obj: bytes, imports=None) -> dict[str, int]:
        """The address of every symbol ``obj`` needs: ``imports`` (name -> address) first, then the builtins,
        then the process (`C_FUNCTIONS` only). CompileError naming the symbols nothing defines."""
        return self._resolve(obj, imports, self._jit)

    def link(self, obj: bytes, exports, imports=None, *, fresh=False) -> Library:
        """Link ``obj`` as a new library; index the returned `Library` by an exported name.

        Kernel object code must pass `check_object` (defining exactly ``exports``), wherever it comes
        from: LLVM never sees one that does not. ``fresh``: code this process's LLVM has just emitted
        from its own IR (the CUDA emulator's, with unwind tables and helper functions), only checked
        to be readable."""
        import llvmlite.binding as llvm
        with self._lock:
            if self._jit.libraries >= self.LIBRARIES_PER_JIT:
                self._jit = _Jit(self.machine, self._options)
            jit = self._jit
            resolved = self._resolve(obj, imports, jit)
            if not fresh:
                self.check_object(obj, exports, resolved)
            builder = llvm.JITLibraryBuilder().add_object_img(obj)
            for name, address in resolved.items():
                builder.import_symbol(name, address)
            for name in exports:
                builder.export_symbol(name)
            jit.libraries += 1
            return Library(builder.link(jit.lljit, f"jitorch_library_{jit.libraries}"), jit)

    def _resolve(self, obj, imports, jit):
        imports = dict(imports or {})
        resolved, unresolved = {}, []
        for name in sorted(undefined_symbols(obj)):
            address = imports.get(name) or jit.builtins.get(name) or (
                process_address(name) if name in C_FUNCTIONS else None)
            if address:
                resolved[name] = address
            else:
                unresolved.append(name)
        if unresolved:
            raise CompileError(f"machine code for {self.machine.cpu} calls {', '.join(unresolved)}, which neither "
                               "jitorch's builtins nor the C functions kernels may call define")
        return resolved
