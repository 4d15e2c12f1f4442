"""Reductions, sorts and scans given an ``out=`` tensor of another dtype than their result's: torch raises
(each family with its own message) and writes nothing, where jitorch used to cast and write
(`ops.out_dtypes`). Against torch: the same error type and message, the out tensors untouched; and the
dtypes torch accepts still write the same values."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import jitorch as jt


def _calls(T):
    L = T.int64
    return {
        "amax": lambda x, o: T.amax(x, 1, out=o[0]),
        "amin_all": lambda x, o: T.amin(x, out=o[0]),
        "max.dim values": lambda x, o: T.max(x, 1, out=(o[0], T.empty(3, dtype=L))),
        "min.dim indices": lambda x, o: T.min(x, 1, out=(T.empty(3, dtype=x.dtype), o[0])),
        "argmax": lambda x, o: T.argmax(x, 1, out=o[0]),
        "norm": lambda x, o: T.norm(x, 2, 1, out=o[0]),
        "vector_norm": lambda x, o: T.linalg.vector_norm(x, 2, 1, out=o[0]),
        "linalg.norm": lambda x, o: T.linalg.norm(x, dim=1, out=o[0]),
        "matrix_norm": lambda x, o: T.linalg.matrix_norm(x.reshape(3, 2, 2), out=o[0]),
        "all": lambda x, o: T.all(x, 1, out=o[0]),
        "any_all": lambda x, o: T.any(x, out=o[0]),
        "logcumsumexp": lambda x, o: T.logcumsumexp(x, 1, out=o[1]),
        "cummin indices": lambda x, o: T.cummin(x, 1, out=(T.empty(3, 4, dtype=x.dtype), o[1])),
        "quantile": lambda x, o: T.quantile(x, 0.5, 1, out=o[0]),
        "median.dim values": lambda x, o: T.median(x, 1, out=(o[0], T.empty(3, dtype=L))),
        "nanmedian.dim indices": lambda x, o: T.nanmedian(x, 1, out=(T.empty(3, dtype=x.dtype), o[0])),
        "mode": lambda x, o: T.mode(x, 1, out=(o[0], T.empty(3, dtype=L))),
        "kthvalue": lambda x, o: T.kthvalue(x, 2, 1, out=(o[0], T.empty(3, dtype=L))),
        "aminmax": lambda x, o: T.aminmax(x, dim=1, out=(o[0], T.empty(3, dtype=x.dtype))),
        "topk": lambda x, o: T.topk(x, 2, 1, out=(o[2], T.empty(3, 2, dtype=L))),
        "sort indices": lambda x, o: T.sort(x, 1, out=(T.empty(3, 4, dtype=x.dtype), o[1])),
        "msort": lambda x, o: T.msort(x, out=o[1]),
    }


def _run(T, name, x_dtype, out_dtype):
    x = T.tensor(np.arange(12.0).reshape(3, 4) / 3).to(getattr(T, x_dtype))
    outs = [T.full(s, 7).to(getattr(T, out_dtype)) for s in ((3,), (3, 4), (3, 2))]
    try:
        _calls(T)[name](x, outs)
        error = None
    except Exception as e:  # noqa: BLE001  (compared below)
        error = (type(e).__name__, re.sub(r"(?<!ji)torch\.", "jitorch.", str(e)))
    return error, [o.float().numpy() for o in outs]


@pytest.mark.parametrize("name", list(_calls(torch)))
@pytest.mark.parametrize("x_dtype", ["float32", "float16"])
@pytest.mark.parametrize("out_dtype", ["float32", "float64", "float16", "int64", "bool"])
def test_reduction_out_of_another_dtype_raises_torchs_error_before_writing(name, x_dtype, out_dtype):
    t_error, t_outs = _run(torch, name, x_dtype, out_dtype)
    j_error, j_outs = _run(jt, name, x_dtype, out_dtype)
    assert j_error == t_error
    for t, j in zip(t_outs, j_outs):
        np.testing.assert_array_equal(j, t)  # untouched where torch raised; the same values where it wrote
