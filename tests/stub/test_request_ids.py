"""Request ids a header cannot carry (issue 18): real stubs, and a real proxy
in front of one.

A ``CompletionRequest``'s ``request_id`` is any string; the stub echoes the id
in a response header, which must be Latin-1 without CR/LF. An id with CR/LF
or text past Latin-1 used to fail the answer with a 500, and the proxy in
front then cooled the backend down. Now the header is left out (the body
still echoes the id); a valid id is echoed as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from flatgate.proxy.wire.chunk.stock import decode_chunk
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES, SSE
from tests.proxy.test_proxy_http import metric, proxy_config
from tests.servers import Server, running, write_config
from tests.stub.helpers import stub

pytestmark = pytest.mark.integration

BAD_IDS = ["a\r\nb", "naïve✓"]
USER = {"role": "user", "content": "hi"}


@pytest.fixture(scope="module")
def fbs_stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with stub("fbs", tmp_path_factory.mktemp("fbs-stub")) as s:
        yield s


def _frames(body: bytes) -> list[bytes]:
    out, at = [], 0
    while at < len(body):
        size = int.from_bytes(body[at : at + 4], "little")
        out.append(body[at : at + 4 + size])
        at += 4 + size
    return out


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("accept", [FRAMES, SSE])
@pytest.mark.parametrize("request_id", [*BAD_IDS, "req-ok"])
def test_the_fbs_stub_answers_any_request_id(
    fbs_stub: Server, request_id: str, accept: str, stream: bool
) -> None:
    body = build_request("echo", [("user", "hello there")], request_id=request_id, stream=stream)
    r = httpx.post(
        f"{fbs_stub.url}/v1/completions",
        content=body,
        headers={"content-type": FLATBUFFERS, "accept": accept},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    valid = request_id == "req-ok"
    assert r.headers.get("x-request-id") == (request_id if valid else None)
    if accept == FRAMES:  # the frames still carry the id, whatever it is
        chunks = [decode_chunk(f[4:]) for f in _frames(r.content)]
        assert chunks and all(c.request_id == request_id for c in chunks)


def test_a_proxy_in_front_gets_200_and_cools_nothing_down(fbs_stub: Server, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "p.toml", proxy_config({"stub": fbs_stub.url}))
    with running("proxy", ["--config", cfg], tmp_path) as proxy:
        for request_id in BAD_IDS:
            for stream in (True, False):
                body = build_request(
                    "echo-1",
                    [("user", "hi")],
                    provider="SelfHosted",
                    request_id=request_id,
                    stream=stream,
                )
                r = httpx.post(
                    f"{proxy.url}/v1/completions",
                    content=body,
                    headers={"content-type": FLATBUFFERS, "accept": FRAMES},
                    timeout=10,
                )
                assert r.status_code == 200, r.text
        assert metric(proxy.url, "flatgate_upstream_failures") == 0


@pytest.mark.parametrize(
    ("protocol", "path", "headers", "id_header"),
    [
        ("openai", "/v1/chat/completions", {}, "x-request-id"),
        ("anthropic", "/v1/messages", {"anthropic-version": "2023-06-01"}, "request-id"),
    ],
)
def test_the_json_stubs_answer_a_request_id_past_latin_1(
    protocol: str, path: str, headers: dict[str, str], id_header: str, tmp_path: Path
) -> None:
    """Their id comes from the caller's ``x-request-id``: raw UTF-8 bytes there
    arrive as Latin-1 text with control characters, not a valid id."""
    with stub(protocol, tmp_path) as s:
        for stream in (True, False):
            content = json.dumps(
                {"model": "m", "max_tokens": 8, "stream": stream, "messages": [USER]}
            ).encode()
            r = httpx.post(
                f"{s.url}{path}",
                content=content,
                headers=[
                    *((k.encode(), v.encode()) for k, v in headers.items()),
                    (b"content-type", b"application/json"),
                    (b"x-request-id", "naïve✓".encode()),
                ],
                timeout=10,
            )
            assert r.status_code == 200, r.text
            assert id_header not in r.headers
            ok = httpx.post(
                f"{s.url}{path}",
                content=content,
                headers={**headers, "content-type": "application/json", "x-request-id": "r-1"},
                timeout=10,
            )
            assert (ok.status_code, ok.headers.get(id_header)) == (200, "r-1")
