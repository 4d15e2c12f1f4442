"""The caching allocator's policy, on a fake device-memory backend."""

import gc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jitorch.runtime.cuda_allocator import (LARGE_SEGMENT, SMALL_SEGMENT, CachingAllocator, round_size,
                                            segment_size, track)
from jitorch.runtime.device import device
from jitorch.runtime.dtypes import float32
from jitorch.runtime.storage import Storage


class FakeMemory:
    """Device memory as address ranges: counts calls, refuses beyond ``capacity``."""

    def __init__(self, capacity=1 << 40):
        self.capacity = capacity
        self.live = {}
        self.next = 1 << 32
        self.mallocs = self.frees = 0

    def malloc(self, n):
        if sum(self.live.values()) + n > self.capacity:
            raise MemoryError("fake out of memory")
        self.mallocs += 1
        address, self.next = self.next, self.next + n + 4096
        self.live[address] = n
        return address

    def free(self, address):
        self.frees += 1
        del self.live[address]


@pytest.fixture
def mem():
    return FakeMemory()


def test_sizes_round_to_512_and_pools_pick_segments():
    assert [round_size(n) for n in (0, 1, 512, 513, 1000)] == [512, 512, 512, 1024, 1024]
    assert segment_size(512) == segment_size(1 << 20) == SMALL_SEGMENT
    assert segment_size((1 << 20) + 512) == LARGE_SEGMENT
    assert segment_size(11 << 20) == 12 << 20


def test_freed_block_is_reused_at_once_on_the_same_stream(mem):
    a = CachingAllocator(mem)
    b1 = a.malloc(1000)
    a.free(b1)
    b2 = a.malloc(900)
    assert b2.address == b1.address and mem.mallocs == 1
    assert a.memory_stats()["cache_hits"] == 1


def test_each_stream_has_its_own_pool(mem):
    a = CachingAllocator(mem)
    b1 = a.malloc(1000, stream=1)
    a.free(b1)
    b2 = a.malloc(1000, stream=2)
    assert b2.segment != b1.segment and mem.mallocs == 2


def test_small_segment_is_split_into_blocks(mem):
    a = CachingAllocator(mem)
    blocks = [a.malloc(512) for _ in range(4)]
    assert mem.mallocs == 1
    assert [b.address - blocks[0].address for b in blocks] == [0, 512, 1024, 1536]
    assert a.memory_allocated() == 2048 and a.memory_reserved() == SMALL_SEGMENT


def test_free_merges_neighbours_and_empty_cache_releases_whole_segments(mem):
    a = CachingAllocator(mem)
    blocks = [a.malloc(700) for _ in range(3)]
    a.empty_cache()
    assert mem.frees == 0  # the segment is in use
    for b in (blocks[0], blocks[2], blocks[1]):
        a.free(b)
    a.empty_cache()
    assert mem.frees == 1 and a.memory_reserved() == 0 and mem.live == {}


def test_large_requests_split_only_when_the_rest_exceeds_1_mib(mem):
    a = CachingAllocator(mem)
    big = a.malloc(3 << 20)
    assert big.size == 3 << 20 and big.next is not None and big.next.size == LARGE_SEGMENT - (3 << 20)
    a.free(big)
    whole = a.malloc(LARGE_SEGMENT - (1 << 19))
    assert whole.size == LARGE_SEGMENT and mem.mallocs == 1  # 512 KiB left over: not worth a block


def test_out_of_memory_releases_the_cache_then_raises(mem):
    mem.capacity = SMALL_SEGMENT + LARGE_SEGMENT
    a = CachingAllocator(mem)
    a.free(a.malloc(100))          # a cached, fully free small segment
    big = a.malloc(LARGE_SEGMENT - 4096)
    assert mem.mallocs == 2
    a.free(a.malloc(100))
    assert mem.frees == 0
    with pytest.raises(MemoryError, match=r"CUDA out of memory. Tried to allocate 20.00 MiB"):
        a.malloc(LARGE_SEGMENT)
    assert a.memory_stats()["num_ooms"] == 1 and mem.frees == 1  # the free small segment went back
    a.free(big)


def test_statistics_and_peaks(mem):
    a = CachingAllocator(mem)
    b1, b2 = a.malloc(1000), a.malloc(5000)
    assert a.memory_allocated() == 1024 + 5120
    a.free(b1)
    stats = a.memory_stats()
    assert stats["allocated_bytes.all.current"] == 5120 and stats["allocated_bytes.all.peak"] == 6144
    assert stats["requested_bytes.all.current"] == 5000 and stats["num_allocs"] == 2 and stats["num_frees"] == 1
    assert a.max_memory_allocated() == 6144
    a.reset_peak_memory_stats()
    assert a.max_memory_allocated() == 5120
    a.free(b2)


def test_double_free_raises(mem):
    a = CachingAllocator(mem)
    b = a.malloc(10)
    a.free(b)
    with pytest.raises(RuntimeError, match="freed twice"):
        a.free(b)


def test_negative_size_raises(mem):
    with pytest.raises(ValueError, match="negative"):
        CachingAllocator(mem).malloc(-1)


def test_block_returns_when_the_last_tensor_dies_without_gc(mem):
    a = CachingAllocator(mem)
    gc.disable()
    try:
        storage = Storage(None, float32, device("cuda"), 100)
        block = a.malloc(400)
        track(storage, a, block)
        view_holder = [storage]
        del storage
        assert a.memory_allocated() == 512  # still referenced
        view_holder.clear()
        assert a.memory_allocated() == 0 and a.malloc(400).address == block.address
    finally:
        gc.enable()


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 3 << 20), st.integers(0, 2)), max_size=40))
def test_random_traces_keep_blocks_disjoint_and_stats_consistent(ops):
    mem = FakeMemory()
    a = CachingAllocator(mem)
    live = []
    for alloc, n, stream in ops:
        if alloc or not live:
            b = a.malloc(n, stream)
            assert b.size >= n and b.size % 512 == 0 and b.stream == stream
            live.append(b)
        else:
            a.free(live.pop(n % len(live)))
        spans = sorted((b.address, b.address + b.size) for b in live)
        assert all(e <= s for (_, e), (s, _) in zip(spans, spans[1:]))
        assert a.memory_allocated() == sum(b.size for b in live) <= a.memory_reserved()
    for b in live:
        a.free(b)
    a.empty_cache()
    assert mem.live == {} and a.memory_reserved() == 0
