"""Norms between and within tensors: ``cdist`` (pairwise distances between two sets of row vectors) and
``renorm`` (slices scaled down to a maximum norm), composites over ``norm`` as torch's."""

from __future__ import annotations

import math

from ..runtime import dtypes as _dt
from ..runtime.strided import wrap_dim
from . import functions
from .registry import defop, scalar_name


_COMPUTE_MODES = (None, "use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")


def _cdist(x1, x2, p, compute_mode):
    if compute_mode not in _COMPUTE_MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    for name, x in (("X1", x1), ("X2", x2)):
        if x.ndim < 2:
            raise RuntimeError(f"cdist only supports at least 2D tensors, {name} got: {x.ndim}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
    for name, x in (("X1", x1), ("X2", x2)):
        if not x.dtype.is_floating_point:
            raise RuntimeError(f"cdist only supports floating-point dtypes, {name} got: {scalar_name(x.dtype)}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    # torch's kernel, which has no half types, runs only where there are distances to compute from elements
    # (no rows: an empty result; no columns: zeros; fuzz seed 8400604)
    if x1.dtype in (_dt.float16, _dt.bfloat16) and x1.numel() and x2.numel():
        raise NotImplementedError(f"\"cdist\" not implemented for '{scalar_name(x1.dtype)}'")
    differences = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    if x1.shape[-1] == 0:  # zeros for every p, as torch's (an inf-norm of nothing would have no identity)
        return differences.sum(-1)
    # torch's kernel counts min(ceil(|d|), 1) for p = 0 (NaN where a difference is NaN), and takes the infinity
    # norm as a running max from 0 that passes over NaN (norm's count and max gave 3 and NaN for [nan, 1, 2])
    if p == 0:
        return functions.clamp(differences.abs().ceil(), None, 1).sum(-1)
    if math.isinf(p):
        magnitudes = differences.abs()
        return functions.where(magnitudes.isnan(), 0, magnitudes).amax(-1)
    return differences.norm(p, (-1,))


defop("cdist(Tensor x1, Tensor x2, float p=2.0, str? compute_mode=None) -> Tensor", composite=_cdist,
      kind="reduction", variants=("function",), own_derivative=True,
      doc="The ``p``-norm distance between each row of ``x1`` and each row of ``x2`` (batch dims broadcast), computed "
          "from the differences whatever ``compute_mode`` says.")


def _renorm(x, p, dim, maxnorm):
    if p <= 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm:g}")
    if x.ndim <= 1:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {x.ndim} dimensions")
    d = wrap_dim(dim, x.ndim)
    norms = x.norm(p, tuple(i for i in range(x.ndim) if i != d), keepdim=True)
    factor = functions.where(norms > maxnorm, maxnorm / (norms + 1e-7), 1.0)
    # contiguous, as torch's (whose output is allocated so, where the product follows x's layout; fuzz seed 7200068)
    return (x * factor.to(x.dtype)).contiguous()


defop("renorm(Tensor self, Scalar p, int dim, Scalar maxnorm) -> Tensor", composite=_renorm, kind="reduction",
      variants=("function", "method", "inplace", "out"), own_derivative=True,
      doc="``self`` with each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` scaled down to norm "
          "``maxnorm``.")
