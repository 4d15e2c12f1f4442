"""The lookups and counts of jitorch/ops/searching.py (and histogramdd.py, hash_tensor.py) give indices, masks,
counts and hashes: no gradient."""

from __future__ import annotations

from ..rule import nondifferentiable

nondifferentiable("searchsorted.Tensor", "bucketize.Tensor", "bucketize.Scalar", "isin.Tensor_Tensor",
                  "_unique_consecutive", "bincount", "histc", "histogram.bins_tensor", "histogram.bin_ct",
                  "_histogramdd_edges", "_histogramdd_from_bin_tensors", "hash_tensor")
