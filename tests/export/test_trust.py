"""No code from a file runs unless the caller trusts it; trusted object code is validated before LLVM sees it."""

from __future__ import annotations

import io
import struct
import subprocess
import sys

import numpy as np
import pytest

import jitorch as jt
from jitorch.cli import main
from jitorch.export import ExportError

from .helpers import ROOT, cpu_kernels, object_calling, replace_object_code


@pytest.fixture
def crafted(saved, tmp_path):
    """The issue's attack: the first kernel's object code replaced by code that calls system("touch pwned"),
    its SHA-256 recomputed in the manifest."""
    path = saved[0]
    name = cpu_kernels(path)[0][0]["name"]
    return replace_object_code(path, tmp_path / "crafted.jtx", {name: object_calling(name, "system")})


def _inputs(tmp_path, args):
    for n, a in zip("xy", args):
        np.save(tmp_path / f"{n}.npy", a.numpy())
    return ["--input", f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}"]


def test_crafted_object_code_does_not_run_by_default(saved, crafted, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    program = jt.export.load(crafted)
    assert "2 kernels, ignored: code from a file runs only with trust_object_code=True" in program.artifact_notes[0]
    for got, want in zip(program(*saved[1]), saved[2]):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    assert program.artifact_stats["used"] == 0  # (kernels this process compiled before are not counted)
    assert not (tmp_path / "pwned").exists()


def test_crafted_object_code_is_refused_when_trusted(crafted):
    with pytest.raises(ExportError, match=r"object code 'artifacts/cpu/[0-9a-f]+\.o' \(kernel jitorch_k1_pointwise\) "
                                          r"is not what jitorch makes for a kernel: the object calls system, which "
                                          r"kernels never call"):
        jt.export.load(crafted, trust_object_code=True)


def test_cli_run_of_the_crafted_file(saved, crafted, tmp_path):
    """`jitorch run` rebuilds the kernels (correct outputs, no file created); with --trust-object-code it refuses
    the file in one line."""
    run = [sys.executable, "-m", "jitorch.cli", "run", str(crafted), *_inputs(tmp_path, saved[1]),
           "--output", "h.npy", "--output", "s.npy"]
    env = {"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin", "JITORCH_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(np.load(tmp_path / "h.npy"), saved[2][0], rtol=1e-6)
    done = subprocess.run(run + ["--trust-object-code"], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("jitorch run: error: object code ") and "calls system" in done.stderr
    assert not (tmp_path / "pwned").exists()


def test_object_code_of_another_kernel_is_refused_when_trusted(saved, tmp_path):
    (first, a), (second, b) = cpu_kernels(saved[0])
    swapped = replace_object_code(saved[0], tmp_path / "swapped.jtx", {first["name"]: b, second["name"]: a})
    with pytest.raises(ExportError, match=rf"the object defines \['{second['name']}'\], not the entry points "
                                          rf"\['{first['name']}'\]"):
        jt.export.load(swapped, trust_object_code=True)


def _section_name_offset(obj, index):
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    return shoff + index * 64


@pytest.mark.parametrize("damage, message", [
    (lambda o: o[:_section_name_offset(o, 2)] + b"\xff\xff\x00\x00" + o[_section_name_offset(o, 2) + 4:],
     "section 2's name lies outside the section name table"),   # the "invalid sh_name" abort
    (lambda o: o[:len(o) // 2], "the section header table lies outside the file"),
    (lambda o: o[:18] + struct.pack("<H", 183) + o[20:], "for machine 183, not a relocatable x86_64 object"),
    (lambda o: b"\x7fELF\x01" + o[5:], "not a 64-bit little-endian ELF object"),
], ids=["sh_name", "truncated", "machine", "class"])
@pytest.mark.skipif(__import__("platform").machine() != "x86_64", reason="x86-64 object code")
def test_damaged_object_code_is_refused_when_trusted(saved, tmp_path, damage, message):
    name, obj = cpu_kernels(saved[0])[0][0]["name"], cpu_kernels(saved[0])[0][1]
    bad = replace_object_code(saved[0], tmp_path / "bad.jtx", {name: damage(obj)})
    with pytest.raises(ExportError, match=message):
        jt.export.load(bad, trust_object_code=True)
    assert jt.export.load(bad).artifact_notes[0].endswith("rebuilt from the graph")


def test_jitorch_load_passes_trust_through(saved, crafted):
    assert jt.load(saved[0], trust_object_code=True).artifact_notes[0].endswith("2 kernels, used")
    with pytest.raises(ExportError, match="calls system"):
        jt.load(crafted, trust_object_code=True)


def test_inspect_says_object_code_is_ignored(crafted):
    out = io.StringIO()
    assert main(["inspect", str(crafted)], out=out) == 0
    assert "2 kernels, ignored: code from a file runs only with trust_object_code=True (--trust-object-code); " \
           "rebuilt from the graph" in out.getvalue()


def test_trusted_object_code_serves_its_own_program_only(tmp_path):
    """A trusted file's kernel code is not shared with other programs whose kernels have the same IR
    (before, the process-wide table of linked kernels handed the file's code to the user's own
    compiled functions and to later untrusted loads)."""
    def f(x):
        return x * 2 + 1

    def g(x):
        return x * 3 + 1

    x = jt.ones(4)
    jt.export.export(f, (x,)).save(tmp_path / "f.jtx")
    jt.export.export(g, (x,)).save(tmp_path / "g.jtx")
    ((kernel, _),), ((_, other),) = cpu_kernels(tmp_path / "f.jtx"), cpu_kernels(tmp_path / "g.jtx")
    lying = replace_object_code(tmp_path / "f.jtx", tmp_path / "lying.jtx", {kernel["name"]: other})
    trusted = jt.export.load(lying, trust_object_code=True).module()
    assert trusted(x).tolist() == [4.0] * 4  # what the file's code computes: the caller's choice
    assert jt.export.load(lying).module()(x).tolist() == [3.0] * 4
    assert jt.compile(f)(x).tolist() == [3.0] * 4
    assert trusted(x).tolist() == [4.0] * 4
