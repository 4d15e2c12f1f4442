"""A compiled function that writes into a tensor over read-only memory: eager raises NumPy's ValueError; the
compiled call wrote through it (into an immutable ``bytes`` object's memory, from ``np.frombuffer``) and returned
values. It now runs eagerly (`compile._inputs_alias`), raising eager's error before writing."""

import numpy as np
import pytest

import jitorch
from jitorch.ops import creation


def _writer():
    @jitorch.compile
    def step(x, y):
        x.add_(1)
        return x * y
    return step


def test_a_compiled_write_into_a_read_only_input_raises_as_eager(monkeypatch):
    """Found checking from_numpy of a read-only array (session 44 trust, item 6): ``x.add_(1)`` compiled, on
    ``from_numpy(np.frombuffer(bytes(32)))``, returned 2s and changed the bytes."""
    monkeypatch.setattr(creation, "_NOT_WRITABLE", [True])
    data = bytes(32)
    x = jitorch.from_numpy(np.frombuffer(data, dtype=np.float64))
    y = jitorch.ones(4, dtype=jitorch.float64)
    step = _writer()
    for _ in range(3):  # the tracing call, then the compiled entry's calls
        with pytest.raises(ValueError, match="read-only"):
            step(x, y)
    assert data == bytes(32)
    writable = jitorch.zeros(4, dtype=jitorch.float64)
    assert step(writable, y).tolist() == [1.0] * 4 and writable.tolist() == [1.0] * 4


def test_a_compiled_write_into_a_read_only_captured_tensor_raises_as_eager(monkeypatch):
    monkeypatch.setattr(creation, "_NOT_WRITABLE", [True])
    a = np.zeros(4)
    a.flags.writeable = False
    state = jitorch.from_numpy(a)

    @jitorch.compile
    def bump(y):
        state.add_(y)
        return state.sum()

    for _ in range(3):
        with pytest.raises(ValueError, match="read-only"):
            bump(jitorch.ones(4, dtype=jitorch.float64))
    assert not a.any()
