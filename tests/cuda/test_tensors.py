"""CUDA tensors on a fake device: creation, transfers, writes, printing, memory and device errors."""

import gc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
from jitorch.runtime.cuda_memory import CudaStorage


def test_creation_ops_take_a_cuda_device(fake):
    for t in (jt.zeros(2, 3, device="cuda"), jt.ones(2, 3, device=jt.device("cuda", 0)),
              jt.full((2, 3), 7, device="cuda:0"), jt.eye(3, device="cuda")[:2]):
        assert t.device == jt.device("cuda:0") and t.is_cuda and isinstance(t._storage, CudaStorage)
    assert jt.arange(5, device="cuda").cpu().tolist() == [0, 1, 2, 3, 4]
    assert jt.full((2,), 7, device="cuda").cpu().tolist() == [7, 7]
    assert jt.tensor([[1.5, 2.0]], device="cuda").tolist() == [[1.5, 2.0]]
    assert jt.empty(4, dtype=jt.int32, device="cuda").dtype == jt.int32
    assert jt.randn(3, 4, device="cuda").shape == (3, 4)


def test_to_cuda_cpu_and_back_keeps_values_shape_and_dtype(fake):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    c = jt.from_numpy(x).cuda()
    assert c.device.type == "cuda" and c.shape == (3, 4) and c.dtype == jt.float32
    back = c.cpu()
    assert back.device == jt.device("cpu")
    np.testing.assert_array_equal(back.numpy(), x)


def test_to_accepts_a_device_a_dtype_or_another_tensor(fake):
    x = jt.arange(6).reshape(2, 3)
    on = jt.zeros(1, dtype=jt.float64, device="cuda")
    y = x.to(on)
    assert y.device.type == "cuda" and y.dtype == jt.float64
    np.testing.assert_array_equal(y.cpu().numpy(), np.arange(6, dtype=np.float64).reshape(2, 3))
    z = x.to("cuda", jt.float16)
    assert z.dtype == jt.float16 and z.to(jt.int64).cpu().tolist() == [[0, 1, 2], [3, 4, 5]]


def test_to_the_same_device_is_the_tensor_itself(fake):
    c = jt.ones(3, device="cuda")
    assert c.to("cuda") is c and c.cuda() is c and c.to("cuda:0") is c
    assert c.to("cuda", copy=True) is not c


def test_non_contiguous_views_transfer_their_own_elements(fake):
    base = jt.arange(24.0).reshape(4, 6).cuda()
    view = base[1:, ::2].t()
    expected = np.arange(24.0).reshape(4, 6)[1:, ::2].T
    np.testing.assert_array_equal(view.cpu().numpy(), expected)
    np.testing.assert_array_equal(view.contiguous().cpu().numpy(), expected)


def test_item_tolist_and_repr_copy_to_the_host(fake):
    c = jt.tensor([[1.0, 2.5], [3.0, 4.0]], device="cuda")
    assert c[0, 1].item() == 2.5 and c.tolist() == [[1.0, 2.5], [3.0, 4.0]]
    assert repr(c) == "tensor([[1.0000, 2.5000],\n        [3.0000, 4.0000]], device='cuda:0')"
    assert float(c.sum()) == 10.5 and bool(c[0, 0])


def test_numpy_of_a_cuda_tensor_raises_as_in_torch(fake):
    with pytest.raises(TypeError, match=r"can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu\(\)"):
        jt.ones(2, device="cuda").numpy()


def test_copy_between_devices_with_non_blocking(fake):
    dst = jt.zeros(2, 3, device="cuda")
    dst.copy_(jt.tensor([1.0, 2.0, 3.0]), non_blocking=True)
    assert dst.tolist() == [[1.0, 2.0, 3.0]] * 2
    assert ("htod", 24, True) in fake.copies
    host = jt.zeros(2, 3, dtype=jt.int64)
    host.copy_(dst)
    assert host.tolist() == [[1, 2, 3]] * 2
    moved = jt.ones(4).to("cuda", non_blocking=True)
    assert fake.copies[-1] == ("htod", 16, True) and moved.tolist() == [1.0] * 4


def test_copy_within_the_device_broadcasts_and_casts(fake):
    dst = jt.zeros(2, 3, dtype=jt.float64, device="cuda")
    dst.copy_(jt.tensor([1, 2, 3], dtype=jt.int32, device="cuda"))
    assert dst.tolist() == [[1.0, 2.0, 3.0]] * 2 and dst.dtype == jt.float64


def test_writes_into_strided_views(fake):
    x = jt.zeros(3, 4, device="cuda")
    x[:, 1] = 5.0
    x[0] = jt.arange(4.0, device="cuda")
    x.t()[3].copy_(jt.tensor([7.0, 8.0, 9.0]))
    expected = np.zeros((3, 4), np.float32)
    expected[:, 1] = 5
    expected[0] = np.arange(4)
    expected[:, 3] = [7, 8, 9]
    np.testing.assert_array_equal(x.cpu().numpy(), expected)
    assert x._version == 3


def test_in_place_ops_write_device_memory(fake):
    x = jt.arange(4.0, device="cuda")
    address = x.data_ptr()
    x.mul_(2).add_(1)
    assert x.data_ptr() == address and x.tolist() == [1.0, 3.0, 5.0, 7.0]


def test_memory_returns_to_the_pool_when_the_last_tensor_dies(fake):
    gc.disable()
    try:
        before = jt.cuda.memory_allocated()
        x = jt.ones(1000, device="cuda")
        view = x[10:]
        assert jt.cuda.memory_allocated() == before + 4096
        address = x.data_ptr()
        del x
        assert jt.cuda.memory_allocated() == before + 4096  # the view still uses it
        del view
        assert jt.cuda.memory_allocated() == before
        assert jt.ones(900, device="cuda").data_ptr() == address  # reused at once
    finally:
        gc.enable()


def test_mixing_devices_raises_torchs_error(fake):
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device, but found at least two "
                                           "devices, cuda:0 and cpu!"):
        jt.ones(2, device="cuda") + jt.ones(2)


def test_mixing_devices_in_a_list_argument_raises(fake):
    with pytest.raises(RuntimeError, match="found at least two devices, cuda:0 and cpu!"):
        jt.cat([jt.ones(2, device="cuda"), jt.ones(2)])


def test_mixing_devices_in_a_matmul_raises(fake):
    with pytest.raises(RuntimeError, match="found at least two devices, cpu and cuda:0!"):
        jt.ones(2, 2) @ jt.ones(2, 2, device="cuda")


def test_a_zero_dim_cpu_tensor_joins_cuda_operands(fake):
    y = jt.arange(3.0, device="cuda") * jt.tensor(2.0)
    assert y.device.type == "cuda" and y.tolist() == [0.0, 2.0, 4.0]


def test_a_missing_device_ordinal_raises(fake):
    with pytest.raises(RuntimeError, match=r"invalid device ordinal \(device 1 requested, device_count\(\) is 1\)"):
        jt.zeros(2, device="cuda:1")


def test_the_fake_device_refuses_accesses_outside_device_memory(fake):
    with pytest.raises(ValueError, match="outside device memory"):
        fake.upload(16, np.ones(4, np.float32))


@given(st.lists(st.integers(1, 5), min_size=0, max_size=3), st.sampled_from([jt.float32, jt.int64, jt.bool,
                                                                                jt.float16]))
def test_round_trips_preserve_values(shape, dtype):
    from jitorch.runtime.cuda_backend import use_backend
    from jitorch.backends.cuda.fake import FakeBackend
    values = np.random.default_rng(0).standard_normal(shape) * 10
    x = jt.tensor(values).to(dtype)
    with use_backend(FakeBackend()):
        back = x.cuda().cpu()
    assert back.dtype == dtype and back.shape == x.shape
    np.testing.assert_array_equal(back.numpy(), x.numpy())
