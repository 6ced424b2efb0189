"""A lean path to Redis for the limits' hot path: pre-encoded commands over a
fixed set of redis-py connections, and a batch per event-loop turn for the
operations off the request's path.

redis-py's general path (``Redis.execute_command`` through a
``BlockingConnectionPool``) spends most of a request's limit check in
Python: a pool condition and lock, a health probe, observability hooks, and
``pack_command`` re-encoding every argument. Here a command is encoded once
into RESP (``encode``), a worker's ``size`` connections wait in a queue (a
``get`` is a deque pop when one is free), and redis-py's own ``Connection``
still does the connecting (TCP or TLS, ``AUTH``, ``SELECT``) and parses the
replies. ``batch`` gathers the commands off the request's path (settles,
usage) sent during one turn of the event loop and writes them in one
pipeline, on a connection of their own: under load, one write for many
requests' settles, and never on a request's own round trip (carrying them in
the next acquire's write doubled its wall time).

A connection that fails is disconnected and the command sent once more on it
(it reconnects): a server restart costs one retry, not an error. Errors
Redis answers come back as the exception objects redis-py's parser makes
(``NoScriptError``, ``ResponseError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

__all__ = ["Connections", "Refresher", "Retired", "Target", "encode"]

_CRLF = b"\r\n"


def encode(*parts: str | bytes) -> bytes:
    """One command in RESP: an array of bulk strings."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class _Batch:
    __slots__ = ("commands", "done")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.commands: list[bytes] = []
        self.done: asyncio.Future[list[Any]] = loop.create_future()

    def finish(self, replies: list[Any] | None, exc: BaseException | None = None) -> None:
        if self.done.done():
            return
        if exc is not None:
            self.done.set_exception(exc)
        else:
            self.done.set_result(replies or [])


class Target(Protocol):
    """Where the store's commands go: one server (``Connections``), a
    cluster (``rediscluster``) or Sentinel's primary (``redissentinel``).
    ``key``: a key the command touches (a cluster routes by its slot; every
    key of one command is in one slot); the others ignore it."""

    async def call(self, command: bytes, key: str = "") -> Any:
        """One encoded command's reply (an error reply as an exception object)."""

    async def batch(self, command: bytes, key: str = "") -> Any:
        """``call``, batched with the others of this turn of the event loop."""

    async def aclose(self) -> None:
        """Closes every connection."""


class Connections:
    """``size`` connections to the server of ``url`` (redis-py's URL forms;
    ``options``: redis-py connection keywords, e.g. ``password``)."""

    def __init__(
        self, url: str, size: int, *, background_timeout: float = 1.0, **options: Any
    ) -> None:
        """``background_timeout``: the longest a batch of background commands
        may take (waiting for a connection included); past it the batch fails
        and its connection is dropped, so a server that stopped answering
        cannot hold the connections for good."""
        self._background_timeout = background_timeout
        template = ConnectionPool.from_url(url, **options)
        self._idle: asyncio.Queue[AbstractConnection] = asyncio.Queue()
        self._all: list[AbstractConnection] = [
            template.make_connection()  # type: ignore[no-untyped-call]
            for _ in range(size)
        ]
        for conn in self._all:
            self._idle.put_nowait(conn)
        self._batch: _Batch | None = None
        self._closed = False

    async def call(self, command: bytes, key: str = "") -> Any:
        """Send one encoded command; its reply (an error reply as an exception
        object, not raised). ``key`` is not read: one server holds them all."""
        return (await self.pipeline([command]))[0]

    async def pipeline(self, commands: Sequence[bytes]) -> list[Any]:
        """Send ``commands`` in one write on one connection; their replies in
        order. Raises redis-py's ``ConnectionError`` / ``TimeoutError`` or
        ``OSError`` when the connection fails twice."""
        if self._closed:
            raise RedisConnectionError("these connections are closed")
        conn = await self._idle.get()
        try:
            try:
                return await _exchange(conn, commands)
            except (RedisConnectionError, OSError):
                await conn.disconnect()
                if self._closed:  # closed meanwhile: never reconnect
                    raise
                return await _exchange(conn, commands)
        except BaseException:
            await conn.disconnect()
            raise
        finally:
            self._idle.put_nowait(conn)
            if self._closed:  # closed while this command was out
                await conn.disconnect()

    async def batch(self, command: bytes, key: str = "") -> Any:
        """``call``, off the request's path: sent together with every other
        ``batch`` command of this turn of the event loop (``key``: not read)."""
        batch = self._batch
        if batch is None:
            loop = asyncio.get_running_loop()
            batch = self._batch = _Batch(loop)
            loop.call_soon(self._send, batch)
        at = len(batch.commands)
        batch.commands.append(command)
        replies = await asyncio.shield(batch.done)
        return replies[at]

    def _send(self, batch: _Batch) -> None:
        self._batch = None
        task = asyncio.get_running_loop().create_task(
            asyncio.wait_for(self.pipeline(batch.commands), self._background_timeout)
        )

        def settle(t: asyncio.Task[list[Any]]) -> None:
            if t.cancelled():
                batch.finish(None, ConnectionError("cancelled"))
            elif (exc := t.exception()) is not None:
                batch.finish(None, exc)
            else:
                batch.finish(t.result())

        task.add_done_callback(settle)

    async def aclose(self) -> None:
        """Disconnect every connection; a command after this fails."""
        self._closed = True
        for conn in self._all:
            await conn.disconnect()


class Retired:
    """Connections no longer in use (a node that left the map, a primary
    that is one no more), closed in the background: a command still on one
    fails. ``aclose`` waits for every close under way."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def close(self, conns: Connections) -> None:
        task = asyncio.get_running_loop().create_task(conns.aclose())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)


class Refresher:
    """Runs ``load`` (a cluster's slot map, Sentinel's primary) in the
    background: one run at a time, at most one every ``interval`` seconds
    however many commands fail, and never cancelled by a caller's timeout."""

    def __init__(self, load: Callable[[], Awaitable[None]], interval: float) -> None:
        self._load = load
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        self._last = -math.inf

    def stale(self) -> None:
        """What ``load`` found may be out of date: run it again (soon)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def fresh(self) -> None:
        """Wait for a run (the one under way, or a new one)."""
        self.stale()
        assert self._task is not None
        await asyncio.shield(self._task)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        wait = self._last + self._interval - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        self._last = loop.time()
        await self._load()

    async def cancel(self) -> None:
        """Stop a run under way, and wait until it has stopped."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def _exchange(conn: AbstractConnection, commands: Sequence[bytes]) -> list[Any]:
    await conn.send_packed_command(commands, check_health=False)
    replies = []
    for _ in commands:
        try:
            replies.append(await conn.read_response(disconnect_on_error=False))
        except ResponseError as exc:  # an error reply: the connection is fine
            replies.append(exc)
    return replies
