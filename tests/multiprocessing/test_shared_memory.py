"""Tensors in shared memory: moved in place, sent between processes as handles, freed by the last user."""

import gc
import os

import pytest
import torch

import jitorch as jt
import jitorch.multiprocessing as mp

FORK = mp.get_context("fork")


def memory_files():
    """How many of jitorch's memory files this process holds open (mmap keeps a descriptor of its own)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "jitorch-storage" in os.readlink(f"/proc/self/fd/{fd}"):
                found.add(os.stat(f"/proc/self/fd/{fd}").st_ino)
        except FileNotFoundError:  # the descriptor listdir itself used
            pass
    return len(found)


def test_share_memory_moves_the_storage_in_place_for_every_view():
    x = jt.arange(12.0)
    view, as_ints = x[2:6], x.view(jt.int32)
    view.numpy(), as_ints.numpy()  # cached arrays of the old buffer must be dropped
    assert not x.is_shared() and x.untyped_storage().is_shared() is False
    assert x.share_memory_() is x
    assert x.is_shared() and view.is_shared() and as_ints.is_shared()
    x[3] = 100.0
    assert view.tolist() == [2.0, 100.0, 4.0, 5.0]
    assert as_ints[3].item() == torch.tensor([100.0]).view(torch.int32).item()
    view.mul_(2)
    assert x.tolist()[2:6] == [4.0, 200.0, 8.0, 10.0]


def test_share_memory_is_a_no_op_the_second_time_and_keeps_values_and_version():
    x = jt.randn(5, 3)
    before, version = x.clone(), x._version
    x.share_memory_()
    storage = x.untyped_storage().data
    x.share_memory_()
    assert x.untyped_storage().data is storage
    assert jt.equal(x, before) and x._version == version


def test_resizing_a_shared_tensor_beyond_its_memory_raises_torchs_error():
    """torch's message (its shared storages are not resizable); torch 2.13 itself crashes on this call."""
    x = jt.zeros(4).share_memory_()
    with pytest.raises(RuntimeError, match="Trying to resize storage that is not resizable"):
        x.resize_(10)
    assert x.resize_(2).tolist() == [0.0, 0.0]  # within its memory: allowed


def test_module_share_memory_moves_parameters_grads_and_buffers():
    m = jt.nn.Sequential(jt.nn.Linear(3, 4), jt.nn.BatchNorm1d(4))
    m(jt.randn(5, 3)).sum().backward()
    expected = m(jt.ones(2, 3))
    assert m.share_memory() is m
    assert all(p.is_shared() and p.grad.is_shared() for p in m.parameters())
    assert all(b.is_shared() for b in m.buffers())
    assert jt.allclose(m(jt.ones(2, 3)), expected)


def _add_one_and_report(queue, results):
    inherited = memory_files()  # a forked child holds the parent's descriptors too
    t = queue.get()
    t.add_(1)
    results.put((t.is_shared(), memory_files() - inherited))
    assert queue.get() == "parent wrote"
    results.put(t.tolist())


def test_a_tensor_sent_through_a_queue_shares_memory_both_ways():
    queue, results = FORK.Queue(), FORK.Queue()
    x = jt.zeros(3, 4)
    process = FORK.Process(target=_add_one_and_report, args=(queue, results))
    process.start()
    queue.put(x[1])  # a view: its whole storage moves into shared memory
    shared, files = results.get(timeout=60)
    assert shared and files == 1
    assert x.tolist() == [[0.0] * 4, [1.0] * 4, [0.0] * 4]
    x[1, 0] = 7.0
    queue.put("parent wrote")
    assert results.get(timeout=60) == [7.0, 1.0, 1.0, 1.0]
    process.join(60)
    assert process.exitcode == 0


def _receive_and_compare(queue, results):
    a, b, p, meta = queue.get()
    results.put((a.untyped_storage() is b.untyped_storage(), type(p).__name__, p.requires_grad, p.is_leaf,
                 b.dtype == jt.int32, meta.device.type, tuple(meta.shape), a.tolist()))


def test_one_storage_arrives_as_one_storage_with_classes_dtypes_and_grad_flags():
    queue, results = FORK.Queue(), FORK.Queue()
    x = jt.arange(6.0)
    p = jt.nn.Parameter(jt.ones(2))
    process = FORK.Process(target=_receive_and_compare, args=(queue, results))
    process.start()
    queue.put((x[:2], x.view(jt.int32), p, jt.empty(2, 3, device="meta")))
    assert results.get(timeout=60) == (True, "Parameter", True, True, True, "meta", (2, 3), [0.0, 1.0])
    process.join(60)


def test_a_non_leaf_tensor_that_requires_grad_is_refused_as_torch_refuses_it():
    y = jt.ones(2, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="Cowardly refusing to serialize non-leaf tensor"):
        mp.reductions.reduce_tensor(y)


def _hold_then_drop(queue, results):
    inherited = memory_files()
    t = queue.get()
    results.put(("holding", memory_files() - inherited, t.sum().item()))
    assert queue.get() == "drop"
    del t
    gc.collect()
    results.put(("dropped", memory_files() - inherited, None))


def test_the_memory_lives_until_the_last_process_lets_go():
    gc.collect()
    start = memory_files()
    queue, results = FORK.Queue(), FORK.Queue()
    process = FORK.Process(target=_hold_then_drop, args=(queue, results))
    process.start()
    x = jt.full((256, 1024), 2.0)
    queue.put(x)
    assert results.get(timeout=60) == ("holding", 1, 2.0 * 256 * 1024)
    del x  # the sender lets go first: the receiver's mapping keeps the memory
    gc.collect()
    assert memory_files() == start
    queue.put("drop")
    assert results.get(timeout=60) == ("dropped", 0, None)
    process.join(60)


def test_the_elements_are_not_pickled():
    """The handle's size does not grow with the tensor's."""
    from multiprocessing.reduction import ForkingPickler

    small = ForkingPickler.dumps(jt.zeros(10))
    large = ForkingPickler.dumps(jt.zeros(1_000_000))
    assert len(small) < 1000 and len(large) < 1000



def test_the_handle_names_only_the_rebuild_functions_the_tensor_classes_and_the_descriptor_passer():
    """What a receiver's unpickler is asked to look up: nothing of the sender's choosing runs on loading."""
    import io
    import pickle
    from multiprocessing.reduction import ForkingPickler

    looked_up = []

    class Recording(pickle.Unpickler):
        def find_class(self, module, name):
            looked_up.append(f"{module}.{name}")
            return super().find_class(module, name)

    x, p = jt.arange(6.0), jt.nn.Parameter(jt.ones(2))
    data = bytes(ForkingPickler.dumps((x[1:4], x.view(jt.int32), p)))
    view, ints, param = Recording(io.BytesIO(data)).load()  # this process maps its own memory file again
    assert view.tolist() == [1.0, 2.0, 3.0] and ints.untyped_storage() is x.untyped_storage()
    assert type(param) is jt.nn.Parameter and param.tolist() == [1.0, 1.0]
    assert set(looked_up) == {"jitorch.multiprocessing.reductions.rebuild_tensor",
                              "jitorch.multiprocessing.reductions.rebuild_storage", "jitorch.tensor.Tensor",
                              "jitorch.nn.parameter.Parameter", "multiprocessing.resource_sharer.DupFd"}



def test_a_child_forked_while_other_threads_hold_the_runtimes_locks_finds_them_unheld():
    # regression: a DataLoader worker hung at its first batch's shared storage: the fork copied the shared-memory
    # lock while another thread of the parent held it (CI). Every module lock of `runtime.forks` is held here by
    # a thread of the parent while the child is forked; the child shares a tensor, takes a buffer from the
    # allocator's pool and starts a team of threads, and exits
    import threading
    import time

    import jitorch.codegen.cpu
    import jitorch.codegen.kernel
    import jitorch.jit.collector
    import jitorch.jit.plan_cache
    import jitorch.runtime.dlpack  # noqa: F401 - (their locks exist once they are loaded)
    from jitorch.runtime import forks, threads

    locks = [namespace[name] for namespace, name in forks._renewed]
    assert len(locks) >= 8  # (allocator, shared memory, threads, dlpack, collector, plan cache, cpu, kernel)
    held, release = threading.Event(), threading.Event()

    def hold():
        for lock in locks:
            lock.acquire()
        held.set()
        release.wait()
        for lock in locks:
            lock.release()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    try:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                unheld = not any(namespace[name].locked() for namespace, name in forks._renewed)
                jt.empty(4).share_memory_()
                jt.empty(1 << 19)  # 2 MB: from the allocator's pool
                threads.set_num_threads(2)
                threads.run_parts(lambda: None, [(), ()])
                code = 0 if unheld else 2
            finally:
                os._exit(code)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.02)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung on a lock held by another thread of its parent")
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        release.set()
        holder.join()
