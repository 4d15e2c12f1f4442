"""Profiles of CUDA work on the fake device (its emulator runs kernels on the host; a real GPU's kernels are
timed with CUDA events instead, which needs the driver)."""

import json

import pytest

import jitorch as jt
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.profiler import ProfilerActivity, profile
from jitorch.runtime.cuda_backend import use_backend


@pytest.fixture
def fake():
    with use_backend(FakeBackend()) as backend:
        yield backend


def test_a_compiled_cuda_graph_shows_each_kernel_and_device_memory(fake, tmp_path):
    f = jt.compile(lambda a, b: ((a * b).relu() + 1).sum(dim=1))
    a, b = jt.ones(8, 16, device="cuda"), jt.ones(8, 16, device="cuda")
    f(a, b)
    kernels = [st.kernel.name for st in jt.explain(f, a, b).steps if hasattr(st, "kernel")]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = f(a, b)
    spans = [e for e in prof.events() if e.kind == "kernel"]
    assert [e.name for e in spans] == kernels
    assert all(e.device_type == "cuda" and e.cpu_parent.kind == "compiled_call" for e in spans)
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    memory = [e["args"] for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["name"] == "[memory]"]
    assert {m["Device Type"] for m in memory} == {"cuda:0"}
    assert memory[-1]["Total Allocated"] >= out.numel() * 4  # the output's block, still alive
    assert set(prof.kernel_times()) == set(kernels)
