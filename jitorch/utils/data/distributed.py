"""DistributedSampler: each rank's share of a dataset's indices, as torch.utils.data.distributed."""

from __future__ import annotations

import math

from ... import Generator, randperm
from .sampler import Sampler

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler):
    """Rank ``rank`` of ``num_replicas`` gets every ``num_replicas``-th index of one (shuffled) order.

    The order is a permutation drawn from ``seed + epoch`` (call ``set_epoch`` at each epoch), the same on every
    rank. Without ``drop_last`` the order is padded with its own first indices to a multiple of
    ``num_replicas``; with it, the tail is dropped instead. ``num_replicas`` and ``rank`` default to the default
    process group's.
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        if num_replicas is None or rank is None:
            from ... import distributed  # loads on use: only a sampler without explicit ranks needs the group

            if not distributed.is_initialized():
                raise RuntimeError("Requires distributed package to be available")
            num_replicas = distributed.get_world_size() if num_replicas is None else num_replicas
            rank = distributed.get_rank() if rank is None else rank
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.epoch, self.shuffle, self.seed, self.drop_last = 0, shuffle, seed, drop_last
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            indices = randperm(n, generator=Generator().manual_seed(self.seed + self.epoch)).tolist()
        else:
            indices = list(range(n))
        if self.drop_last:
            indices = indices[:self.total_size]
        else:
            padding = self.total_size - len(indices)
            indices += (indices * math.ceil(padding / len(indices)))[:padding] if padding > len(indices) \
                else indices[:padding]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """Draw the next epoch's order from ``seed + epoch`` (the same on every rank)."""
        self.epoch = epoch
