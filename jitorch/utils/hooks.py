"""``torch.utils.hooks``'s names, where PyTorch code imports them from."""

from ..runtime.hooks import RemovableHandle
from ..nn.modules.hooks import BackwardHook

__all__ = ["BackwardHook", "RemovableHandle"]
