"""The CUDA toolchain as a GPU machine's image may hold it: ptxas from a toolkit instead of the
nvidia-cuda-nvcc wheel, a cuda-pathfinder too old to look for binaries, no ptxas at all; and PTX that the
oldest toolchain jitorch meets (ptxas and driver of CUDA 13.0: PTX ISA 9.0 at most) accepts."""

import os
import re

import pytest

import jitorch as jt
from jitorch.codegen.nvptx import ptxas

# A stand-in for ptxas: writes an empty file where -o says, and succeeds.
FAKE_PTXAS = """#!/bin/sh
while [ $# -gt 1 ]; do [ "$1" = -o ] && : > "$2"; shift; done
"""


def _tool(folder):
    """An executable ``ptxas`` in ``folder/bin``; its path."""
    path = folder / "bin" / "ptxas"
    path.parent.mkdir(parents=True)
    path.write_text(FAKE_PTXAS)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def no_wheel(monkeypatch, tmp_path):
    """No ptxas from cuda-pathfinder, an empty PATH, no CUDA_PATH/CUDA_HOME, and an empty default toolkit."""
    monkeypatch.setattr(ptxas, "_pathfinder_ptxas", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(ptxas, "TOOLKIT", str(tmp_path / "no-toolkit"))
    return tmp_path


def test_ptxas_on_the_path_is_found_and_used(no_wheel, monkeypatch):
    tool = _tool(no_wheel / "path")
    monkeypatch.setenv("PATH", os.path.dirname(tool))
    assert ptxas.find_ptxas() == tool
    assert ptxas.assemble([".version 7.0\n"]) == [None]


@pytest.mark.parametrize("variable", ["CUDA_PATH", "CUDA_HOME"])
def test_ptxas_under_the_toolkit_variables_is_found(no_wheel, monkeypatch, variable):
    tool = _tool(no_wheel / "toolkit")
    monkeypatch.setenv(variable, str(no_wheel / "toolkit"))
    assert ptxas.find_ptxas() == tool


def test_ptxas_in_the_default_toolkit_folder_is_found(no_wheel, monkeypatch):
    tool = _tool(no_wheel / "cuda")
    monkeypatch.setattr(ptxas, "TOOLKIT", str(no_wheel / "cuda"))
    assert ptxas.find_ptxas() == tool


def test_a_file_that_cannot_run_is_not_taken_for_ptxas(no_wheel, monkeypatch):
    _tool(no_wheel / "cuda")
    os.chmod(no_wheel / "cuda" / "bin" / "ptxas", 0o644)
    monkeypatch.setattr(ptxas, "TOOLKIT", str(no_wheel / "cuda"))
    assert ptxas.find_ptxas() is None


def test_a_cuda_pathfinder_without_binary_lookup_falls_back(monkeypatch, tmp_path):
    import cuda.pathfinder
    monkeypatch.delattr(cuda.pathfinder, "find_nvidia_binary_utility", raising=False)  # as before 1.3.4
    tool = _tool(tmp_path)
    monkeypatch.setenv("PATH", os.path.dirname(tool))
    assert ptxas._pathfinder_ptxas() is None
    assert ptxas.find_ptxas() == tool


def test_without_any_ptxas_assembly_says_where_it_looked_and_the_selftest_skips_it(no_wheel):
    from jitorch.cuda.selftest import check_ptxas
    assert ptxas.find_ptxas() is None
    with pytest.raises(FileNotFoundError, match="PATH.*CUDA_HOME"):
        ptxas.assemble([""])
    ok, detail = check_ptxas()
    assert ok and detail.startswith("skipped: no ptxas")


def test_ptx_declares_an_isa_the_cuda_13_0_toolchain_accepts():
    from jitorch.codegen.nvptx.matmul import matmul_kernel
    x = jt.randn(8, 40)
    kernels = jt.compile(lambda t: (t.exp() * t.sin()).softmax(-1)).lower(x, device="cuda").executable.kernels
    kernels += [matmul_kernel((2, 8, 16), (16, 8), jt.float16)]
    for k in kernels:
        (version,) = re.findall(r"^\.version (\d+)\.(\d+)$", k.asm, re.M)
        assert (int(version[0]), int(version[1])) <= (9, 0), k.name
        assert re.search(r"^\.target sm_80\b", k.asm, re.M), k.name
