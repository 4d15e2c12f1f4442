"""The lookups and counts of jitorch/ops/searching.py (and histogramdd.py, hash_tensor.py) give indices, masks,
counts and hashes: no gradient. unique_consecutive's values require grad, as torch's, whose derivative is not
implemented."""

from __future__ import annotations

from ..rule import defgrad, differentiates, nondifferentiable, not_implemented, reads

nondifferentiable("searchsorted.Tensor", "bucketize.Tensor", "bucketize.Scalar", "isin.Tensor_Tensor",
                  "bincount", "histc", "histogram.bins_tensor", "histogram.bin_ct",
                  "_histogramdd_edges", "_histogramdd_from_bin_tensors", "hash_tensor")
defgrad("_unique_consecutive",
        differentiates("self", reads("", lambda g, a, out: not_implemented("unique_consecutive"))))
