"""Autocast's op policy: which ops run in the lower precision dtype, which in float32, which in the widest
of their inputs' dtypes, on CPU and on CUDA (torch 2.13's lists, ``aten/src/ATen/autocast_mode.cpp``).

One hook applies it: `autocast_call`, which the op registry's ``call`` runs for every op while autocast
is on in the thread (`runtime.autocast_mode.STATE.key`), and which `autocasts` puts around the ops
written as Python functions (``nn.functional.linear``). It casts the op's floating tensor inputs on the
autocast device (not float64 ones) as the op's policy says, with registry ops, so autograd records the
casts (gradients come back in the inputs' own dtypes) and a trace records them too; then it runs the
op with autocast off, as torch's autocast kernels redispatch below themselves. Ops called with
``out=`` and in-place ops are not autocast (torch registers only the functional forms).
"""

from __future__ import annotations

import functools

from ..runtime import dtypes as _dt
from ..runtime.autocast_mode import STATE, cached_cast, excluded
from ..runtime.grad_mode import is_grad_enabled
from . import registry

LOWER = "lower_precision_fp"  # every eligible input cast to the autocast dtype
FP32 = "fp32"                  # every eligible input cast to float32
FP32_DTYPE = "fp32_set_opt_dtype"  # float32 by the op's ``dtype=`` (when not given and the first input is eligible)
PROMOTE = "promote"            # every eligible input cast to the widest eligible dtype among them
BANNED = "banned"              # refused under autocast

_FP32_CPU_LINALG = (
    "_lu_with_info cholesky cholesky_inverse cholesky_solve geqrf inverse linalg_cholesky linalg_cholesky_ex "
    "linalg_cond linalg_eig linalg_eigh linalg_eigvals linalg_eigvalsh linalg_householder_product linalg_inv "
    "linalg_inv_ex linalg_lstsq linalg_matrix_rank linalg_qr linalg_solve linalg_svd linalg_svdvals "
    "linalg_tensorinv linalg_tensorsolve lu_solve orgqr ormqr pinverse qr svd triangular_solve")
_FP32_LOSSES = (
    "binary_cross_entropy_with_logits cosine_embedding_loss hinge_embedding_loss huber_loss kl_div l1_loss "
    "margin_ranking_loss mse_loss multi_margin_loss multilabel_margin_loss nll_loss nll_loss2d poisson_nll_loss "
    "smooth_l1_loss soft_margin_loss triplet_margin_loss")

# torch's names (without their overload names: every overload of a name has one policy on a device type
# here, but for norm's and the reductions' overloads with a dtype argument, which FP32_DTYPE leaves alone)
_POLICIES = {
    "cpu": {
        LOWER: "_addmm_activation _convolution _native_multi_head_attention addbmm addmm baddbmm bmm conv1d "
               "conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d linalg_vecdot linear "
               "matmul mkldnn_rnn_layer mm prelu scaled_dot_product_attention",
        FP32: _FP32_CPU_LINALG + " " + _FP32_LOSSES + " "
              "_grid_sampler_2d_cpu_fallback adaptive_avg_pool3d adaptive_max_pool3d avg_pool3d binary_cross_entropy "
              "cdist cross_entropy_loss ctc_loss fake_quantize_per_tensor_affine fft_fft fft_fft2 fft_fftn fft_hfft "
              "fft_ifft fft_ifft2 fft_ifftn fft_ihfft fft_irfft fft_irfft2 fft_irfftn fft_rfft fft_rfft2 fft_rfftn "
              "fractional_max_pool2d fractional_max_pool3d grid_sampler grid_sampler_2d grid_sampler_3d max_pool3d "
              "max_unpool2d max_unpool3d multilabel_margin_loss_forward nanquantile polar prod quantile "
              "reflection_pad1d reflection_pad2d replication_pad1d replication_pad2d replication_pad3d stft trace "
              "view_as_complex",
        PROMOTE: "cat index_copy stack",
    },
    "cuda": {
        LOWER: "_convolution _scaled_dot_product_flash_attention _thnn_fused_gru_cell _thnn_fused_lstm_cell addbmm "
               "addmm addmv addr baddbmm bmm chain_matmul conv1d conv2d conv3d conv_tbc conv_transpose1d "
               "conv_transpose2d conv_transpose3d convolution cudnn_convolution cudnn_convolution_transpose einsum "
               "gru_cell linalg_multi_dot linalg_vecdot linear lstm_cell matmul mm mv prelu rnn_relu_cell "
               "rnn_tanh_cell scaled_dot_product_attention",
        FP32: _FP32_LOSSES + " "
              "_upsample_bicubic2d_aa _upsample_bilinear2d_aa _upsample_nearest_exact1d _upsample_nearest_exact2d "
              "_upsample_nearest_exact3d acos asin cdist cosh cosine_similarity dist erfinv exp expm1 frobenius_norm "
              "group_norm layer_norm log log10 log1p log2 logsumexp native_layer_norm nuclear_norm pdist pow "
              "reciprocal renorm rms_norm rsqrt sinh softplus tan upsample_bicubic2d upsample_bilinear2d "
              "upsample_linear1d upsample_nearest1d upsample_nearest2d upsample_nearest3d upsample_trilinear3d",
        FP32_DTYPE: "cumprod cumsum linalg_matrix_norm linalg_vector_norm log_softmax norm prod softmax sum",
        PROMOTE: "addcdiv addcmul atan2 bilinear cross dot grid_sampler index_put scatter_add tensordot vdot",
        BANNED: "binary_cross_entropy",
    },
}

# device type -> {op name: policy}
POLICIES = {device_type: {name: policy for policy, names in table.items() for name in names.split()}
            for device_type, table in _POLICIES.items()}

_BANNED_MESSAGE = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast.")


def _tensors(values):
    for v in values:
        if isinstance(v, registry.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from (t for t in v if isinstance(t, registry.Tensor))


def _policy(name, tensors):
    """(device type, policy) of op ``name`` on these input tensors now, or None: the device type is the
    inputs' ("cuda" if any is a CUDA tensor, as torch's dispatch key), and autocast must be on for it."""
    device_type = "cuda" if any(t.device.type == "cuda" for t in tensors) else "cpu"
    if not STATE.enabled[device_type]:
        return None
    policy = POLICIES[device_type].get(name)
    return None if policy is None else (device_type, policy)


def _eligible(t, device_type):
    return isinstance(t, registry.Tensor) and t.dtype.is_floating_point and t.dtype is not _dt.float64 \
        and t.device.type == device_type


def _promoted(device_type, tensors):
    """torch's ``promote_type``: float32 if an eligible input is float32, else the autocast dtype; an
    input of the other half type is an error."""
    lower = STATE.dtypes[device_type]
    for t in tensors:
        if not _eligible(t, device_type) or t.dtype is lower:
            continue
        if t.dtype is not _dt.float32:
            raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")
        return _dt.float32
    return lower


def _cast(t, dtype, device_type):
    """``t`` as ``dtype`` if autocast casts it; a leaf parameter's cast to the autocast dtype comes from the
    region's cache (not while tracing, whose casts are graph nodes, nor without grad mode, whose casts
    carry no history a later forward in grad mode would need)."""
    if not _eligible(t, device_type) or t.dtype is dtype:
        return t
    to_copy = registry.OPS["_to_copy"]
    if (dtype is STATE.dtypes[device_type] and t.dtype is _dt.float32 and t._requires_grad and t.grad_fn is None
            and t._base is None and STATE.cache_enabled and is_grad_enabled() and not registry.hooks_take_calls()):
        return cached_cast(t, lambda: registry.call(to_copy, (t, dtype, None)))
    return registry.call(to_copy, (t, dtype, None))


def _cast_all(values, dtype, device_type):
    """``values`` (arguments) with their tensors, and the tensors of their lists, cast."""
    def one(v):
        if isinstance(v, registry.Tensor):
            return _cast(v, dtype, device_type)
        if isinstance(v, (list, tuple)) and any(isinstance(t, registry.Tensor) for t in v):
            return type(v)(one(t) for t in v)
        return v
    return [one(v) for v in values]


def _cast_arguments(device_type, policy, args, kwargs, dtype_index=None):
    """The arguments of a call under ``policy``: ``(args, kwargs)``, cast or given float32 as ``dtype=``."""
    if policy == BANNED:
        raise RuntimeError(_BANNED_MESSAGE)
    if policy == FP32_DTYPE and dtype_index is not None:
        # the result in float32 by the op's own dtype argument, as torch's fp32_set_opt_dtype
        if args[dtype_index] is None and _eligible(args[0], device_type):
            args = list(args)
            args[dtype_index] = _dt.float32
        return args, kwargs
    if policy == LOWER:
        dtype = STATE.dtypes[device_type]
    elif policy == PROMOTE:
        dtype = _promoted(device_type, _tensors([*args, *kwargs.values()]))
    else:  # FP32, and FP32_DTYPE for an op without a dtype argument
        dtype = _dt.float32
    cast_kwargs = dict(zip(kwargs, _cast_all(kwargs.values(), dtype, device_type)))
    return _cast_all(args, dtype, device_type), cast_kwargs


def autocast_call(op, args):
    """``registry.AUTOCAST``: ``op`` on ``args`` (in schema order) as autocast runs it, or NotImplemented
    where autocast leaves the call alone."""
    found = _policy(op.public_name, list(_tensors(args)))
    if found is None:
        return NotImplemented
    with excluded():
        args, _ = _cast_arguments(*found, args, {}, op.dtype_index)
        return registry.call(op, args)


def autocasts(name, first=None, arity=None):
    """Decorate an op written as a Python function with autocast's policy for torch's op ``name`` (a
    string, or a function of the call's arguments giving one, or None where the call is no such op).

    ``first``, if given (a registry op's ``fast``), serves the commonest calls before the function's own frame
    and those of the decorators under this one: called with the arguments, as a tuple, of a call of ``arity``
    positional arguments and no keyword ones while autocast and the dispatch hooks are off, it gives the
    result, or None for the function to run. (nn.LayerNorm's call of ``F.layer_norm``: two frames fewer, each
    repacking the arguments.)"""
    hooks = registry.DISPATCH_HOOKS

    def decorate(fn):
        @functools.wraps(fn)
        def autocast_op(*args, **kwargs):
            if STATE.key is None:
                if first is not None and len(args) == arity and not kwargs and not hooks:
                    out = first(args)
                    if out is not None:
                        return out
                return fn(*args, **kwargs)
            op_name = name(*args, **kwargs) if callable(name) else name
            found = None if op_name is None else _policy(op_name, list(_tensors([*args, *kwargs.values()])))
            if found is None:
                return fn(*args, **kwargs)
            with excluded():
                args, kwargs = _cast_arguments(*found, args, kwargs)
                return fn(*args, **kwargs)
        autocast_op.autocast_name = name
        return autocast_op
    return decorate


registry.AUTOCAST = autocast_call
registry.AUTOCAST_NAMES.update(name for table in POLICIES.values() for name in table)
