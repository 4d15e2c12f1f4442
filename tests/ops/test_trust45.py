"""Session 45's trust findings among the ops: ``diag`` into an ``out=`` tensor raised other words than torch's."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import torch

import jitorch

SHAPES = ((3,), (3, 3), (2, 3, 3), ())
OUT_SHAPES = ((3, 3), (3,), (0,))
DTYPES = ("float32", "float64", "int64", "float16")


def _diag(T, shape, x_dtype, out_dtype, out_shape, compiled):
    """(outcome, out's values after the call): ("ran", dtype name) or (exception type, message)."""
    x = T.tensor(np.arange(1, 1 + int(np.prod(shape, dtype=np.int64)), dtype=np.float64).reshape(shape))
    x = x.to(getattr(T, x_dtype))
    out = T.zeros(out_shape, dtype=getattr(T, out_dtype))

    def fn(x, out):
        return T.diag(x, out=out)
    try:
        (jitorch.compile(fn) if compiled else fn)(x, out)
    except Exception as e:  # (torch's type and message are the oracle)
        return (type(e).__name__, str(e)), out.double().numpy()
    return ("ran", str(out.dtype).split(".")[-1]), out.double().numpy()


def test_diag_into_an_out_of_another_dtype_or_of_a_3d_input_raises_torchs_words_before_writing():
    """torch's diag(out=) refuses an out tensor of another dtype than the input's ("Expected out tensor to have dtype
    float, but got long int instead"; jitorch cast into it, or raised "result type Float can't be cast to the desired
    output type Long") and names a 3-d input without the ``diag(): `` its plain call's words start with (jitorch kept
    the prefix), before anything is written; eagerly and compiled, into outs of the result's shape and of others
    (session 44's open findings)."""
    for case in itertools.product(SHAPES, DTYPES, DTYPES, OUT_SHAPES):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the resize warning of an out of another shape)
            want, want_values = _diag(torch, *case, False)
            for compiled in (False, True):
                got, got_values = _diag(jitorch, *case, compiled)
                assert got == want, (case, compiled)
                if want[0] == "ran" or got_values.shape == want_values.shape:  # (torch resized out before raising)
                    np.testing.assert_array_equal(got_values, want_values, err_msg=str((case, compiled)))
                else:
                    assert not got_values.any(), (case, compiled)


def _msort_into(T, case, compiled):
    x = T.tensor([[3.0, 1.0], [2.0, 0.0]]) if case != "0-d" else T.tensor(1.5)
    calls = {"0-d": lambda x: T.msort(x, out=x), "itself": lambda x: T.msort(x, out=x),
             "its first row": lambda x: T.msort(x, out=x[0]),
             "another column": lambda x: T.msort(x[:, 0], out=x[:, 1]),
             "an overlapping slice": lambda x: T.msort(x.reshape(-1)[:3], out=x.reshape(-1)[1:])}

    def fn(x):
        calls[case](x)
        return x
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the resize warning)
            return (jitorch.compile(fn) if compiled else fn)(x).tolist()
    except Exception as e:
        return type(e).__name__, str(e)


def test_msort_into_an_out_that_shares_its_inputs_memory_is_torchs_seed_8492305():
    """Main fuzz seed 8492305 (``--out-views 0.5 --chains 0.3``): ``T.msort(x2, out=x2)`` raised TypeError ('NoneType'
    object is not callable): the overlap check asked the composite for its meta rule to resize out as sort's kernel
    does. msort now says where its out is written; each overlap is torch's result or error, eagerly and compiled."""
    for case in ("0-d", "itself", "its first row", "another column", "an overlapping slice"):
        want = _msort_into(torch, case, False)
        for compiled in (False, True):
            assert _msort_into(jitorch, case, compiled) == want, (case, compiled)
