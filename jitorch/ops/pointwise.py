"""Pointwise ops: arithmetic, math functions, comparisons and logic.

Each op is one `defpointwise` line: schema, NumPy formula, promotion kind.
"""

from __future__ import annotations

import numpy as np

from .meta import ALWAYS_BOOL, DEFAULT, INT_TO_FLOAT, KEEP_INT
from .pointwise_base import defpointwise


def _add(a, b, alpha):
    return np.add(a, b if alpha == 1 else np.multiply(b, alpha))


def _sub(a, b, alpha):
    return np.subtract(a, b if alpha == 1 else np.multiply(b, alpha))


defpointwise("add(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", _add, DEFAULT,
             doc="``self + alpha * other``, broadcasting, with torch's type promotion.")
defpointwise("sub(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", _sub, DEFAULT,
             doc="``self - alpha * other``.")
defpointwise("mul(Tensor self, Tensor other) -> Tensor", np.multiply, DEFAULT, doc="Elementwise product.")
defpointwise("exp(Tensor self) -> Tensor", np.exp, INT_TO_FLOAT, doc="Elementwise ``e**x``.")
defpointwise("neg(Tensor self) -> Tensor", np.negative, DEFAULT, doc="Elementwise ``-x``.")
defpointwise("eq(Tensor self, Tensor other) -> Tensor", np.equal, ALWAYS_BOOL, doc="Elementwise ``==``.")
defpointwise("bitwise_and(Tensor self, Tensor other) -> Tensor", np.bitwise_and, KEEP_INT,
             doc="Elementwise AND of integers or bools.")
