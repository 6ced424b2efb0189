"""Shared-offset amplification against real processes (issue 18): a real
proxy (granian) in front of a real ``openai`` backend (the stub in openai
mode). A 270 KB body whose 2,000 ``messages`` are one 256 KiB message once
took the proxy from 130 MB to 1,130 MB and sent the backend 500 MiB of JSON;
now it is a 400 ``malformed_request`` and the backend sees nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES
from tests.proxy.shared_offsets import amplified, expanded_bytes, shared_strings
from tests.servers import Server, running, tree_rss
from tests.stacks import QUIET, write_stack

pytestmark = pytest.mark.integration

MAX_BODY = 8 << 20
HEADERS = {"content-type": FLATBUFFERS, "accept": FRAMES}


@pytest.fixture(scope="module")
def oai(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running("stub", ["--protocol", "openai"], tmp_path_factory.mktemp("oai")) as s:
        yield s


@pytest.fixture(scope="module")
def proxy(oai: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("proxy")
    cfg = write_stack(
        d / "p.toml",
        proxy={"max_body_bytes": MAX_BODY, "cooldown_seconds": 0.5, **QUIET},
        backends={"oai": {"url": f"{oai.url}/v1", "protocol": "openai"}},
        routes={"*": "oai"},
    )
    with running("proxy", ["--config", cfg], d) as p:
        yield p


def stats(server: Server) -> dict[str, object]:
    data: dict[str, object] = httpx.get(f"{server.url}/stats", timeout=5).json()
    return data


def post(proxy: Server, body: bytes) -> httpx.Response:
    return httpx.post(f"{proxy.url}/v1/completions", content=body, headers=HEADERS, timeout=30)


def test_the_hostile_body_is_a_400_and_the_backend_never_sees_it(
    proxy: Server, oai: Server
) -> None:
    body = amplified(2000, 256 << 10, model="gpt-4o-mini")
    assert len(body) < 300_000
    before = stats(oai)
    rss = tree_rss(proxy.proc.pid)
    for _ in range(5):
        r = post(proxy, body)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "malformed_request"
        assert "(max_bytes)" in error["message"]
    after = stats(oai)
    assert after["started"] == before["started"]
    assert after["last_body_sha256"] == before["last_body_sha256"]
    # 500 MiB decoded per request before; now nothing is decoded past the cap.
    assert tree_rss(proxy.proc.pid) - rss < 64 << 20
    # The backend was not cooled down: an honest request is answered by it.
    honest = build_request("gpt-4o-mini", [("user", "still here")], stream=False)
    r = post(proxy, honest)
    assert r.status_code == 200, r.text
    assert stats(oai)["started"] == int(str(before["started"])) + 1


def test_an_honest_body_that_shares_strings_within_max_body_bytes_passes(
    proxy: Server, oai: Server
) -> None:
    messages = 2000
    text = b"w" * ((MAX_BODY - 1024) // messages - 4)
    body = shared_strings(messages, text, model="gpt-4o-mini")
    assert expanded_bytes(messages, len(text), model="gpt-4o-mini") <= MAX_BODY
    before = stats(oai)
    r = post(proxy, body)
    assert r.status_code == 200, r.text
    after = stats(oai)
    assert after["started"] == int(str(before["started"])) + 1
    assert after["last_body_sha256"] != before["last_body_sha256"]
