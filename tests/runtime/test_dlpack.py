"""The DLPack capsule layer: names, renaming on consumption, and deleters called exactly once (ours by
NumPy and torch, theirs by us), also when a consumer drops a capsule with its exception already set."""

import gc
import sys

import numpy as np
import pytest
import torch

from jitorch.runtime import dlpack
from jitorch.runtime import dtypes as dt


class Owner:
    """The memory a capsule keeps alive; its reference count tells whether a deleter ran (and how often)."""

    def __init__(self, n=6, dtype=np.float64):
        self.array = np.arange(n, dtype=dtype)


def capsule_of(owner, versioned, dtype=dt.float64, shape=(2, 3), strides=(3, 1), read_only=False):
    return dlpack.export(owner.array.ctypes.data, (dlpack.kDLCPU, 0), dtype, shape, strides, owner,
                         versioned=versioned, read_only=read_only)


class Producer:
    """A minimal producer: hands out `capsule_of` its owner, versioned when asked with max_version >= 1."""

    def __init__(self, owner, **kw):
        self.owner, self.kw = owner, kw

    def __dlpack_device__(self):
        return (dlpack.kDLCPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        versioned = max_version is not None and max_version[0] >= 1
        return capsule_of(self.owner, versioned, **self.kw)


@pytest.mark.parametrize("versioned, name", [(False, "dltensor"), (True, "dltensor_versioned")])
def test_capsule_names_and_renaming_on_consumption(versioned, name):
    owner = Owner()
    cap = capsule_of(owner, versioned)
    assert f'"{name}"' in repr(cap) and dlpack.capsule_kind(cap) is versioned
    imported = dlpack.consume(cap)
    assert f'"used_{name}"' in repr(cap) and dlpack.capsule_kind(cap) is None
    assert imported.shape == (2, 3) and imported.strides == (3, 1) and imported.dtype is dt.float64
    assert imported.data == owner.array.ctypes.data
    with pytest.raises(RuntimeError, match="consumed only once"):
        dlpack.consume(cap)


@pytest.mark.parametrize("versioned", [False, True])
def test_an_unconsumed_capsule_releases_its_memory_when_it_dies(versioned):
    owner = Owner()
    before = sys.getrefcount(owner)
    cap = capsule_of(owner, versioned)
    assert sys.getrefcount(owner) == before + 1
    del cap
    assert sys.getrefcount(owner) == before


@pytest.mark.parametrize("consumer", [np.from_dlpack, torch.from_dlpack])
def test_a_consumer_calls_our_deleter_once_when_done(consumer):
    owner = Owner()
    before = sys.getrefcount(owner)
    out = consumer(Producer(owner))
    assert sys.getrefcount(owner) == before + 1  # the consumer's array holds the memory
    owner.array[0] = 42  # shared, not copied (NumPy before 2 makes what it imports read-only)
    assert out[0, 0] == 42
    del out
    gc.collect()
    assert sys.getrefcount(owner) == before  # released, and once: twice would have gone below


def test_a_consumer_that_refuses_a_capsule_keeps_its_own_error():
    # NumPy drops the capsule with its RuntimeError already set: the destructor must leave that error alone
    owner = Owner(4, np.uint16)
    before = sys.getrefcount(owner)
    with pytest.raises(RuntimeError, match="Unsupported dtype in DLTensor"):
        np.from_dlpack(Producer(owner, dtype=dt.bfloat16, shape=(4,), strides=(1,)))
    assert sys.getrefcount(owner) == before


def test_consuming_numpy_capsules_calls_numpys_deleter_once():
    a = np.arange(5.0)
    before = sys.getrefcount(a)
    imported = dlpack.consume(a.__dlpack__())
    assert sys.getrefcount(a) == before + 1
    view = dlpack.host_array(imported, 5)
    del imported
    assert np.shares_memory(view, a) and sys.getrefcount(a) == before + 1
    del view
    assert sys.getrefcount(a) == before
    assert sys.getrefcount(a) == before  # and not again


def test_a_newer_major_version_is_refused_and_left_for_the_producer():
    owner = Owner()
    before = sys.getrefcount(owner)
    cap = capsule_of(owner, True)
    managed = dlpack.DLManagedTensorVersioned.from_address(dlpack._api.PyCapsule_GetPointer(cap, dlpack.NAMES[True]))
    assert (managed.version.major, managed.version.minor) == dlpack.VERSION
    managed.version.major = 2
    with pytest.raises(RuntimeError, match="unsupported DLPack capsule major version: 2"):
        dlpack.consume(cap)
    assert dlpack.capsule_kind(cap) is True  # not consumed
    del cap
    assert sys.getrefcount(owner) == before


def test_the_versioned_read_only_flag_is_read():
    owner = Owner()
    imported = dlpack.consume(capsule_of(owner, True, read_only=True))
    assert imported.read_only
    arr = dlpack.host_array(imported, 6)
    assert not arr.flags.writeable and np.shares_memory(arr, owner.array)


@pytest.mark.parametrize("code, bits, lanes, message", [
    (dlpack.kDLComplex, 64, 1, "complex64"), (dlpack.kDLFloat, 128, 1, "float128"),
    (dlpack.kDLFloat, 32, 4, "float32 x4 lanes"), (10, 8, 1, "float8_e4m3fn"),
])
def test_dtypes_jitorch_lacks_are_a_buffer_error_naming_them(code, bits, lanes, message):
    owner = Owner()
    cap = capsule_of(owner, True)
    managed = dlpack.DLManagedTensorVersioned.from_address(dlpack._api.PyCapsule_GetPointer(cap, dlpack.NAMES[True]))
    managed.dl_tensor.dtype = dlpack.DLDataType(code, bits, lanes)
    with pytest.raises(BufferError, match=message):
        dlpack.consume(cap)


def test_devices_jitorch_lacks_are_a_buffer_error_naming_them():
    cap = capsule_of(Owner(), False)
    managed = dlpack.DLManagedTensor.from_address(dlpack._api.PyCapsule_GetPointer(cap, dlpack.NAMES[False]))
    managed.dl_tensor.device.device_type = dlpack.DLDeviceType.kDLMetal
    with pytest.raises(BufferError, match="unsupported device type kDLMetal"):
        dlpack.consume(cap)


def test_dtype_codes_follow_dlpack_h():
    assert dlpack.dl_dtype(dt.bool) == (6, 8)
    assert dlpack.dl_dtype(dt.bfloat16) == (4, 16)
    assert dlpack.dl_dtype(dt.float16) == (2, 16)
    assert dlpack.dl_dtype(dt.int8) == (0, 8)
    assert dlpack.dl_dtype(dt.uint64) == (1, 64)
