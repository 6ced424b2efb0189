"""The limits' arithmetic, shared by both stores: constants, the quota a
rate's state leaves, the UTC day, and OpenAI's duration format.

Every algorithm is written twice, in ``memory.MemoryStore`` (Python) and in
``scripts`` (Lua, run by Redis), with the same IEEE-754 double operations in
the same order, so that the two give the same decisions for the same calls
at the same times (``tests/limits`` checks that). Times are seconds since
``EPOCH`` (not since 1970): a double then resolves about 15 ns, where Unix
time leaves it 0.24 µs.

- ``requests_per_minute``, ``tokens_per_minute``: GCRA (the generic cell
  rate algorithm), one number per key, the theoretical arrival time ``tat``.
  A request of cost ``c`` against a limit of ``N`` per minute moves it to
  ``max(tat, now) + c * 60 / N`` and passes when that is at most 60 s ahead
  of ``now``: up to ``N`` at once, then ``N`` per minute as time passes,
  exactly, with no window edges, and one value to read and write atomically
  (a sliding log keeps one entry per request; a fixed window lets 2N through
  around its edge). A refused request changes nothing. The cost of a token
  rate is the reserved tokens, capped at ``N`` (a request bigger than a
  whole minute passes when the bucket is full rather than never).
- ``max_concurrent``: leases with a time to live: a set of lease ids, each
  with its expiry; expired ones are dropped on every acquire, so a worker
  that dies holding leases leaks nothing past their TTL.
- ``tokens_per_day``: a counter per UTC day (its key carries the date and
  expires two days on), checked against the reservation (capped at the
  budget, as above); a day whose counter has reached the budget refuses
  every request. Its state does not say when it frees up (its key names the
  day), so a refusal waits what the caller gives with the check (``GIVEN_WAIT``:
  ``Store.acquire``'s ``waits``; the limiter gives the seconds left in the UTC
  day): the stores know nothing of days.

No I/O.
"""

from __future__ import annotations

import math
import time
from typing import Final, NamedTuple

from flatgate.proxy.document.limits import KINDS

__all__ = [
    "CONCURRENT_RETRY",
    "DAY_KEY_SECONDS",
    "EPOCH",
    "GIVEN_WAIT",
    "KEY_SLACK_MS",
    "KINDS",
    "KIND_CODES",
    "PERIOD",
    "TOLERANCE",
    "Quota",
    "go_duration",
    "rate_quota",
    "rate_remaining",
    "utc_day",
]

# 2025-01-01T00:00:00Z: the origin of the limits' clock (see above).
EPOCH: Final = 1_735_689_600
# The rates' period: per minute.
PERIOD: Final = 60.0
# Slack for the rounding of sums of doubles: a request may pass this early.
TOLERANCE: Final = 1e-6
# Retry-After of a request refused by max_concurrent: streams end at their
# own pace, and the earliest lease's expiry says nothing of it.
CONCURRENT_RETRY: Final = 1.0
# A day counter's key outlives its day by a day (a late settle still finds it).
DAY_KEY_SECONDS: Final = 2 * 86_400
# Redis keys outlive the state they hold by this much: the state alone says
# when it is spent, and a test's clock need not follow Redis' own.
KEY_SLACK_MS: Final = 1_000

# The limits a [[limits]] entry may set, in the order they are checked
# (``KINDS``, the one table of them: the config's keys, the metrics' labels),
# by number, and their codes in the Lua scripts.
REQUESTS: Final = 0
TOKENS: Final = 1
CONCURRENT: Final = 2
DAY: Final = 3
KIND_CODES: Final = ("r", "t", "c", "d")
# The kinds whose refusal waits what the caller gives per check (see above).
GIVEN_WAIT: Final = frozenset({DAY})


class Quota(NamedTuple):
    """A rate's standing for OpenAI's ``x-ratelimit-*`` headers: the limit
    per minute, what a request of cost 1 could still take now, and the
    seconds until the rate is back to its full allowance."""

    limit: int
    remaining: int
    reset: float


def rate_quota(limit: int, level: float) -> Quota:
    """The quota a GCRA key leaves, ``level`` being ``tat - now`` (seconds):
    the requests of cost 1 that would still pass (a millionth of one short
    counts as one: the doubles' rounding), and ``level`` as the reset."""
    return Quota(limit, rate_remaining(limit, level), max(level, 0.0))


def rate_remaining(limit: int, level: float) -> int:
    """``rate_quota``'s ``remaining``."""
    if level <= 0.0:
        return limit
    remaining = int((PERIOD - level) * limit / PERIOD + 1e-6)
    return 0 if remaining < 0 else limit if remaining > limit else remaining


def utc_day(unix: float) -> tuple[str, float]:
    """The UTC date of a Unix time (``"20260131"``) and the seconds left in it."""
    day_start = unix - unix % 86_400
    return time.strftime("%Y%m%d", time.gmtime(day_start)), day_start + 86_400 - unix


def go_duration(seconds: float) -> str:
    """A duration as OpenAI writes ``x-ratelimit-reset-*`` (Go's format):
    ``"0s"``, ``"20ms"``, ``"1s"``, ``"1.5s"``, ``"6m0s"``, ``"1h2m3s"``.
    Rounded up to the millisecond, so a wait is never understated."""
    # A microsecond of slack: the doubles' noise must not add a millisecond.
    ms = math.ceil(seconds * 1000 - 0.001) if seconds > 0 else 0
    if ms < 1000:
        return f"{ms}ms" if ms else "0s"
    if ms < 60_000:  # the usual case, short
        return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms / 1000:g}s"
    whole, frac = divmod(ms, 1000)
    secs = f"{whole % 60}.{frac:03d}".rstrip("0") if frac else str(whole % 60)
    if whole < 60:
        return f"{secs}s"
    minutes = whole // 60
    if minutes < 60:
        return f"{minutes}m{secs}s"
    return f"{minutes // 60}h{minutes % 60}m{secs}s"
