"""Access logs: one structured line per request, on both services.

``Entry`` is what a request leaves behind (the client API, the method and
the path it came on (never its query string), request id, tenant, model,
provider, backend, status, bytes in and out, time to first byte, duration,
completion tokens, error code); ``AccessLog.write`` renders it as logfmt text
or one JSON object per line. Never a prompt, a completion or a credential:
an entry has no field that could hold one.

Values a caller chose (request id, tenant, model) are cut to 128 characters
and, in text, quoted and escaped when they hold anything but a plain token,
so a caller cannot forge a line or a field.

Cost: entries are kept (a few small strings each) and rendered together at a
flush, every ``FLUSH_ENTRIES`` entries or ``FLUSH_SECONDS`` after the first
kept one, whichever is sooner: rendering in a batch costs about half what
rendering each line on its own request does. Lines go out in
``os.write`` calls of whole lines of at most ``FLUSH_BYTES`` (under
``PIPE_BUF``, so the lines of several worker processes sharing one stderr pipe
never interleave). The time stamp is formatted once per millisecond.

On the way out nothing kept may be lost. A granian worker is a forked process
that leaves through ``os._exit``, so ``atexit`` (registered all the same, for
a process that exits normally) never runs there: ``unbatch`` (called when a
drain begins) writes what is kept and from then on each line as its request
ends, since the worker may be killed at the drain's deadline; and the server
boundary (``plumbing.serve.ServerApp``) calls ``flush`` when the worker stops.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import re
import time
from collections.abc import Callable
from typing import Literal

import msgspec

__all__ = ["FLUSH_BYTES", "FLUSH_ENTRIES", "FLUSH_SECONDS", "AccessLog", "Entry", "LogFormat"]

LogFormat = Literal["text", "json"]
FLUSH_BYTES = 3584
FLUSH_SECONDS = 0.5
FLUSH_ENTRIES = 32
_MAX_VALUE = 128
_PLAIN = re.compile(r"[A-Za-z0-9._:/@+\-]+").fullmatch


class Entry:
    """One request's access-log fields; ``None`` is "not known" (``-`` in text)."""

    __slots__ = (
        "api",
        "backend",
        "bytes_in",
        "bytes_out",
        "duration",
        "ended",
        "error",
        "method",
        "model",
        "path",
        "prompt_tokens",
        "provider",
        "request_id",
        "started",
        "status",
        "tenant",
        "tokens",
        "trace_id",
        "ttfb",
    )

    def __init__(self) -> None:
        self.started = time.perf_counter()
        # The client API ("openai-chat", "anthropic-messages",
        # "openai-responses"; the proxy's "fbs"; None on a path no route
        # serves), the request's method, and its path without the query.
        self.api: str | None = None
        self.method: str | None = None
        self.path: str | None = None
        self.request_id: str | None = None
        self.tenant: str | None = None
        self.model: str | None = None
        self.provider: str | None = None
        self.backend: str | None = None
        self.status = 0
        self.bytes_in = 0
        self.bytes_out = 0
        # Seconds from the request's start to the first response byte.
        self.ttfb: float | None = None
        self.tokens: int | None = None
        # The prompt's tokens, as the backend's usage counts them (the edge's
        # traces; not a field of the log line).
        self.prompt_tokens: int | None = None
        # The request's OpenTelemetry trace (32 hex digits), when traced:
        # logged, to find the trace from the line.
        self.trace_id: str | None = None
        self.error: str | None = None
        # Set by AccessLog.write: wall-clock end, and seconds from start to end.
        self.ended = 0.0
        self.duration = 0.0

    def first_byte(self) -> None:
        """Note the first response byte (once)."""
        if self.ttfb is None:
            self.ttfb = time.perf_counter() - self.started


def _caller(value: str | None) -> str:
    """A value a caller chose, for text: cut, and quoted unless a plain token."""
    if not value:
        return "-"
    if len(value) > _MAX_VALUE:
        value = value[:_MAX_VALUE]
    if _PLAIN(value):
        return value
    return msgspec.json.encode(value).decode()


_OURS: dict[str, str] = {}


def _ours(value: str | None) -> str:
    """A value from the configuration or the code registry (backend, provider,
    error code), or a request's method: few, so rendered once each (quoted if
    need be; past 4096 of them, rendered each time)."""
    if not value:
        return "-"
    text = _OURS.get(value)
    if text is None:
        text = _caller(value)
        if len(_OURS) < 4096:
            _OURS[value] = text
    return text


def _cut(value: str | None) -> str | None:
    if value is None or len(value) <= _MAX_VALUE:
        return value
    return value[:_MAX_VALUE]


class _JsonLine(msgspec.Struct, omit_defaults=True):
    ts: str
    service: str
    api: str | None
    method: str | None
    path: str | None
    request_id: str | None
    tenant: str | None
    model: str | None
    provider: str | None
    backend: str | None
    status: int
    bytes_in: int
    bytes_out: int
    ttfb_ms: float | None
    duration_ms: float
    completion_tokens: int | None
    error: str | None
    # Only when traced (the one field with a default: left out when None).
    trace_id: str | None = None


_encode_json = msgspec.json.Encoder().encode


class _Clock:
    """The ISO-8601 UTC time stamp to the millisecond: made once a millisecond,
    its date and time part once a second."""

    __slots__ = ("_ms", "_prefix", "_second", "_stamp")

    def __init__(self) -> None:
        self._second = -1
        self._ms = -1
        self._prefix = ""
        self._stamp = ""

    def __call__(self, now: float) -> str:
        ms = int(now * 1000)
        if ms != self._ms:
            self._ms = ms
            second, frac = divmod(ms, 1000)
            if second != self._second:
                self._second = second
                self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._stamp = f"{self._prefix}.{frac:03d}Z"
        return self._stamp


def _stderr(data: bytes) -> None:
    os.write(2, data)


class AccessLog:
    """Renders entries for one service and writes them in whole-line batches."""

    def __init__(
        self,
        service: str,
        log_format: LogFormat = "text",
        *,
        enabled: bool = True,
        write: Callable[[bytes], None] = _stderr,
    ) -> None:
        self.service = service
        self.enabled = enabled
        self._json = log_format == "json"
        self._write = write
        self._pending: list[Entry] = []
        # Entries kept before a flush: FLUSH_ENTRIES, 1 once unbatched.
        self._flush_at = FLUSH_ENTRIES
        self._timer: asyncio.TimerHandle | None = None
        self._clock = _Clock()
        if enabled:
            atexit.register(self.flush)

    def write(self, entry: Entry) -> None:
        """Log ``entry`` (it ends now). Rendered at the next flush, in a batch."""
        if not self.enabled:
            return
        entry.duration = time.perf_counter() - entry.started
        entry.ended = time.time()
        pending = self._pending
        pending.append(entry)
        if len(pending) >= self._flush_at:
            self.flush()
        elif self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()
                return
            self._timer = loop.call_later(FLUSH_SECONDS, self.flush)

    def unbatch(self) -> None:
        """Write what is kept now, and from now on each entry as it is
        written (a drain has begun: the process may be killed any moment)."""
        self._flush_at = 1
        self.flush()

    def _render(self, e: Entry) -> bytes:
        ttfb = e.ttfb
        tokens = e.tokens
        return (
            f"ts={self._clock(e.ended)} service={self.service} api={_ours(e.api)} "
            f"method={_ours(e.method)} path={_caller(e.path)} rid={_caller(e.request_id)} "
            f"tenant={_caller(e.tenant)} model={_caller(e.model)} provider={_ours(e.provider)} "
            f"backend={_ours(e.backend)} status={e.status} in={e.bytes_in} out={e.bytes_out} "
            f"ttfb_ms={'-' if ttfb is None else f'{ttfb * 1000:.3f}'} "
            f"dur_ms={e.duration * 1000:.3f} tokens={'-' if tokens is None else tokens} "
            f"error={_ours(e.error)}{'' if e.trace_id is None else f' trace={e.trace_id}'}\n"
        ).encode()

    def _render_json(self, e: Entry) -> bytes:
        ttfb = e.ttfb
        return (
            _encode_json(
                _JsonLine(
                    self._clock(e.ended),
                    self.service,
                    e.api,
                    _cut(e.method),
                    _cut(e.path),
                    _cut(e.request_id),
                    _cut(e.tenant),
                    _cut(e.model),
                    e.provider,
                    e.backend,
                    e.status,
                    e.bytes_in,
                    e.bytes_out,
                    None if ttfb is None else round(ttfb * 1000, 3),
                    round(e.duration * 1000, 3),
                    e.tokens,
                    e.error,
                    e.trace_id,
                )
            )
            + b"\n"
        )

    def flush(self) -> None:
        """Write the buffered lines now, in batches of whole lines."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending = self._pending
        if not pending:
            return
        self._pending = []
        render = self._render_json if self._json else self._render
        batch: list[bytes] = []
        size = 0
        for entry in pending:
            line = render(entry)
            if batch and size + len(line) > FLUSH_BYTES:
                self._emit(b"".join(batch))
                batch, size = [], 0
            batch.append(line)
            size += len(line)
        self._emit(b"".join(batch))

    def _emit(self, data: bytes) -> None:
        # A closed or full stderr must not fail requests.
        with contextlib.suppress(OSError):
            self._write(data)
