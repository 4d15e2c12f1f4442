"""jitorch/random.py: the CPU generator's state as a uint8 tensor, and fork_rng over the CPU and the
(emulated) CUDA devices' generators."""

import pytest
import torch

import jitorch as jt


def test_rng_state_round_trips_draws_and_the_seed():
    jt.manual_seed(5)
    state = jt.get_rng_state()
    first = jt.rand(4).tolist()
    jt.manual_seed(7)
    jt.set_rng_state(state)
    assert jt.rand(4).tolist() == first and jt.initial_seed() == 5
    assert state.dtype is jt.uint8 and state.ndim == 1
    assert jt.get_rng_state() is not state


@pytest.mark.parametrize("bad, error, message", [
    ("list", TypeError, "expected a torch.ByteTensor, but got list"),
    ("float", TypeError, "RNG state must be a torch.ByteTensor"),
    ("short", RuntimeError, "Expected a CPUGeneratorImplState of size")])
def test_set_rng_state_refuses_what_torch_refuses(bad, error, message):
    for lib in (jt, torch):
        arg = {"list": [1, 2], "float": lib.ones(3), "short": lib.zeros(3, dtype=lib.uint8)}[bad]
        with pytest.raises(error, match=message):
            lib.set_rng_state(arg)


def test_fork_rng_restores_the_cpu_and_device_generators_and_their_seed():
    with jt.cuda.emulated():
        jt.manual_seed(3)
        expected = (jt.rand(3).tolist(), jt.rand(3, device="cuda").tolist())
        jt.manual_seed(3)
        with jt.random.fork_rng():
            jt.manual_seed(11)
            jt.rand(5), jt.rand(5, device="cuda")
        assert (jt.rand(3).tolist(), jt.rand(3, device="cuda").tolist()) == expected
        assert jt.initial_seed() == 3


def test_fork_rng_disabled_leaves_draws_advancing():
    jt.manual_seed(3)
    with jt.random.fork_rng(enabled=False):
        first = jt.rand(2).tolist()
    assert jt.rand(2).tolist() != first
