"""Session 51's adversarial cases for session 50's split full reductions (`codegen.split_combine`): values that the
partial results and their combine must carry across the parts (a NaN or a tie in the last part, sums of -0.0,
integer wrap-around, overflow of a narrow result), compiled at one and two threads against eager jitorch and torch;
and the seeds of the chains of dependent reductions (`tests.fuzz.reductions`) that failed to compile."""

import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
from tests.fuzz.reductions import check_chain, generate_chain

N = (1 << 18) * 3 + 7  # (split in parts, the last one shorter)


def _cases():
    nan_last = np.zeros(N, np.float32)
    nan_last[N - 3] = np.nan
    tie = np.zeros(N, np.float32)
    tie[[5, N - 2]] = 1.0
    return [("amax, NaN in the last part", nan_last, lambda t: t.amax()),
            ("argmax, a tie across parts", tie, lambda t: t.argmax()),
            ("sum of -0.0", np.full(N, -0.0, np.float32), lambda t: t.sum()),
            ("float16 sum past its range", np.ones(N, np.float16), lambda t: t.sum()),
            ("int32 product wrapping", np.full(N, 3, np.int32), lambda t: t.prod()),
            ("uint8 sum", np.full(N, 200, np.uint8), lambda t: t.sum())]


@pytest.mark.parametrize("threads", [1, 2])
def test_split_full_reductions_carry_extremes_across_their_parts(threads):
    before = jt.get_num_threads()
    jt.set_num_threads(threads)
    try:
        for name, values, fn in _cases():
            want = fn(torch.from_numpy(values.copy()))
            for got in (fn(jt.tensor(values)), jt.compile(fn)(jt.tensor(values))):
                assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], name
                np.testing.assert_array_equal(got.double().numpy(), want.double().numpy(), err_msg=name)
                assert np.signbit(got.double().numpy()) == np.signbit(want.double().numpy()), name
    finally:
        jt.set_num_threads(before)


@pytest.mark.parametrize("seed", [185, 188])
def test_chain_of_reductions_over_a_dim_of_one_element_compiles_seeds(seed):
    """`tests.fuzz.reductions` seeds 185 and 188 (three reductions deep over the (1, 33) input's dim 0, float32 and
    float64): the compiled call raised AttributeError ``'Reduction' object has no attribute 'emit'``
    (tests/codegen/test_trust51.py has the cause)."""
    case = generate_chain(seed)
    assert case.shape[case.dim] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert check_chain(case) == []
