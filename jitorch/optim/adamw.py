"""``torch.optim.adamw``'s path: AdamW, defined with Adam in `adam`."""

from .adam import AdamW

__all__ = ["AdamW"]
