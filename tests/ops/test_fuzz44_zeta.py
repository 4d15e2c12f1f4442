"""special.zeta at a NaN ``x``, found by the fuzzer's namespaced ops in session 44."""

import numpy as np
import pytest
import torch

import jitorch as jt

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_zeta_of_a_nan_x_at_an_integer_q_not_above_0_is_inf_seed_8663583(dtype):
    """Seed 8663583 (``--namespaced --out-views 0.5``): ``T.special.zeta(T.acosh(x0), -1, out=...)`` with acosh NaN
    gave NaN where torch gives inf: Cephes (torch's kernel) asks ``x == 1`` and ``x < 1`` before the poles of an
    integer ``q <= 0``, and a NaN ``x`` passes both. Eager and compiled, against torch, over the branches."""
    x = [NAN, NAN, NAN, NAN, 0.5, 1.0, 2.0, INF, INF, -INF]
    q = [-1.0, 0.0, 2.0, -1.5, -1.0, -1.0, -1.5, -1.0, 2.0, -1.0]
    want = torch.special.zeta(*(torch.tensor(v, dtype=getattr(torch, dtype)) for v in (x, q)))
    assert want[:2].tolist() == [INF, INF]
    args = (jt.tensor(x, dtype=getattr(jt, dtype)), jt.tensor(q, dtype=getattr(jt, dtype)))
    for got in (jt.special.zeta(*args), jt.compile(lambda a, b: jt.special.zeta(a, b) * 1)(*args)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
