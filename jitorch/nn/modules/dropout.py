"""Dropout, the channel dropouts Dropout1d/2d/3d, and the alpha dropouts of self-normalising networks."""

from __future__ import annotations

from ._functional import F
from .module import Module


class _DropoutNd(Module):
    """The dropout probability ``p`` (checked) and ``inplace`` flag every dropout holds."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    """In training, zero each element with probability ``p`` and scale the rest by 1/(1-p)."""

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)


class Dropout1d(_DropoutNd):
    """In training, zero whole channels of (N, C, L) or (C, L) inputs with probability ``p``, scaling the rest
    by 1/(1-p)."""

    def forward(self, input):
        return F.dropout1d(input, self.p, self.training, self.inplace)


class Dropout2d(_DropoutNd):
    """In training, zero whole channels of (N, C, H, W) inputs with probability ``p``, scaling the rest by
    1/(1-p)."""

    def forward(self, input):
        return F.dropout2d(input, self.p, self.training, self.inplace)


class Dropout3d(_DropoutNd):
    """In training, zero whole channels of (N, C, D, H, W) or (C, D, H, W) inputs with probability ``p``,
    scaling the rest by 1/(1-p)."""

    def forward(self, input):
        return F.dropout3d(input, self.p, self.training, self.inplace)


class AlphaDropout(_DropoutNd):
    """In training, alpha dropout: each element dropped with probability ``p`` while the input's mean and
    variance are kept (for selu networks)."""

    def forward(self, input):
        return F.alpha_dropout(input, self.p, self.training)


class FeatureAlphaDropout(_DropoutNd):
    """In training, alpha dropout of whole channels."""

    def forward(self, input):
        return F.feature_alpha_dropout(input, self.p, self.training)
