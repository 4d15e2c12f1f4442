"""``get_worker_info``: what a DataLoader worker process knows of itself (None outside workers)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerInfo:
    """A worker's ``id``, the loader's ``num_workers``, the worker's ``seed`` and its copy of ``dataset``."""

    id: int
    num_workers: int
    seed: int
    dataset: object


CURRENT = None  # set by the worker loop in each worker process


def get_worker_info():
    """This worker's `WorkerInfo` inside a DataLoader worker process, None in any other process.

    An IterableDataset uses it to read its share: ``info.id`` of ``info.num_workers``."""
    return CURRENT
