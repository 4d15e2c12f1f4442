"""Session 46's audit of issue 20: shared memory freed in every process once the last lets go (mappings as well
as descriptors), a 100 MB tensor sent as a handle of the same size as a small one's, and DataLoader workers
seeded by ``jitorch.manual_seed`` alone giving the batches of one process."""

import gc
from multiprocessing.reduction import ForkingPickler

import jitorch as jt
import jitorch.multiprocessing as mp
from jitorch.utils.data import DataLoader, Dataset

FORK = mp.get_context("fork")


def held():
    """(descriptors, mappings) of jitorch's memory files in this process: mmap keeps a descriptor of its own,
    and a mapping keeps the memory after every descriptor is closed."""
    import os

    files = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "jitorch-storage" in os.readlink(f"/proc/self/fd/{fd}"):
                files.add(os.stat(f"/proc/self/fd/{fd}").st_ino)
        except FileNotFoundError:
            pass
    with open("/proc/self/maps") as maps:
        return len(files), sum("jitorch-storage" in line for line in maps)


def _hold_write_drop(queue, results):
    inherited = held()  # a forked child holds the parent's descriptors and mappings too
    t = queue.get()
    t[-1] = 7.0
    results.put(("holding", tuple(a - b for a, b in zip(held(), inherited))))
    assert queue.get() == "drop"
    del t
    gc.collect()
    results.put(("dropped", tuple(a - b for a, b in zip(held(), inherited))))


def test_a_100mb_tensor_travels_as_a_handle_and_is_unmapped_everywhere_after_the_last_user():
    gc.collect()
    start = held()  # other tests' handles pickled without a receiver leave descriptors with resource_sharer
    large = jt.zeros(25_000_000)  # 100 MB
    queue, results = FORK.Queue(), FORK.Queue()
    process = FORK.Process(target=_hold_write_drop, args=(queue, results))
    process.start()
    queue.put(large)
    assert results.get(timeout=60) == ("holding", (1, 1))
    assert large[-1].item() == 7.0 and large[0].item() == 0.0  # the child wrote into this process's memory
    del large  # the sender lets go first: nothing of it stays here, the child's mapping keeps the memory
    gc.collect()
    assert held() == start
    queue.put("drop")
    assert results.get(timeout=60) == ("dropped", (0, 0))
    process.join(60)
    assert process.exitcode == 0
    # the handle of 100 MB is that of 4 KB but for a few digits (each pickled handle leaves a descriptor with
    # resource_sharer until a receiver takes it, as torch's file_descriptor strategy does)
    handles = [len(ForkingPickler.dumps(jt.zeros(n))) for n in (1000, 25_000_000)]
    assert handles[1] < 1000 and abs(handles[1] - handles[0]) < 16, handles


class Numbers(Dataset):
    def __len__(self):
        return 14

    def __getitem__(self, i):
        return jt.tensor([float(i)])


def test_workers_seeded_by_manual_seed_give_the_batches_of_one_process_in_order():
    """No generator: the shuffle draws from the default generator, which must end where it would without workers."""
    def epochs(workers):
        jt.manual_seed(11)
        loader = DataLoader(Numbers(), batch_size=3, shuffle=True, num_workers=workers)
        return [[b.flatten().tolist() for b in loader] for _ in range(2)], jt.rand(2).tolist()

    alone, with_workers = epochs(0), epochs(2)
    assert with_workers == alone and alone[0][0] != alone[0][1]
