"""``torch.utils.dlpack``: DLPack exchange by capsule (`to_dlpack`) and from any producer (`from_dlpack`)."""

from __future__ import annotations

from ..ops.dlpack import DLDeviceType, from_dlpack


def to_dlpack(tensor):
    """A legacy (``dltensor``) DLPack capsule sharing ``tensor``'s memory; consume it once, with a
    ``from_dlpack``. Prefer passing the tensor itself to the consumer's ``from_dlpack``."""
    return tensor.__dlpack__()


__all__ = ["DLDeviceType", "from_dlpack", "to_dlpack"]
