"""Credentials a backend presents that expire (AWS's, Microsoft Entra ID's),
kept fresh off the request's path.

A cloud's credential comes from its own library's chain (botocore's for
AWS, azure-identity's for Azure), whose lookups are blocking I/O: files,
the environment, a metadata server, a token endpoint. A request must never
wait on one. ``Refreshing`` holds the latest value a ``fetch`` returned:

- ``current()`` is what a request reads: the value, no I/O. Before the first
  fetch has succeeded, or once the value has expired and no fetch has
  replaced it, it raises ``CredentialsUnavailable`` (the dispatcher then
  tries the route's next backend, and names why if none answers).
- ``start(loop)`` begins the refresher on a worker's loop (the service calls
  it once per worker, and for each backend a reload adds): ``fetch`` runs in
  a thread at once, then again ``margin`` seconds before the value expires
  (a value without an expiry, a static key, is not fetched again), and on a
  failure after 1 s, doubling to ``MAX_BACKOFF``, logged each time.
  ``stop()`` ends it (a reload that drops the backend).

``fetch`` returns ``(value, expires_at)``, ``expires_at`` in Unix seconds
(``None``: it does not expire); it runs the library's chain and raises what
the chain raises.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError

__all__ = ["MAX_BACKOFF", "CredentialsUnavailable", "Fetch", "Refreshing"]

log = logging.getLogger("flatgate.proxy.credentials")

T = TypeVar("T")
Fetch = Callable[[], tuple[T, float | None]]

# The longest wait between two failed fetches.
MAX_BACKOFF = 60.0
# Fetched again this long before the value expires (AWS's SDKs refresh 5 to
# 15 minutes ahead; Entra ID's tokens live an hour or more).
DEFAULT_MARGIN = 300.0


class CredentialsUnavailable(FlatgateError):
    """A backend's credential has not been fetched yet, or has expired and
    could not be fetched again: the gateway's configuration or the cloud's
    credential service, never the caller's."""

    default = codes.BACKEND_AUTH_FAILED


class Refreshing(Generic[T]):
    """One backend's credential, fetched off the request's path (see the
    module docstring)."""

    def __init__(
        self,
        name: str,
        fetch: Fetch[T],
        *,
        margin: float = DEFAULT_MARGIN,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``name`` says whose credential it is in logs and errors (``backend
        bedrock-east (AWS credentials)``)."""
        self.name = name
        self._fetch = fetch
        self._margin = margin
        self._clock = clock
        self._value: T | None = None
        self._expires: float | None = None
        self._error = "not fetched yet"
        self._task: asyncio.Task[None] | None = None

    def current(self) -> T:
        """The value last fetched; ``CredentialsUnavailable`` when there is
        none, or it has expired."""
        value = self._value
        expires = self._expires
        if value is None or (expires is not None and expires <= self._clock()):
            raise CredentialsUnavailable(f"{self.name}: no credentials: {self._error}")
        return value

    def refresh(self) -> float | None:
        """Fetch once, now (blocking: a thread's, or a test's); the seconds
        until the next fetch is due (``None``: never)."""
        value, expires = self._fetch()
        self._value, self._expires = value, expires
        self._error = ""
        if expires is None:
            return None
        return max(expires - self._margin - self._clock(), 1.0)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Begin refreshing on ``loop`` (once: a running refresher is kept)."""
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name=f"credentials {self.name}")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        backoff = 1.0
        while True:
            try:
                wait = await asyncio.to_thread(self.refresh)
            except Exception as exc:  # the chain's own errors, whatever they are
                self._error = f"{type(exc).__name__}: {exc}"
                log.warning("%s: fetching credentials failed (again in %.0f s): %s",
                            self.name, backoff, self._error)  # fmt: skip
                wait = backoff
                backoff = min(backoff * 2, MAX_BACKOFF)
            else:
                backoff = 1.0
                if wait is None:
                    return
            await asyncio.sleep(wait)
