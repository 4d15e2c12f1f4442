"""jitorch.accelerator: torch.accelerator's device-neutral API over CUDA (the fake device here)."""

import pytest

import jitorch as jt
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.runtime.cuda_backend import use_backend


@pytest.fixture
def fake():
    with use_backend(FakeBackend()) as backend:
        yield backend


def test_current_accelerator_is_cuda_as_in_a_cuda_build():
    assert jt.accelerator.current_accelerator() == jt.device("cuda")
    assert jt.accelerator.current_accelerator().index is None


def test_accelerator_answers_for_the_cuda_devices(fake):
    assert jt.accelerator.is_available() and jt.accelerator.device_count() == 1
    assert jt.accelerator.current_accelerator(check_available=True) == jt.device("cuda")
    assert jt.accelerator.current_device_index() == 0
    jt.accelerator.set_device_index(0)
    jt.accelerator.set_device_index(-1)
    with jt.accelerator.device_index(0), jt.accelerator.device_index(None):
        x = jt.ones(256, device=jt.accelerator.current_accelerator())
    jt.accelerator.synchronize()
    assert x.device == jt.device("cuda:0")
    assert jt.accelerator.memory_allocated() == jt.cuda.memory_allocated() > 0
    assert jt.accelerator.max_memory_allocated() >= jt.accelerator.memory_allocated()
    assert jt.accelerator.memory_stats()["allocated_bytes.all.current"] == jt.accelerator.memory_allocated()
    del x
    jt.accelerator.reset_peak_memory_stats()
    jt.accelerator.empty_cache()
    assert jt.accelerator.memory_reserved() == jt.cuda.memory_reserved() == 0


def test_device_selection_as_torch_examples_write_it(fake):
    device = jt.accelerator.current_accelerator() if jt.accelerator.is_available() else jt.device("cpu")
    assert jt.zeros(2, device=device).is_cuda
