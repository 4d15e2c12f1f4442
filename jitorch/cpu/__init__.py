"""``jitorch.cpu``, as ``torch.cpu``: its `amp` forms."""

from . import amp  # noqa: F401
