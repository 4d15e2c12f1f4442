"""The lookups and counts of jitorch/ops/searching.py (and histogramdd.py, hash_tensor.py) give indices, masks,
counts and hashes: no gradient. unique_consecutive's values require grad, as torch's, whose derivative is not
implemented. bincount, histogram and histogramdd's kernels have no rule: torch's autograd fallback serves them
(their ops' ``autograd_fallback``), whose results require grad and whose backward raises; histc is torch's only
count declared nondifferentiable."""

from __future__ import annotations

from ..rule import defgrad, differentiates, nondifferentiable, not_implemented, reads

nondifferentiable("searchsorted.Tensor", "bucketize.Tensor", "bucketize.Scalar", "isin.Tensor_Tensor",
                  "histc", "hash_tensor")
defgrad("_unique_consecutive",
        differentiates("self", reads("", lambda g, a, out: not_implemented("unique_consecutive"))))
