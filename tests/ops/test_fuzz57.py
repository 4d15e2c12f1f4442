"""Session 57's fuzz findings in the op layer (``python -m tests.fuzz`` with the flags each test names)."""

import warnings

import pytest

import torch

import jitorch


@pytest.mark.parametrize("dtype", ["bool", "int32", "uint8", "float32"])
def test_nan_to_num_in_place_of_an_expanded_integer_tensor_is_torchs_unchecked_copy_seed_5701641(dtype):
    """Fuzz seed 5701641 of ``--edges 0.4 --out-views 0.4 --regions 0.2``: ``x0.nan_to_num_(0.5, 1.0)`` of a bool
    input laid out expanded raised the internal-overlap error; torch's nan_to_num_ of integers or bools copies self
    into itself, which checks no overlap: the values stay, the version counts the write. A floating one is refused
    by both, eager and compiled."""
    def write(x):
        x.nan_to_num_(0.5, 1.0)
        return x

    outcomes = []
    for T, fn in ((torch, write), (jitorch, write), (jitorch, jitorch.compile(write))):
        x = T.tensor([1, 0, 1], dtype=getattr(T, dtype))[:1].expand(2, 3)
        before = x._version
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (the compiled call's note that it runs the write eagerly)
                result = fn(x)
        except RuntimeError as e:
            assert "more than one element of the written-to tensor" in str(e)
            outcomes.append("refused")
            continue
        outcomes.append((result.tolist(), x._version - before))
    want = "refused" if dtype == "float32" else ([[1, 1, 1], [1, 1, 1]], 1)
    assert outcomes == [want] * 3
