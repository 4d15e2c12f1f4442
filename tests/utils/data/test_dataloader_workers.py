"""DataLoader worker processes: the same batches as without workers, in order, through shared memory; seeds,
worker info, persistent workers, and each way a worker can fail."""

from __future__ import annotations

import os
import random
import signal
import time

import numpy as np
import pytest
import torch
import torch.utils.data

import jitorch as jt
from jitorch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset, get_worker_info


def _dataset(n=30):
    return TensorDataset(jt.arange(2.0 * n).view(n, 2), jt.arange(n))


def _batches(loader):
    return [(x.tolist(), y.tolist()) for x, y in loader]


@pytest.mark.parametrize("options", [dict(batch_size=4), dict(batch_size=4, drop_last=True), dict(batch_size=None),
                                     dict(batch_size=3, num_workers=3, prefetch_factor=1)])
def test_workers_give_the_batches_of_one_process_in_order(options):
    options = {"num_workers": 2, **options}
    seeded = dict(shuffle=True)
    alone = DataLoader(_dataset(), **seeded, generator=jt.Generator().manual_seed(5),
                       **{k: v for k, v in options.items() if k not in ("num_workers", "prefetch_factor")})
    workers = DataLoader(_dataset(), **seeded, generator=jt.Generator().manual_seed(5), **options)
    assert _batches(workers) == _batches(alone)
    assert _batches(workers) == _batches(alone)  # a second epoch: the generators moved on alike


def test_batches_arrive_in_shared_memory():
    batch = next(iter(DataLoader(_dataset(), batch_size=8, num_workers=1)))
    assert all(t.is_shared() for t in batch)


class Sharded:
    """Each worker yields its share, as torch's documentation shows it."""

    lib = jt

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = self.lib.utils.data.get_worker_info()
        first, step = (0, 1) if info is None else (info.id, info.num_workers)
        return (self.lib.tensor([float(i)]) for i in range(first, self.n, step))


class OurSharded(Sharded, IterableDataset):
    pass


class TorchSharded(Sharded, torch.utils.data.IterableDataset):
    lib = torch


@pytest.mark.parametrize("options", [dict(batch_size=3), dict(batch_size=3, drop_last=True), dict(batch_size=None)])
def test_an_iterable_dataset_interleaves_its_workers_as_torch(options):
    ours = [b.tolist() for b in DataLoader(OurSharded(11), num_workers=2, **options)]
    theirs = [b.tolist() for b in torch.utils.data.DataLoader(TorchSharded(11), num_workers=2, **options)]
    assert ours == theirs


class WhoAmI(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        info = get_worker_info()
        return jt.tensor([info.id, info.num_workers, info.seed, os.getpid(), random.getrandbits(31),
                          int(np.random.randint(1 << 30)), jt.randint(0, 1 << 30, ()).item(), STARTED.get(info.id, -1)])


STARTED: dict = {}


def _mark_started(worker_id):
    STARTED[worker_id] = worker_id * 10


def test_worker_info_seeds_and_init_fn():
    assert get_worker_info() is None
    rows = [r.tolist() for b in DataLoader(WhoAmI(), batch_size=1, num_workers=2, worker_init_fn=_mark_started,
                                           generator=jt.Generator().manual_seed(0)) for r in b]
    by_worker = {r[0]: r for r in rows}
    assert sorted(by_worker) == [0, 1] and [r[0] for r in rows] == [0, 1] * 3
    assert all(r[1] == 2 and r[7] == r[0] * 10 for r in rows)
    assert by_worker[1][2] == by_worker[0][2] + 1  # seed = base seed + worker id
    assert by_worker[0][3] != by_worker[1][3] != os.getpid()
    again = [r.tolist() for b in DataLoader(WhoAmI(), batch_size=1, num_workers=2, worker_init_fn=_mark_started,
                                            generator=jt.Generator().manual_seed(0)) for r in b]
    assert [r[4:7] for r in again] == [r[4:7] for r in rows]  # the generator fixes every worker's RNGs
    for r in rows:  # Python's, jitorch's and NumPy's generators are all seeded from the worker's seed
        random.seed(by_worker[r[0]][2])
        jt.manual_seed(by_worker[r[0]][2])
    assert len({tuple(r[4:7]) for r in rows}) == 6


def test_persistent_workers_serve_every_epoch():
    loader = DataLoader(WhoAmI(), batch_size=2, num_workers=2, persistent_workers=True)
    first = [b[:, 3].tolist() for b in loader]
    second = [b[:, 3].tolist() for b in loader]
    assert first == second and len(first) == 3  # the same worker processes
    partial = iter(loader)
    next(partial)
    assert len([b for b in loader]) == 3  # an epoch abandoned halfway does not leak into the next


def test_in_order_false_gives_every_batch():
    batches = DataLoader(_dataset(), batch_size=4, num_workers=2, in_order=False)
    assert sorted(i for _, y in batches for i in y.tolist()) == list(range(30))


class Failing(Dataset):
    def __init__(self, how):
        self.how = how

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            if self.how == "raise":
                raise KeyError("missing sample 5")
            if self.how == "die":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(30)
        return jt.tensor(i)


def test_a_worker_exception_is_raised_in_the_loading_process():
    with pytest.raises(KeyError, match="(?s)Caught KeyError in DataLoader worker process 1.*missing sample 5"):
        list(DataLoader(Failing("raise"), batch_size=None, num_workers=2))


def test_a_dead_worker_is_an_error_not_a_hang():
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid\(s\) \d+\) exited unexpectedly"):
        list(DataLoader(Failing("die"), batch_size=None, num_workers=2))


def test_timeout():
    with pytest.raises(RuntimeError, match="DataLoader timed out after 1 seconds"):
        list(DataLoader(Failing("hang"), batch_size=None, num_workers=1, timeout=1))


def test_spawned_workers():
    loader = DataLoader(_dataset(10), batch_size=4, num_workers=2, multiprocessing_context="spawn")
    assert _batches(loader) == _batches(DataLoader(_dataset(10), batch_size=4))


def test_pin_memory_without_an_accelerator_warns_as_torch():
    with pytest.warns(UserWarning, match="no accelerator is found"):
        DataLoader(_dataset(), pin_memory=True)


def test_workers_collate_straight_into_shared_memory(monkeypatch):
    """The batch is stacked into a new shared storage, not stacked and then copied into one: the (forked)
    worker cannot move storages into shared memory here, and sending one that is not there would fail."""
    from jitorch.runtime import shared_memory

    monkeypatch.setattr(shared_memory, "share_storages", lambda storages: None)
    x, y = next(iter(DataLoader(_dataset(), batch_size=8, num_workers=1)))
    assert x.is_shared() and y.is_shared() and x.tolist() == [[2.0 * i, 2.0 * i + 1] for i in range(8)]
