"""DLPack exchange with NumPy and torch (the oracles), both ways: zero copy (shared pointers, writes seen on the
other side), strides, offsets, every dtype, 0-d and empty tensors, read-only arrays, the protocol's keywords,
torch's errors, and CUDA tensors on the fake device."""

import gc
import weakref

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.utils.dlpack

import jitorch as jt
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.runtime.cuda_backend import use_backend
from jitorch.runtime.dlpack import DLDeviceType

NUMPY_DTYPES = [jt.bool, jt.uint8, jt.int8, jt.int16, jt.int32, jt.int64, jt.float16, jt.float32, jt.float64,
                jt.uint16, jt.uint32, jt.uint64]
ALL = NUMPY_DTYPES + [jt.bfloat16]
TORCH = {d: getattr(torch, d.name) for d in ALL}


def values(dtype, shape=(3, 4)):
    return jt.arange(int(np.prod(shape))).reshape(shape).remainder(2 if dtype is jt.bool else 100).to(dtype)


def one(dtype):
    return True if dtype is jt.bool else 7


# NumPy ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=str)
def test_numpy_reads_jitorch_memory_without_a_copy(dtype):
    x = values(dtype)
    a = np.from_dlpack(x)
    assert a.dtype == dtype.np and a.shape == (3, 4) and a.ctypes.data == x.data_ptr()
    np.testing.assert_array_equal(a, x.numpy())
    x[1, 2] = one(dtype)
    assert a[1, 2] == one(dtype)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=str)
def test_jitorch_reads_numpy_memory_without_a_copy(dtype):
    a = values(dtype).numpy().copy()
    x = jt.from_dlpack(a)
    assert x.dtype is dtype and x.shape == (3, 4) and x.data_ptr() == a.ctypes.data
    a[2, 3] = one(dtype)
    assert x[2, 3].item() == one(dtype)
    x[0, 0] = one(dtype)
    assert a[0, 0] == one(dtype)


def test_numpy_has_no_bfloat16_in_dlpack():
    with pytest.raises(RuntimeError, match="Unsupported dtype in DLTensor"):
        np.from_dlpack(jt.ones(2, dtype=jt.bfloat16))
    with pytest.raises(BufferError, match="only supports signed/unsigned integers, float and complex"):
        jt.from_dlpack(np.ones(2, ml_dtypes.bfloat16))


@pytest.mark.parametrize("index", [(slice(1, None), slice(None, None, 2)), (slice(None), 1), (1,)], ids=str)
def test_strides_and_storage_offsets_cross_to_numpy(index):
    x = jt.arange(24.0).view(2, 3, 4).transpose(0, 2)[index]
    a = np.from_dlpack(x)
    assert a.ctypes.data == x.data_ptr()
    assert a.strides == tuple(s * 4 for s in x.stride())
    np.testing.assert_array_equal(a, x.numpy())


def test_strided_numpy_views_come_in_shared():
    base = np.arange(60.0).reshape(3, 4, 5)
    a = base[1:, ::2, 1::3].transpose(2, 0, 1)
    x = jt.from_dlpack(a)
    assert x.data_ptr() == a.ctypes.data and x.stride() == tuple(s // 8 for s in a.strides)
    np.testing.assert_array_equal(x.numpy(), a)
    x.mul_(-1)
    np.testing.assert_array_equal(a, -np.arange(60.0).reshape(3, 4, 5)[1:, ::2, 1::3].transpose(2, 0, 1))


def test_negative_strides_are_copied_or_refused_with_copy_false():
    # jitorch strides are never negative; torch 2.13 aborts the process on these (an uncaught C++ error)
    a = np.arange(12.0).reshape(3, 4)[::-1, ::-2]
    x = jt.from_dlpack(a)
    np.testing.assert_array_equal(x.numpy(), a)
    assert not np.shares_memory(x.numpy(), a)
    with pytest.raises(BufferError, match=r"strides \[-4, -2\] are negative.*copy=None or copy=True"):
        jt.from_dlpack(a, copy=False)


@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3)], ids=str)
def test_zero_dim_and_empty_tensors_cross_both_ways(shape):
    x = jt.full(shape, 2.5)
    a = np.from_dlpack(x)
    assert a.shape == shape and a.dtype == np.float32
    back = jt.from_dlpack(np.full(shape, 1.5))
    assert back.shape == shape and back.dtype is jt.float64
    np.testing.assert_array_equal(back.numpy(), np.full(shape, 1.5))
    t = torch.from_dlpack(x)
    assert tuple(t.shape) == shape
    assert jt.from_dlpack(torch.full(shape, 3)).shape == shape


# NumPy reads and writes versioned capsules (with the read-only flag) from 2.1; before, only legacy ones
NUMPY_VERSIONED = np.lib.NumpyVersion(np.__version__) >= "2.1.0"


def test_read_only_numpy_arrays_stay_read_only_and_shared():
    a = np.arange(4.0)
    a.flags.writeable = False
    if not NUMPY_VERSIONED:  # a legacy capsule cannot say read-only, so NumPy refuses to make one
        with pytest.raises(BufferError, match="Cannot export readonly array"):
            jt.from_dlpack(a)
    else:
        x = jt.from_dlpack(a)  # NumPy signals read-only in a versioned capsule
        assert x.data_ptr() == a.ctypes.data
        with pytest.raises(ValueError, match="read-only"):
            x.add_(1)
    np.testing.assert_array_equal(a, np.arange(4.0))


def test_read_only_memory_is_flagged_in_versioned_capsules_and_refused_in_legacy_ones():
    a = np.arange(4.0)
    a.flags.writeable = False
    x = jt.from_numpy(a)
    back = jt.from_dlpack(x.__dlpack__(max_version=(1, 0)))
    assert back.data_ptr() == a.ctypes.data
    with pytest.raises(ValueError, match="read-only"):
        back.add_(1)
    with pytest.raises(BufferError, match="Cannot export readonly array"):
        x.__dlpack__()
    if NUMPY_VERSIONED:
        shared = np.from_dlpack(x)
        assert not shared.flags.writeable and np.shares_memory(shared, a)


# torch ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_torch_reads_jitorch_memory_without_a_copy(dtype):
    x = values(dtype)[:, 1:]
    t = torch.from_dlpack(x)
    assert t.dtype == TORCH[dtype] and t.data_ptr() == x.data_ptr() and t.stride() == x.stride()
    assert t.tolist() == x.tolist()
    t[0, 0] = one(dtype)
    assert x[0, 0].item() == one(dtype)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_jitorch_reads_torch_memory_without_a_copy(dtype):
    t = torch.arange(20).reshape(4, 5).remainder(2 if dtype is jt.bool else 100).to(TORCH[dtype])[1:, ::2]
    x = jt.from_dlpack(t)
    assert x.dtype is dtype and x.data_ptr() == t.data_ptr() and x.stride() == t.stride()
    assert x.tolist() == t.tolist()
    t[2, 1] = one(dtype)
    assert x[2, 1].item() == one(dtype)


def test_the_exported_memory_outlives_the_producer_tensor():
    x = jt.arange(5.0)
    storage = weakref.ref(x._storage)
    t = torch.from_dlpack(x)
    del x
    gc.collect()
    assert storage() is not None and t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    del t
    gc.collect()
    assert storage() is None


def test_torch_memory_outlives_the_torch_tensor():
    t = torch.arange(5.0)
    x = jt.from_dlpack(t)
    del t
    gc.collect()
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_tensors_requiring_grad_are_refused_as_torch_does():
    x = jt.ones(2, requires_grad=True)
    with pytest.raises(BufferError, match=r"Can't export tensors that require gradient, use tensor.detach\(\)"):
        torch.from_dlpack(x)
    with pytest.raises(BufferError, match="require gradient"):
        torch.from_dlpack(torch.ones(2, requires_grad=True))  # the oracle agrees
    assert torch.from_dlpack(x.detach()).data_ptr() == x.data_ptr()


def test_dtypes_jitorch_lacks_are_a_buffer_error():
    with pytest.raises(BufferError, match="jitorch has no dtype for DLPack's complex64"):
        jt.from_dlpack(torch.ones(2, dtype=torch.complex64))


# The protocol's keywords -----------------------------------------------------------------------------------

def test_max_version_chooses_the_capsule_kind():
    x = jt.arange(3)
    assert '"dltensor"' in repr(x.__dlpack__())
    assert '"dltensor"' in repr(x.__dlpack__(max_version=(0, 8)))
    assert '"dltensor_versioned"' in repr(x.__dlpack__(max_version=(1, 0)))
    assert '"dltensor_versioned"' in repr(x.__dlpack__(max_version=(1, 3)))
    assert x.__dlpack_device__() == (DLDeviceType.kDLCPU, 0)
    assert torch.arange(3).__dlpack_device__() == (1, 0)


def test_copy_true_gives_independent_memory_and_copy_false_shares():
    x = jt.arange(4.0)
    t = torch.from_dlpack(x, copy=True)
    assert t.data_ptr() != x.data_ptr() and t.tolist() == x.tolist()
    assert torch.from_dlpack(x, copy=False).data_ptr() == x.data_ptr()
    a = np.arange(3.0)
    assert jt.from_dlpack(a, device="cpu").data_ptr() == a.ctypes.data  # no move, no copy
    y = jt.from_dlpack(np.arange(3.0), copy=True)
    t = torch.arange(3.0)
    assert jt.from_dlpack(t, copy=True).data_ptr() != t.data_ptr()
    assert y.tolist() == [0.0, 1.0, 2.0]


def test_streams_on_cpu_follow_torch():
    x = jt.arange(3)
    assert jt.from_dlpack(x.__dlpack__(stream=-1)).data_ptr() == x.data_ptr()
    with pytest.raises(AssertionError, match="stream should be None on cpu"):
        x.__dlpack__(stream=5)
    with pytest.raises(AssertionError, match="stream should be None on cpu"):
        torch.arange(3).__dlpack__(stream=5)
    with pytest.raises(TypeError, match="stream must be ``int`` or ``none``"):
        x.__dlpack__(stream="s")


def test_dl_device_cpu_is_accepted_and_others_are_refused_without_cuda():
    x = jt.arange(3)
    assert jt.from_dlpack(x.__dlpack__(dl_device=(DLDeviceType.kDLCPU, 0))).data_ptr() == x.data_ptr()
    with pytest.raises(BufferError, match="without a copy, and copy=False"):
        x.__dlpack__(dl_device=(DLDeviceType.kDLCUDA, 0), copy=False)
    with pytest.raises(BufferError, match="jitorch has kDLCPU and kDLCUDA tensors"):
        x.__dlpack__(dl_device=(DLDeviceType.kDLMetal, 0))


def test_meta_tensors_and_non_producers_get_torchs_errors():
    with pytest.raises(BufferError, match="Cannot pack tensors on meta"):
        jt.empty(2, device="meta").__dlpack__()
    with pytest.raises(ValueError, match="Unknown device type meta for Dlpack"):
        jt.empty(2, device="meta").__dlpack_device__()
    with pytest.raises(RuntimeError, match="invalid capsule"):
        jt.from_dlpack([1, 2])


def test_older_producers_without_max_version_get_a_legacy_request():
    calls = []

    class Legacy:  # NumPy 1.26's signature: only ``stream``
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, stream=None):
            calls.append(stream)
            return jt.arange(3).__dlpack__()

    assert jt.from_dlpack(Legacy()).tolist() == [0, 1, 2] and calls == [None]
    assert jt.from_dlpack(Legacy(), copy=True).tolist() == [0, 1, 2]


# CUDA on the fake device -----------------------------------------------------------------------------------

@pytest.fixture
def fake():
    with use_backend(FakeBackend(2)) as backend:
        yield backend


def test_cuda_tensors_cross_as_device_memory(fake):
    c = jt.arange(12.0, device="cuda").view(3, 4)[:, 1:]
    assert c.__dlpack_device__() == (DLDeviceType.kDLCUDA, 0)
    x = jt.from_dlpack(c)
    assert x.device == jt.device("cuda:0") and x.data_ptr() == c.data_ptr() and x.stride() == (4, 1)
    x.fill_(3.0)
    assert c.cpu().tolist() == [[3.0] * 3] * 3
    with pytest.raises(RuntimeError, match="Unsupported device in DLTensor"):
        np.from_dlpack(c)  # NumPy reads host memory only


def test_cuda_memory_stays_until_the_last_consumer_goes(fake):
    c = jt.arange(1000.0, device="cuda")
    allocated = jt.cuda.memory_allocated()
    x = jt.from_dlpack(c)
    del c
    gc.collect()
    assert jt.cuda.memory_allocated() == allocated and x[999].item() == 999.0
    del x
    gc.collect()
    assert jt.cuda.memory_allocated() == 0


def test_cuda_consumers_pass_their_stream_and_producers_check_it(fake):
    seen = []
    c = jt.arange(3.0, device="cuda")

    class Recording:
        def __dlpack_device__(self):
            return c.__dlpack_device__()

        def __dlpack__(self, **kw):
            seen.append(kw)
            return c.__dlpack__(**kw)

    assert jt.from_dlpack(Recording()).data_ptr() == c.data_ptr()
    assert seen[0]["stream"] == 1 and seen[0]["max_version"] == (1, 0)  # the legacy default stream is 1
    with pytest.raises(BufferError, match="per-thread default stream is not supported"):
        c.__dlpack__(stream=2)
    with pytest.raises(AssertionError, match="unsupported stream on CUDA: 0"):
        c.__dlpack__(stream=0)
    jt.cuda.set_device(1)
    with pytest.raises(BufferError, match="different CUDA device index. Expected: 0. Current device: 1"):
        c.__dlpack__()


def test_device_keywords_copy_between_host_and_cuda(fake):
    c = jt.arange(4.0, device="cuda")
    h = jt.from_dlpack(c, device="cpu")
    assert h.device == jt.device("cpu") and h.tolist() == [0.0, 1.0, 2.0, 3.0]
    g = jt.from_dlpack(np.arange(3.0), device="cuda")
    assert g.device == jt.device("cuda:0") and g.cpu().tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="without copying"):
        jt.from_dlpack(c, device="cpu", copy=False)
    host = jt.from_dlpack(c.__dlpack__(dl_device=(DLDeviceType.kDLCPU, 0), max_version=(1, 0)))
    assert host.device == jt.device("cpu") and host.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert jt.from_dlpack(jt.zeros(0, device="cuda")).shape == (0,)
