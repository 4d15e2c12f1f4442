"""The CPU the backend compiles for: ``JITORCH_CPU``, feature checks before code runs, and kernels that
compile for another architecture (no hidden x86 assumption in the code generator)."""

import os
import platform
import struct
import subprocess
import sys

import pytest

import jitorch as jt
from jitorch.codegen import builtins, cpu, elf, machine
from jitorch.codegen.machine import Machine, missing_features, parse

x86_only = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 CPU names")
AARCH64 = Machine("aarch64-unknown-linux-gnu", "generic", "+neon,+fp-armv8")
EM_AARCH64 = 183


@x86_only
def test_presets_spell_out_their_features():
    v2 = parse("x86-64-v2")
    assert v2.cpu == "x86-64-v2"
    assert {"sse4.2", "popcnt", "ssse3", "cx16"} <= v2.required()
    assert not {"avx", "avx2", "f16c", "fma"} & v2.required()
    assert {"avx2", "f16c", "fma"} <= parse("x86-64-v3").required()
    assert {"avx512f", "avx512vl"} <= parse("x86-64-v4").required() <= parse("skylake-avx512").required()


@x86_only
def test_feature_changes_follow_the_cpu_name():
    m = parse("x86-64-v3,+avx512f,-fma")
    assert m.cpu == "x86-64-v3"
    assert "avx512f" in m.required() and "fma" not in m.required()
    assert "-fma" in m.features.split(",")


def test_native_is_the_host():
    host = machine.host()
    for spec in ("", "native", " native "):
        assert parse(spec).cpu == host.cpu
        assert parse(spec).required() == host.required()


@pytest.mark.parametrize("spec, message", [("pentium-pro", "unknown CPU 'pentium-pro'"),
                                           ("x86-64-v2,avx2", "feature changes look like"),
                                           ("x86-64-v2,+", "feature changes look like")])
def test_a_bad_selection_says_what_is_wrong(spec, message):
    with pytest.raises(ValueError, match=message):
        parse(spec)


@x86_only
def test_code_for_missing_features_is_refused_before_it_runs(monkeypatch):
    v3 = parse("x86-64-v3")
    assert missing_features(parse("x86-64-v4"), v3) == ["avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl"]
    assert missing_features(parse("x86-64-v2"), v3) == []
    assert missing_features(AARCH64, v3) == ["the aarch64-unknown-linux-gnu architecture"]
    monkeypatch.setattr(machine, "host", lambda: v3)
    machine._selected.cache_clear()
    monkeypatch.setenv("JITORCH_CPU", "x86-64-v4")
    try:
        with pytest.raises(RuntimeError, match=r"JITORCH_CPU='x86-64-v4' makes code that needs avx512bw.*lacks"):
            machine.selected()
    finally:
        machine._selected.cache_clear()


def _run(code, **env):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    return done


BASELINE_PROGRAM = """
import jitorch as jt
from jitorch.codegen import cpu
f = jt.compile(lambda x, h: (x * 3).to(jt.float16).float() + h.float() + x.sin())
x = jt.linspace(-70000, 70000, 4099)
h = jt.linspace(-3, 3, 4099).to(jt.float16)
assert jt.equal(f(x, h), (x * 3).to(jt.float16).float() + h.float() + x.sin()), "compiled differs from eager"
assert len(f.lower(x, h).kernels) == 1
print(cpu.target_id())
print("ymm" in f.lower(x, h).kernels[0].asm)
"""


@pytest.mark.cpu_independent
@x86_only
def test_the_baseline_target_compiles_runs_and_matches_eager():
    done = _run(BASELINE_PROGRAM, JITORCH_CPU="x86-64-v2")
    target, uses_avx = done.stdout.split()
    assert target.split("|")[1] == "x86-64-v2"
    assert uses_avx == "False"  # SSE registers only: the code runs on any x86-64 of the last decade
    assert "JIT session error" not in done.stderr and "Warning" not in done.stderr


@pytest.mark.cpu_independent
@x86_only
def test_a_selection_the_host_cannot_run_is_reported_not_executed():
    done = subprocess.run([sys.executable, "-c", "import jitorch as jt\n"
                           "import warnings\nwarnings.simplefilter('error')\n"
                           "jt.compile(lambda x: x + 1)(jt.ones(3))"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JITORCH_CPU": "x86-64-v2,+jitorchnosuchfeature"})
    assert done.returncode != 0
    assert "jitorchnosuchfeature" in done.stderr and "lacks" in done.stderr


def _representative_kernels():
    def step(x, w, h, i):
        y = (x @ w).relu() * 2 - x.mean(1, keepdim=True)
        z = y.softmax(-1) + h.float() + i.to(jt.float32) / 3
        return z.to(jt.bfloat16), (z.exp() + z.tanh()).sum(0).to(jt.float16), (i % 7 + y.argmax(1)[0]).sum()
    args = (jt.randn(8, 16), jt.randn(16, 16), jt.randn(8, 16).to(jt.float16), jt.arange(128).view(8, 16))
    return jt.compile(step).lower(*args).kernels


@pytest.mark.cpu_independent
def test_kernels_compile_for_aarch64():
    kernels = _representative_kernels()
    assert len(kernels) >= 3
    for k in kernels:
        obj = cpu.emit_object(k._kernel.source, AARCH64)
        assert struct.unpack_from("<H", obj, 18)[0] == EM_AARCH64
        defined, undefined = elf.symbols(obj)
        assert k.name in defined
        # what is left to link is C's maths library or jitorch's own builtins, nothing of x86's
        assert all(name in builtins.names() or not name.startswith("__") for name in undefined), undefined
