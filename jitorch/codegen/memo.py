"""A bounded, thread-safe memo: what the code generator remembers in memory of things it can make again.

A long-running process (a notebook, a server, a workload whose shapes keep changing) compiles ever new
kernels, so every in-process memo of generated code needs a bound; past it, the least recently used
entries go, and a later request makes (or reads from the disk cache) what was dropped.
"""

from __future__ import annotations

import collections
import threading


class BoundedMemo:
    """key -> value, holding at most ``limit`` units, where a value weighs ``size(value)`` (default
    ``len``: bytes of code or characters of text); the least recently used entries go first. A value
    heavier than the whole limit is not kept."""

    def __init__(self, limit: int, size=len):
        self.limit = limit
        self._size = size
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def get(self, key, default=None):
        """The value of ``key`` (now the most recently used), or ``default``."""
        with self._lock:
            value = self._entries.get(key)
            if value is None:
                return default
            self._entries.move_to_end(key)
            return value

    def put(self, key, value) -> None:
        """Remember ``value`` under ``key`` (replacing an earlier one), then drop the least recently used
        entries until the total fits the limit."""
        weight = self._size(value)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._total -= self._size(old)
            if weight > self.limit:
                return
            self._entries[key] = value
            self._total += weight
            while self._total > self.limit:
                self._total -= self._size(self._entries.popitem(last=False)[1])

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()
            self._total = 0

    @property
    def total(self) -> int:
        """The summed weight of the entries held (at most ``limit``)."""
        return self._total

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key) -> bool:
        return key in self._entries


class BuiltOnce:
    """key -> what ``build(*key)`` made (None included: "cannot be built"), made once per key under a lock,
    at most ``limit`` keys (past it, all go: programs of ever new sizes; the code stays cached on disk)."""

    def __init__(self, build, limit=256):
        self._build, self._limit = build, limit
        self._made: dict = {}
        self._lock = threading.Lock()

    def __call__(self, *key):
        with self._lock:
            if key not in self._made:
                if len(self._made) > self._limit:
                    self._made.clear()
                self._made[key] = self._build(*key)
            return self._made[key]

    def __getitem__(self, key):
        return self._made[key]

    def items(self):
        """(key, what was made) pairs, a snapshot."""
        with self._lock:
            return list(self._made.items())
