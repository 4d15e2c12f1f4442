"""DataLoader workers fetch ``prefetch_factor`` batches each ahead of the consumer, and no more (issue 20's
option: the suite compared batches with ``prefetch_factor=1`` but never counted what the workers fetched)."""

import multiprocessing
import time

import jitorch as jt
from jitorch.utils.data import DataLoader, Dataset


class Counted(Dataset):
    """Samples that count their fetches in shared memory (the workers are forked: they share ``fetched``)."""

    def __init__(self, n):
        self.n, self.fetched = n, multiprocessing.get_context("fork").Value("i", 0)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        with self.fetched.get_lock():
            self.fetched.value += 1
        return jt.tensor([float(i)])


def settles_at(dataset, count):
    """Wait until the workers have fetched ``count`` samples, then a while longer: the count must stay there."""
    deadline = time.monotonic() + 30
    while dataset.fetched.value < count and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    return dataset.fetched.value


def test_workers_fetch_prefetch_factor_batches_each_ahead_and_no_more():
    """3 each (the default is 2): 12 samples fetched before the first batch is taken, 14 after, never more."""
    prefetch_factor, workers, batch = 3, 2, 2
    dataset = Counted(40)
    loader = DataLoader(dataset, batch_size=batch, num_workers=workers, prefetch_factor=prefetch_factor,
                        multiprocessing_context="fork")
    batches = iter(loader)
    ahead = prefetch_factor * workers * batch
    assert settles_at(dataset, ahead) == ahead
    assert next(batches).flatten().tolist() == [0.0, 1.0]
    assert settles_at(dataset, ahead + batch) == ahead + batch  # the batch taken makes room for one more
    assert [b.flatten().tolist() for b in batches][-1] == [38.0, 39.0]
    assert dataset.fetched.value == 40
