"""Turning a list of samples into a batch: ``default_collate`` and ``default_convert``, as torch's."""

from __future__ import annotations

import collections.abc
import copy
import math

import numpy as np

from ... import Tensor, as_tensor, empty, float64, stack, tensor
from ...runtime.storage import Storage
from . import worker_info

__all__ = ["default_collate", "default_convert"]

_ERROR = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"


def _is_namedtuple(obj):
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


def _is_string_array(arr):
    return arr.dtype.kind in "SaUO"


def _rebuild_mapping(elem, values):
    """A mapping of ``elem``'s type holding ``values`` (a plain dict when that type can't be built so)."""
    if isinstance(elem, collections.abc.MutableMapping):
        clone = copy.copy(elem)
        clone.update(values)
        return clone
    try:
        return type(elem)(values)
    except TypeError:
        return values


def _rebuild_sequence(elem, items):
    """A sequence like ``elem`` holding ``items``: lists keep their type, tuples become lists (as torch)."""
    if isinstance(elem, tuple):
        return items
    if isinstance(elem, collections.abc.MutableSequence):
        clone = copy.copy(elem)
        clone[:] = items
        return clone
    try:
        return type(elem)(items)
    except TypeError:
        return items


def default_collate(batch):
    """Stack a list of samples into a batch, recursing through dicts, named tuples, tuples and lists.

    Tensors and NumPy arrays stack along a new dim 0; Python floats become a
    float64 tensor, ints (and bools) an int64 (bool) tensor, NumPy scalars a
    tensor of their dtype; strings stay as they are (a tuple of them when they are one field of
    sequence samples, as torch). Tuples give lists.
    """
    elem = batch[0]
    if isinstance(elem, Tensor):
        if _in_worker() and elem.device.type == "cpu":
            return stack(list(batch), 0, out=_shared_empty((len(batch), *elem.shape), elem.dtype))
        return stack(list(batch), 0)
    if isinstance(elem, np.ndarray):
        if _is_string_array(elem):
            raise TypeError(_ERROR.format(elem.dtype))
        return default_collate([as_tensor(b) for b in batch])
    if isinstance(elem, (np.bool_, np.number)):
        return _for_transfer(tensor(np.array(batch)))
    if isinstance(elem, float):
        return _for_transfer(tensor(batch, dtype=float64))
    if isinstance(elem, int):
        return _for_transfer(tensor(batch))
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return _rebuild_mapping(elem, {key: default_collate([d[key] for d in batch]) for key in elem})
    if _is_namedtuple(elem):
        return type(elem)(*(default_collate(samples) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(sample) != size for sample in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        # each field's samples stay the tuple zip makes: torch hands strings back as that tuple
        return _rebuild_sequence(elem, [default_collate(samples) for samples in zip(*batch)])
    raise TypeError(_ERROR.format(type(elem)))


def _in_worker():
    return worker_info.CURRENT is not None


def _shared_empty(shape, dtype):
    """A new tensor in shared memory of its own: a DataLoader worker collates into the memory its batch travels
    in, so sending it needs no copy, nor a search for other tensors on the memory (as torch's workers do)."""
    return empty(0, dtype=dtype).set_(Storage.new_shared(math.prod(shape), dtype), 0, shape)


def _for_transfer(t):
    """``t``, in shared memory of its own when this is a DataLoader worker."""
    return _shared_empty(t.shape, t.dtype).copy_(t) if _in_worker() else t


def default_convert(data):
    """Convert one sample without batching: NumPy arrays and scalars become tensors, containers recurse."""
    if isinstance(data, Tensor):
        return data
    if isinstance(data, np.ndarray):
        return data if _is_string_array(data) else as_tensor(data)
    if isinstance(data, (np.bool_, np.number)):
        return as_tensor(data)
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, collections.abc.Mapping):
        return _rebuild_mapping(data, {key: default_convert(value) for key, value in data.items()})
    if _is_namedtuple(data):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence):
        return _rebuild_sequence(data, [default_convert(d) for d in data])
    return data
