"""One tenant sending many large image requests at once, at the default sizes.

Against a real ``flatgate gateway`` left at its default bounds
(``max_body_bytes`` 32 MiB, ``max_buffered_bytes`` 256 MiB, so 64 MiB a
caller): an attacking tenant opens six requests of three screenshots each,
28 MiB of JSON apiece, at once. Its share admits two; the other four are told
to wait (429 ``caller_busy``, ``Retry-After``) before their bodies are read,
while another tenant's request of the same size goes through; then the two
admitted ones complete, their images intact (the fbs stub echoes each one's
digest).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from flatgate.proxy.plumbing.server_section import DEFAULT_MAX_BODY_BYTES, ServiceSection
from tests.proxy.part_requests import picture
from tests.servers import Server, running
from tests.stacks import write_stack

pytestmark = pytest.mark.integration

KEYS = {"attacker": "key-attacker", "victim": "key-victim"}
MIB = 1 << 20
# Three screenshots of 7 MiB each (a PNG, then bytes after its end): 28 MiB
# of base64 in JSON, within the default max_body_bytes.
SHOT = picture("PNG", 64, 32)
IMAGES = [SHOT + bytes([i]) * (7 * MIB) for i in range(3)]


def image_request() -> bytes:
    content: list[dict[str, object]] = [{"type": "text", "text": "compare these"}]
    for data in IMAGES:
        url = "data:image/png;base64," + base64.b64encode(data).decode()
        content.append({"type": "image_url", "image_url": {"url": url}})
    message = {"role": "user", "content": content}
    return json.dumps({"model": "echo", "messages": [message]}).encode()


BODY = image_request()


def echoed(images: list[bytes]) -> list[str]:
    return [
        f"[image image/png {len(d)} bytes sha256:{hashlib.sha256(d).hexdigest()[:12]} 64x32]"
        for d in images
    ]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("hostile-images")
    with running("stub", [], d) as fbs:
        cfg = write_stack(
            d / "g.toml",
            backends={"fbs": fbs.url},
            routes={"echo": "fbs"},
            edge={"access_log": False},
            proxy={"access_log": False},
            models={"echo": "SelfHosted"},
            keys={key: tenant for tenant, key in KEYS.items()},
        )
        with running("gateway", ["--config", cfg], d) as g:
            yield g


def head(key: str, length: int) -> bytes:
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def answer(s: socket.socket, seconds: float) -> bytes:
    """The whole answer on ``s`` (a Content-Length body), or what came of it
    in ``seconds``."""
    s.settimeout(0.2)
    data = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            piece = s.recv(1 << 16)
        except TimeoutError:
            continue
        if not piece:
            break
        data += piece
        top, sep, rest = data.partition(b"\r\n\r\n")
        if sep:
            fields = dict(line.split(b":", 1) for line in top.split(b"\r\n")[1:] if b":" in line)
            length = int(fields.get(b"content-length", fields.get(b"Content-Length", b"0")))
            if len(rest) >= length:
                break
    return data


def test_the_defaults_admit_the_providers_request_sizes() -> None:
    assert DEFAULT_MAX_BODY_BYTES == 32 * MIB  # Anthropic's 32 MB requests
    section = ServiceSection(port=1)
    assert section.max_body_bytes == DEFAULT_MAX_BODY_BYTES
    assert 26 * MIB < len(BODY) < DEFAULT_MAX_BODY_BYTES


def test_a_tenant_sending_many_image_requests_is_held_to_its_share(gateway: Server) -> None:
    socks = [socket.create_connection(("127.0.0.1", gateway.port)) for _ in range(6)]
    with contextlib.ExitStack() as stack:
        for s in socks:
            stack.enter_context(s)
            s.sendall(head(KEYS["attacker"], len(BODY)))  # admitted or not on its head
        refused: dict[int, bytes] = {}
        deadline = time.monotonic() + 10
        while len(refused) < 4 and time.monotonic() < deadline:
            for i, s in enumerate(socks):
                if i not in refused:
                    got = answer(s, 0.05)
                    if got:
                        refused[i] = got
        time.sleep(0.5)  # no more answers: the other two are held, waiting for their bodies
        for i, s in enumerate(socks):
            if i not in refused:
                assert not answer(s, 0.05), "an admitted request was answered before its body"
        assert len(refused) == 4
        for got in refused.values():
            status_line, _, rest = got.partition(b"\r\n")
            assert b" 429 " in status_line
            assert b"retry-after: 1" in rest.lower()
            assert b"caller_busy" in rest

        # Another tenant, same size, meanwhile: untouched by the attacker's share.
        victim = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            content=BODY,
            headers={
                "authorization": f"Bearer {KEYS['victim']}",
                "content-type": "application/json",
            },
            timeout=60,
        )
        assert victim.status_code == 200, victim.text[:500]
        text = victim.json()["choices"][0]["message"]["content"]
        assert all(e in text for e in echoed(IMAGES))

        # The two admitted ones complete, their bytes intact.
        held = [s for i, s in enumerate(socks) if i not in refused]
        for s in held:
            s.settimeout(60)  # answer() left a short one
            s.sendall(BODY)
        for s in held:
            got = answer(s, 60)
            assert got.startswith(b"HTTP/1.1 200"), got[:300]
            body = json.loads(got.partition(b"\r\n\r\n")[2])
            assert all(e in body["choices"][0]["message"]["content"] for e in echoed(IMAGES))
