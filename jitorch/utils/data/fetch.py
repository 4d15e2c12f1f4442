"""Fetchers: one batch (or sample) from a dataset, given what the index sampler yielded.

The same fetchers run in the calling process (``num_workers=0``) and in worker processes, so both give the
same batches.
"""

from __future__ import annotations


class MapFetcher:
    """Indexing a map-style dataset: a list of indices is a batch to collate, one index a sample."""

    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn

    def fetch(self, index):
        if not self.auto_collation:
            return self.collate_fn(self.dataset[index])
        getitems = getattr(self.dataset, "__getitems__", None)
        return self.collate_fn(getitems(index) if getitems is not None else [self.dataset[i] for i in index])


class IterableFetcher:
    """Drawing from an iterable dataset's iterator: as many samples as ``index`` holds placeholders.

    Raises StopIteration when the iterator is exhausted (after a last partial batch, unless ``drop_last``).
    """

    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.iterator = iter(dataset)
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.drop_last = drop_last
        self.ended = False

    def fetch(self, index):
        if self.ended:
            raise StopIteration
        if not self.auto_collation:
            return self.collate_fn(next(self.iterator))
        batch = []
        for _ in index:
            try:
                batch.append(next(self.iterator))
            except StopIteration:
                self.ended = True
                break
        if not batch or (self.ended and self.drop_last):
            raise StopIteration
        return self.collate_fn(batch)


def fetcher(dataset, iterable, auto_collation, collate_fn, drop_last):
    """The fetcher for ``dataset`` (an IterableDataset when ``iterable``)."""
    return (IterableFetcher if iterable else MapFetcher)(dataset, auto_collation, collate_fn, drop_last)
