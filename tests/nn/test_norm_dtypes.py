"""Normalisations of float16 and bfloat16 input (jitorch/nn/functional.py): computed in float32 and
returned in the input's dtype, as torch's, also with float32 parameters, which they get under autocast
(they gave float32 there: a model's norm layers left autocast's dtype, unlike torch's)."""

import numpy as np
import pytest
import torch

import jitorch as jt


def norms(m, x, w, b):
    F = m.nn.functional
    stats = (m.zeros(4), m.ones(4))
    return {"layer_norm": F.layer_norm(x.transpose(1, 2), (4,), w, b),
            "group_norm": F.group_norm(x, 2, w, b),
            "batch_norm train": F.batch_norm(x, *stats, w, b, training=True),
            "batch_norm eval": F.batch_norm(x, *stats, w, b, training=False),
            "instance_norm": F.instance_norm(x, weight=w, bias=b)}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_norms_of_half_input_with_float32_parameters_keep_the_input_dtype(dtype):
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((2, 4, 3)), rng.standard_normal(4), rng.standard_normal(4)
    results, grads = [], []
    for m in (torch, jt):
        xt = m.tensor(x.astype(np.float32)).to(getattr(m, dtype)).requires_grad_()
        wt, bt = (m.tensor(v.astype(np.float32), requires_grad=True) for v in (w, b))
        out = norms(m, xt, wt, bt)
        sum(o.float().sum() * (i + 1) for i, o in enumerate(out.values())).backward()
        results.append(out)
        grads.append((xt.grad, wt.grad))
    for name, want in results[0].items():
        got = results[1][name]
        assert str(got.dtype)[8:] == str(want.dtype)[6:] == dtype, name
        np.testing.assert_array_equal(got.detach().float().numpy(), want.detach().float().numpy(), err_msg=name)
    for got, want in zip(grads[1], grads[0]):
        assert str(got.dtype)[8:] == str(want.dtype)[6:]
        np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=2e-2, atol=2e-2)


def test_norm_layers_under_autocast_give_torchs_dtypes():
    dtypes = []
    for m in (torch, jt):
        m.manual_seed(0)
        layers = m.nn.Sequential(m.nn.Conv2d(2, 4, 3), m.nn.BatchNorm2d(4), m.nn.GroupNorm(2, 4), m.nn.ReLU())
        with m.autocast("cpu"):
            dtypes.append(str(layers(m.randn(1, 2, 5, 5)).dtype).split(".")[1])
    assert dtypes == ["bfloat16", "bfloat16"]
