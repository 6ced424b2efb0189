"""A recording forwarder between the gateway and a stub, for the media tests:
what a backend was sent, seen on the wire (the echo shows only the last
user message; a tap shows the history a later turn carried).

``tapped_gateway(directory, protocols)`` runs a stub per backend protocol,
a tap in front of each, and a ``flatgate gateway`` (one worker) whose
backend for model ``echo-<protocol>`` (and ``gpt-5.5-echo-<protocol>``) is
that protocol's tap, with the
client tests' ``[[keys]]`` (``tests.clients.conftest.KEYS``).
``tapping(upstream)`` serves on a loopback port, in a thread, forwarding
each request to ``upstream`` (a stub's URL) and answering with its whole
answer (a stream read to its end, then sent; the stub's answers are short),
and records ``(path, body)`` of each in ``Tap.seen``. ``images_in(body)``
finds the media a JSON body holds, whatever the protocol's shape: every
base64 ``source`` (Anthropic) and every ``data:`` URL (OpenAI), decoded;
``Tap.media()`` reads an ``fbs`` backend's FlatBuffer request too (its
parts' bytes, with the wire's own reader).
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx

from flatgate.proxy.wire.request.decode import read_request
from tests.clients.conftest import KEYS, serving
from tests.servers import spawn
from tests.stacks import QUIET, start_all, stop_all, write_stack

__all__ = ["Tap", "TappedGateway", "media_in", "tapped_gateway", "tapping"]

_UPSTREAM_KEY = "sk-flatgate-upstream"
_PROVIDERS = {"openai": "OpenAI", "openai-responses": "OpenAI", "anthropic": "Anthropic"}

_HOP = frozenset({"connection", "content-length", "transfer-encoding", "keep-alive", "host"})


@dataclass
class Tap:
    """A running tap: its URL and what it forwarded."""

    url: str
    seen: list[tuple[str, bytes]] = field(default_factory=list)

    def bodies(self, path: str) -> list[Any]:
        """The JSON bodies forwarded to ``path`` (its query left out), in order."""
        return [json.loads(b) for p, b in self.seen if p.split("?")[0].endswith(path)]

    def media(self) -> list[list[tuple[str, bytes]]]:
        """The media of each request forwarded (``media_in``; an fbs
        request's parts read with the wire's reader), in order."""
        return [_media_of(path, body) for path, body in self.seen]


@contextlib.contextmanager
def tapping(upstream: str) -> Iterator[Tap]:
    """A tap in front of ``upstream`` for the block."""
    tap = Tap("")
    client = httpx.Client(timeout=60)

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            tap.seen.append((self.path, body))
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            r = client.post(f"{upstream}{self.path}", content=body, headers=headers)
            self.answer(r)

        def do_GET(self) -> None:
            self.answer(client.get(f"{upstream}{self.path}"))

        def answer(self, r: httpx.Response) -> None:
            data = r.content
            self.send_response(r.status_code)
            for k, v in r.headers.items():
                if k.lower() not in _HOP and k.lower() != "content-encoding":
                    self.send_header(k, v)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    try:
        with serving(Forward) as port:
            tap.url = f"http://127.0.0.1:{port}"
            yield tap
    finally:
        client.close()


@dataclass
class TappedGateway:
    """A running gateway (``url``) and the tap in front of each protocol's stub."""

    url: str
    taps: dict[str, Tap]


@contextlib.contextmanager
def tapped_gateway(directory: Path, protocols: tuple[str, ...]) -> Iterator[TappedGateway]:
    """Stubs of ``protocols`` (JSON ones), each behind a tap, and a gateway
    in front, for the block."""
    keyed = ["--api-key", _UPSTREAM_KEY]
    stubs = {
        p: spawn("stub", ["--protocol", p, *([] if p == "fbs" else keyed)], directory)
        for p in protocols
    }
    start_all(list(stubs.values()))
    try:
        with contextlib.ExitStack() as taps_open:
            taps = {p: taps_open.enter_context(tapping(s.url)) for p, s in stubs.items()}
            config = write_stack(
                directory / "gateway.toml",
                proxy={**QUIET, "cooldown_seconds": 0},
                backends={f"tap-{p}": _backend(p, t.url) for p, t in taps.items()},
                routes={name: f"tap-{p}" for p in protocols for name in _names(p)},
                models={
                    name: _PROVIDERS.get(p, "SelfHosted") for p in protocols for name in _names(p)
                },
                keys=KEYS,
            )
            gateway = spawn("gateway", ["--config", config, "--workers", "1"], directory)
            start_all([gateway])
            try:
                yield TappedGateway(gateway.url, taps)
            finally:
                stop_all([gateway])
    finally:
        stop_all(list(stubs.values()))


def _backend(protocol: str, url: str) -> dict[str, Any]:
    if protocol == "fbs":
        return {"url": url}
    return {"url": f"{url}/v1", "protocol": protocol, "api_key": _UPSTREAM_KEY}


def _names(protocol: str) -> tuple[str, str]:
    """The model names that reach ``protocol``'s tap: ``echo-<protocol>``, and
    ``gpt-5.5-echo-<protocol>`` (a name Codex knows takes images)."""
    return f"echo-{protocol}", f"gpt-5.5-echo-{protocol}"


def _media_of(path: str, body: bytes) -> list[tuple[str, bytes]]:
    if body[:1] in (b"{", b"["):
        return media_in(json.loads(body))
    request = read_request(body)
    return [
        (part.media_type, part.data)
        for message in request.messages
        for part in message.parts or []
        if part.data
    ]


def media_in(body: Any) -> list[tuple[str, bytes]]:
    """``(media type, bytes)`` of every base64 source and data URL in a JSON
    body, in document order."""
    found: list[tuple[str, bytes]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "base64" and isinstance(node.get("data"), str):
                found.append((str(node.get("media_type", "")), base64.b64decode(node["data"])))
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str) and node.startswith("data:") and ";base64," in node:
            head, _, data = node.partition(";base64,")
            found.append((head[len("data:") :], base64.b64decode(data)))

    walk(body)
    return found
