"""How a request body is read, and how reading it fails: ``BodyPolicy`` (its
bounds), ``BodyClock`` (its deadline), ``check_pieces`` (the small-pieces
rule) and the ``BodyError`` tree.

Both interfaces' exchanges (``plumbing.serve``) read against these; the
services map the errors to their answers. No I/O: the clock only computes
deadlines for the reader's ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Final

from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError

__all__ = [
    "ENDED_EARLY",
    "FREE_PIECES",
    "MIN_PIECE_BYTES",
    "BodyClock",
    "BodyError",
    "BodyMalformed",
    "BodyPolicy",
    "BodyTimeout",
    "BodyTooLarge",
    "check_pieces",
]


# A body may come in this many pieces whatever their size; past it, its
# pieces must average MIN_PIECE_BYTES (200,000 one-byte chunks cost seconds of
# CPU, one receive each; an honest upload's reads are kilobytes each).
FREE_PIECES: Final = 1024
MIN_PIECE_BYTES: Final = 1024


@dataclass(frozen=True, slots=True)
class BodyPolicy:
    """How a request body is read: at most ``max_bytes``; no more than
    ``idle_timeout`` seconds without a byte, nor ``timeout`` for the whole
    body (0: no limit), counted from when the handler asks for it."""

    max_bytes: int
    idle_timeout: float = 0.0
    timeout: float = 0.0


class BodyError(FlatgateError):
    """A request body that could not be read whole: the root of the three below."""

    default = codes.MALFORMED_BODY


class BodyTooLarge(BodyError):
    """A request body over ``BodyPolicy.max_bytes``."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"body over {limit} bytes", code=codes.BODY_TOO_LARGE)
        self.limit = limit


class BodyTimeout(BodyError):
    """A request body that stopped arriving (``idle``) or took too long in all."""

    def __init__(self, seconds: float, idle: bool) -> None:
        what = "no byte of the request body" if idle else "the request body was not complete"
        super().__init__(f"{what} within {seconds:g} s", code=codes.BODY_TIMEOUT)
        self.seconds = seconds
        self.idle = idle


class BodyMalformed(BodyError):
    """A request body that ended early, whose chunked framing was malformed, or
    that came in too many small pieces (the message says which)."""


# granian reports both a client gone mid-body and a chunked body it cannot
# parse (a chunk longer than its size, no CRLF, too many trailers) as the end
# of the request: the server cannot tell them apart, and answers both.
ENDED_EARLY = "the request body ended before it was complete, or its chunked framing is malformed"


def check_pieces(count: int, total: int) -> None:
    if count > FREE_PIECES and total < count * MIN_PIECE_BYTES:
        raise BodyMalformed(
            f"the request body came in {count} pieces of {total // count} bytes on average; "
            f"past {FREE_PIECES} pieces they must average {MIN_PIECE_BYTES} bytes"
        )


class BodyClock:
    """The deadline of a body read: the idle timeout from the last piece, or
    the whole body's, whichever comes first (one ``asyncio.timeout``,
    rescheduled per piece)."""

    __slots__ = ("_end", "_idle", "_idle_first", "_loop", "_total")

    def __init__(self, policy: BodyPolicy) -> None:
        self._loop = asyncio.get_running_loop()
        self._idle = policy.idle_timeout
        self._total = policy.timeout
        self._end = self._loop.time() + policy.timeout if policy.timeout > 0 else math.inf
        self._idle_first = False

    def next(self) -> float | None:
        """When the read fails if no piece comes first (``None``: never)."""
        idle_at = self._loop.time() + self._idle if self._idle > 0 else math.inf
        self._idle_first = idle_at < self._end
        at = min(idle_at, self._end)
        return None if at == math.inf else at

    def expired(self) -> BodyTimeout:
        if self._idle_first:
            return BodyTimeout(self._idle, idle=True)
        return BodyTimeout(self._total, idle=False)
