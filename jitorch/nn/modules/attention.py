"""MultiheadAttention, following torch's ``multi_head_attention_forward`` step by step."""

from __future__ import annotations

import math

from ...ops.registry import FUNCTIONS as _fn
from .. import init
from ..parameter import Parameter
from ._functional import F
from .linear import NonDynamicallyQuantizableLinear
from .module import Module
from .utils import factory


def _shape_check(query, key, value, key_padding_mask, attn_mask, num_heads):
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


def _map_shared(fn, tensors):
    """``fn`` of each tensor, once per distinct object, so that ``query is key is value`` (which
    selects the self-attention projection) survives the layout change."""
    done = {}
    for t in tensors:
        if id(t) not in done:
            done[id(t)] = fn(t)
    return tuple(done[id(t)] for t in tensors)


def _canonical_mask(mask, name, dtype):
    """A bool mask (True = masked out) as an additive float mask of ``dtype`` (-inf where masked)."""
    if mask is None:
        return None
    if mask.dtype.is_floating_point:
        return mask
    if mask.dtype.name != "bool":
        raise AssertionError(f"only bool and floating types of {name} are supported")
    return _fn["zeros_like"](mask, dtype=dtype).masked_fill(mask, -math.inf)


class MultiheadAttention(Module):
    """Attention over ``num_heads`` heads of ``embed_dim // num_heads`` features, as
    ``torch.nn.MultiheadAttention``: returns (output, attention weights or None)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0,"
                             f" got embed_dim={embed_dim} and num_heads={num_heads} instead")
        super().__init__()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(factory("empty", (3 * embed_dim, embed_dim), device, dtype))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = Parameter(factory("empty", (embed_dim, embed_dim), device, dtype))
            self.k_proj_weight = Parameter(factory("empty", (embed_dim, self.kdim), device, dtype))
            self.v_proj_weight = Parameter(factory("empty", (embed_dim, self.vdim), device, dtype))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(factory("empty", (3 * embed_dim,), device, dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        if add_bias_kv:
            self.bias_k = Parameter(factory("empty", (1, 1, embed_dim), device, dtype))
            self.bias_v = Parameter(factory("empty", (1, 1, embed_dim), device, dtype))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self):
        """torch's default: xavier_uniform_ projections, zero biases, xavier_normal_ bias_k/bias_v."""
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        for b in (self.bias_k, self.bias_v):
            if b is not None:
                init.xavier_normal_(b)

    def _project(self, query, key, value):
        """q, k, v from the packed or separate input projections (one matmul for self-attention)."""
        E = self.embed_dim
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else b.chunk(3)
        if not self._qkv_same_embed_dim:
            return (F.linear(query, self.q_proj_weight, bq), F.linear(key, self.k_proj_weight, bk),
                    F.linear(value, self.v_proj_weight, bv))
        w = self.in_proj_weight
        if query is key and key is value:
            q, k, v = F.linear(query, w, b).unflatten(-1, (3, E)).unbind(-2)
            return q, k, v
        wq, wk, wv = w.chunk(3)
        return F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        batched = _shape_check(query, key, value, key_padding_mask, attn_mask, self.num_heads)
        if self.batch_first and batched:
            query, key, value = _map_shared(lambda x: x.transpose(1, 0), (query, key, value))
        if not batched:
            query, key, value = _map_shared(lambda x: x.unsqueeze(1), (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        output, weights = self._attend(query, key, value, key_padding_mask, need_weights, attn_mask,
                                       average_attn_weights, is_causal)
        if not batched:
            return output.squeeze(1), (weights.squeeze(0) if weights is not None else None)
        if self.batch_first:
            output = output.transpose(1, 0)
        return output, weights

    def _attend(self, query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights,
                is_causal):
        """Sequence-first (L, N, E) attention: torch's multi_head_attention_forward."""
        tgt_len, bsz, embed_dim = query.shape
        heads, head_dim = self.num_heads, self.head_dim
        if embed_dim != self.embed_dim:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, but got {embed_dim}")
        if self._qkv_same_embed_dim and key.shape != value.shape:
            raise AssertionError(f"key shape {key.shape} does not match value shape {value.shape}")
        key_padding_mask = _canonical_mask(key_padding_mask, "key_padding_mask", query.dtype)
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer "
                               "module method `generate_square_subsequent_mask` to create this mask.")
        if is_causal and key_padding_mask is None and not need_weights:
            attn_mask = None  # scaled_dot_product_attention applies the causal mask itself
        else:
            attn_mask = _canonical_mask(attn_mask, "attn_mask", query.dtype)
            if key_padding_mask is not None:
                is_causal = False  # the merged mask is no longer causal
        q, k, v = self._project(query, key, value)
        src_len = k.shape[0]
        if attn_mask is not None:
            if attn_mask.dim() == 2:
                if tuple(attn_mask.shape) != (tgt_len, src_len):
                    raise RuntimeError(f"The shape of the 2D attn_mask is {attn_mask.shape}, but should be "
                                       f"{(tgt_len, src_len)}.")
                attn_mask = attn_mask.unsqueeze(0)
            elif tuple(attn_mask.shape) != (bsz * heads, tgt_len, src_len):
                raise RuntimeError(f"The shape of the 3D attn_mask is {attn_mask.shape}, but should be "
                                   f"{(bsz * heads, tgt_len, src_len)}.")
        if self.bias_k is not None:
            k = _fn["cat"]([k, self.bias_k.repeat(1, bsz, 1)])
            v = _fn["cat"]([v, self.bias_v.repeat(1, bsz, 1)])
            attn_mask, key_padding_mask = _extend_masks(attn_mask, key_padding_mask)
        q = q.reshape(tgt_len, bsz * heads, head_dim).transpose(0, 1)
        k = k.reshape(k.shape[0], bsz * heads, head_dim).transpose(0, 1)
        v = v.reshape(v.shape[0], bsz * heads, head_dim).transpose(0, 1)
        if self.add_zero_attn:
            zeros = _fn["zeros"]((bsz * heads, 1, head_dim), dtype=k.dtype, device=k.device)
            k = _fn["cat"]([k, zeros], dim=1)
            v = _fn["cat"]([v, zeros], dim=1)
            attn_mask, key_padding_mask = _extend_masks(attn_mask, key_padding_mask)
        src_len = k.shape[1]
        if key_padding_mask is not None:
            if key_padding_mask.shape[0] != bsz:
                raise AssertionError(f"Expected key_padded_mask.shape[0] to be {bsz}, but got "
                                     f"{key_padding_mask.shape[0]}")
            if key_padding_mask.shape[1] != src_len:
                raise AssertionError(f"Expected key_padded_mask.shape[1] to be {src_len}, but got "
                                     f"{key_padding_mask.shape[1]}")
            kpm = key_padding_mask.view(bsz, 1, 1, src_len).expand(-1, heads, -1, -1).reshape(bsz * heads, 1, src_len)
            attn_mask = kpm if attn_mask is None else attn_mask + kpm
        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            q_scaled = q * math.sqrt(1.0 / float(head_dim))
            if attn_mask is not None:
                scores = _fn["baddbmm"](attn_mask, q_scaled, k.transpose(-2, -1))
            else:
                scores = _fn["bmm"](q_scaled, k.transpose(-2, -1))
            weights = F.softmax(scores, dim=-1)
            if dropout_p > 0.0:
                weights = F.dropout(weights, p=dropout_p)
            out = _fn["bmm"](weights, v).transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
            out = F.linear(out, self.out_proj.weight, self.out_proj.bias).view(tgt_len, bsz, embed_dim)
            weights = weights.view(bsz, heads, tgt_len, src_len)
            if average_attn_weights:
                weights = weights.mean(dim=1)
            return out, weights
        if attn_mask is not None:
            if attn_mask.shape[0] == 1 and attn_mask.dim() == 3:
                attn_mask = attn_mask.unsqueeze(0)
            else:
                attn_mask = attn_mask.view(bsz, heads, -1, src_len)
        q = q.reshape(bsz, heads, tgt_len, head_dim)
        k = k.reshape(bsz, heads, src_len, head_dim)
        v = v.reshape(bsz, heads, src_len, head_dim)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
        out = out.permute(2, 0, 1, 3).reshape(bsz * tgt_len, embed_dim)
        out = F.linear(out, self.out_proj.weight, self.out_proj.bias).view(tgt_len, bsz, embed_dim)
        return out, None


def _extend_masks(attn_mask, key_padding_mask):
    """Both masks with one more (unmasked) key column, for bias_k/bias_v or the zero attention slot."""
    return tuple(None if m is None else F.pad(m, (0, 1)) for m in (attn_mask, key_padding_mask))
