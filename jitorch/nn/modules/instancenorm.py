"""``torch.nn.modules.instancenorm``'s path: the instance norms, defined with the other norms in
`normalization`."""

from .normalization import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, _InstanceNorm

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "_InstanceNorm"]
