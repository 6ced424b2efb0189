"""The ``fbs`` backend and content parts: the caller's bytes, images and
documents in them, reach the fbs server untouched; an internal caller reads a
part's bytes in place with the generated accessors; the fbs stub echoes what
parts it received (kind, media type, bytes, digest, pixel size)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from benchmarks.inmemory import make_server, serve_one
from flatgate.generated.LLMGateway import CompletionRequest as fb_request
from flatgate.proxy.backends.dialect import described
from flatgate.proxy.backends.fbs.stub import FbsWire
from flatgate.proxy.wire.chunk.frames import FrameSplitter, unprefix
from flatgate.proxy.wire.chunk.stock import decode_chunk
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES, ApiDialect, PartKind
from tests.proxy.part_requests import picture, request
from tests.servers import Server, running
from tests.stacks import QUIET, write_stack

PNG = picture("PNG", 64, 32)
PDF = b"%PDF-1.4\n" + bytes(range(256)) * 64 + b"\n%%EOF\n"
PARTS = [
    ContentPart(kind=int(PartKind.TEXT), text="what is this?"),
    ContentPart(
        kind=int(PartKind.IMAGE),
        data=PNG,
        media_type="image/png",
        dialect=int(ApiDialect.ANTHROPIC_MESSAGES),
        extras='{"cache_control":{"type":"ephemeral"}}',
    ),
    ContentPart(
        kind=int(PartKind.DOCUMENT),
        data=PDF,
        media_type="application/pdf",
        title="report",
        filename="r.pdf",
    ),
]
BODY = request(PARTS)


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()[:12]


def test_the_proxy_sends_a_request_with_parts_as_the_callers_bytes() -> None:
    server, transport = make_server()
    ex = serve_one(server, BODY)
    assert ex.status == 200
    assert transport.last_body is BODY  # the same object: not decoded, not copied


def test_an_internal_caller_reads_a_parts_bytes_in_place() -> None:
    """The design's promise to an internal ``.fbs`` service: the image's raw
    bytes are a slice of the buffer, read without a copy or a base64 decode."""
    message = fb_request.CompletionRequest.GetRootAs(BODY, 0).Messages(0)
    assert message.PartsLength() == 3
    image = message.Parts(1)
    assert image.Kind() == PartKind.IMAGE and image.MediaType() == b"image/png"
    pixels = image.DataAsNumpy()
    assert isinstance(pixels, np.ndarray)
    assert np.shares_memory(pixels, np.frombuffer(BODY, np.uint8))  # a view of the buffer
    assert pixels.tobytes() == PNG
    start = image._tab.Vector(image._tab.Offset(8))  # the data vector's first byte
    view = memoryview(BODY)[start : start + image.DataLength()]
    assert view == PNG and view.obj is BODY


def test_the_stub_echoes_a_message_with_parts_as_described() -> None:
    req = FbsWire().parse(BODY, lambda name: None)
    echo = req.messages[0][1]
    assert echo == described(PARTS)
    assert f"[image image/png {len(PNG)} bytes {digest(PNG)} 64x32]" in echo
    assert f"[document application/pdf {len(PDF)} bytes {digest(PDF)}]" in echo
    assert echo.startswith("what is this? ")


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("fbs-parts")
    with running("stub", [], d) as stub:
        cfg = write_stack(
            d / "p.toml",
            proxy={**QUIET},
            backends={"stub": stub.url},
            routes={"*": "stub"},
        )
        with running("proxy", ["--config", cfg], d) as p:
            yield p


@pytest.mark.integration
def test_the_digests_come_back_through_the_proxy_and_the_fbs_stub(proxy: Server) -> None:
    big = picture("PNG", 640, 480) + bytes(1 << 20)  # a megabyte after the image's end
    body = request([ContentPart(kind=int(PartKind.IMAGE), data=big, media_type="image/png")])
    headers = {"content-type": FLATBUFFERS, "accept": FRAMES}
    with httpx.stream(
        "POST", f"{proxy.url}/v1/completions", content=body, headers=headers, timeout=10
    ) as r:
        assert r.status_code == 200, r.read()
        fs = FrameSplitter()
        chunks = [decode_chunk(unprefix(f)) for p in r.iter_raw() for f in fs.feed(p)]
    text = "".join(c.content or "" for c in chunks)
    assert text == f"[image image/png {len(big)} bytes {digest(big)} 640x480]"
