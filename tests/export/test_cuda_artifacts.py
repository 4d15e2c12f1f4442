"""PTX artifacts: a program on CUDA inputs saves each kernel's PTX, loads it back checked, and runs with
it where the target and toolchain match (on the fake device; ptxas checks the PTX itself)."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

import jitorch as jt
import jitorch.codegen.nvptx.ptx as nvptx_compile
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.cli import main
from jitorch.codegen.memo import BoundedMemo
from jitorch.codegen.nvptx.ptxas import assemble
from jitorch.export import Dim, ExportError
from jitorch.export.artifacts import cuda_target
from jitorch.runtime.cuda_backend import use_backend
from jitorch.runtime.cuda_driver import no_cuda

from .helpers import rewrite, run_python, small_program

KERNELS = ["jitorch_k1_pointwise", "jitorch_k2_reduction"]
MARK = b"// served from the export file\n"


def _expected(x, y):
    """The small program's outputs, in NumPy."""
    x, y = x.cpu().numpy(), y.cpu().numpy()
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    return [np.maximum(x @ w, 0) + y, np.exp(x).sum(axis=1)]


def _assert_expected(outputs, args):
    for got, want in zip(outputs, _expected(*args)):
        assert got.device.type == "cuda"
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5, atol=1e-6)


def _manifest(path):
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("manifest.json")), {n: z.read(n) for n in z.namelist()}


def _rewrite_cuda(src, dst, ptx=None, record=None):
    """Copy an export file, changing each PTX member (bytes -> bytes) and the CUDA record (in place)."""
    with zipfile.ZipFile(src) as z:
        members = {n: ptx(z.read(n)) for n in z.namelist() if n.startswith("artifacts/cuda/")} if ptx else {}

    def edit(m):
        if record is not None:
            record(m["artifacts"][0])
    return rewrite(src, dst, manifest=edit, members=members)


@pytest.fixture
def fresh_ptx(monkeypatch):
    """An empty in-memory PTX cache, as in a new process: kernels come from the cache the graph is
    compiled with (the file's artifacts first)."""
    monkeypatch.setattr(nvptx_compile, "_memory", BoundedMemo(nvptx_compile.PTX_MEMORY_LIMIT))


def test_save_stores_each_kernels_ptx_in_a_cuda_record(saved_cuda):
    m, members = _manifest(saved_cuda[0])
    (record,) = m["artifacts"]
    assert {k: record[k] for k in ("kind", "triple", "cpu", "features")} == {
        "kind": "cuda", "triple": "nvptx64-nvidia-cuda", "cpu": "sm_80", "features": "+ptx70"}
    assert record["toolchain"] == cuda_target()["toolchain"]
    assert [k["name"] for k in record["kernels"]] == KERNELS
    for k in record["kernels"]:
        assert k["member"] == f"artifacts/cuda/{k['key']}.ptx" and k["member"] in m["members"]
        assert b".target sm_80" in members[k["member"]] and f".entry {k['name']}(".encode() in members[k["member"]]
    assert m["constants"][0]["device"] == "cuda:0"


def test_saved_ptx_assembles_with_ptxas(saved_cuda):
    _, members = _manifest(saved_cuda[0])
    texts = [data.decode() for name, data in members.items() if name.endswith(".ptx")]
    assert len(texts) == 2 and assemble(texts, "sm_80") == [None, None]


def test_loaded_program_runs_with_the_stored_ptx(saved_cuda, tmp_path, fake, fresh_ptx):
    path, args, _ = saved_cuda
    marked = _rewrite_cuda(path, tmp_path / "marked.jtx", ptx=lambda text: text + MARK)
    p = jt.export.load(marked, trust_object_code=True)
    assert p.constants["w"].device.type == "cuda"
    _assert_expected(p(*args), args)
    assert p.artifact_stats == {"used": 2, "rebuilt": 0}
    assert all(k.asm.endswith(MARK.decode()) for k in p.specialise().kernels)
    assert [launch.name for launch in fake.launches[-2:]] == KERNELS


def _other_toolchain(record):
    record["toolchain"] = ["jitorch", "0.0.1", "llvmlite", "0.1"]


def _other_sm(record):
    record["cpu"] = "sm_90"


@pytest.mark.parametrize("ptx, record", [
    (lambda text: text + MARK, _other_toolchain),
    (lambda text: text.replace(b".target sm_80", b".target sm_90") + MARK, _other_sm),
], ids=["toolchain", "sm"])
def test_ptx_for_another_target_is_rebuilt_from_the_ir(saved_cuda, tmp_path, fresh_ptx, ptx, record):
    path, args, _ = saved_cuda
    p = jt.export.load(_rewrite_cuda(path, tmp_path / "other.jtx", ptx=ptx, record=record), trust_object_code=True)
    assert "2 kernels, built for another target or toolchain: rebuilt from the IR" in p.artifact_notes[0]
    _assert_expected(p(*args), args)
    assert p.artifact_stats == {"used": 0, "rebuilt": 2}
    assert not any(MARK.decode() in k.asm for k in p.specialise().kernels)


def test_untrusted_ptx_is_not_used(saved_cuda, tmp_path, fake, fresh_ptx):
    path, args, _ = saved_cuda
    p = jt.export.load(_rewrite_cuda(path, tmp_path / "marked.jtx", ptx=lambda text: text + MARK))
    assert "2 kernels, ignored: code from a file runs only with trust_object_code=True" in p.artifact_notes[0]
    _assert_expected(p(*args), args)
    assert p.artifact_stats == {"used": 0, "rebuilt": 2}
    assert not any(MARK.decode() in k.asm for k in p.specialise().kernels)


def test_without_artifacts_a_cuda_program_is_rebuilt(saved_cuda, tmp_path, fresh_ptx):
    path, args, _ = saved_cuda
    p = jt.export.load(rewrite(path, tmp_path / "bare.jtx", manifest=lambda m: dict(m, artifacts=[])))
    _assert_expected(p(*args), args)
    assert p.artifact_stats == {"used": 0, "rebuilt": 2}


def _rename_entry(text):
    return text.replace(b"jitorch_k1_pointwise(", b"renamed(")


def _bad_kernel_name(record):
    record["kernels"][0]["name"] = "k1; .entry x"


def _no_sm(record):
    del record["cpu"]


@pytest.mark.parametrize("ptx, record, message", [
    (lambda text: text + b"\xff\xfe", None, r"PTX member 'artifacts/cuda/[0-9a-f]+\.ptx' \(kernel jitorch_k\d_\w+\) "
                                             r"is not ASCII text"),
    (lambda text: text.replace(b".target sm_80", b".target sm_52"), None,
     r"does not declare \.target sm_80, the SM of its record"),
    (_rename_entry, None, r"\(kernel jitorch_k1_pointwise\) has no \.entry jitorch_k1_pointwise"),
    (None, _bad_kernel_name, r"an artifact record has a kernel with a bad entry name: 'k1; \.entry x'"),
    (None, _no_sm, r"an artifact record has no 'cpu'"),
], ids=["not_text", "other_sm", "no_entry", "bad_name", "no_sm"])
def test_bad_ptx_artifacts_are_refused(saved_cuda, tmp_path, ptx, record, message):
    bad = _rewrite_cuda(saved_cuda[0], tmp_path / "bad.jtx", ptx=ptx, record=record)
    with pytest.raises(ExportError, match=message):
        jt.export.load(bad, trust_object_code=True)


def test_a_ptx_member_that_does_not_match_its_hash_is_refused(saved_cuda, tmp_path):
    bad = _rewrite_cuda(saved_cuda[0], tmp_path / "bad.jtx", ptx=lambda text: text + MARK)
    old = _manifest(saved_cuda[0])[0]["members"]
    bad = rewrite(bad, tmp_path / "stale.jtx", manifest=lambda new: dict(new, members=old), rehash=False)
    with pytest.raises(ExportError, match=r"member 'artifacts/cuda/[0-9a-f]+\.ptx' is damaged or was changed"):
        jt.export.load(bad, trust_object_code=True)


def test_a_constant_on_a_bad_device_is_refused(saved_cuda, tmp_path):
    def edit(m):
        m["constants"][0]["device"] = "tpu:0"
    bad = rewrite(saved_cuda[0], tmp_path / "bad.jtx", manifest=edit)
    with pytest.raises(ExportError, match=r"constant 'w': bad device 'tpu:0' \(cpu or cuda:N\)"):
        jt.export.load(bad)


class _NoDevice(FakeBackend):
    """A machine without CUDA."""

    def available(self):
        return False

    def require(self):
        no_cuda()


def test_loading_a_cuda_program_needs_cuda(saved_cuda):
    with use_backend(_NoDevice()), pytest.raises(ExportError, match="constant 'w' lives on cuda:0: CUDA is not "
                                                                    "available") as info:
        jt.export.load(saved_cuda[0])
    assert isinstance(info.value, RuntimeError)  # as torch's


def test_unknown_artifact_target_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"artifacts_for: unknown target 'tpu'; the targets are 'cpu', 'cuda'"):
        small_program()[2].save(tmp_path / "p.jtx", artifacts_for=("cpu", "tpu"))


@pytest.mark.parametrize("targets, kinds", [(("cpu", "cuda"), ["cpu"]), ("cpu", ["cpu"]), (("cuda",), [])],
                         ids=["default", "str", "cuda_only"])
def test_a_cpu_program_has_only_cpu_artifacts(tmp_path, targets, kinds):
    small_program()[2].save(tmp_path / "p.jtx", artifacts_for=targets)
    assert [r["kind"] for r in _manifest(tmp_path / "p.jtx")[0]["artifacts"]] == kinds


def test_inspect_lists_the_ptx(saved_cuda):
    out = io.StringIO()
    assert main(["inspect", "--trust-object-code", str(saved_cuda[0])], out=out) == 0
    text = out.getvalue()
    assert "cuda nvptx64-nvidia-cuda sm_80: 2 kernels, used" in text
    assert "w: [4, 3] jitorch.float32 cuda:0" in text and "x: Tensor [5, 4] jitorch.float32 cuda:0" in text


def test_cli_run_moves_inputs_to_the_programs_device(saved_cuda, tmp_path):
    path, args, expected = saved_cuda
    inputs = []
    for name, t in zip("xy", args):
        np.save(tmp_path / f"{name}.npy", t.cpu().numpy())
        inputs += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    outs = [str(tmp_path / "h.npy"), str(tmp_path / "s.npy")]
    assert main(["run", str(path), *inputs, "--output", outs[0], "--output", outs[1]], out=io.StringIO()) == 0
    for o, e in zip(outs, expected):
        np.testing.assert_allclose(np.load(o), e, rtol=1e-6)


def test_dynamic_dims_on_cuda_round_trip(fake, tmp_path):
    def f(x):
        return (x * 2).sum(dim=1)
    x = jt.tensor(np.arange(12, dtype=np.float32).reshape(4, 3), device="cuda")
    jt.export(f, (x,), dynamic_shapes={"x": {0: Dim("batch", min=1, max=16)}}).save(tmp_path / "d.jtx")
    p = jt.export.load(tmp_path / "d.jtx")
    x7 = np.arange(21, dtype=np.float32).reshape(7, 3)
    np.testing.assert_allclose(p(jt.tensor(x7, device="cuda")).cpu().numpy(), (x7 * 2).sum(axis=1))


def test_a_fresh_process_runs_the_stored_ptx(saved_cuda, tmp_path):
    path, args, expected = saved_cuda
    for i, a in enumerate([*args, *expected]):
        np.save(tmp_path / f"a{i}.npy", a.cpu().numpy() if hasattr(a, "cpu") else a)
    out = run_python(
        "import numpy as np, jitorch as jt\n"
        "from jitorch.runtime.cuda_backend import use_backend\n"
        "from jitorch.backends.cuda.fake import FakeBackend\n"
        "with use_backend(FakeBackend()):\n"
        f"    p = jt.export.load({str(path)!r}, trust_object_code=True)\n"
        "    h, s = p(*(jt.tensor(np.load(f'a{i}.npy'), device='cuda') for i in range(2)))\n"
        "    assert np.allclose(h.cpu().numpy(), np.load('a2.npy')) and np.allclose(s.cpu().numpy(), np.load('a3.npy'))\n"
        "    print(p.artifact_stats)\n", tmp_path)
    assert out.strip() == "{'used': 2, 'rebuilt': 0}"


def test_no_c_library_for_a_cuda_program(fake, tmp_path):
    with pytest.raises(ExportError, match=r"the C library runs on the CPU, but the program takes inputs on cuda:0"):
        small_program("cuda")[2].to_c_library(tmp_path, "m")
