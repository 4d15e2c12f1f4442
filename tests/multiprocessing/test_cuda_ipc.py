"""CUDA tensors between processes through CUDA IPC handles, on the fake driver (tests/cuda/fake_driver.py).

What this covers: the parent and a forked child each run their own fake driver (the child installs a fresh one,
with none of the parent's allocations, contexts or handles). The fake driver's device memory lives in memory
files, and its ``cuIpcOpenMemHandle`` maps the exporter's file through ``/proc/PID/fd`` at a new address, so the
child reaches the parent's elements only through the handle, offset and size that crossed the queue: a write
by the child is seen by the parent, and a bug that sent the parent's pointer would hit memory the child's driver
does not know (CUDA_ERROR_INVALID_VALUE). Not covered: the real driver's handle format, peer access between
devices, and concurrent kernels in both processes (the GPU check script runs the real path on a GPU).
"""

import gc
from multiprocessing.reduction import ForkingPickler

import pytest

import jitorch as jt
import jitorch.multiprocessing as mp
from jitorch.multiprocessing import reductions
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.runtime import cuda_memory
from jitorch.runtime.cuda_backend import use_backend

from tests.cuda import fake_driver

FORK = mp.get_context("fork")


def _consumer(inbox, outbox):
    """The child: its own driver, then the parent's tensors read, written and sent back."""
    fake = fake_driver.install_in_process()
    handle, offset = inbox.get(timeout=30)  # a sender claiming more bytes than its allocation holds
    try:
        reductions.rebuild_cuda_tensor(jt.Tensor, handle, offset, 1 << 20, "float32", 0, "float32", (1 << 20,), (1,),
                                       0, False)
        oversized = "accepted"
    except RuntimeError as e:
        oversized = str(e)
    closed_oversized = fake.calls.count("cuIpcCloseMemHandle")
    x, y = inbox.get(timeout=30)
    again = inbox.get(timeout=30)          # y's storage once more: the handle is not opened twice
    report = {"x": x.tolist(), "y": y.tolist(), "same_storage": y.untyped_storage() is x.untyped_storage()
              and again.untyped_storage() is x.untyped_storage(), "x_ptr": x.data_ptr(),
              "opens": fake.calls.count("cuIpcOpenMemHandle"), "open_handles": cuda_memory.ipc_open_count(),
              "oversized": oversized, "closed_oversized": closed_oversized}
    y.copy_(jt.tensor([-1.0, -2.0, -3.0]))  # written through the mapping: the parent sees it
    outbox.put(y)                          # sent back with the parent's own handle
    inbox.get(timeout=30)                  # the parent has it: the queue's feeder thread lets go of y
    report["closes_before"] = fake.calls.count("cuIpcCloseMemHandle")
    del x, y, again
    gc.collect()
    report["closes_after"] = fake.calls.count("cuIpcCloseMemHandle")
    report["open_handles_after"] = cuda_memory.ipc_open_count()
    outbox.put(report)


def test_a_cuda_tensor_crosses_processes_as_an_ipc_handle(monkeypatch):
    fake = fake_driver.install(monkeypatch)
    x = jt.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], device="cuda")
    y = x[2:5]                             # a view: the handle's offset and the tensor's storage offset
    inbox, outbox = FORK.Queue(), FORK.Queue()
    child = FORK.Process(target=_consumer, args=(inbox, outbox))
    child.start()
    handle, offset, _ = cuda_memory.ipc_export(x.untyped_storage())
    inbox.put((handle, offset))
    inbox.put((x, y))
    inbox.put(y)
    back = outbox.get(timeout=60)
    inbox.put("received")
    report = outbox.get(timeout=60)
    child.join(30)
    assert child.exitcode == 0
    assert report["x"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and report["y"] == [2.0, 3.0, 4.0]
    assert "does not fit the 2097152 bytes of the allocation" in report["oversized"]
    assert report["closed_oversized"] == 1  # the mapping made for the refused storage is closed at once
    assert report["same_storage"] and report["opens"] == 2 and report["open_handles"] == 1
    assert report["x_ptr"] != x.data_ptr()  # the child's own mapping, not the parent's address
    # the handle is closed once, when the child's last storage on it died
    assert (report["closes_before"], report["closes_after"], report["open_handles_after"]) == (1, 2, 0)
    assert x.tolist() == [0.0, 1.0, -1.0, -2.0, -3.0, 5.0]
    # sent back, the tensor is a view of the parent's own storage: the parent never opens its own handle
    assert back.untyped_storage() is x.untyped_storage() and back.data_ptr() == y.data_ptr()
    assert "cuIpcOpenMemHandle" not in fake.calls and fake.calls.count("cuIpcGetMemHandle") >= 1


def test_the_message_is_plain_data_naming_only_the_rebuild_function(monkeypatch):
    fake_driver.install(monkeypatch)
    x = jt.ones(3, 4, device="cuda")[:, 1:]
    rebuild, args = reductions.reduce_tensor(x)
    assert rebuild is reductions.rebuild_cuda_tensor
    handle, offset, count, storage_dtype, index = args[1:6]
    assert isinstance(handle, bytes) and len(handle) == 64
    assert (offset, count, storage_dtype, index) == (x.untyped_storage().data_ptr() - _segment(x), 12, "float32", 0)
    assert args[6:] == ("float32", (3, 3), (4, 1), 1, False)
    assert all(type(a) in (bytes, int, str, tuple, bool) for a in args[1:])


def _segment(t):
    from jitorch.runtime import cuda_backend
    return cuda_backend.current().allocator(0).export(t.untyped_storage().data_ptr())


def test_an_exported_segment_is_kept_by_empty_cache(monkeypatch):
    fake = fake_driver.install(monkeypatch)
    x = jt.zeros(8, device="cuda")
    reductions.reduce_tensor(x)
    del x
    jt.cuda.empty_cache()
    assert "cuMemFree" not in fake.calls   # another process may still map it


def test_memory_that_cannot_be_exported_raises_before_anything_is_sent(monkeypatch):
    fake_driver.install(monkeypatch, ipc=False)  # a driver that refuses to export (CUDA_ERROR_NOT_SUPPORTED)
    x = jt.ones(4, device="cuda")
    with pytest.raises(RuntimeError, match=r"CUDA IPC cannot export .*CUDA_ERROR_NOT_SUPPORTED.*tensor\.cpu\(\)"):
        ForkingPickler.dumps(x)


def test_the_fake_device_refuses_to_export():
    with use_backend(FakeBackend()), pytest.raises(RuntimeError, match="CUDA IPC cannot export memory of the fake"):
        ForkingPickler.dumps(jt.ones(2, device="cuda"))


def test_a_handle_of_the_wrong_size_is_refused(monkeypatch):
    fake_driver.install(monkeypatch)
    with pytest.raises(RuntimeError, match="a CUDA IPC memory handle is 64 bytes, got 3"):
        reductions.rebuild_cuda_tensor(jt.Tensor, b"abc", 0, 4, "float32", 0, "float32", (4,), (1,), 0, False)
    with pytest.raises(RuntimeError, match="non-negative offset and size"):
        reductions.rebuild_cuda_tensor(jt.Tensor, bytes(64), -1, 4, "float32", 0, "float32", (4,), (1,), 0, False)


def test_a_process_cannot_open_its_own_handle_on_the_driver(monkeypatch):
    """What the fake driver refuses as the real one does; jitorch never asks (a storage that comes back is found
    by its handle), shown here by asking the driver directly."""
    from jitorch.runtime import cuda_driver
    fake_driver.install(monkeypatch)
    x = jt.ones(4, device="cuda")
    handle, _, _ = cuda_memory.ipc_export(x.untyped_storage())
    with pytest.raises(RuntimeError, match="CUDA_ERROR_INVALID_CONTEXT"):
        cuda_driver.ipc_open_handle(handle)
