"""Counting the heap allocations one call makes, with memray.

Owns ``count_allocations(fn, arg, ops)``: run ``fn(arg)`` ``ops`` times under a
``memray.Tracker`` that traces the Python allocators too
(``trace_python_allocators=True``: pymalloc serves most small objects and
never reaches ``malloc``), read every record back, and count each allocation
call (``malloc``, ``calloc``, ``realloc``, the aligned ones, and the pymalloc
ones) with the bytes it asked for (a ``realloc`` counts its new size). Frees
are not counted; ``mmap`` is not counted either, as with Python allocators
traced it only backs pymalloc's arenas, whose objects are counted one by one.
So the figure is every allocation in the measured loop, transient ones
included: what ``malloc`` and the garbage collector deal with, not what stays
alive. Only the measuring thread's: memray tracks every thread, and another
one (pytest-xdist's, a timeout's) allocating meanwhile is not the call's (a
marker allocation of ``_MARKER`` bytes names the measuring thread's records).

Two corrections, both measured, never assumed:

- Loop overhead: the same loop around a no-op function is measured the same way
  and subtracted (``itertools.repeat`` drives the loop, so it makes no ints).
- memray's profiler artefacts. memray learns the Python stack from a profile
  hook, and under a profile hook CPython 3.11 (a) materialises a frame object
  for every Python-level call and (b) runs unspecialised bytecode, so unpacking
  a tuple or list (``a, b = t``) makes an iterator the specialised instruction
  does not. Neither happens when nobody profiles. Native stacks are recorded
  and every allocation whose C stack passes through
  ``_PyFrame_MakeAndSetFrameObject``, or through ``unpack_iterable`` into
  ``tuple_iter``/``list_iter``, is set aside as an artefact. Without this,
  pure-Python code (the FlatBuffers runtime) would be charged an allocation
  per function call. (Real frame objects, from tracebacks or
  ``sys._getframe``, and starred unpacking would be set aside too; none is on
  the measured paths.) The no-op loop must show one frame artefact per call:
  if CPython's symbols cannot be resolved, ``ArtefactsUnresolved`` is raised
  rather than a wrong figure returned.

Allocation counts are about allocator calls, not object creations: objects
served from CPython's free lists (small tuples, floats, dicts, lists) cost no
allocation and are not counted, exactly as in production.

``count_raw`` can also tally the real allocations by site (the Python line
and the C allocation path under it): ``python -m benchmarks.micro --sites
FORMAT OP`` lists them for any op of ``make bench``'s codecs (``flatgate
route``: the eight allocations of the proxy's route read).

This module only measures; it writes memray's capture files in a temporary
directory and removes them. It must run alone in its process (no other
tracker, no other profiler, one thread).
"""

from __future__ import annotations

import collections
import itertools
import linecache
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import memray

__all__ = [
    "ALLOCATING",
    "Allocations",
    "ArtefactsUnresolved",
    "Tally",
    "count_allocations",
    "count_raw",
]

# Allocator calls that hand out memory (memray.AllocatorType values).
ALLOCATING = frozenset(
    {
        memray.AllocatorType.PYMALLOC_MALLOC,
        memray.AllocatorType.PYMALLOC_CALLOC,
        memray.AllocatorType.PYMALLOC_REALLOC,
        memray.AllocatorType.MALLOC,
        memray.AllocatorType.CALLOC,
        memray.AllocatorType.REALLOC,
        memray.AllocatorType.POSIX_MEMALIGN,
        memray.AllocatorType.ALIGNED_ALLOC,
        memray.AllocatorType.MEMALIGN,
        memray.AllocatorType.VALLOC,
        memray.AllocatorType.PVALLOC,
    }
)
# How deep into an allocation's C stack to look for an artefact's signature.
_DEPTH = 8
_REAL, _FRAME, _UNPACK = 0, 1, 2


class ArtefactsUnresolved(RuntimeError):
    """memray's native stacks carry no CPython symbols: artefacts cannot be told apart."""


@dataclass(frozen=True, slots=True)
class Tally:
    """What one tracked loop recorded: real allocations, and the two artefacts."""

    allocs: int
    bytes: int
    frames: int
    unpacks: int


@dataclass(frozen=True, slots=True)
class Allocations:
    """Per-call figures, loop and artefacts subtracted: allocator calls, the
    bytes they asked for; ``frames``: Python calls per call beyond the first
    (the frame objects memray forced); ``ops``: calls tracked."""

    allocs: float
    bytes: float
    frames: float
    ops: int


# A marker allocation's size, made by the measuring thread as its tracking
# begins: the records of other threads (which memray tracks too) are set aside.
_MARKER = 7_654_321


def _is_marker(record: Any) -> bool:
    """Whether ``record`` is the marker (its object's header and terminator besides)."""
    return bool(_MARKER <= record.size < _MARKER + 256)


def _noop(arg: object) -> None:
    return None


def _kind(record: Any) -> int:
    names = [frame[0] for frame in record.native_stack_trace(max_stacks=_DEPTH)]
    if "_PyFrame_MakeAndSetFrameObject" in names:
        return _FRAME
    if "unpack_iterable" in names and ("tuple_iter" in names or "list_iter" in names):
        return _UNPACK
    return _REAL


def _site(record: Any) -> str:
    """The Python line that allocated, then the C path under it."""
    frames = record.hybrid_stack_trace(max_stacks=12)
    c_path = " <- ".join(f for f, _, _ in frames[:4])
    for _, filename, lineno in frames:
        if filename.endswith(".py"):
            line = linecache.getline(filename, lineno).strip()
            return f"{os.path.basename(filename)}:{lineno} {line}  [{c_path}]"
    return c_path


def count_raw(
    fn: Callable[[Any], object],
    arg: object,
    ops: int,
    sites: collections.Counter[str] | None = None,
) -> Tally:
    """What memray records for ``ops`` calls of ``fn(arg)``, the loop included;
    with ``sites``, the real allocations are also counted there by site."""
    kinds: dict[tuple[int, int], int] = {}
    names: dict[tuple[int, int], str] = {}
    allocs = size = frames = unpacks = 0
    with tempfile.TemporaryDirectory(prefix="flatgate-memray-") as tmp:
        path = os.path.join(tmp, "capture.bin")
        with memray.Tracker(path, trace_python_allocators=True, native_traces=True):
            bytearray(_MARKER)  # which thread is this one's, in the records
            for _ in itertools.repeat(None, ops):
                fn(arg)
        # Another thread's allocations (pytest-xdist's, a timeout's) are not the
        # call's: the records from the measuring thread's marker on are counted.
        ours = -1
        for record in memray.FileReader(path).get_allocation_records():
            if ours < 0:
                if _is_marker(record):
                    ours = record.tid
                continue
            if record.tid != ours or record.allocator not in ALLOCATING:
                continue
            key = (record.native_stack_id, record.native_segment_generation)
            kind = kinds.get(key)
            if kind is None:
                kind = kinds[key] = _kind(record)
            if kind == _FRAME:
                frames += record.n_allocations
            elif kind == _UNPACK:
                unpacks += record.n_allocations
            else:
                allocs += record.n_allocations
                size += record.size
                if sites is not None:
                    if key not in names:
                        names[key] = _site(record)
                    sites[names[key]] += record.n_allocations
    return Tally(allocs=allocs, bytes=size, frames=frames, unpacks=unpacks)


def count_allocations(
    fn: Callable[[Any], object],
    arg: object,
    ops: int,
    *,
    max_records: int | None = None,
) -> Allocations:
    """Allocations per call of ``fn(arg)``, loop and artefacts subtracted.

    Up to ``ops`` calls are tracked (and as many no-op calls); with
    ``max_records``, fewer, so that about that many allocations are recorded
    (reading them back is the slow part). Call ``fn`` a few times before, so
    that caches and pools are warm; a one-call tracked run here absorbs what
    memray itself allocates the first time it meets ``fn``.
    """
    if ops < 1 or (max_records is not None and max_records < 1):
        raise ValueError("ops and max_records must be >= 1")
    first = count_raw(fn, arg, 1)
    count_raw(_noop, arg, 1)
    if max_records is not None:
        recorded = first.allocs + first.frames + first.unpacks
        ops = max(1, min(ops, max_records // max(1, recorded)))
    measured = count_raw(fn, arg, ops)
    base = count_raw(_noop, arg, ops)
    if base.frames < ops:
        raise ArtefactsUnresolved(
            "memray resolved no frame-object allocation for the no-op loop: CPython's "
            "symbols are missing, so profiler artefacts would count as allocations"
        )
    return Allocations(
        allocs=(measured.allocs - base.allocs) / ops,
        bytes=(measured.bytes - base.bytes) / ops,
        frames=(measured.frames - base.frames) / ops,
        ops=ops,
    )
