"""Live reload: each worker watches its config file and applies a good change.

Owns ``ConfigWatch``. Every ``interval`` seconds, a worker's event loop looks
at the config file's identity (inode, size, modification time, to the
nanosecond); when it has changed, the ``apply`` callback reads and validates
the whole file and swaps in what may change live. A file that does not read
or validate is rejected: one log line naming every problem, the config in
force stays, and the same bad file is not tried again until it changes.
``flatgate reload`` checks the file and touches it, so a reload is one command
whatever edited the file.

Why a watched file rather than a signal or an admin endpoint: granian's master
answers ``SIGHUP`` by respawning its workers (a restart, which drops the
memory store's counts), a signal to a worker would need its PID, and an HTTP
endpoint reaches one worker of many behind the same port. A stat per second
per worker costs nothing measurable, and every worker of every instance that
reads the file converges within ``interval``.

No requests are touched: the callback swaps references between two requests
(one event loop per worker), and requests in flight finish on the config they
started with.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

__all__ = ["ConfigWatch", "file_identity"]

log = logging.getLogger("flatgate.reload")


def file_identity(path: str) -> tuple[int, int, int] | None:
    """``(inode, size, mtime_ns)`` of ``path``; ``None`` when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class ConfigWatch:
    """Watches ``path``; ``apply()`` re-reads it on a change. ``apply`` raises
    (a ``ConfigError``, or anything) to reject the new file. ``name`` says
    whose config it is in the log."""

    def __init__(
        self, path: str, apply: Callable[[], None], *, interval: float = 1.0, name: str = ""
    ) -> None:
        self.path = path
        self.interval = interval
        self.name = name
        self._apply = apply
        self._seen = file_identity(path)
        self._handle: asyncio.TimerHandle | None = None
        # Reloads applied and rejected (for tests and the log).
        self.applied = 0
        self.rejected = 0

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start watching, on ``loop`` (the worker's)."""
        if self._handle is None and self.interval > 0:
            self._handle = loop.call_later(self.interval, self._tick, loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self.check()
        finally:
            self._handle = loop.call_later(self.interval, self._tick, loop)

    def check(self) -> bool:
        """Apply the file if it changed since last seen; whether it was applied."""
        now = file_identity(self.path)
        if now is None or now == self._seen:
            return False
        self._seen = now
        try:
            self._apply()
        except Exception as exc:
            self.rejected += 1
            log.error(  # the problems, not a traceback
                "%sconfig %s rejected; the config in force stays: %s",
                f"{self.name}: " if self.name else "",
                self.path,
                exc,
            )
            return False
        self.applied += 1
        log.info("%sconfig %s reloaded", f"{self.name}: " if self.name else "", self.path)
        return True
