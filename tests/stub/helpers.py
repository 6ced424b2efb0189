"""Starting stubs for the stub's tests, and reading what they answer raw."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.servers import Server, running

__all__ = ["sse_events", "stream_raw", "stub"]


@contextmanager
def stub(protocol: str, log_dir: Path, *args: str) -> Iterator[Server]:
    """``flatgate stub --protocol P <args>`` on a free port until the block ends."""
    with running("stub", ["--protocol", protocol, *args], log_dir) as s:
        yield s


def sse_events(text: str) -> list[tuple[str | None, Any]]:
    """``(event name, data)`` per SSE event; data is JSON, or the raw text
    (``[DONE]``)."""
    out: list[tuple[str | None, Any]] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name = None
        data = []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        raw = "\n".join(data)
        try:
            out.append((name, json.loads(raw)))
        except ValueError:
            out.append((name, raw))
    return out


def stream_raw(
    url: str, content: bytes, headers: dict[str, str], timeout: float = 5
) -> tuple[int, bytes, str]:
    """POST ``content`` and read the answer until the server ends, cuts or
    stalls it: ``(status, bytes read, how it ended)``: ``"end"``, or the
    error's class name (status 0 when not even the head came)."""
    pieces: list[bytes] = []
    status = 0
    try:
        with httpx.stream("POST", url, content=content, headers=headers, timeout=timeout) as r:
            status = r.status_code
            for piece in r.iter_raw():
                pieces.append(piece)
        ended = "end"
    except httpx.HTTPError as exc:
        ended = type(exc).__name__
    return status, b"".join(pieces), ended
