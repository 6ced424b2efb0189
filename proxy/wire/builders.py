"""A bounded pool of ``flatbuffers.Builder`` objects that keep their capacity.

Owns the lease discipline (docs/design.md, "Pools"): a builder is reset (``Clear``)
before it goes back, never after it is taken; a builder whose buffer grew past
``max_retained`` bytes is dropped instead of pooled, so one huge frame does not
pin memory forever; bytes leave a lease only as a copy (``finish_bytes``).

With ``debug=True`` every released buffer is overwritten with ``POISON``, so a
view that outlived its lease reads garbage and tests fail loudly.

No I/O. Not thread-safe by design: one pool per event loop (granian runs one
loop per worker thread).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import flatbuffers

__all__ = ["POISON", "BuilderPool", "PoolStats", "finish_bytes"]

POISON = 0xDB


@dataclass(frozen=True, slots=True)
class PoolStats:
    """Counters since the pool was made: ``hits`` reused a pooled builder,
    ``misses`` made a new one, ``dropped`` were released but not kept."""

    hits: int
    misses: int
    dropped: int
    idle: int
    capacity: int


class BuilderPool:
    """Hands out builders with retained capacity; bounded to ``size`` idle ones."""

    __slots__ = (
        "_debug",
        "_dropped",
        "_free",
        "_hits",
        "_initial",
        "_leased",
        "_max_retained",
        "_misses",
        "_size",
    )

    def __init__(
        self,
        size: int = 256,
        initial_capacity: int = 1024,
        max_retained: int = 1 << 20,
        *,
        debug: bool = False,
    ) -> None:
        if size < 0 or initial_capacity < 0 or max_retained < initial_capacity:
            raise ValueError("pool size and capacities must be >= 0, max_retained >= initial")
        self._size = size
        self._initial = initial_capacity
        self._max_retained = max_retained
        self._debug = debug
        # A deque keeps its block when it empties (a list would free and
        # reallocate its item array as one builder cycles through it), and the
        # leased set holds the builders themselves (identity-hashed: no int made).
        self._free: collections.deque[flatbuffers.Builder] = collections.deque()
        self._leased: set[flatbuffers.Builder] = set()
        self._hits = 0
        self._misses = 0
        self._dropped = 0

    def acquire(self) -> flatbuffers.Builder:
        """Take a clean builder (pooled if one is idle, else new)."""
        if self._free:
            builder = self._free.pop()
            self._hits += 1
        else:
            builder = flatbuffers.Builder(self._initial)
            self._misses += 1
        self._leased.add(builder)
        return builder

    def release(self, builder: flatbuffers.Builder) -> None:
        """Give a builder back: reset it now, keep it if there is room."""
        if builder not in self._leased:
            raise ValueError("builder released twice or not from this pool")
        self._leased.discard(builder)
        buf = builder.Bytes
        if self._debug:
            buf[:] = bytes([POISON]) * len(buf)
        builder.Clear()
        if len(self._free) < self._size and len(buf) <= self._max_retained:
            self._free.append(builder)
        else:
            self._dropped += 1

    @contextmanager
    def lease(self) -> Iterator[flatbuffers.Builder]:
        """``with pool.lease() as b:`` builds with ``b`` and always gives it back."""
        builder = self.acquire()
        try:
            yield builder
        finally:
            self.release(builder)

    @property
    def leased(self) -> int:
        """Builders out on lease now; 0 whenever no request is in flight."""
        return len(self._leased)

    def stats(self) -> PoolStats:
        return PoolStats(
            hits=self._hits,
            misses=self._misses,
            dropped=self._dropped,
            idle=len(self._free),
            capacity=self._size,
        )


def finish_bytes(builder: flatbuffers.Builder) -> bytes:
    """The finished buffer as an independent ``bytes`` (one copy, no alias)."""
    return bytes(memoryview(builder.Bytes)[builder.Head() :])
