"""Without a CUDA driver: jitorch works, reports no CUDA, and every CUDA request says why."""

import re
import subprocess
import sys
from pathlib import Path

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


def test_selftest_without_a_gpu_runs_ptxas_and_the_emulated_checks_and_exits_0():
    """The suite's one run of the selftest's emulated checks: every registry op's first sample on CUDA
    against the CPU, CUDA tensors, and a compiled graph with autograd (a failing row prints what differed)."""
    done = subprocess.run([sys.executable, "-m", "jitorch.cuda.selftest"], capture_output=True, text=True,
                          cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the kernels run on the host emulator" in done.stdout
    rows = {line.split("  ")[0].strip(): line for line in done.stdout.splitlines()[1:]}
    assert set(rows) == {"ptxas sm_80/sm_90", "kernels vs CPU (emulated)", "CUDA tensors (emulated)",
                         "registry ops vs CPU (emulated)", "graph and autograd (emulated)"}
    assert all(" ok " in line for line in rows.values()), done.stdout
    assert re.search(r"\b\d{3} ops vs CPU", rows["registry ops vs CPU (emulated)"])


def test_seeding_without_cuda_is_silent_as_in_torch():
    for seed_cuda in (lambda: jt.cuda.manual_seed(1), lambda: jt.cuda.manual_seed_all(1), jt.cuda.seed,
                      jt.cuda.seed_all):
        assert seed_cuda() is None
    assert jt.cuda.is_bf16_supported() is False


@pytest.mark.parametrize("call", [lambda: jt.cuda.set_device(0), jt.cuda.current_device, jt.cuda.initial_seed,
                                  lambda: jt.cuda.FloatTensor(2), lambda: jt.cuda.LongTensor([1])],
                         ids=["set_device", "current_device", "initial_seed", "FloatTensor", "LongTensor"])
def test_what_needs_a_device_says_cuda_is_unavailable(call):
    with pytest.raises(RuntimeError, match=NO_CUDA):
        call()


def test_accelerator_without_a_device_answers_as_torch():
    import torch
    assert jt.accelerator.is_available() is torch.accelerator.is_available() is False
    assert jt.accelerator.device_count() == torch.accelerator.device_count() == 0
    assert jt.accelerator.current_accelerator(check_available=True) is None
    for name in ("current_device_index", "synchronize", "memory_allocated", "empty_cache"):
        with pytest.raises(RuntimeError) as theirs:
            getattr(torch.accelerator, name)()
        with pytest.raises(RuntimeError, match=str(theirs.value)):
            getattr(jt.accelerator, name)()
