"""The lookups and counts of jitorch/ops/searching.py give indices, masks and counts: no gradient."""

from __future__ import annotations

from ..rule import nondifferentiable

nondifferentiable("searchsorted.Tensor", "bucketize.Tensor", "bucketize.Scalar", "isin.Tensor_Tensor",
                  "_unique_consecutive", "bincount", "histc", "histogram.bins_tensor", "histogram.bin_ct")
