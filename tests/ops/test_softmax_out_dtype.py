"""softmax and log_softmax into an ``out=`` tensor of another dtype than the result's (the input's, or ``dtype=``'s):
torch refuses it ("Expected out tensor to have dtype float, but got double instead"), before its kernel refuses an
integer input, and writes nothing; jitorch cast the result into a float64 or float16 out (left open by session 44's
tangents helper, `ops.out_dtypes`)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import jitorch

INPUTS = ("float32", "float64", "bfloat16", "int64")
OUTS = ("float32", "float64", "float16", "int64", "bool")


def _run(T, name, x_dtype, out_dtype, dtype, dim):
    """(outcome, out's values after the call): ("ran", dtype name) or (exception type, first line)."""
    x = T.tensor(np.arange(12, dtype=np.float64).reshape(3, 4) / 7).to(getattr(T, x_dtype))
    out = T.zeros(3, 4, dtype=getattr(T, out_dtype))
    kwargs = {} if dtype is None else {"dtype": getattr(T, dtype)}
    try:
        getattr(T, name)(x, dim, out=out, **kwargs)
    except Exception as e:  # (torch's type and message are the oracle)
        return (type(e).__name__, str(e).split("\n")[0]), out.double().numpy()
    return ("ran", str(out.dtype).split(".")[-1]), out.double().numpy()


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_into_an_out_of_another_dtype_raises_torchs_error_before_writing(name):
    for x_dtype, out_dtype, dtype, dim in itertools.product(INPUTS, OUTS, (None, "float64"), (-1, 0)):
        (want, want_values), (got, got_values) = (_run(T, name, x_dtype, out_dtype, dtype, dim)
                                                  for T in (torch, jitorch))
        case = (name, x_dtype, out_dtype, dtype, dim)
        assert got == want, case
        if got[0] == "ran":
            np.testing.assert_allclose(got_values, want_values, rtol=1e-2, atol=1e-2, err_msg=str(case))
        else:
            assert not got_values.any(), case  # nothing written
