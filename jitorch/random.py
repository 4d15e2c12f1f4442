"""``torch.random``'s path: seeding the default generator and every device's, its state as a uint8 tensor,
and ``fork_rng``."""

from __future__ import annotations

import contextlib

from jitorch.ops import random_ops as _random
from jitorch.ops.random_ops import default_generator, initial_seed, manual_seed, seed
from jitorch.runtime import dtypes as _dt
from jitorch.runtime.device import current_cuda_index, device as _device
from jitorch.tensor import Tensor

__all__ = ["default_generator", "initial_seed", "manual_seed", "seed", "get_rng_state", "set_rng_state",
           "fork_rng"]


def get_rng_state():
    """The CPU default generator's state, as a uint8 tensor (a copy: later draws leave it unchanged)."""
    return Tensor._from_array(_random.state_bytes(default_generator), _dt.uint8)


def set_rng_state(new_state):
    """Put the CPU default generator back in a state ``get_rng_state`` returned."""
    if not isinstance(new_state, Tensor):
        raise TypeError(f"expected a torch.ByteTensor, but got {type(new_state).__name__}")
    if new_state.dtype is not _dt.uint8:
        raise TypeError("RNG state must be a torch.ByteTensor")
    if new_state.numel() != _random.STATE_SIZE:
        raise RuntimeError(f"Expected a CPUGeneratorImplState of size {_random.STATE_SIZE} but found the input RNG "
                           f"state size to be {new_state.numel()}")
    _random.restore_state_bytes(default_generator, new_state.cpu().numpy().reshape(-1))


def _index(d):
    if isinstance(d, int):
        return d
    index = _device(d).index
    return current_cuda_index() if index is None else index


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices", device_type="cuda"):
    """Random draws and seeding inside leave the generators as they were: the CPU default generator, and the
    CUDA devices' (those in ``devices``; by default every one made so far, and the seed the ones made later
    start from, so that a ``manual_seed`` inside does not leak out either)."""
    if not enabled:
        yield
        return
    if device_type not in ("cuda", None):
        raise RuntimeError(f"fork_rng: jitorch has no {device_type} devices")
    cpu = _random.state_bytes(default_generator)
    lazy_seed = list(_random._device_seed)
    indices = list(_random._device_generators) if devices is None else [_index(d) for d in devices]
    saved = {i: _random.state_bytes(_random.device_generator(_device("cuda", i))) for i in indices}
    made = set(_random._device_generators)
    try:
        yield
    finally:
        _random.restore_state_bytes(default_generator, cpu)
        if devices is None:
            _random._device_seed[:] = lazy_seed
            for i in set(_random._device_generators) - made:  # made inside: made again from the restored seed
                del _random._device_generators[i]
        for i, state in saved.items():
            _random.restore_state_bytes(_random._device_generators.get(i) or _random.device_generator(
                _device("cuda", i)), state)
