"""tensordot's and inner's ``out=`` forms are the plain call's result copied into out: autocast applies, and out
must have the result's dtype, as torch's (session 56's fuzz runs: a value where torch raises)."""

import warnings

import numpy as np
import pytest

import torch

import jitorch

MESSAGE = "tensordot: Expected the output tensor to have dtype {}, but got an output tensor with dtype {}"
CALLS = {
    "tensordot": lambda T, a, b, o: T.tensordot(a, b, dims=1, out=o),
    "inner": lambda T, a, b, o: T.inner(a, b.mT, out=o),
}


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("autocast, out_dtype, error", [
    (True, "float32", ("BFloat16", "Float")), (True, "bfloat16", None),
    (False, "float64", ("Float", "Double")), (False, "float32", None)])
def test_tensordot_and_inner_into_out_under_autocast_raise_torchs_dtype_error(name, autocast, out_dtype, error):
    """Under bfloat16 autocast torch's ``tensordot(a, b, out=o)`` computes the autocast (bfloat16) product and
    refuses a float32 ``o`` with torch's RuntimeError; jitorch ran the product without autocast and wrote it. Out of
    autocast an out of another dtype is refused likewise, before any write; one of the result's dtype holds it."""
    values = np.arange(6.0).reshape(2, 3) / 4
    results = []
    for T in (torch, jitorch):
        a, b = T.tensor(values, dtype=T.float32), T.tensor(values.T + 1, dtype=T.float32)
        out = T.full((2, 2), 7.0, dtype=getattr(T, out_dtype))
        with T.autocast("cpu", dtype=T.bfloat16, enabled=autocast):
            if error is not None:
                with pytest.raises(RuntimeError, match=MESSAGE.format(*error)):
                    CALLS[name](T, a, b, out)
                assert out.double().tolist() == [[7.0, 7.0], [7.0, 7.0]]
                continue
            CALLS[name](T, a, b, out)
        results.append((str(out.dtype).split(".")[-1], out.double().tolist()))
    assert results[:1] == results[1:]


def test_tensordot_of_one_element_is_a_dot_autocast_leaves_in_float32():
    """torch's tensordot of a one-element result is a dot, which CPU autocast does not cast: float32 under bfloat16
    autocast where a larger product is bfloat16 (jitorch's mm of one element was cast), and ``out=`` takes float32
    there."""
    for shapes, dims, dtype in ((((4,), (4,)), 1, "float32"), (((2, 3), (2, 3)), 2, "float32"),
                                (((1, 3), (3, 1)), 1, "float32"), (((1, 3), (3, 2)), 1, "bfloat16")):
        got = []
        for T in (torch, jitorch):
            a, b = (T.arange(float(np.prod(s))).reshape(s) / 2 for s in shapes)
            with T.autocast("cpu", dtype=T.bfloat16):
                r = T.tensordot(a, b, dims=dims)
                if r.numel() == 1:
                    out = T.zeros(r.shape)
                    T.tensordot(a, b, dims=dims, out=out)
                    assert out.tolist() == r.tolist()
            got.append((str(r.dtype).split(".")[-1], r.double().tolist()))
        assert got[0] == got[1] and got[0][0] == dtype, (shapes, got)


def test_inner_of_a_0d_operand_into_out_still_casts_as_torchs_mul():
    """inner's out= of a 0-d operand is torch's mul out=, which casts into an out of another dtype."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for T in (torch, jitorch):
            out = T.zeros(3, dtype=T.float64)
            with T.autocast("cpu", dtype=T.bfloat16):
                T.inner(T.tensor([1.0, 2.0, 3.0]), T.tensor(2.0), out=out)
            assert out.tolist() == [2.0, 4.0, 6.0]
