"""The op library: importing this package declares every op in the registry."""

from . import registry  # noqa: F401
from . import (  # noqa: F401
    creation, pointwise, reductions, views, linalg, decompositions, shape_ops, indexing, random_ops, casts, autocast,
    value_checks,
    pointwise_scaled, scans, statistics, searching, arrangements, diagonals, selection, distances, windows,
    real_identities, recurrences, normalization, linear, attention, special_ops, ldl, ctc,
)
from . import histogramdd, hash_tensor  # noqa: F401
from . import out_dtypes  # noqa: F401  (after the ops it checks)
