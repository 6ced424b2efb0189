"""Graceful shutdown inside one worker: the draining flag and the streams' deadline.

Owns what a worker knows of a drain. The server's main process (the gateway's
``DrainingServer``) sends each worker ``SIGUSR1`` the moment it is told to stop
(SIGTERM or SIGINT); ``install`` makes that signal call ``begin``. From then
on, with ``t = 0`` at ``begin``:

- ``0``: ``draining`` is true. The app answers new requests and ``/readyz``
  with 503 ``draining`` (``Connection: close``, ``Retry-After``), so that load
  balancers take this instance out;
- ``grace``: the main process stops the workers' listeners (granian's own
  shutdown); streams already running go on;
- ``end_after`` (``seconds`` less a margin): every stream still tracked has
  its ``end`` callback called, once, and the app ends it with an error chunk;
- ``seconds``: the main process kills any worker still running.

``seconds`` is the whole budget from the signal, the grace included, so that
an orchestrator's own deadline (Kubernetes' ``terminationGracePeriodSeconds``
is 30 s by default) can be matched by one number.

A connection granian does not wait for at the grace's end (an upgraded
WebSocket: its listener's close drops it) takes a ``hold`` while it is open:
while any is held, a marker file named by the worker's pid exists in the
directory ``HOLDS_ENV`` names (the gateway's ``DrainingServer`` makes one for
its workers), and the main process waits for it to go, until just before
``seconds``, before granian's shutdown begins.

Knows nothing of HTTP: what draining answers, and how a stream ends, belong
to the apps; what else must change when a drain begins (the access log stops
batching its lines) registers with ``on_begin``. No I/O but the hold's marker
(made on the first hold, removed on the last release); one timer on the
worker's loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
from collections.abc import Callable

__all__ = ["DRAIN_SIGNAL", "HOLDS_ENV", "Drain", "Ending", "hold_marker"]

log = logging.getLogger("flatgate.drain")

# The signal the main process sends its workers when a drain begins (POSIX).
DRAIN_SIGNAL: signal.Signals | None = getattr(signal, "SIGUSR1", None)
# The environment variable naming the directory of the workers' hold markers.
HOLDS_ENV = "FLATGATE_DRAIN_HOLDS"


def hold_marker(directory: str, pid: int) -> str:
    """The marker a worker ``pid`` keeps in ``directory`` while it holds the stop."""
    return os.path.join(directory, f"{pid}.held")


class Drain:
    """One worker's drain; see the module docstring for the timeline."""

    __slots__ = (
        "_beginnings",
        "_begun",
        "_ends",
        "_expired",
        "_holds",
        "_ids",
        "_loop",
        "_timer",
        "grace",
        "margin",
        "seconds",
    )

    def __init__(self, grace: float = 5.0, seconds: float = 30.0, margin: float = 1.0) -> None:
        if grace < 0 or margin < 0:
            raise ValueError("Drain: grace and margin must be >= 0")
        if seconds <= grace:
            raise ValueError(f"Drain: seconds ({seconds}) must be more than grace ({grace})")
        self.grace = grace
        self.seconds = seconds
        self.margin = margin
        self._begun = False
        self._beginnings: list[Callable[[], None]] = []
        self._expired = False
        self._holds = 0
        self._ends: dict[int, Callable[[], None]] = {}
        self._ids = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def draining(self) -> bool:
        """True from ``begin`` on."""
        return self._begun

    @property
    def end_after(self) -> float:
        """Seconds from ``begin`` to the tracked streams' end: ``seconds`` less
        ``margin``, the margin capped at half the time left after the grace (so
        a short drain still ends its streams after the listener has closed)."""
        return self.seconds - min(self.margin, (self.seconds - self.grace) / 2)

    def begin(self) -> None:
        """Enter draining and schedule the streams' deadline; idempotent.

        Runs on the worker's loop (the signal handler ``install`` sets), or
        anywhere once ``install`` has named the loop."""
        if self._begun:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if self._loop is None:
                raise RuntimeError(
                    "Drain.begin: no running loop, and install() was not called"
                ) from None
            loop = self._loop
        self._begun = True
        self._timer = loop.call_later(self.end_after, self._expire)
        log.info("draining: streams still running are ended in %.1fs", self.end_after)
        for beginning in self._beginnings:
            _call(beginning, "an on_begin callback failed")

    def on_begin(self, callback: Callable[[], None]) -> None:
        """Have ``begin`` call ``callback`` (after the deadline is set); at
        once if the drain has begun already."""
        self._beginnings.append(callback)
        if self._begun:
            _call(callback, "an on_begin callback failed")

    def track(self, end: Callable[[], None]) -> Callable[[], None]:
        """Register an in-flight stream's "end now" callback; returns the
        function that unregisters it (call it when the stream ends, idempotent).

        A stream tracked after the deadline is ended at the loop's next turn."""
        if self._expired:
            self._call_soon(end)
            return _nothing
        key = next(self._ids)
        self._ends[key] = end
        ends = self._ends

        def untrack() -> None:
            ends.pop(key, None)

        return untrack

    def hold(self) -> Callable[[], None]:
        """Keep the server's stop (granian's listeners closing at the grace's
        end) waiting while a connection granian would drop is open; returns
        its release (idempotent). See the module docstring."""
        self._holds += 1
        if self._holds == 1:
            self._mark(held=True)
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            self._holds -= 1
            if self._holds == 0:
                self._mark(held=False)

        return release

    @property
    def holds(self) -> int:
        """Holds taken and not released."""
        return self._holds

    def _mark(self, *, held: bool) -> None:
        directory = os.environ.get(HOLDS_ENV)
        if not directory:
            return
        path = hold_marker(directory, os.getpid())
        try:
            if held:
                with open(path, "w"):
                    pass
            else:
                os.unlink(path)
        except OSError as exc:
            log.warning("drain: the hold marker %s: %s", path, exc)

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have ``SIGUSR1`` call ``begin`` on ``loop`` (in a worker, on its
        main thread, once the loop exists)."""
        self._loop = loop
        if DRAIN_SIGNAL is None:  # Windows: no drain signal; granian's stop only
            return
        try:
            loop.add_signal_handler(DRAIN_SIGNAL, self.begin)
        except NotImplementedError:
            signal.signal(DRAIN_SIGNAL, lambda *_: loop.call_soon_threadsafe(self.begin))
        except RuntimeError as exc:  # not the main thread: no signals here
            log.warning("drain: cannot handle %s here (%s)", DRAIN_SIGNAL.name, exc)

    @property
    def tracked(self) -> int:
        """Streams tracked now."""
        return len(self._ends)

    def _expire(self) -> None:
        self._expired = True
        ends = list(self._ends.values())
        self._ends.clear()
        if ends:
            log.warning("drain: ending %d stream(s) still running", len(ends))
        for end in ends:
            _call(end, "a stream's end callback failed")

    def _call_soon(self, end: Callable[[], None]) -> None:
        try:
            asyncio.get_running_loop().call_soon(end)
        except RuntimeError:
            end()


class Ending:
    """A request's ``end`` callback for ``Drain.track``: cancels the task that
    made it, and remembers it did, so the handler can tell that cancellation
    from any other (``absorb``) and end its answer with ``draining``."""

    __slots__ = ("_task", "fired")

    def __init__(self) -> None:
        try:
            self._task = asyncio.current_task()
        except RuntimeError:  # no running loop (driven by hand): nothing to end
            self._task = None
        self.fired = False

    def __call__(self) -> None:
        if self._task is not None and not self.fired:
            self.fired = True
            self._task.cancel()

    def absorb(self) -> bool:
        """Whether this cancelled the task; if so, uncancel it."""
        if not self.fired or self._task is None:
            return False
        self._task.uncancel()
        return True


def _nothing() -> None:
    return None


def _call(callback: Callable[[], None], failure: str) -> None:
    # One failing callback must not keep the others from running.
    try:
        callback()
    except Exception:
        log.exception("drain: %s", failure)
