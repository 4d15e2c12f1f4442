"""Session 57's fuzz findings in the op layer (``python -m tests.fuzz`` with the flags each test names)."""

import warnings

import numpy as np
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


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int64"])
def test_histogram_of_an_empty_half_type_input_runs_no_kernel_as_torchs_seed_5730044(dtype):
    """Fuzz seed 5730044 of ``--export --edges 0.4``: ``v2.histogram(1, weight=v1)`` of an empty bfloat16 ``v2``
    raised '"histogramdd" not implemented for 'BFloat16''; torch dispatches no kernel for an empty half-type input
    (its bins over [0, 1], no counts), and refuses an integer one as a non-empty half-type one."""
    outcomes = []
    for T in (torch, jitorch):
        x = T.zeros(0, dtype=getattr(T, dtype))
        try:
            hist, edges = T.histogram(x, 3, weight=x)
            outcomes.append((hist.tolist(), edges.double().tolist()))
        except NotImplementedError as e:
            outcomes.append(str(e))
        if dtype != "int64":
            with pytest.raises(NotImplementedError, match="not implemented for"):
                T.histogram(T.ones(2, dtype=x.dtype), 3)
    assert outcomes[0] == outcomes[1]
    assert isinstance(outcomes[0], str) == (dtype == "int64")


@pytest.mark.parametrize("name", ["bartlett_window", "hann_window", "kaiser_window"])
def test_window_of_a_half_type_under_autocast_of_the_other_is_not_autocast_seed_5740765(name):
    """Fuzz seed 5740765 of ``--edges 0.4 --out-views 0.4 --regions 0.2 --export``: ``T.bartlett_window(2,
    dtype=T.float16)`` under bfloat16 autocast raised cat's "Unexpected floating ScalarType in
    at::autocast::prioritize" (jitorch's composite joins two halves); torch's window kernels call native functions,
    which autocast does not see. The window is float16, torch's values within an ulp."""
    got = []
    for T in (torch, jitorch):
        with T.autocast("cpu", dtype=T.bfloat16):
            w = getattr(T, name)(5, dtype=T.float16)
        assert str(w.dtype).endswith("float16") and not str(w.dtype).endswith("bfloat16")
        got.append(w.double().numpy())
    np.testing.assert_allclose(got[1], got[0], atol=2e-3)
