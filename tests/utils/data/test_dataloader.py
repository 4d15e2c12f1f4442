"""DataLoader orders, batching, collation and option errors; samplers."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import jitorch as jt
from jitorch.utils.data import (
    BatchSampler, DataLoader, Dataset, IterableDataset, RandomSampler, SequentialSampler, SubsetRandomSampler,
    TensorDataset, default_collate, default_convert,
)


class Records(Dataset):
    """Samples of every kind default_collate handles."""

    def __init__(self, n):
        self.n = n

    def __getitem__(self, i):
        return {"x": jt.full((2,), float(i)), "id": i, "w": i / 2, "name": f"s{i}", "arr": np.full(3, i, np.int32)}

    def __len__(self):
        return self.n


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(jt.tensor([float(i)]) for i in range(self.n))

    def __len__(self):
        return self.n


def _dataset(n=10):
    return TensorDataset(jt.arange(float(n)).view(n, 1), jt.arange(n))


def _order(loader):
    return [i for _, y in loader for i in y.tolist()]


def test_sequential_batches_and_last_partial():
    loader = DataLoader(_dataset(), batch_size=4)
    batches = list(loader)
    assert len(loader) == 3 and [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0][0].shape == (4, 1) and batches[0][0].dtype is jt.float32


def test_drop_last():
    loader = DataLoader(_dataset(), batch_size=4, drop_last=True)
    assert len(loader) == 2 and [len(y) for _, y in loader] == [4, 4]


def test_shuffle_with_seeded_generator_is_reproducible():
    orders = [_order(DataLoader(_dataset(), batch_size=3, shuffle=True, generator=jt.Generator().manual_seed(7)))
              for _ in range(2)]
    assert orders[0] == orders[1] and sorted(orders[0]) == list(range(10)) and orders[0] != list(range(10))


def test_shuffle_draws_a_new_order_each_epoch():
    loader = DataLoader(_dataset(20), batch_size=5, shuffle=True, generator=jt.Generator().manual_seed(3))
    first, second = _order(loader), _order(loader)
    assert sorted(first) == sorted(second) == list(range(20)) and first != second


def test_shuffle_without_generator_follows_manual_seed():
    jt.manual_seed(11)
    a = _order(DataLoader(_dataset(), batch_size=2, shuffle=True))
    jt.manual_seed(11)
    assert _order(DataLoader(_dataset(), batch_size=2, shuffle=True)) == a


def test_collate_dicts_numbers_strings_arrays():
    batch = next(iter(DataLoader(Records(5), batch_size=3)))
    assert batch["x"].tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    assert batch["id"].dtype is jt.int64 and batch["id"].tolist() == [0, 1, 2]
    assert batch["w"].dtype is jt.float64 and batch["w"].tolist() == [0.0, 0.5, 1.0]
    assert batch["name"] == ["s0", "s1", "s2"]
    assert batch["arr"].dtype is jt.int32 and batch["arr"].shape == (3, 3)


def test_collate_tuples_give_lists_and_keep_container_types():
    Pair = collections.namedtuple("Pair", "a b")
    assert default_collate([(1, 2.0), (3, 4.0)])[0].tolist() == [1, 3]
    assert isinstance(default_collate([(1, 2.0), (3, 4.0)]), list)
    pair = default_collate([Pair(1, jt.zeros(2)), Pair(2, jt.ones(2))])
    assert isinstance(pair, Pair) and pair.a.tolist() == [1, 2] and pair.b.shape == (2, 2)
    od = default_collate([collections.OrderedDict(b=1, a=2)] * 2)
    assert isinstance(od, collections.OrderedDict) and list(od) == ["b", "a"]
    assert default_collate([True, False]).dtype is jt.bool
    assert default_collate([np.float32(1), np.float32(2)]).dtype is jt.float32
    nested = default_collate([[jt.zeros(1), {"k": 1}], [jt.ones(1), {"k": 2}]])
    assert nested[0].tolist() == [[0.0], [1.0]] and nested[1]["k"].tolist() == [1, 2]


def test_collate_string_fields_of_sequences_stay_tuples():
    # torch: the strings of one field come back as the tuple zip(*batch) made
    batch = default_collate([(1, "a"), (2, "b")])
    assert batch[0].tolist() == [1, 2] and batch[1] == ("a", "b")
    Pair = collections.namedtuple("Pair", "n name")
    assert default_collate([Pair(1, "x"), Pair(2, "y")]).name == ("x", "y")
    assert default_collate([["p", 1], ["q", 2]])[0] == ("p", "q")


def test_collate_unequal_lists():
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal size"):
        default_collate([[1, 2], [3]])


def test_collate_unsupported_type():
    with pytest.raises(TypeError, match="default_collate: batch must contain tensors, numpy arrays, numbers, dicts "
                                        "or lists; found <class 'object'>"):
        default_collate([object(), object()])


def test_collate_string_arrays():
    with pytest.raises(TypeError, match="found <U1"):
        default_collate([np.array(["a"]), np.array(["b"])])


def test_default_convert_without_batching():
    loader = DataLoader(Records(2), batch_size=None)
    sample = next(iter(loader))
    assert isinstance(sample["arr"], jt.Tensor) and sample["id"] == 0 and len(loader) == 2
    assert default_convert((np.zeros(2), 1))[0].dtype is jt.float64


def test_custom_collate_and_sampler():
    loader = DataLoader(_dataset(), batch_size=2, sampler=[9, 8, 7], collate_fn=lambda b: [y.tolist() for _, y in b])
    assert list(loader) == [[9, 8], [7]]


def test_batch_sampler():
    loader = DataLoader(_dataset(), batch_sampler=[[0, 5], [2]])
    assert [y.tolist() for _, y in loader] == [[0, 5], [2]] and len(loader) == 2


def test_iterable_dataset_batches():
    loader = DataLoader(Stream(5), batch_size=2)
    assert [b.shape for b in loader] == [(2, 1), (2, 1), (1, 1)] and len(loader) == 3
    assert len(DataLoader(Stream(5), batch_size=2, drop_last=True)) == 2


def test_samplers():
    assert list(SequentialSampler(range(3))) == [0, 1, 2]
    g = jt.Generator().manual_seed(0)
    draws = list(RandomSampler(range(4), replacement=True, num_samples=40, generator=g))
    assert len(draws) == 40 and set(draws) <= {0, 1, 2, 3}
    counts = collections.Counter(RandomSampler(range(3), num_samples=7, generator=g))
    assert sorted(counts.values()) == [2, 2, 3]  # two whole permutations, then one index of a third
    assert sorted(SubsetRandomSampler([5, 6, 7])) == [5, 6, 7]
    assert list(BatchSampler(range(5), 2, False)) == [[0, 1], [2, 3], [4]] and len(BatchSampler(range(5), 2, True)) == 2


OPTION_ERRORS = [
    (dict(num_workers=-1), "num_workers option should be non-negative"),
    (dict(timeout=-1), "timeout option should be non-negative"),
    (dict(prefetch_factor=2), "prefetch_factor option could only be specified in multiprocessing"),
    (dict(persistent_workers=True), "persistent_workers option needs num_workers > 0"),
    (dict(sampler=[0], shuffle=True), "sampler option is mutually exclusive with shuffle"),
    (dict(batch_sampler=[[0]], batch_size=2), "batch_sampler option is mutually exclusive with batch_size"),
    (dict(batch_size=None, drop_last=True), "batch_size=None option disables auto-batching"),
    (dict(batch_size=0), "batch_size should be a positive integer value, but got batch_size=0"),
    (dict(drop_last=1), "drop_last should be a boolean value, but got drop_last=1"),
]


@pytest.mark.parametrize("options, message", OPTION_ERRORS, ids=[m for _, m in OPTION_ERRORS])
def test_option_errors(options, message):
    with pytest.raises(ValueError, match=message):
        DataLoader(_dataset(), **options)


def test_iterable_dataset_refuses_shuffle():
    with pytest.raises(ValueError, match="DataLoader with IterableDataset: expected unspecified shuffle option, "
                                         "but got shuffle=True"):
        DataLoader(Stream(3), shuffle=True)


def test_random_sampler_errors():
    with pytest.raises(ValueError, match="num_samples should be a positive integer value, but got num_samples=0"):
        RandomSampler(range(3), num_samples=0)
    with pytest.raises(TypeError, match="replacement should be a boolean value, but got replacement=1"):
        RandomSampler(range(3), replacement=1)
