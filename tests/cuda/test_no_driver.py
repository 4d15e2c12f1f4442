"""Without a CUDA driver: jitorch works, reports no CUDA, and every CUDA request says why."""

import subprocess
import sys

import pytest

import jitorch as jt

pytestmark = pytest.mark.skipif(jt.cuda.is_available(), reason="checks the machine without a CUDA driver")

NO_CUDA = "CUDA is not available: jitorch found no CUDA GPU or driver"


def test_queries_report_no_device():
    assert jt.cuda.is_available() is False and jt.cuda.device_count() == 0


def test_memory_statistics_read_zero_as_in_torch():
    assert jt.cuda.memory_allocated() == jt.cuda.memory_reserved() == jt.cuda.max_memory_allocated() == 0
    assert jt.cuda.memory_stats() == {}
    jt.cuda.empty_cache()


@pytest.mark.parametrize("make", [
    lambda: jt.zeros(2, device="cuda"), lambda: jt.ones(2).cuda(), lambda: jt.ones(2).to("cuda"),
    lambda: jt.tensor([1.0], device="cuda:0"), lambda: jt.empty(3, device=jt.device("cuda")),
    lambda: jt.randn(2, device="cuda"), lambda: jt.zeros_like(jt.ones(2), device="cuda"),
    lambda: jt.ones(2).to("cuda", non_blocking=True), lambda: jt.ones(2).new_full((2,), 1.0, device="cuda"),
    lambda: jt.arange(3, device="cuda"), lambda: jt.ones(2).cuda(0),
], ids=["zeros", "cuda", "to", "tensor", "empty", "randn", "zeros_like", "to_non_blocking", "new_full", "arange",
        "cuda_index"])
def test_creating_a_cuda_tensor_raises(make):
    with pytest.raises(RuntimeError, match=NO_CUDA):
        make()


@pytest.mark.parametrize("call", [
    lambda: jt.cuda.Stream(), lambda: jt.cuda.Event(enable_timing=True), lambda: jt.cuda.synchronize(),
    lambda: jt.cuda.get_device_name(), lambda: jt.cuda.current_stream(),
], ids=["Stream", "Event", "synchronize", "get_device_name", "current_stream"])
def test_device_calls_raise(call):
    with pytest.raises(RuntimeError, match=NO_CUDA):
        call()


def test_cpu_work_is_unaffected():
    assert (jt.ones(3) * 2).sum().item() == 6.0


def test_import_loads_no_cuda_bindings():
    code = "import sys, jitorch; print(any(m.startswith('cuda') or 'cuda_driver' in m for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_selftest_runs_the_ptxas_checks_and_exits_0():
    done = subprocess.run([sys.executable, "-m", "jitorch.cuda.selftest"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no CUDA GPU available" in done.stdout and "ptxas sm_80/sm_90  ok" in done.stdout
