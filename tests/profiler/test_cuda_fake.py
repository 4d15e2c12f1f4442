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
    trace = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    memory = [e["args"] for e in trace if e["name"] == "[memory]"]
    assert {m["Device Type"] for m in memory} == {"cuda:0"}
    assert memory[-1]["Total Allocated"] >= out.numel() * 4  # the output's block, still alive
    assert set(prof.kernel_times()) == set(kernels)


def test_on_the_driver_kernels_are_timed_with_cuda_events_on_their_stream(monkeypatch, tmp_path):
    from tests.cuda import fake_driver
    drv = fake_driver.install(monkeypatch)  # the real driver backend over a fake driver, whose events tell time
    assert jt.cuda.is_available()
    f = jt.compile(lambda a, b: ((a * b).relu() + 1).sum(dim=1))
    a, b = jt.ones(8, 16, device="cuda"), jt.ones(8, 16, device="cuda")
    f(a, b)
    kernels = [st.kernel.name for st in jt.explain(f, a, b).steps if hasattr(st, "kernel")]
    launched = len(drv.launches)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        f(a, b)
    assert len(drv.launches) > launched
    device = [e for e in prof.events() if e.kind == "kernel"]
    host = [e for e in prof.events() if e.kind == "cuda_launch"]
    assert [e.name for e in device] == [e.name for e in host] == kernels
    stream = int(jt.cuda.current_stream().handle)
    assert all(e.thread == ("cuda", 0, stream) and e.device_type == "cuda" and e.cpu_time_total > 0 for e in device)
    assert all(h.cpu_parent.kind == "compiled_call" for h in host)
    assert set(prof.kernel_times()) == set(kernels)
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    trace = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    on_gpu = [e for e in trace if e.get("cat") == "kernel"]
    assert {(e["pid"], e["tid"]) for e in on_gpu} == {(0, stream)}
    assert {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}} in trace
