"""Session 56's triage of the fuzz failures found at the end of session 55 (``--edges 0.4 --out-views 0.4
--regions 0.2``): those that were the oracle's or the generator's, not jitorch's."""

import warnings

import numpy as np
import pytest

import torch

import jitorch
from tests.fuzz.generator import generate
from tests.fuzz.oracle import check

EAGER_MODES = ("torch", "eager")


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _session55_program(seed):
    return generate(seed, 14, out_views=0.4, regions=0.2, edges=0.4)


def test_triu_out_of_batches_that_do_not_flatten_is_written_only_into_a_compact_buffer_seed_5603034():
    """Fuzz seed 5603034: ``T.triu(v0, 1, out=v0)`` with ``v0`` a gather of a channels-last input (strides
    (18, 1, 6, 3) of shape (4, 3, 3, 2)); torch 2.13 steps the batches by ``out.stride(-3)`` alone and left 3.0
    where the triangle holds 0. jitorch writes each matrix's triangle (torch's into a compact out); such programs
    now call triu/tril ``out=`` of four dims into a new compact buffer only (`generator.TORCH_WRONG_INTO_BATCHES`)."""
    values = np.arange(72.0).reshape(4, 3, 3, 2)
    want = torch.triu(torch.tensor(values), 1)
    for T in (jitorch, torch):
        out = T.tensor(values).contiguous(memory_format=T.channels_last)
        assert out.stride() == (18, 1, 6, 3)
        T.triu(T.tensor(values), 1, out=out)
        if T is jitorch:
            np.testing.assert_array_equal(out.numpy(), want.numpy())
        else:  # (torch's own error, which the fuzzer no longer meets)
            assert not torch.equal(out, want)
    program, g = _session55_program(5603034)
    assert "index_tensor" in g.accepted and "triu(out)" not in g.accepted
    assert check(program, EAGER_MODES).mismatches == []
