"""The granian server every ``flatgate`` service runs: granian's own, draining first.

granian's main process stops on SIGTERM or SIGINT by stopping its workers
(each closes its listener, finishes what it serves, and is killed after
``workers_kill_timeout``). ``DrainingServer`` puts a drain in front of that,
timed from the signal (``t = 0``):

1. ``0``: ``SIGUSR1`` to every worker, whose ``plumbing.drain.Drain`` begins
   (503 ``draining`` and a 503 ``/readyz`` from the apps, so that load
   balancers take the instance out while it still accepts);
2. ``grace`` (sooner if every worker has exited already): granian's own
   shutdown: the listeners close, in-flight requests and streams go on.
   granian drops an upgraded WebSocket when its listener closes, so first,
   while a worker holds the stop (``Drain.hold``: a WebSocket is open; its
   marker file is in the directory ``HOLDS_ENV`` names, made at startup),
   the shutdown waits, until just before ``seconds``;
3. just before ``seconds``: each worker's ``Drain`` ends the streams still
   running (the apps send an error chunk);
4. ``seconds``: granian kills any worker left; the process exits 0.

A second signal changes nothing. Workers inherit ``SIGUSR1`` ignored, so a
worker whose app installs no ``Drain`` (or has not yet) is not killed by it.
A terminal's Ctrl-C signals the workers too: they close their listeners at
once (granian's own stop), while the streams they serve still get until
``seconds``; a signal to the main process alone (what an orchestrator sends)
gets the whole drain.

granian's multi-process server only (``granian.server.MPServer``, what
``Granian`` is on a GIL build of Python).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from typing import Any

from granian.log import logger
from granian.server import MPServer
from granian.server.mp import WorkerProcess

from flatgate.proxy.plumbing.drain import DRAIN_SIGNAL, HOLDS_ENV, hold_marker

__all__ = ["DrainingServer"]

# The least granian is given to stop its workers once the grace is over.
_MIN_KILL_TIMEOUT = 0.1
# A hold is waited for until this long before the drain's end.
_HOLD_MARGIN = 0.5


class DrainingServer(MPServer):
    """``granian.server.MPServer`` with a drain before its shutdown (see the
    module docstring); ``grace`` and ``seconds`` are counted from the signal."""

    def __init__(self, target: str, *, grace: float, seconds: float, **options: Any) -> None:
        if not 0 <= grace < seconds:
            raise ValueError(f"drain: expected 0 <= grace < seconds, got {grace}, {seconds}")
        super().__init__(target, **options)
        self.drain_grace = grace
        self.drain_seconds = seconds
        # Without a signal (a worker crashed), granian's own stop gets the
        # whole budget; granian joins with float timeouts, though it says int.
        self.workers_kill_timeout = seconds  # type: ignore[assignment]
        self._signalled_at: float | None = None
        self._holds = ""

    def startup(self, spawn_target: Any, target_loader: Any) -> None:
        # Workers inherit the disposition (fork and exec alike): until a
        # worker's Drain handles the signal, it is ignored, not fatal.
        if DRAIN_SIGNAL is not None:
            signal.signal(DRAIN_SIGNAL, signal.SIG_IGN)
        # Where the workers mark their holds (they inherit the environment).
        self._holds = tempfile.mkdtemp(prefix="flatgate-holds-")
        os.environ[HOLDS_ENV] = self._holds
        super().startup(spawn_target, target_loader)  # type: ignore[no-untyped-call]

    def signal_handler_interrupt(self, *args: Any, **kwargs: Any) -> None:
        if self._signalled_at is not None:
            logger.info("Already draining; the stop is under way")
            return
        self._signalled_at = time.monotonic()
        # From now on a worker that exits (it got the signal too, from a
        # terminal's Ctrl-C) is part of the stop, not a crash to report.
        for wrk in self.wrks:
            wrk.interrupt_by_parent = True
        super().signal_handler_interrupt(*args, **kwargs)  # type: ignore[no-untyped-call]

    def shutdown(self, exit_code: int = 0) -> None:
        try:
            if self._signalled_at is not None:
                self._drain(self._signalled_at)
            super().shutdown(exit_code)  # type: ignore[no-untyped-call]
        finally:
            if self._holds:
                shutil.rmtree(self._holds, ignore_errors=True)

    def _spawn_worker(self, *args: Any, **kwargs: Any) -> WorkerProcess:
        worker = super()._spawn_worker(*args, **kwargs)
        worker.__class__ = _Worker
        return worker

    def _drain(self, since: float) -> None:
        alive = [wrk for wrk in self.wrks if _alive(wrk)]
        logger.info(
            f"Draining: {len(alive)} worker(s) told, listeners close in "
            f"{self.drain_grace:g}s, the rest is stopped {self.drain_seconds:g}s after the signal"
        )
        if DRAIN_SIGNAL is not None:
            for wrk in alive:
                # A worker gone already, or never started (no pid), is skipped.
                with contextlib.suppress(ProcessLookupError, TypeError):
                    os.kill(wrk.inner.pid, DRAIN_SIGNAL)
        grace_ends = since + self.drain_grace
        while any(_alive(wrk) for wrk in self.wrks):
            left = grace_ends - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, 0.05))
        held_until = since + self.drain_seconds - _HOLD_MARGIN
        while self._held() and time.monotonic() < held_until:
            time.sleep(0.05)
        # granian's shutdown: listeners close, workers get the rest of the budget.
        left = self.drain_seconds - (time.monotonic() - since)
        self.workers_kill_timeout = max(left, _MIN_KILL_TIMEOUT)  # type: ignore[assignment]

    def _held(self) -> bool:
        """Whether a live worker holds the stop (its marker is there)."""
        if not self._holds:
            return False
        for wrk in self.wrks:
            pid = getattr(wrk.inner, "pid", None)
            if pid and _alive(wrk) and os.path.exists(hold_marker(self._holds, pid)):
                return True
        return False


class _Worker(WorkerProcess):
    """granian's worker process, whose clean exit is a stop, not a crash.

    granian's worker exits 0 only when told to stop, and a signal may reach it
    before this process's own handler runs (a terminal's Ctrl-C signals the
    whole process group): the server then stops, draining, instead of
    reporting a crash and exiting 1."""

    def _watcher(self) -> None:
        self.inner.join()
        if not self.interrupt_by_parent and self.inner.exitcode == 0:
            self.interrupt_by_parent = True
            self.parent.signal_handler_interrupt()  # type: ignore[no-untyped-call]
            return
        super()._watcher()  # type: ignore[no-untyped-call]


def _alive(worker: Any) -> bool:
    return bool(worker.is_alive())
