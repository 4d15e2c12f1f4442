"""ELF object files read without LLVM: their symbols, and a check that they are what our JIT makes.

LLVM's linker trusts its input: a malformed object aborts the process
("Unchecked Expected<T> contained error", "Relocation type not implemented
yet!") or corrupts memory, and a missing symbol is only reported after it is
printed to stderr. So every object is read here first. `symbols` says which
global symbols an object defines and which it needs; `validate` checks that
it is the kind of object LLVM emits for a jitorch kernel and nothing more:

- a relocatable 64-bit little-endian ELF file for the expected machine, with
  its header, section table, string tables, symbols and relocations all
  inside the file and consistent with each other;
- only the section types, symbol kinds and relocation kinds that compiling
  kernels produces (measured over many graphs with the JIT's large code
  model; see `RELOCATIONS`);
- global symbols: exactly the expected entry points (functions), and
  undefined ones only among the names the caller allows.

Validation makes object code safe to hand to LLVM's linker; it cannot make
the machine code itself safe to run. Anything else is an `ElfError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_IDENT = b"\x7fELF\x02\x01\x01"  # magic, 64-bit, little-endian, ELF version 1
_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")

_ET_REL = 1
_SHT_PROGBITS, _SHT_SYMTAB, _SHT_STRTAB, _SHT_RELA, _SHT_NOBITS = 1, 2, 3, 4, 8
_SECTION_TYPES = {_SHT_PROGBITS, _SHT_SYMTAB, _SHT_STRTAB, _SHT_RELA, _SHT_NOBITS}
_SHF_ALLOC, _SHF_EXECINSTR = 0x2, 0x4
# write, alloc, execinstr, merge, strings, info-link, and x86-64's "large" (the JIT's code model)
_SECTION_FLAGS = 0x1 | 0x2 | 0x4 | 0x10 | 0x20 | 0x40 | 0x10000000
_SHN_UNDEF, _SHN_ABS = 0, 0xFFF1
_STB_LOCAL, _STB_GLOBAL = 0, 1
_STT_NOTYPE, _STT_OBJECT, _STT_FUNC, _STT_SECTION, _STT_FILE = 0, 1, 2, 3, 4
_SYMBOL_TYPES = {_STT_NOTYPE, _STT_OBJECT, _STT_FUNC, _STT_SECTION, _STT_FILE}

MAX_SECTIONS = 256             # a kernel has about ten
MAX_ALIGN = 4096               # kernels align to 64 bytes at most
MAX_NOBITS = 1 << 20           # zero-filled sections are allocated by the linker: keep them small

# Relocation kinds (type -> bytes patched) that LLVM emits for our kernels with the JIT's code model
# ("jitdefault", the large model), measured over many graphs and both CPU targets. x86-64 uses
# absolute 64-bit addresses only; AArch64 builds them with MOVZ/MOVK and calls with BL.
RELOCATIONS = {
    "x86_64": (62, {1: 8}),                                  # R_X86_64_64
    "aarch64": (183, {257: 8,                                # R_AARCH64_ABS64
                      264: 4, 266: 4, 268: 4, 269: 4,        # R_AARCH64_MOVW_UABS_G0_NC .. G3
                      283: 4}),                              # R_AARCH64_CALL26
}


class ElfError(ValueError):
    """The bytes are not a well-formed ELF object of the kind the JIT links."""


@dataclass(frozen=True)
class _Section:
    name: int
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    align: int
    entsize: int


@dataclass(frozen=True)
class _Symbol:
    name: str
    bind: int
    type: int
    other: int
    shndx: int
    value: int
    size: int


class _Object:
    """An ELF object parsed with every structural check that does not depend on the machine."""

    def __init__(self, obj: bytes):
        if len(obj) < _HEADER.size or not obj.startswith(_IDENT):
            raise ElfError("not a 64-bit little-endian ELF object")
        self.obj = obj
        (_, self.type, self.machine, version, entry, phoff, shoff, self.flags, ehsize, _, phnum, shentsize, shnum,
         shstrndx) = _HEADER.unpack_from(obj)
        if (version, entry, phoff, phnum, ehsize) != (1, 0, 0, 0, _HEADER.size):
            raise ElfError("the ELF header is not that of a relocatable object")
        if shentsize != _SECTION.size or not 1 <= shnum <= MAX_SECTIONS or shoff % 8:
            raise ElfError(f"bad section header table ({shnum} entries of {shentsize} bytes)")
        if shoff + shnum * shentsize > len(obj):
            raise ElfError("the section header table lies outside the file")
        self.sections = [_Section(*_SECTION.unpack_from(obj, shoff + i * shentsize)) for i in range(shnum)]
        if self.sections[0] != _Section(*[0] * 10):
            raise ElfError("section 0 is not the null section")
        if not 0 < shstrndx < shnum:
            raise ElfError("the section name table is missing")
        names = self._strings(shstrndx, "section names")
        for i, s in enumerate(self.sections[1:], 1):
            self._check_section(i, s, len(names))
        symtabs = [i for i, s in enumerate(self.sections) if s.type == _SHT_SYMTAB]
        if len(symtabs) != 1:
            raise ElfError(f"{len(symtabs)} symbol tables, not one")
        self.symtab = symtabs[0]
        self.symbols = self._read_symbols()

    def _check_section(self, i, s, names_size):
        if s.name >= names_size:
            raise ElfError(f"section {i}'s name lies outside the section name table")
        if s.type != _SHT_NOBITS and s.offset + s.size > len(self.obj):
            raise ElfError(f"section {i} lies outside the file")
        if s.link >= len(self.sections):
            raise ElfError(f"section {i} links to a section that does not exist")

    def _strings(self, index, what):
        s = self.sections[index]
        data = self.obj[s.offset:s.offset + s.size]
        if s.type != _SHT_STRTAB or not data or data[-1] != 0:
            raise ElfError(f"the {what} table is not a NUL-terminated string table")
        return data

    def _table(self, s, entry, what):
        if s.entsize != entry.size or s.size % entry.size or s.offset % 8:
            raise ElfError(f"the {what} table has entries of {s.entsize} bytes, {s.size} bytes in all")
        return [entry.unpack_from(self.obj, s.offset + k) for k in range(0, s.size, entry.size)]

    def _read_symbols(self):
        s = self.sections[self.symtab]
        rows = self._table(s, _SYMBOL, "symbol")
        strings = self._strings(s.link, "symbol name")
        if not rows or rows[0] != (0, 0, 0, 0, 0, 0) or not 1 <= s.info <= len(rows):
            raise ElfError("the symbol table does not start with the null symbol or misplaces its globals")
        symbols = []
        for k, (name, info, other, shndx, value, size) in enumerate(rows):
            if name >= len(strings):
                raise ElfError(f"symbol {k}'s name lies outside its string table")
            sym = _Symbol(_name(strings, name), info >> 4, info & 0xF, other, shndx, value, size)
            if (sym.bind == _STB_LOCAL) != (k < s.info) or sym.bind not in (_STB_LOCAL, _STB_GLOBAL):
                raise ElfError(f"symbol {sym.name!r} has binding {sym.bind} at position {k}")
            if sym.type not in _SYMBOL_TYPES or other:
                raise ElfError(f"symbol {sym.name!r} has type {sym.type} and visibility {other}")
            self._check_placement(k, sym)
            symbols.append(sym)
        return symbols

    def _check_placement(self, k, sym):
        if sym.shndx in (_SHN_UNDEF, _SHN_ABS):
            if sym.shndx == _SHN_UNDEF and k and (sym.bind == _STB_LOCAL or not sym.name):
                raise ElfError(f"undefined symbol {k} is local or has no name")
            return
        if sym.shndx >= len(self.sections):
            raise ElfError(f"symbol {sym.name!r} is defined in section {sym.shndx}, which does not exist")
        target = self.sections[sym.shndx]
        if not target.flags & _SHF_ALLOC or sym.value + sym.size > target.size:
            raise ElfError(f"symbol {sym.name!r} lies outside the loaded sections")

    def globals(self):
        """(defined, undefined): the global symbols by name; ElfError where a name is defined twice."""
        defined, undefined = {}, set()
        for sym in self.symbols:
            if sym.bind == _STB_LOCAL:
                continue
            if sym.shndx == _SHN_UNDEF:
                undefined.add(sym.name)
            elif defined.setdefault(sym.name, sym) is not sym or not sym.name:
                raise ElfError(f"global symbol {sym.name!r} is defined twice or has no name")
        return defined, undefined

    def relocations(self):
        """(relocation section, [(offset, type, symbol index, addend)]) for each relocation section."""
        for s in self.sections:
            if s.type == _SHT_RELA:
                rows = self._table(s, _RELA, "relocation")
                yield s, [(offset, info & 0xFFFFFFFF, info >> 32, addend) for offset, info, addend in rows]


def _name(strings, start):
    name = strings[start:strings.index(b"\0", start)]
    if not name.isascii():
        raise ElfError("a symbol name is not ASCII")
    return name.decode("ascii")


def symbols(obj: bytes) -> tuple[frozenset[str], frozenset[str]]:
    """(defined, undefined): the names of the object's global symbols, split by whether it defines them."""
    defined, undefined = _Object(obj).globals()
    return frozenset(defined), frozenset(undefined)


def validate(obj: bytes, arch: str, entry_points, imports) -> None:
    """Check that ``obj`` is object code the JIT could have made for a kernel on ``arch`` ("x86_64" or
    "aarch64", a triple's first part): ELF structure, sections, relocation kinds, and global symbols
    that are exactly the functions ``entry_points`` plus undefined names from ``imports``. ElfError
    saying what is wrong; LLVM never sees an object that fails."""
    if arch not in RELOCATIONS:
        raise ElfError(f"object code for {arch!r} is not linked by jitorch (only {', '.join(RELOCATIONS)})")
    machine, kinds = RELOCATIONS[arch]
    parsed = _Object(obj)
    if (parsed.type, parsed.machine, parsed.flags) != (_ET_REL, machine, 0):
        raise ElfError(f"an ELF file of type {parsed.type} for machine {parsed.machine}, not a relocatable "
                       f"{arch} object")
    for i, section in enumerate(parsed.sections[1:], 1):
        _check_kind(i, section)
    _check_globals(parsed, set(entry_points), set(imports))
    for section, rows in parsed.relocations():
        _check_relocations(parsed, section, rows, kinds)


def _check_kind(i, s):
    """Only the sections kernels have: no unwind tables (the linker would register and parse them), no
    large zero-filled or oddly aligned sections (the linker would allocate them)."""
    if s.type not in _SECTION_TYPES:
        raise ElfError(f"section {i} has type {s.type:#x}, which kernels do not have")
    if s.flags & ~_SECTION_FLAGS or s.addr:
        raise ElfError(f"section {i} has flags {s.flags:#x} or address {s.addr:#x} of no object the JIT makes")
    if s.align > MAX_ALIGN or s.align & (s.align - 1):
        raise ElfError(f"section {i} has alignment {s.align}")
    if s.type == _SHT_NOBITS and s.size > MAX_NOBITS:
        raise ElfError(f"section {i} asks for {s.size} zero bytes")


def _check_globals(parsed, entry_points, imports):
    defined, undefined = parsed.globals()
    if set(defined) != entry_points:
        raise ElfError(f"the object defines {sorted(defined)}, not the entry points {sorted(entry_points)}")
    for sym in defined.values():
        if sym.type != _STT_FUNC or not parsed.sections[sym.shndx].flags & _SHF_EXECINSTR:
            raise ElfError(f"entry point {sym.name!r} is not a function in executable code")
    stray = sorted(undefined - imports)
    if stray:
        raise ElfError(f"the object calls {', '.join(stray)}, which kernels never call")


def _check_relocations(parsed, section, rows, kinds):
    if section.link != parsed.symtab:
        raise ElfError("a relocation section does not use the symbol table")
    if not 0 < section.info < len(parsed.sections):
        raise ElfError("a relocation section applies to no section")
    target = parsed.sections[section.info]
    if target.type != _SHT_PROGBITS or not target.flags & _SHF_ALLOC:
        raise ElfError("a relocation section applies to a section that is not loaded")
    for offset, kind, index, _ in rows:
        if kind not in kinds:
            raise ElfError(f"relocation type {kind} is not one the JIT makes for kernels")
        if offset + kinds[kind] > target.size:
            raise ElfError(f"a relocation patches bytes outside its section ({offset} of {target.size})")
        if not 0 < index < len(parsed.symbols):
            raise ElfError(f"a relocation refers to symbol {index}, which does not exist")
        sym = parsed.symbols[index]
        if sym.shndx == _SHN_ABS or sym.type == _STT_FILE:
            raise ElfError(f"a relocation refers to symbol {sym.name!r}, which has no address")
