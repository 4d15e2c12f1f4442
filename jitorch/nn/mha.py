"""The shape checks and mask handling of ``F.multi_head_attention_forward`` (torch's ``_mha_shape_check``,
``_canonical_mask``, static keys and values, the extra key column), shared by the functional form and
``nn.MultiheadAttention``'s layout changes."""

from __future__ import annotations

import math

from ..ops.registry import FUNCTIONS as _fn


def shape_check(query, key, value, key_padding_mask, attn_mask, num_heads):
    """Whether the inputs are batched (3-D) or not (2-D); AssertionError, as torch, for other dims."""
    if query.dim() not in (2, 3):
        raise AssertionError(
            f"query should be unbatched 2D or batched 3D tensor but received {query.dim()}-D query tensor")
    batched = query.dim() == 3
    which = "batched (3-D)" if batched else "unbatched (2-D)"
    if key.dim() != query.dim() or value.dim() != query.dim():
        raise AssertionError(f"For {which} `query`, expected `key` and `value` to be {query.dim()}-D"
                             f" but found {key.dim()}-D and {value.dim()}-D tensors respectively")
    kpm_dims = 2 if batched else 1
    if key_padding_mask is not None and key_padding_mask.dim() != kpm_dims:
        raise AssertionError(f"For {which} `query`, expected `key_padding_mask` to be `None` or {kpm_dims}-D"
                             f" but found {key_padding_mask.dim()}-D tensor instead")
    if attn_mask is not None:
        if attn_mask.dim() not in (2, 3):
            raise AssertionError(f"For {which} `query`, expected `attn_mask` to be `None`, 2-D or 3-D"
                                 f" but found {attn_mask.dim()}-D tensor instead")
        expected = (num_heads, query.shape[0], key.shape[0])
        if not batched and attn_mask.dim() == 3 and tuple(attn_mask.shape) != expected:
            raise AssertionError(f"Expected `attn_mask` shape to be {expected} but got {attn_mask.shape}")
    return batched


def map_shared(fn, tensors):
    """``fn`` of each tensor, once per distinct object, so that ``query is key is value`` (which
    selects the self-attention projection) survives the layout change."""
    done = {}
    for t in tensors:
        if id(t) not in done:
            done[id(t)] = fn(t)
    return tuple(done[id(t)] for t in tensors)


def canonical_mask(mask, name, dtype):
    """A bool mask (True = masked out) as an additive float mask of ``dtype`` (-inf where masked)."""
    if mask is None:
        return None
    if mask.dtype.is_floating_point:
        return mask
    if mask.dtype.name != "bool":
        raise AssertionError(f"only bool and floating types of {name} are supported")
    return _fn["zeros_like"](mask, dtype=dtype).masked_fill(mask, -math.inf)


def static_heads(t, static, name, bsz, heads, head_dim):
    """``t`` (L, N, E) as (N * heads, L, head_dim), or the given ``static`` one after torch's checks."""
    if static is None:
        return t.reshape(t.shape[0], bsz * heads, head_dim).transpose(0, 1)
    if static.size(0) != bsz * heads:
        raise AssertionError(f"expecting {name}.size(0) of {bsz * heads}, but got {static.size(0)}")
    if static.size(2) != head_dim:
        raise AssertionError(f"expecting {name}.size(2) of {head_dim}, but got {static.size(2)}")
    return static


def extend_masks(attn_mask, key_padding_mask):
    """Both masks with one more (unmasked) key column, for bias_k/bias_v or the zero attention slot."""
    def extended(m):
        return _fn["cat"]([m, _fn["zeros"]((*m.shape[:-1], 1), dtype=m.dtype, device=m.device)], -1)
    return tuple(None if m is None else extended(m) for m in (attn_mask, key_padding_mask))
