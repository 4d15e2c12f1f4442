"""``torch.nn.modules.batchnorm``'s path: the batch norms, defined with the other norms in `normalization`."""

from .normalization import BatchNorm1d, BatchNorm2d, _BatchNorm

__all__ = ["BatchNorm1d", "BatchNorm2d", "_BatchNorm"]
