"""``Blobs``: a memory store's blobs (the stored responses), bounded in all
and per group (a tenant), so that no group can evict another's.

A blob is a tuple of pieces whose concatenation is its bytes. A piece is
kept by reference: a blob made of another's pieces (a chained response's
input holds its previous response's) shares them, and a group's bytes
count each distinct piece once, however many of its blobs hold it. What a
group holds is what its count says: a piece is counted until the last of
the group's blobs that holds it goes.

Bounds (``BlobBounds``):

- per group, ``group_count`` blobs and ``group_bytes`` bytes: past either,
  that group's own least recently used (put or read) go first;
- in all, ``max_count`` and ``max_bytes``: past either, the least recently
  used of the group holding the most (blobs past the count, bytes past the
  bytes) goes. The group that loses one holds at least the average of the
  groups that store, so a group within its fair share of the whole is never
  evicted for another's.

A blob larger than a group may hold (or the whole) is refused (``put``
answers ``False``). A blob's TTL is honoured on read; expired ones go as
later puts pass them (a heap of ``(expiry, key)``: stale entries, replaced
or gone, are skipped, and it is rebuilt when they outnumber the live ones).
Per process; one event loop thread. No I/O.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import NamedTuple

__all__ = ["BlobBounds", "Blobs", "Pieces"]

# A blob's bytes, as the pieces it was put as.
Pieces = tuple[bytes, ...]


class BlobBounds(NamedTuple):
    """A store's bounds on its blobs: in all (a memory store's) and per
    group (both stores')."""

    max_count: int
    max_bytes: int
    group_count: int
    group_bytes: int


class _Group:
    """One group's blobs in the order of their last use, and its distinct
    pieces: ``id`` -> how many of its blobs hold it (``kept`` holds each
    piece, so that its ``id`` stays its own)."""

    __slots__ = ("counts", "kept", "keys", "size")

    def __init__(self) -> None:
        self.keys: OrderedDict[str, None] = OrderedDict()
        self.counts: dict[int, int] = {}
        self.kept: dict[int, bytes] = {}
        self.size = 0

    def hold(self, pieces: Pieces) -> None:
        counts = self.counts
        for piece in pieces:
            at = id(piece)
            held = counts.get(at, 0)
            if not held:
                self.kept[at] = piece
                self.size += len(piece)
            counts[at] = held + 1

    def let_go(self, pieces: Pieces) -> None:
        counts = self.counts
        for piece in pieces:
            at = id(piece)
            left = counts[at] - 1
            if left:
                counts[at] = left
            else:
                del counts[at], self.kept[at]
                self.size -= len(piece)


def _distinct_bytes(pieces: Pieces) -> int:
    """The bytes of ``pieces``, each distinct piece once."""
    return sum(len(p) for p in {id(p): p for p in pieces}.values())


class Blobs:
    """See the module docstring."""

    __slots__ = ("bounds", "evicted", "groups", "heap", "items", "size")

    def __init__(self, bounds: BlobBounds) -> None:
        # key -> (expiry, pieces, group), in the order of last use.
        self.items: OrderedDict[str, tuple[float, Pieces, str]] = OrderedDict()
        self.groups: dict[str, _Group] = {}
        self.heap: list[tuple[float, str]] = []
        self.size = 0
        self.bounds = bounds
        # Blobs let go before their TTL, to keep within the bounds.
        self.evicted = 0

    def put(self, key: str, pieces: Pieces, expiry: float, now: float, group: str = "") -> bool:
        """Keep ``pieces`` under ``key`` (replacing what it held) in
        ``group``; whether it is kept."""
        b = self.bounds
        if min(b.max_count, b.group_count) < 1:
            return False
        self.purge(now)
        self.pop(key)
        alone = _distinct_bytes(pieces)
        if alone > b.group_bytes or alone > b.max_bytes:
            return False
        owner = self.groups.get(group)
        if owner is None:
            owner = self.groups[group] = _Group()
        before = owner.size
        owner.hold(pieces)
        owner.keys[key] = None
        self.size += owner.size - before
        self.items[key] = (expiry, pieces, group)
        heapq.heappush(self.heap, (expiry, key))
        if len(self.heap) > 2 * len(self.items) + 16:
            self.heap = [(e, k) for k, (e, _, _) in self.items.items()]
            heapq.heapify(self.heap)
        self.shrink(key)
        return key in self.items

    def get(self, key: str, now: float) -> Pieces | None:
        found = self.items.get(key)
        if found is None:
            return None
        if found[0] <= now:
            self.pop(key)
            return None
        self.items.move_to_end(key)
        self.groups[found[2]].keys.move_to_end(key)
        return found[1]

    def pop(self, key: str) -> bool:
        found = self.items.pop(key, None)
        if found is None:
            return False
        _, pieces, name = found
        group = self.groups[name]
        del group.keys[key]
        before = group.size
        group.let_go(pieces)
        self.size -= before - group.size
        if not group.keys:
            del self.groups[name]
        return True

    def purge(self, now: float) -> None:
        heap, items = self.heap, self.items
        while heap and heap[0][0] <= now:
            expiry, key = heapq.heappop(heap)
            found = items.get(key)
            if found is not None and found[0] == expiry:
                self.pop(key)

    def shrink(self, keep: str = "") -> None:
        """Evict to within the bounds (see the module docstring); ``keep``:
        a key just put, evicted only when nothing else can go."""
        b = self.bounds
        for name in list(self.groups):
            group = self.groups.get(name)
            while group is not None and (
                len(group.keys) > b.group_count or group.size > b.group_bytes
            ):
                self._evict(group, keep)
                group = self.groups.get(name)
        while self.items and (len(self.items) > b.max_count or self.size > b.max_bytes):
            by_count = len(self.items) > b.max_count
            heaviest = max(
                self.groups.values(),
                key=(lambda g: (len(g.keys), g.size)) if by_count else (lambda g: g.size),
            )
            self._evict(heaviest, keep)

    def _evict(self, group: _Group, keep: str) -> None:
        victim = next(iter(group.keys))
        if victim == keep and len(group.keys) > 1:
            victim = next(k for k in group.keys if k != keep)
        self.pop(victim)
        self.evicted += 1

    def held(self, group: str) -> tuple[int, int]:
        """(blobs, bytes) ``group`` holds."""
        found = self.groups.get(group)
        return (len(found.keys), found.size) if found is not None else (0, 0)
