"""`elf.validate`: object code of the kind the JIT makes for kernels passes, on every CPU target; anything
damaged or foreign is an ElfError before LLVM sees it (LLVM's linker aborts the process on bad input)."""

import random
import struct

import numpy as np
import pytest

import jitorch as jt
from jitorch.codegen import cpu, elf
from jitorch.codegen.errors import CompileError
from jitorch.codegen.linker import kernel_imports
from jitorch.codegen.machine import Machine, selected

X86_BASELINE = Machine("x86_64-unknown-linux-gnu", "x86-64", "")   # calls libm and builtins for floor, fma, halves
AARCH64 = Machine("aarch64-unknown-linux-gnu", "generic", "+neon,+fp-armv8")


def _kernels():
    """Kernels of graphs covering what the code generator emits: matmul epilogues, reductions, softmax,
    the maths library, integer division, half and bfloat16 casts, float64, random numbers, strided views."""
    x, w, i = jt.randn(8, 16), jt.randn(16, 16), jt.arange(128).view(8, 16)
    programs = [
        (lambda x, w: (x @ w).relu() * 2 - x.mean(1, keepdim=True), (x, w)),
        (lambda x: x.softmax(-1).log() + x.tanh().exp(), (x,)),
        (lambda x: (x.erf() + x.sigmoid() + x.pow(2.5) + x.sin() + x.atan2(x + 1)).sum(0), (x,)),
        (lambda x, i: (i % 7 + x.argmax(1)[0]).sum() + (i // 3).max(), (x, i)),
        (lambda x: x.to(jt.bfloat16).to(jt.float16).float().cumsum(0), (x,)),
        (lambda x: (x.floor() + x.round() + x.ceil() + x.trunc()).to(jt.float64).exp().sum(), (x,)),
        (lambda x: jt.rand_like(x) + x.t().contiguous()[::2].repeat(1, 2) * x.amax(1, keepdim=True), (x,)),
    ]
    return [k._kernel for fn, args in programs for k in jt.compile(fn).lower(*args).kernels]


@pytest.fixture(scope="module")
def kernels():
    return _kernels()


@pytest.mark.parametrize("machine", [None, X86_BASELINE, AARCH64], ids=["selected", "x86-64", "aarch64"])
def test_every_kernel_validates(kernels, machine):
    machine = machine or selected()
    assert len(kernels) >= 7
    imported = set()
    for k in kernels:
        obj = cpu.emit_object(k.source, machine)
        elf.validate(obj, machine.triple.split("-")[0], [k.name], kernel_imports())
        imported |= elf.symbols(obj)[1]
    if machine is X86_BASELINE:  # without SSE4.1, FMA and F16C LLVM calls out; validation allows exactly those
        assert {"floorf", "fmaf", "__extendhfsf2"} <= imported


@pytest.fixture(scope="module")
def obj():
    """A small kernel's object code for the selected CPU, and its entry point."""
    k = jt.compile(lambda x: (x * 2).exp()).lower(jt.ones(4, 4)).kernels[0]
    return cpu.emit_object(k._kernel.source), k.name


def _arch():
    return selected().triple.split("-")[0]


def _section(data, i):
    shoff, = struct.unpack_from("<Q", data, 0x28)
    return shoff + i * 64


def _set(data, offset, fmt, value):
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def _first(data, kind):
    """The index of the first section of type ``kind``."""
    shnum, = struct.unpack_from("<H", data, 0x3C)
    return next(i for i in range(shnum) if struct.unpack_from("<I", data, _section(data, i) + 4)[0] == kind)


def _relocation(data):
    """The offset of the first relocation entry."""
    return struct.unpack_from("<Q", data, _section(data, _first(data, 4)) + 24)[0]


@pytest.mark.parametrize("damage, message", [
    (lambda d: d[:40], "not a 64-bit little-endian ELF object"),
    (lambda d: _set(d, 16, "<H", 2), "an ELF file of type 2"),
    (lambda d: _set(d, 0x28, "<Q", len(d)), "the section header table lies outside the file"),
    (lambda d: _set(d, 0x3C, "<H", 0), r"bad section header table \(0 entries"),
    (lambda d: _set(d, _section(d, 1), "<I", 1 << 30), "section 1's name lies outside the section name table"),
    (lambda d: _set(d, _section(d, 2) + 24, "<Q", 1 << 40), "section 2 lies outside the file"),
    (lambda d: _set(d, _section(d, 2) + 4, "<I", 0x70000001), "section 2 has type 0x70000001"),
    (lambda d: _set(d, _section(d, 2) + 48, "<Q", 3), "section 2 has alignment 3"),
    (lambda d: _set(d, _section(d, _first(d, 2)) + 56, "<Q", 16), "the symbol table has entries of 16 bytes"),
    (lambda d: _set(d, _relocation(d) + 8, "<I", 2), "relocation type 2 is not one the JIT makes"),
    (lambda d: _set(d, _relocation(d), "<Q", 1 << 40), "a relocation patches bytes outside its section"),
    (lambda d: _set(d, _relocation(d) + 12, "<I", 9999), "a relocation refers to symbol 9999"),
], ids=["short", "type", "shoff", "shnum", "sh_name", "offset", "unwind", "align", "entsize", "reloc_kind",
        "reloc_offset", "reloc_symbol"])
@pytest.mark.skipif(__import__("platform").machine() != "x86_64", reason="x86-64 object layout")
def test_damage_is_an_elf_error(obj, damage, message):
    data, name = obj
    with pytest.raises(elf.ElfError, match=message):
        elf.validate(damage(data), _arch(), [name], kernel_imports())


def test_symbols_other_than_the_entry_points(obj):
    data, name = obj
    with pytest.raises(elf.ElfError, match=rf"the object defines \['{name}'\], not the entry points \['other'\]"):
        elf.validate(data, _arch(), ["other"], kernel_imports())
    with pytest.raises(elf.ElfError, match="object code for 'riscv64' is not linked by jitorch"):
        elf.validate(data, "riscv64", [name], kernel_imports())


def test_random_damage_is_an_elf_error_or_passes(obj):
    """Byte flips anywhere: validation either refuses with ElfError or accepts an object whose structure
    is still sound (a flip in the code or constants); it never fails with another exception."""
    data, name = obj
    rng = random.Random(0)
    outcomes = {"refused": 0, "passed": 0}
    for _ in range(3000):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        try:
            elf.validate(bytes(damaged), _arch(), [name], kernel_imports())
            outcomes["passed"] += 1
        except elf.ElfError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 500 and outcomes["passed"] > 100, outcomes


def test_the_linker_validates_every_object(obj):
    """Object code reaches LLVM only through `Linker.link`, which validates it: a damaged kernel is a
    CompileError, not an abort."""
    data, name = obj
    linker = cpu._init()["linker"]
    bad = _set(data, _section(data, 1), "<I", 1 << 30)
    with pytest.raises(CompileError, match="object code is not usable: section 1's name lies outside"):
        linker.link(bad, [name])
    library = linker.link(data, [name])
    assert library[name]
    np.testing.assert_allclose(jt.compile(lambda x: (x * 2).exp())(jt.ones(4, 4)).numpy(), np.full((4, 4), np.e ** 2),
                               rtol=1e-6)
