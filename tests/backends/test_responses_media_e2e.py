"""Images and files through the Responses API end to end: the official
``openai`` SDK's Responses client (its create and stream calls) sends
``input_image`` (a data URL and an https URL) and ``input_file`` (a PDF)
through the edge and the proxy to each backend protocol's stub, whose echo describes every part it
received (``dialect.described``): the digests prove the bytes arrived
intact, decoded once at the edge and written again in each backend's shape.
A stored response keeps the image, and its input items give it back."""

from __future__ import annotations

import base64
import hashlib
import io
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from PIL import Image

from tests.backends.helpers import SdkStack
from tests.servers import free_port, spawn
from tests.stacks import loopback, stop_all, write_stack

pytestmark = pytest.mark.integration

# The backend protocols, each behind its own stub.
PROTOCOLS = ("openai-responses", "openai", "anthropic", "fbs")
KEY = "sk-upstream-media"
PDF = b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
URL = "https://example.com/cat.png"


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 32), "orange").save(out, "PNG")
    return out.getvalue()


IMAGE = png()


def described(kind: str, media: str, data: bytes, size: str = "") -> str:
    """What the stubs' echo says of ``data`` (``dialect.describe_part``)."""
    digest = hashlib.sha256(data).hexdigest()[:12]
    return f"[{kind} {media} {len(data)} bytes sha256:{digest}{size}]"


def data_url(media: str, data: bytes) -> str:
    return f"data:{media};base64,{base64.b64encode(data).decode()}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SdkStack]:
    d = tmp_path_factory.mktemp("responses-media")
    ports = {name: free_port() for name in (*PROTOCOLS, "proxy", "edge")}
    backends: dict[str, Any] = {
        p: {"url": f"{loopback(ports[p])}/v1", "protocol": p, "api_key": KEY}
        for p in PROTOCOLS
        if p != "fbs"
    }
    backends["fbs"] = loopback(ports["fbs"])
    config = write_stack(
        d / "flatgate.toml",
        proxy={"port": ports["proxy"], "cooldown_seconds": 0},
        backends=backends,
        routes={f"echo-{p}": p for p in PROTOCOLS},
        edge={"port": ports["edge"], "proxy_url": loopback(ports["proxy"])},
        models={f"echo-{p}": "OpenAI" for p in PROTOCOLS},
    )
    servers = [
        spawn("stub", ["--protocol", p, "--api-key", KEY], d, port=ports[p])
        for p in PROTOCOLS
        if p != "fbs"
    ]
    servers.append(spawn("stub", [], d, port=ports["fbs"]))
    servers.append(spawn("proxy", ["--config", config], d, port=ports["proxy"]))
    servers.append(spawn("edge", ["--config", config], d, port=ports["edge"]))
    try:
        for s in servers:
            s.wait_healthy()
        stack = SdkStack(servers[-1])
        yield stack
        stack.close()
    finally:
        stop_all(servers)


def picture_and_pdf() -> list[Any]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is in these?"},
                {"type": "input_image", "image_url": data_url("image/png", IMAGE), "detail": "low"},
                {
                    "type": "input_file",
                    "file_data": data_url("application/pdf", PDF),
                    "filename": "r.pdf",
                },
            ],
        }
    ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_image_and_a_pdf_reach_every_backend_intact(
    stack: SdkStack, protocol: str, stream: bool
) -> None:
    client = stack.client()
    if stream:
        with client.responses.stream(model=f"echo-{protocol}", input=picture_and_pdf()) as events:
            echoed = events.get_final_response().output_text
    else:
        echoed = client.responses.create(
            model=f"echo-{protocol}", input=picture_and_pdf()
        ).output_text
    assert echoed.startswith("What is in these? ")
    assert described("image", "image/png", IMAGE, " 64x32") in echoed
    assert described("document", "application/pdf", PDF) in echoed


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_image_url_is_passed_on_as_a_url(stack: SdkStack, protocol: str) -> None:
    response = stack.client().responses.create(
        model=f"echo-{protocol}",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "and this?"},
                    {"type": "input_image", "image_url": URL, "detail": "auto"},
                ],
            }
        ],
    )
    assert response.output_text == f"and this? [image url {URL}]"


def test_a_malformed_image_is_a_400_naming_it(stack: SdkStack) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        stack.client().responses.create(
            model="echo-openai-responses",
            input=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "input_image",
                            "image_url": data_url("image/jpeg", IMAGE),
                            "detail": "auto",
                        }
                    ],
                }
            ],
        )
    err = caught.value
    assert err.status_code == 400
    assert isinstance(err.body, dict) and err.body["param"] == "input.[0].content.[0].image_url"
    assert err.body["code"] == "invalid_media"


def test_a_stored_turn_keeps_its_image_for_the_chain(stack: SdkStack) -> None:
    client = stack.client()
    first = client.responses.create(model="echo-openai-responses", input=picture_and_pdf())
    items = client.responses.input_items.list(first.id).data
    (message,) = items
    kept: Any = message.content[1]  # type: ignore[index,union-attr]
    assert kept.type == "input_image"
    assert base64.b64decode(kept.image_url.split(",", 1)[1]) == IMAGE
    second = client.responses.create(
        model="echo-openai-responses", input="and now?", previous_response_id=first.id
    )
    assert second.output_text == "and now?"
