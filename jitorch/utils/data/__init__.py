"""Datasets, samplers and the DataLoader, as ``torch.utils.data``.

    from jitorch.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True,
                        generator=jitorch.Generator().manual_seed(0))
"""

from .collate import default_collate, default_convert
from .dataloader import DataLoader
from .dataset import ChainDataset, ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset, random_split
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler
from .worker_info import WorkerInfo, get_worker_info
from .distributed import DistributedSampler

__all__ = ["Dataset", "IterableDataset", "ChainDataset", "TensorDataset", "Subset", "ConcatDataset",
           "random_split", "Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "BatchSampler",
           "DataLoader", "default_collate", "default_convert", "get_worker_info", "WorkerInfo",
           "DistributedSampler"]
