"""The machine the CPU backend makes code for: the host, or the one ``JITORCH_CPU`` names.

Machine code is bound to the features it was compiled for: code built for
AVX-512 dies with SIGILL on an AVX2 machine. So a `Machine` always spells its
features out (``+sse4.2,+popcnt,...``, never "whatever the CPU name implies"),
kernel-cache keys and exported artifacts record them, and code is only run on
a host that has every feature it names (`missing_features`).

``JITORCH_CPU`` selects the target:

- unset, empty or ``native``: the host's CPU name and features (the default);
- a preset (`PRESETS`): the x86-64 micro-architecture levels ``x86-64``,
  ``x86-64-v2`` (the baseline every x86-64 machine of the last decade runs),
  ``x86-64-v3`` (AVX2, FMA, F16C), ``x86-64-v4`` (AVX-512) and
  ``skylake-avx512``;
- either, followed by LLVM feature changes: ``x86-64-v3,+avx512f,-fma``.

A selection the host cannot run is refused when the backend starts, naming
the missing features. Other machines (another architecture, another CPU) can
still be compiled for with `Machine` and `codegen.cpu.emit_object`, without
running the code.
"""

from __future__ import annotations

import dataclasses
import functools
import os

_V1 = ("64bit", "cmov", "cx8", "fxsr", "mmx", "sse", "sse2")
_V2 = _V1 + ("cx16", "sahf", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3", "crc32")
_V3 = _V2 + ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")
_V4 = _V3 + ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")

# CPU name -> the features LLVM enables for it (the x86-64 psABI's levels; Skylake-SP from LLVM's X86.td).
PRESETS = {
    "x86-64": _V1,
    "x86-64-v2": _V2,
    "x86-64-v3": _V3,
    "x86-64-v4": _V4,
    "skylake-avx512": _V4 + ("adx", "aes", "clflushopt", "clwb", "fsgsbase", "invpcid", "pclmul", "pku", "prfchw",
                             "rdrnd", "rdseed", "xsavec", "xsaveopt", "xsaves"),
}


@dataclasses.dataclass(frozen=True)
class Machine:
    """A code-generation target: LLVM triple, CPU name, and explicit feature string (``+a,-b``)."""

    triple: str
    cpu: str
    features: str

    def id(self) -> str:
        """What kernel-cache keys mix in: code for one `Machine` is never used for another."""
        return f"{self.triple}|{self.cpu}|{self.features}"

    def required(self) -> frozenset[str]:
        """The features this machine's code may use."""
        return _enabled(self.features)

    def target_machine(self, **options):
        """An LLVM TargetMachine for this machine (``opt``, ``reloc``, ``codemodel`` passed through)."""
        import llvmlite.binding as llvm
        _initialise_llvm()
        target = llvm.Target.from_triple(self.triple)
        return target.create_target_machine(cpu=self.cpu, features=self.features, **options)


@functools.cache
def _enabled(features: str) -> frozenset[str]:
    """The features a feature string turns on. Kept per string: the recurrences ask once per layer call whether the
    selected machine has AVX-512, and splitting a host's string of some 150 features took 30 us."""
    return frozenset(f[1:] for f in features.split(",") if f.startswith("+"))


@functools.cache
def _initialise_llvm():
    import llvmlite.binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.cache
def host() -> Machine:
    """This process's CPU, with every feature LLVM knows marked on or off."""
    import llvmlite.binding as llvm
    _initialise_llvm()
    return Machine(llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())


def parse(spec: str, base: Machine | None = None) -> Machine:
    """The machine ``JITORCH_CPU=spec`` names (see the module docstring); ValueError for an unknown CPU."""
    base = base or host()
    name, *changes = [part.strip() for part in spec.split(",")] if spec.strip() else ["native"]
    for change in changes:
        if len(change) < 2 or change[0] not in "+-":
            raise ValueError(f"JITORCH_CPU={spec!r}: feature changes look like +avx2 or -fma, got {change!r}")
    if name == "native":
        features = dict(_split(base.features))
        cpu = base.cpu
    elif name in PRESETS:
        features = dict.fromkeys(PRESETS[name], True)
        cpu = name
    else:
        raise ValueError(f"JITORCH_CPU={spec!r}: unknown CPU {name!r}; use native or one of "
                         f"{', '.join(PRESETS)}, optionally followed by ,+feature or ,-feature")
    for change in changes:
        features[change[1:]] = change[0] == "+"
    return Machine(base.triple, cpu, ",".join(("+" if on else "-") + f for f, on in sorted(features.items())))


def _split(features: str):
    return [(f[1:], f[0] == "+") for f in features.split(",") if f[:1] in ("+", "-")]


def missing_features(machine: Machine, available: Machine | None = None) -> list[str]:
    """The features ``machine``'s code may use that ``available`` (default: the host) lacks; [] if it runs there."""
    available = available or host()
    if machine.triple != available.triple:
        return [f"the {machine.triple} architecture"]
    return sorted(machine.required() - available.required())


@functools.cache
def _selected(spec: str) -> Machine:
    machine = parse(spec)
    missing = missing_features(machine)
    if missing:
        raise RuntimeError(f"JITORCH_CPU={spec!r} makes code that needs {', '.join(missing)}, which this CPU "
                           f"({host().cpu}) lacks: choose a CPU this machine can run, such as x86-64-v2 or native")
    return machine


def selected() -> Machine:
    """The machine the CPU backend compiles for now, from ``JITORCH_CPU``."""
    return _selected(os.environ.get("JITORCH_CPU", ""))
