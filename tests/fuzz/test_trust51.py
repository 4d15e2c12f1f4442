"""Session 51's adversarial cases for session 50's split full reductions (`codegen.split_combine`): values that the
partial results and their combine must carry across the parts (a NaN or a tie in the last part, sums of -0.0,
integer wrap-around, overflow of a narrow result), compiled at one and two threads against eager jitorch and torch.
The targeted campaigns (reductions, convolutions reading windows in place, recurrences, dependent row reductions)
found no wrong value; these are the cheap cases kept."""

import numpy as np
import pytest
import torch

import jitorch as jt

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
