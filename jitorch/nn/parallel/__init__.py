"""Data-parallel training: ``DistributedDataParallel`` over jitorch.distributed."""

from .distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
