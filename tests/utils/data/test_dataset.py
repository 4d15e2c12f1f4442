"""Datasets and random_split."""

from __future__ import annotations

import pytest

import jitorch as jt
from jitorch.utils.data import (
    ChainDataset, ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset, random_split,
)


class Squares(Dataset):
    def __init__(self, n):
        self.n = n

    def __getitem__(self, i):
        return i * i

    def __len__(self):
        return self.n


class Count(IterableDataset):
    def __init__(self, start, stop):
        self.start, self.stop = start, stop

    def __iter__(self):
        return iter(range(self.start, self.stop))

    def __len__(self):
        return self.stop - self.start


def test_tensor_dataset_slices_along_dim0():
    x, y = jt.arange(12.0).view(4, 3), jt.tensor([0, 1, 0, 1])
    ds = TensorDataset(x, y)
    assert len(ds) == 4
    xi, yi = ds[2]
    assert xi.tolist() == [6.0, 7.0, 8.0] and yi.tolist() == 0


def test_tensor_dataset_size_mismatch():
    with pytest.raises(AssertionError, match=r"Size mismatch between tensors: first dims \[4, 3\]"):
        TensorDataset(jt.zeros(4, 2), jt.zeros(3))


def test_tensor_dataset_needs_tensors():
    with pytest.raises(TypeError, match="TensorDataset expects tensors, got list"):
        TensorDataset([1, 2])


def test_base_dataset_getitem_must_be_defined():
    with pytest.raises(NotImplementedError, match="Subclasses of Dataset should implement __getitem__"):
        Dataset()[0]


def test_subset_and_concat():
    sub = Subset(Squares(10), [3, 1, 4])
    assert len(sub) == 3 and [sub[i] for i in range(3)] == [9, 1, 16] and sub.__getitems__([0, 2]) == [9, 16]
    cat = Squares(3) + Squares(2)
    assert isinstance(cat, ConcatDataset) and cat.cumulative_sizes == [3, 5]
    assert [cat[i] for i in range(5)] == [0, 1, 4, 0, 1] and cat[-1] == 1 and cat[-5] == 0


def test_concat_negative_index_out_of_range():
    with pytest.raises(ValueError, match="absolute value of index should not exceed dataset length"):
        ConcatDataset([Squares(2)])[-3]


def test_concat_empty():
    with pytest.raises(AssertionError, match="datasets should not be an empty iterable"):
        ConcatDataset([])


def test_concat_rejects_iterable():
    with pytest.raises(AssertionError, match="ConcatDataset does not support IterableDataset"):
        ConcatDataset([Count(0, 2)])


def test_iterable_datasets_chain():
    chained = Count(0, 2) + Count(5, 7)
    assert isinstance(chained, ChainDataset) and list(chained) == [0, 1, 5, 6] and len(chained) == 4


def test_random_split_lengths_partition_with_seed():
    parts = random_split(range(10), [3, 7], generator=jt.Generator().manual_seed(1))
    again = random_split(range(10), [3, 7], generator=jt.Generator().manual_seed(1))
    assert [len(p) for p in parts] == [3, 7]
    assert sorted(parts[0].indices + parts[1].indices) == list(range(10))
    assert [p.indices for p in parts] == [p.indices for p in again]


def test_random_split_fractions_round_robin_remainder():
    assert [len(p) for p in random_split(range(10), [0.33, 0.33, 0.34])] == [4, 3, 3]
    assert [len(p) for p in random_split(range(11), [0.5, 0.5])] == [6, 5]


def test_random_split_warns_on_empty_split():
    with pytest.warns(UserWarning, match="Length of split at index 1 is 0"):
        random_split(range(2), [1.0, 0.0])


def test_random_split_uses_default_generator():
    jt.manual_seed(5)
    a = random_split(range(8), [4, 4])[0].indices
    jt.manual_seed(5)
    assert random_split(range(8), [4, 4])[0].indices == a


def test_random_split_bad_lengths():
    with pytest.raises(ValueError, match="Sum of input lengths does not equal the length of the input dataset!"):
        random_split(range(10), [3, 3])
