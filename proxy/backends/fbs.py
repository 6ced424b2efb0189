"""The ``fbs`` backend: a model server that speaks flatgate's own wire format.

It is sent the caller's ``CompletionRequest`` bytes, untouched, as
``POST {url}/v1/completions``, asking for size-prefixed chunk frames, which
come back as they are. Nothing is decoded: the only zero-copy path end to end.
No I/O here; the proxy's app does the sending.
"""

from __future__ import annotations

from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES

__all__ = ["COMPLETIONS_PATH", "completions_url", "request_headers"]

# Where an fbs server takes requests, under its root URL.
COMPLETIONS_PATH = "/v1/completions"


def completions_url(url: str) -> str:
    """The completions endpoint of the fbs server whose root is ``url``."""
    return url.rstrip("/") + COMPLETIONS_PATH


def request_headers(request_id: str, authorization: str | None) -> list[tuple[str, str]]:
    """What goes with the bytes: their type, the framing asked for, the request id,
    and the caller's credential when the backend is configured to receive it."""
    headers = [("content-type", FLATBUFFERS), ("accept", FRAMES), ("x-request-id", request_id)]
    if authorization:
        headers.append(("authorization", authorization))
    return headers
