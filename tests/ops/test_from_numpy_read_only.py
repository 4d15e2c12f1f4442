"""from_numpy (and as_tensor, asarray) of a non-writeable NumPy array: torch warns once a process and shares the
memory; jitorch warns alike, shares it too, and keeps it read-only (a write raises NumPy's ValueError where torch
writes through, which for read-only mapped memory is a crash)."""

import warnings

import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops import creation

MESSAGE = "The given NumPy array is not writable, and PyTorch does not support non-writable tensors"


def _read_only():
    a = np.arange(4.0)
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("name", ["from_numpy", "as_tensor", "asarray", "tensor"])
def test_wrapping_a_read_only_array_warns_as_torch_and_shares_its_memory(name, monkeypatch):
    """torch's UserWarning (TORCH_WARN_ONCE) where torch shares the memory (from_numpy, as_tensor, asarray), none
    where it copies (tensor)."""
    monkeypatch.setattr(creation, "_NOT_WRITABLE", [False])
    a = _read_only()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        j = getattr(jitorch, name)(a)
    want_warns = name != "tensor"
    assert [str(w.message).startswith(MESSAGE) and w.category is UserWarning for w in got] == [True] * want_warns
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = getattr(torch, name)(_read_only())
    assert np.shares_memory(a, j.numpy()) == want_warns
    np.testing.assert_array_equal(j.numpy(), t.numpy())


def test_the_read_only_warning_is_given_once_a_process(monkeypatch):
    monkeypatch.setattr(creation, "_NOT_WRITABLE", [False])
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        jitorch.from_numpy(_read_only())
        jitorch.from_numpy(_read_only())
    assert len(got) == 1


def test_a_write_into_a_read_only_array_raises_and_writes_nothing(monkeypatch):
    """jitorch keeps the array's flag: an in-place op raises NumPy's ValueError and the memory keeps its values
    (torch's write goes through: undefined behaviour by its own warning)."""
    monkeypatch.setattr(creation, "_NOT_WRITABLE", [True])
    a = _read_only()
    x = jitorch.from_numpy(a)
    with pytest.raises(ValueError, match="read-only"):
        x.add_(1)
    with pytest.raises(ValueError, match="read-only"):
        x[0] = 5.0
    np.testing.assert_array_equal(a, np.arange(4.0))
