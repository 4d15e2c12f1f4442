"""The symbols of an ELF object file, read without LLVM.

LLVM's linker aborts the process on malformed input and only reports a
missing symbol after printing it to stderr, so object code is read here first:
which global symbols it defines and which it needs from elsewhere. Only the
64-bit little-endian ELF that LLVM emits for x86-64 and AArch64 Linux is read;
anything else is an `ElfError`.
"""

from __future__ import annotations

import struct

_IDENT = b"\x7fELF\x02\x01"  # magic, 64-bit, little-endian
_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
_SHT_SYMTAB = 2
_SHN_UNDEF = 0
_STB_LOCAL = 0


class ElfError(ValueError):
    """The bytes are not a well-formed 64-bit little-endian ELF object."""


def symbols(obj: bytes) -> tuple[frozenset[str], frozenset[str]]:
    """(defined, undefined): the names of the object's global and weak symbols, split by whether it defines them."""
    if len(obj) < _HEADER.size or not obj.startswith(_IDENT):
        raise ElfError("not a 64-bit little-endian ELF object")
    header = _HEADER.unpack_from(obj)
    shoff, shentsize, shnum = header[6], header[11], header[12]
    if shentsize != _SECTION.size or shoff + shnum * shentsize > len(obj):
        raise ElfError("the section header table lies outside the file")
    sections = [_SECTION.unpack_from(obj, shoff + i * shentsize) for i in range(shnum)]
    defined, undefined = set(), set()
    for kind, link, offset, size, entsize in ((s[1], s[6], s[4], s[5], s[9]) for s in sections):
        if kind != _SHT_SYMTAB:
            continue
        if entsize != _SYMBOL.size or offset + size > len(obj) or link >= shnum:
            raise ElfError("a symbol table lies outside the file")
        strings = _section_bytes(obj, sections[link])
        for i in range(size // _SYMBOL.size):
            name, info, _, shndx, _, _ = _SYMBOL.unpack_from(obj, offset + i * _SYMBOL.size)
            if name == 0 or info >> 4 == _STB_LOCAL:
                continue
            (undefined if shndx == _SHN_UNDEF else defined).add(_string(strings, name))
    return frozenset(defined), frozenset(undefined)


def _section_bytes(obj, section):
    offset, size = section[4], section[5]
    if offset + size > len(obj):
        raise ElfError("a string table lies outside the file")
    return obj[offset:offset + size]


def _string(table, start):
    end = table.find(b"\0", start)
    if start >= len(table) or end < 0:
        raise ElfError("a symbol name lies outside its string table")
    try:
        return table[start:end].decode("ascii")
    except UnicodeDecodeError:
        raise ElfError("a symbol name is not ASCII") from None
