"""``torch.nn.modules.pixelshuffle``'s path: PixelShuffle and PixelUnshuffle, defined in `upsampling`."""

from .upsampling import PixelShuffle, PixelUnshuffle

__all__ = ["PixelShuffle", "PixelUnshuffle"]
