"""jitorch.cuda's seeding, current device and bfloat16 query, on the fake device and as torch answers them."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.runtime.cuda_backend import use_backend


@pytest.fixture(autouse=True)
def fresh_seed():
    """Each test starts from and leaves the default seeds."""
    jt.manual_seed(67280421310721)
    yield
    jt.manual_seed(67280421310721)


def test_cuda_manual_seed_makes_cuda_random_ops_repeat(fake):
    jt.cuda.manual_seed(7)
    a = jt.randn(5, device="cuda").cpu()
    jt.cuda.manual_seed(7)
    b = jt.randn(5, device="cuda").cpu()
    assert np.array_equal(a.numpy(), b.numpy())


def test_cuda_manual_seed_leaves_the_cpu_stream_alone(fake):
    jt.manual_seed(3)
    expected = jt.randn(4)
    jt.manual_seed(3)
    jt.cuda.manual_seed(11)  # torch's CUDA seed does not touch the CPU generator
    assert np.array_equal(jt.randn(4).numpy(), expected.numpy())


def test_cpu_draws_do_not_advance_the_cuda_stream(fake):
    jt.manual_seed(5)
    first = jt.randn(3, device="cuda").cpu()
    jt.manual_seed(5)
    jt.randn(100)  # a CPU draw in between, as a data loader makes
    assert np.array_equal(jt.randn(3, device="cuda").cpu().numpy(), first.numpy())


def test_manual_seed_gives_the_same_numbers_on_both_devices(fake):
    jt.manual_seed(9)
    on_cuda = jt.rand(6, device="cuda").cpu()
    jt.manual_seed(9)
    assert np.array_equal(jt.rand(6).numpy(), on_cuda.numpy())


def test_manual_seed_all_and_initial_seed(fake):
    jt.cuda.manual_seed_all(21)
    assert jt.cuda.initial_seed() == 21
    jt.cuda.manual_seed(22)
    assert jt.cuda.initial_seed() == 22
    jt.cuda.seed_all()
    jt.cuda.seed()
    assert jt.cuda.initial_seed() != 22


def test_seeding_before_the_device_is_used_holds_for_its_generator():
    jt.cuda.manual_seed_all(4)  # no device yet: torch queues it; here the generators are host objects
    with use_backend(FakeBackend(2)):
        a = jt.randn(3, device="cuda:1").cpu()
        jt.cuda.manual_seed_all(4)
        assert np.array_equal(jt.randn(3, device="cuda:1").cpu().numpy(), a.numpy())


def test_dropout_on_cuda_repeats_under_the_cuda_seed_eager_and_compiled(fake):
    x = jt.ones(64, device="cuda")
    step = jt.compile(lambda t: jt.nn.functional.dropout(t, 0.5, training=True) * 2)
    jt.cuda.manual_seed(1)
    eager = jt.nn.functional.dropout(x, 0.5, training=True).cpu() * 2
    jt.cuda.manual_seed(1)
    compiled = step(x).cpu()
    assert np.array_equal(eager.numpy(), compiled.numpy())


def test_set_device_and_current_device(fake):
    jt.cuda.set_device(0)
    jt.cuda.set_device("cuda:0")
    jt.cuda.set_device(jt.device("cuda"))
    jt.cuda.set_device(-1)  # a negative index changes nothing, as in torch
    assert jt.cuda.current_device() == 0
    with jt.cuda.device(0):
        assert jt.zeros(1, device="cuda").device == jt.device("cuda:0")


def test_set_device_refuses_another_device_type_as_torch():
    with pytest.raises(ValueError, match="Expected a cuda device, but got: cpu") as ours:
        jt.cuda.set_device("cpu")
    with pytest.raises(ValueError) as theirs:
        torch.cuda.set_device("cpu")
    assert str(ours.value) == str(theirs.value)


def test_set_device_to_a_missing_device_raises():
    with use_backend(FakeBackend(1)):
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            jt.cuda.set_device(3)


@pytest.fixture
def two_devices():
    with use_backend(FakeBackend(2)):
        yield


def test_set_device_places_cuda_tensors_on_the_current_device(two_devices):
    jt.cuda.set_device(1)
    assert jt.cuda.current_device() == 1
    assert jt.zeros(1, device="cuda").device == jt.device("cuda:1")
    assert jt.ones(2).cuda().device == jt.device("cuda:1")
    assert jt.ones(2).to("cuda").device == jt.device("cuda:1")
    assert jt.randn(2, device="cuda").device == jt.device("cuda:1")
    assert (jt.ones(2, device="cuda") + 1).device == jt.device("cuda:1")
    assert jt.zeros(1, device="cuda:0").device == jt.device("cuda:0")  # a named device stays named


def test_cuda_device_context_restores_the_previous_device(two_devices):
    with jt.cuda.device(1):
        assert jt.cuda.current_device() == 1
        with jt.cuda.device(None):  # None: no change, as torch
            assert jt.cuda.current_device() == 1
        assert jt.empty(1, device="cuda").device == jt.device("cuda:1")
    assert jt.cuda.current_device() == 0
    with jt.accelerator.device_index(1):
        assert jt.accelerator.current_device_index() == 1
    assert jt.accelerator.current_device_index() == 0


def test_current_device_is_per_thread_as_cudas(two_devices):
    import threading
    seen = []
    jt.cuda.set_device(1)
    worker = threading.Thread(target=lambda: seen.append(jt.cuda.current_device()))
    worker.start()
    worker.join()
    assert seen == [0] and jt.cuda.current_device() == 1


def test_cuda_manual_seed_seeds_the_current_device_only(two_devices):
    jt.cuda.manual_seed_all(3)
    before = jt.randn(4, device="cuda:0").cpu()
    jt.cuda.manual_seed_all(3)
    jt.cuda.set_device(1)
    jt.cuda.manual_seed(99)
    assert jt.cuda.initial_seed() == 99
    assert np.array_equal(jt.randn(4, device="cuda:0").cpu().numpy(), before.numpy())


def test_compiled_factory_follows_set_device_by_retracing(two_devices):
    make = jt.compile(lambda n: jt.ones(n, device="cuda") * 2)
    assert make(3).device == jt.device("cuda:0")
    jt.cuda.set_device(1)
    out = make(3)
    assert out.device == jt.device("cuda:1")
    assert np.array_equal(out.cpu().numpy(), np.full(3, 2, np.float32))
    assert make.retrace_reason == "the current CUDA device changed from cuda:0 to cuda:1"


def test_leaving_a_backend_restores_the_current_device():
    with use_backend(FakeBackend(2)):
        jt.cuda.set_device(1)
        with use_backend(FakeBackend(1)):
            assert jt.cuda.current_device() == 0
        assert jt.cuda.current_device() == 1
    with use_backend(FakeBackend(1)):
        assert jt.cuda.current_device() == 0


def test_is_bf16_supported_wherever_cuda_is(fake):
    assert jt.cuda.is_bf16_supported() is True
    assert jt.cuda.is_bf16_supported(including_emulation=False) is True
    assert jt.ones(2, dtype=jt.bfloat16, device="cuda").sum().item() == 2


def test_cuda_legacy_types(fake):
    x = jt.cuda.FloatTensor([1.0, 2.0])
    assert x.device.type == "cuda" and x.dtype is jt.float32
    assert isinstance(x, jt.cuda.FloatTensor) and not isinstance(x, jt.FloatTensor)
    assert jt.cuda.LongTensor(2, 3).shape == (2, 3)
    assert x.type() == "jitorch.cuda.FloatTensor"
    assert jt.ones(2).type("torch.cuda.DoubleTensor").device.type == "cuda"
    assert x.type(jt.LongTensor).device.type == "cpu"
