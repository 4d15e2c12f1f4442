"""The CUDA caching allocator, after PyTorch's (Paszke et al. 2019, section 5.3).

Device memory is requested from the backend in *segments* and handed out in
*blocks*. The policy, written against any backend with ``malloc(nbytes) ->
address`` and ``free(address)`` (the CUDA driver, or a fake in tests):

- request sizes are rounded up to multiples of 512 bytes;
- requests up to 1 MiB come from the small pool, carved from 2 MiB segments;
  larger ones from the large pool (a 20 MiB segment serves requests under
  10 MiB, bigger requests get a segment of their size rounded to 2 MiB);
- each stream has its own pools, so a block freed on a stream can be reused at
  once by the next allocation on that stream: kernels on one stream run in
  order, so the new user cannot overtake the old one;
- the best-fitting free block is taken and split when the rest is worth
  keeping (more than 512 bytes in the small pool, more than 1 MiB in the large);
- a freed block merges with free neighbours of its segment;
- when the backend is out of memory, fully free segments are released and the
  request is tried once more; `empty_cache` releases them on demand.

`track(storage, block)` returns a block to its pool when the storage object
dies: CPython frees the storage when its last tensor goes, so memory comes
back at once, with no garbage-collection pass.
"""

from __future__ import annotations

import bisect
import threading
import weakref
from dataclasses import dataclass, field

ROUND = 512
SMALL_SIZE = 1 << 20          # requests up to this size use the small pool
SMALL_SEGMENT = 2 << 20
LARGE_SEGMENT = 20 << 20      # for large requests under MIN_LARGE_ALLOC
MIN_LARGE_ALLOC = 10 << 20
LARGE_ROUND = 2 << 20


@dataclass(eq=False)
class Block:
    """A range of a segment: ``[address, address + size)``, allocated or free."""

    stream: int
    pool: str                 # "small" or "large"
    address: int
    size: int
    segment: int              # address of the segment's first byte
    allocated: bool = False
    requested: int = 0
    prev: "Block" = field(default=None, repr=False)
    next: "Block" = field(default=None, repr=False)

    def key(self):
        return (self.size, self.address)


def round_size(nbytes):
    """Bytes a request of ``nbytes`` occupies (a multiple of 512, at least 512)."""
    return max(ROUND, -(-nbytes // ROUND) * ROUND)


def segment_size(size):
    """Bytes of a new segment for a rounded request of ``size``."""
    if size <= SMALL_SIZE:
        return SMALL_SEGMENT
    if size < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return -(-size // LARGE_ROUND) * LARGE_ROUND


_STAT_NAMES = ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes")


class CachingAllocator:
    """Blocks of device memory from ``backend`` (``malloc(n) -> int``, ``free(address)``)."""

    def __init__(self, backend):
        self.backend = backend
        self._lock = threading.RLock()
        self._free = {}       # (stream, pool) -> sorted list of (size, address, block)
        self._segments = {}   # segment address -> (size, stream)
        self._exported = set()  # segments another process may have mapped (CUDA IPC): never given back
        self._stats = {name: {"current": 0, "peak": 0} for name in _STAT_NAMES}
        self._counts = dict.fromkeys(("num_allocs", "num_frees", "segment_allocs", "segment_frees", "num_ooms",
                                      "cache_hits"), 0)

    # Allocation -------------------------------------------------------------------------

    def malloc(self, nbytes, stream=0):
        """A `Block` of at least ``nbytes`` bytes for use on ``stream``."""
        if nbytes < 0:
            raise ValueError(f"cannot allocate a negative number of bytes ({nbytes})")
        size = round_size(nbytes)
        pool = "small" if size <= SMALL_SIZE else "large"
        with self._lock:
            block = self._best_fit(stream, pool, size)
            if block is None:
                block = self._new_segment(stream, pool, size)
            else:
                self._counts["cache_hits"] += 1
            self._split(block, size)
            block.allocated = True
            block.requested = nbytes
            self._counts["num_allocs"] += 1
            self._add("allocated_bytes", block.size)
            self._add("active_bytes", block.size)
            self._add("requested_bytes", nbytes)
            return block

    def free(self, block):
        """Give ``block`` back to its stream's pool (merging with free neighbours)."""
        with self._lock:
            if not block.allocated:
                raise RuntimeError(f"block at {block.address:#x} freed twice")
            block.allocated = False
            self._counts["num_frees"] += 1
            self._add("allocated_bytes", -block.size)
            self._add("active_bytes", -block.size)
            self._add("requested_bytes", -block.requested)
            for neighbour in (block.prev, block.next):
                if neighbour is not None and not neighbour.allocated:
                    self._unlist(neighbour)
                    block = _merge(block, neighbour)
            self._list(block)

    def _best_fit(self, stream, pool, size):
        free = self._free.get((stream, pool))
        if not free:
            return None
        i = bisect.bisect_left(free, (size, -1))
        if i == len(free):
            return None
        block = free.pop(i)[2]
        return block

    def _new_segment(self, stream, pool, size):
        nbytes = segment_size(size)
        try:
            address = self.backend.malloc(nbytes)
        except MemoryError:
            self._counts["num_ooms"] += 1
            self.empty_cache()
            try:
                address = self.backend.malloc(nbytes)
            except MemoryError:
                raise MemoryError(f"CUDA out of memory. Tried to allocate {_mib(size)} "
                                  f"({_mib(self._stats['allocated_bytes']['current'])} allocated, "
                                  f"{_mib(self._stats['reserved_bytes']['current'])} reserved)") from None
        self._segments[address] = (nbytes, stream)
        self._counts["segment_allocs"] += 1
        self._add("reserved_bytes", nbytes)
        return Block(stream, pool, address, nbytes, address)

    def _split(self, block, size):
        rest = block.size - size
        worth = rest > ROUND if block.pool == "small" else rest > SMALL_SIZE
        if not worth:
            return
        tail = Block(block.stream, block.pool, block.address + size, rest, block.segment, prev=block, next=block.next)
        if block.next is not None:
            block.next.prev = tail
        block.next = tail
        block.size = size
        self._list(tail)

    def _list(self, block):
        bisect.insort(self._free.setdefault((block.stream, block.pool), []), (block.size, block.address, block))

    def _unlist(self, block):
        free = self._free[(block.stream, block.pool)]
        i = bisect.bisect_left(free, (block.size, block.address))
        del free[i]

    # Releasing and statistics ----------------------------------------------------------

    def empty_cache(self):
        """Give every fully free segment back to the backend."""
        with self._lock:
            for key, free in self._free.items():
                keep = []
                for entry in free:
                    block = entry[2]
                    if block.prev is None and block.next is None and block.address not in self._exported:
                        self.backend.free(block.address)
                        nbytes, _ = self._segments.pop(block.address)
                        self._counts["segment_frees"] += 1
                        self._add("reserved_bytes", -nbytes)
                    else:
                        keep.append(entry)
                self._free[key] = keep

    def export(self, address):
        """The base address of the segment holding device ``address`` (what CUDA IPC exports: whole
        allocations), marked so that `empty_cache` keeps it: freeing memory that another process has
        mapped is undefined behaviour in the driver, and no process here knows when the others let go."""
        with self._lock:
            for base, (nbytes, _) in self._segments.items():
                if base <= address < base + nbytes:
                    self._exported.add(base)
                    return base
        raise RuntimeError(f"device address {address:#x} is not in memory from this allocator")

    def memory_allocated(self):
        """Bytes in blocks handed out (rounded sizes)."""
        return self._stats["allocated_bytes"]["current"]

    def max_memory_allocated(self):
        return self._stats["allocated_bytes"]["peak"]

    def memory_reserved(self):
        """Bytes held from the backend (segments)."""
        return self._stats["reserved_bytes"]["current"]

    def max_memory_reserved(self):
        return self._stats["reserved_bytes"]["peak"]

    def reset_peak_memory_stats(self):
        with self._lock:
            for stat in self._stats.values():
                stat["peak"] = stat["current"]

    def memory_stats(self):
        """A flat dict in torch.cuda.memory_stats' naming (``"allocated_bytes.all.current"``, ...)."""
        with self._lock:
            out = {f"{name}.all.{k}": v for name, stat in self._stats.items() for k, v in stat.items()}
            out.update(self._counts)
            out["segment.all.current"] = len(self._segments)
            return dict(sorted(out.items()))

    def _add(self, name, delta):
        stat = self._stats[name]
        stat["current"] += delta
        stat["peak"] = max(stat["peak"], stat["current"])


def _merge(a, b):
    """One block covering the adjacent blocks ``a`` and ``b``."""
    first, second = (a, b) if a.address < b.address else (b, a)
    first.size += second.size
    first.next = second.next
    if second.next is not None:
        second.next.prev = first
    return first


def _mib(n):
    return f"{n / (1 << 20):.2f} MiB"


def track(storage, allocator, block):
    """Return ``block`` to ``allocator`` when ``storage`` dies (its last tensor is gone)."""
    weakref.finalize(storage, allocator.free, block)
