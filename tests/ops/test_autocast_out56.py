"""Autocast leaves a composite op's ``out=`` form alone, as torch's runs the ``out=`` forms of its ops."""

import pytest

import torch

import jitorch


@pytest.mark.parametrize("stacker", ["hstack", "vstack", "column_stack"])
@pytest.mark.parametrize("out_dtype", ["float64", "bfloat16"])
def test_stacker_into_out_under_float16_autocast_joins_bfloat16_and_float64_seed_5601129(stacker, out_dtype):
    """Fuzz seed 5601129 of ``--edges 0.4 --out-views 0.4 --regions 0.2``: ``T.hstack([x0, x1], out=v2)`` of a
    bfloat16 and a float64 input under ``autocast(dtype=float16)`` raised cat's "Unexpected floating ScalarType in
    at::autocast::prioritize" (the composite's functional cat was autocast); torch's hstack_out runs cat_out,
    which autocast leaves alone, and casts into out."""
    results = []
    for T in (torch, jitorch):
        a = T.tensor([[1.5, 2.0], [3.0, 4.0]], dtype=T.bfloat16)
        b = T.tensor([[1.0, -2.0], [3.25, 4.0]], dtype=T.float64)
        shape = tuple(getattr(torch, stacker)([torch.zeros(2, 2), torch.zeros(2, 2)]).shape)
        out = T.zeros(shape, dtype=getattr(T, out_dtype))
        with T.autocast("cpu", dtype=T.float16):
            getattr(T, stacker)([a, b], out=out)
            with pytest.raises(RuntimeError, match="prioritize"):  # (the functional form is autocast: cat's error)
                getattr(T, stacker)([a, b])
        assert str(out.dtype).endswith(out_dtype)
        results.append(out.double().tolist())
    assert results[0] == results[1]


def test_linalg_inv_into_out_under_autocast_refuses_a_float16_matrix_as_torch():
    """The same rule for another composite: inv's float32 autocast policy no longer casts a float16 matrix of an
    ``out=`` call, which torch refuses (its out= form is not autocast)."""
    for T in (torch, jitorch):
        m = T.eye(2, dtype=T.float16) * 4
        with T.autocast("cpu", dtype=T.bfloat16), pytest.raises(RuntimeError, match="Low precision dtypes"):
            T.linalg.inv(m, out=T.zeros(2, 2))
