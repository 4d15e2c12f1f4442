"""The real driver path (cuda_driver, DriverBackend, jitorch.cuda streams and events, the selftest's GPU checks,
benchmarks/cuda.py) on a fake ``cuda.bindings.driver`` (tests/cuda/fake_driver.py) whose launches run on the
kernel emulator: the calls a GPU run makes, with the bindings' signatures, types and return tuples."""

import ctypes
import importlib.util
import threading
from pathlib import Path

import numpy as np
import pytest

import jitorch as jt
from jitorch.cuda import selftest
from jitorch.runtime import cuda_backend, cuda_driver

from . import fake_driver


@pytest.fixture
def drv(monkeypatch):
    """A fake driver in place of the bindings; the real `DriverBackend` over it."""
    fake = fake_driver.install(monkeypatch)
    assert isinstance(cuda_backend.current(), cuda_backend.DriverBackend)
    return fake


def test_queries_go_through_the_driver(drv):
    assert jt.cuda.is_available() and jt.cuda.device_count() == 1
    assert jt.cuda.get_device_name() == "Fake H200 0"
    assert cuda_driver.attribute("MULTIPROCESSOR_COUNT") == 132
    assert drv.calls[:2] == ["cuInit", "cuDeviceGetCount"]


def test_errors_become_runtime_errors_with_the_driver_name(drv):
    cuda_driver.activate(0)
    with pytest.raises(RuntimeError, match="CUDA_ERROR_INVALID_VALUE"):
        cuda_driver.free(12345)
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        cuda_driver.activate(1)


def test_transfers_both_ways_and_strided_writes(drv):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    for non_blocking in (False, True):
        c = jt.tensor(x).to("cuda", non_blocking=non_blocking)
        assert np.array_equal(c.to("cpu", non_blocking=non_blocking).numpy(), x)
    c[:, 1] = -1.0
    c.t()[0].copy_(jt.arange(4.0))
    c[1:, ::2].t()[0].copy_(jt.tensor([7.0, 8.0, 9.0], device="cuda"))
    expected = x.copy()
    expected[:, 1] = -1
    expected[:, 0] = np.arange(4)
    expected[1:, 0] = [7, 8, 9]
    assert c.tolist() == expected.tolist()
    assert {"cuMemcpyHtoDAsync", "cuMemcpyDtoH", "cuMemcpyDtoHAsync", "cuLaunchKernel"} <= set(drv.calls)
    assert selftest.check_tensors()[0]


def test_eager_kernels_and_a_compiled_graph_match_the_cpu(drv):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(np.float32)

    def fn(x, w):
        return ((x @ w).relu() * 0.5).softmax(-1), x.exp().sum(0)

    want = [t.numpy() for t in fn(jt.tensor(a), jt.tensor(b))]
    eager = [t.cpu().numpy() for t in fn(jt.tensor(a, device="cuda"), jt.tensor(b, device="cuda"))]
    compiled = [t.cpu().numpy() for t in jt.compile(fn)(jt.tensor(a, device="cuda"), jt.tensor(b, device="cuda"))]
    for got in (eager, compiled):
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert drv.launches


def test_allocator_over_driver_memory(drv):
    jt.cuda.empty_cache()
    t = jt.empty(1000, device="cuda")
    address, allocs = t.data_ptr(), drv.calls.count("cuMemAlloc")
    assert jt.cuda.memory_allocated() == 4096 and jt.cuda.memory_reserved() == 2 << 20
    del t
    assert jt.cuda.memory_allocated() == 0 and jt.cuda.max_memory_allocated() == 4096
    assert jt.empty(900, device="cuda").data_ptr() == address and drv.calls.count("cuMemAlloc") == allocs
    assert jt.cuda.memory_stats()["allocated_bytes.all.current"] == 0
    jt.cuda.empty_cache()
    assert jt.cuda.memory_reserved() == 0 and not drv.segments and "cuMemFree" in drv.calls
    assert selftest.check_allocator()[0]


def test_work_on_a_stream_and_events(drv):
    s = jt.cuda.Stream()
    assert s != jt.cuda.current_stream() and s.handle != 0
    x = jt.tensor(np.arange(8, dtype=np.float32), device="cuda")
    start, end = jt.cuda.Event(enable_timing=True), jt.cuda.Event(enable_timing=True)
    s.wait_event(jt.cuda.current_stream().record_event())
    with jt.cuda.stream(s):
        assert jt.cuda.current_stream() is s
        start.record()
        y = x * 2 + 1
        end.record()
    # the stream's work runs when something waits for it; as in torch, a download on the default stream does
    # not wait for another stream (the fake runs neither until asked, so a missing wait reads stale memory)
    assert not s.query() and not end.query()
    end.synchronize()
    assert end.query() and s.query() and start.elapsed_time(end) > 0
    assert y.cpu().tolist() == (np.arange(8) * 2 + 1).tolist()
    with jt.cuda.stream(s):
        z = y - 1
        assert z.cpu().tolist() == (np.arange(8) * 2).tolist()  # a download on the stream waits for it
    assert {launch[3] for launch in drv.launches[-2:]} == {int(s.handle)}
    with pytest.raises(RuntimeError, match="enable_timing"):
        jt.cuda.Event().elapsed_time(end)
    s.synchronize()
    jt.cuda.synchronize()


def test_work_from_a_new_thread_gets_a_context(drv):
    x = jt.ones(4, device="cuda")
    out = []
    thread = threading.Thread(target=lambda: out.append((x + 1).sum().item()))
    thread.start()
    thread.join()
    assert out == [8.0]


def test_the_fake_driver_refuses_what_the_bindings_refuse(drv):
    cuda_driver.require()
    with pytest.raises(TypeError, match="numpy.int64"):
        fake_driver._kernel_params(((np.int64(16),), (ctypes.c_void_p,)), 1)
    assert drv.cuMemAlloc(16)[0] == drv.CUresult.CUDA_ERROR_INVALID_CONTEXT  # no context on this thread yet
    cuda_driver.activate(0)
    with pytest.raises(TypeError):
        drv.cuModuleGetFunction(drv.CUmodule(1), "name")
    with pytest.raises(OverflowError):
        drv.cuMemFree(-1)
    dev, host = cuda_driver.malloc(64), np.zeros(16, np.float32)
    assert drv.cuMemcpyHtoD(host.ctypes.data, dev, 64)[0] == drv.CUresult.CUDA_ERROR_INVALID_VALUE  # swapped


def test_a_synchronous_copy_does_not_wait_for_a_non_blocking_stream(drv):
    cuda_driver.activate(0)
    dev, host = cuda_driver.malloc(16), np.zeros(4, np.float32)
    s = jt.cuda.Stream()
    cuda_driver.copy_to_device(dev, np.ones(4, np.float32), s.handle, non_blocking=True)
    assert drv.cuMemcpyDtoH(host.ctypes.data, dev, 16)[0] == drv.CUresult.CUDA_SUCCESS
    assert host.tolist() == [0] * 4  # the stream's copy has not run: reading without waiting is a race
    cuda_driver.copy_to_host(host, dev, s.handle)
    assert host.tolist() == [1] * 4


def test_selftest_gpu_checks(drv):
    for check in (selftest.check_allocator, lambda: selftest.check_kernels(selftest.EMULATED_ROWS),
                  selftest.check_tensors, selftest.check_graph_and_autograd,
                  lambda: selftest.check_streams_and_bandwidth(1 << 16), lambda: selftest.check_pinned_memory(1 << 10),
                  lambda: selftest.check_ipc(1 << 10, "fork", fake_driver.install_in_process)):
        ok, detail = check()
        assert ok, detail


def test_cuda_benchmark_at_a_small_size(drv, capsys):
    spec = importlib.util.spec_from_file_location("cuda_benchmark", Path(__file__).parents[2] / "benchmarks/cuda.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(n=2 * 4096, m=64, repeat=2) == 0
    out = capsys.readouterr().out
    assert "Fake H200 0" in out and all(name in out for name in ("d2d copy", "gelu", "softmax", "matmul 64"))
    assert not drv.segments  # the benchmark gave its buffers back


def test_an_index_error_found_by_a_kernel_is_raised_at_the_next_synchronization(drv):
    x = jt.arange(6.0, device="cuda")
    y = x.index_select(0, jt.tensor([0, 9], device="cuda"))
    with pytest.raises(RuntimeError, match="out of"):
        jt.cuda.synchronize()
    assert x.index_select(0, jt.tensor([5, 1], device="cuda")).tolist() == [5.0, 1.0]
    del y


def test_an_event_is_made_on_its_first_recording_streams_device(monkeypatch):
    fake_driver.install(monkeypatch, devices=2)
    event = jt.cuda.Event(enable_timing=True)
    assert event.query() and event.handle is None  # nothing recorded: nothing to wait for, as in torch
    with pytest.raises(RuntimeError, match="Both events must be recorded"):
        event.elapsed_time(jt.cuda.Event(enable_timing=True))
    event.record(jt.cuda.Stream(device=1))
    assert event.device_index == 1
    with pytest.raises(RuntimeError, match="Event device cuda:1 does not match recording stream's device cuda:0"):
        event.record(jt.cuda.current_stream())
