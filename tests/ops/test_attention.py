"""`ops.attention.attention_fast`: eager attention without history, bit for bit the composed ops' result."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.nn import functional as F
from jitorch.ops import registry
from jitorch.ops.attention import attention_fast


class _PassingHook:
    """A dispatch hook that takes no call: with it installed, ``F.scaled_dot_product_attention`` composes."""
    passes_on = True

    def call(self, op, args, out):
        return NotImplemented


def _composed(*args, **kwargs):
    registry.DISPATCH_HOOKS.append(_PassingHook())
    try:
        return F.scaled_dot_product_attention(*args, **kwargs)
    finally:
        registry.DISPATCH_HOOKS.pop()


@pytest.mark.parametrize("shapes", [((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6)), ((1, 4, 9, 8),) * 3, ((6, 4),) * 3])
@pytest.mark.parametrize("is_causal", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_composed_result_bit_for_bit_and_torchs_values(shapes, is_causal, dtype):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    q, k, v = map(jt.from_numpy, arrays)
    fast = attention_fast(q, k, v, is_causal, 0.3)
    composed = _composed(q, k, v, is_causal=is_causal, scale=0.3)
    assert fast is not None and fast.stride() == composed.stride() and fast.dtype is composed.dtype
    assert np.array_equal(fast.numpy(), composed.numpy())
    want = torch.nn.functional.scaled_dot_product_attention(*map(torch.from_numpy, arrays), is_causal=is_causal,
                                                            scale=0.3)
    np.testing.assert_allclose(fast.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_f_takes_it_under_no_grad_and_the_fused_op_in_grad_mode():
    q = jt.randn(1, 2, 4, 8, requires_grad=True)
    with jt.no_grad():
        assert F.scaled_dot_product_attention(q, q, q, is_causal=True).grad_fn is None
    assert attention_fast(q, q, q, True, 0.5) is None
    assert F.scaled_dot_product_attention(q, q, q, is_causal=True).grad_fn.name() == "AttentionBackward0"


@pytest.mark.parametrize("args", [
    lambda: (jt.ones(2, 4), jt.ones(3, 5), jt.ones(3, 4)),                    # head dims disagree
    lambda: (jt.ones(2, 4), jt.ones(3, 4), jt.ones(2, 4)),                    # keys and values disagree
    lambda: (jt.ones(2, 4), jt.ones(3, 4, dtype=jt.float64), jt.ones(3, 4)),  # dtypes disagree
    lambda: (jt.ones(2, 2, 4), jt.ones(1, 3, 4), jt.ones(1, 3, 4)),           # batch dims that broadcast
    lambda: (jt.ones(0, 4), jt.ones(3, 4), jt.ones(3, 4)),
    lambda: (jt.ones(2, 4, dtype=jt.float16),) * 3,
])
def test_other_calls_are_left_to_the_composition(args):
    assert attention_fast(*args(), False, 0.5) is None


def test_the_compositions_errors_stay_torchs():
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(jt.ones(2, 4), jt.ones(3, 5), jt.ones(3, 4))
