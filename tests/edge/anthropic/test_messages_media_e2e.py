"""Images and documents end to end (issue 36): the official ``anthropic`` SDK
-> ``flatgate gateway`` -> the stub in each backend protocol (``anthropic``,
``openai``, ``openai-responses``, ``fbs``). Each stub reads the parts it is
sent back into content parts and echoes them described
(``dialect.described``: kind, media type, byte count, sha256 digest, an
image's size in pixels), so an echoed digest equal to the file's proves the
bytes crossed every hop intact: base64 decoded once at the edge, raw in the
FlatBuffer, written again in the backend's own shape."""

from __future__ import annotations

import base64
import hashlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from PIL import Image

from tests.servers import Server, free_port, spawn
from tests.stacks import QUIET, loopback, start_all, stop_all, write_stack

pytestmark = pytest.mark.integration

KEY = "sk-ant-media-test"
# The model that reaches each backend protocol.
MODELS = {
    "anthropic": "echo-anthropic",
    "openai": "echo-openai",
    "openai-responses": "echo-responses",
    "fbs": "echo-fbs",
}
PDF = (
    b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
    b"2 0 obj << /Type /Pages /Kids [] /Count 0 >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
)


def _picture(fmt: str, size: tuple[int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (10, 120, 60)).save(out, fmt)
    return out.getvalue()


PNG = _picture("PNG", (96, 40))
JPEG = _picture("JPEG", (30, 20))


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d: Path = tmp_path_factory.mktemp("media")
    ports = {p: free_port() for p in MODELS}
    proxy = free_port()
    config = write_stack(
        d / "flatgate.toml",
        proxy={"port": proxy, **QUIET, "cooldown_seconds": 0, "max_attempts": 1},
        backends={
            "fbs": loopback(ports["fbs"]),
            "oai": {"url": f"{loopback(ports['openai'])}/v1", "protocol": "openai"},
            "resp": {
                "url": f"{loopback(ports['openai-responses'])}/v1",
                "protocol": "openai-responses",
            },
            "ant": {"url": f"{loopback(ports['anthropic'])}/v1", "protocol": "anthropic"},
        },
        routes={
            "echo-anthropic": "ant",
            "echo-openai": "oai",
            "echo-responses": "resp",
            "echo-fbs": "fbs",
        },
        edge={"proxy_url": loopback(proxy), "max_body_bytes": 4 << 20, **QUIET},
        models={
            "echo-anthropic": "Anthropic",
            "echo-openai": "OpenAI",
            "echo-responses": "OpenAI",
            "echo-fbs": "SelfHosted",
        },
        keys={KEY: "acme"},
    )
    args = ["--config", str(config)]
    servers = [
        *(spawn("stub", ["--protocol", p], d, port=port) for p, port in ports.items()),
        spawn("gateway", args, d),
    ]
    start_all(servers)
    try:
        yield servers[-1]
    finally:
        stop_all(servers)


@pytest.fixture
def client(gateway: Server) -> Iterator[anthropic.Anthropic]:
    c = anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=30)
    yield c
    c.close()


def echoed(client: anthropic.Anthropic, protocol: str, messages: list[Any], **kw: Any) -> str:
    """The stub's echo (its answer's text) for ``messages``, streamed."""
    with client.messages.stream(
        model=MODELS[protocol], max_tokens=4096, messages=messages, **kw
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn"
    return text


def user(content: list[Any]) -> Any:
    return {"role": "user", "content": content}


def image_block(data: bytes, media: str) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media, "data": b64(data)}}


# The backends each case reaches; a cross-protocol case is here once it passes.
ALL = tuple(MODELS)


@pytest.mark.parametrize("protocol", ALL)
def test_a_base64_image_arrives_intact(client: anthropic.Anthropic, protocol: str) -> None:
    text = echoed(
        client,
        protocol,
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what color is this?"},
                    image_block(PNG, "image/png"),
                    image_block(JPEG, "image/jpeg"),
                ],
            }
        ],
    )
    assert f"image/png {len(PNG)} bytes sha256:{digest(PNG)} 96x40]" in text, text
    assert f"image/jpeg {len(JPEG)} bytes sha256:{digest(JPEG)} 30x20]" in text, text
    assert text.startswith("what color is this? "), text


@pytest.mark.parametrize("protocol", ALL)
def test_an_image_url_is_passed_on_as_a_url(client: anthropic.Anthropic, protocol: str) -> None:
    url = "https://upload.wikimedia.org/wikipedia/commons/a/a7/Camponotus_flavomarginatus_ant.jpg"
    text = echoed(
        client,
        protocol,
        [
            {
                "role": "user",
                "content": [
                    {"type": "image", "source": {"type": "url", "url": url}},
                    {"type": "text", "text": "describe it"},
                ],
            }
        ],
    )
    assert f"[image url {url}]" in text, text


@pytest.mark.parametrize("protocol", ALL)
def test_a_pdf_document_arrives_intact(client: anthropic.Anthropic, protocol: str) -> None:
    text = echoed(
        client,
        protocol,
        [
            {
                "role": "user",
                "content": [
                    {
                        "type": "document",
                        "source": {
                            "type": "base64",
                            "media_type": "application/pdf",
                            "data": b64(PDF),
                        },
                        "title": "report",
                        "cache_control": {"type": "ephemeral"},
                    },
                    {"type": "text", "text": "summarise it"},
                ],
            }
        ],
    )
    assert f"application/pdf {len(PDF)} bytes sha256:{digest(PDF)}]" in text, text


# The fbs and openai-responses stubs echo the last user message, which a
# tool result is not: there, the digest cannot be seen in the echo.
@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
def test_an_image_inside_a_tool_result_arrives_intact(
    client: anthropic.Anthropic, protocol: str
) -> None:
    tools: Any = [
        {"name": "screenshot", "description": "takes one", "input_schema": {"type": "object"}}
    ]
    messages: list[Any] = [
        {"role": "user", "content": "take a screenshot"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_01", "name": "screenshot", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [
                        {"type": "text", "text": "the screen"},
                        image_block(PNG, "image/png"),
                    ],
                }
            ],
        },
    ]
    text = echoed(client, protocol, messages, tools=tools)
    assert f"image/png {len(PNG)} bytes sha256:{digest(PNG)} 96x40]" in text, text


def test_a_png_declared_as_jpeg_is_the_sdk_s_bad_request(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model=MODELS["anthropic"],
            max_tokens=16,
            messages=[user([image_block(PNG, "image/jpeg")])],
        )
    message = info.value.body["error"]["message"]  # type: ignore[index]
    assert message.startswith("messages.0.content.0.source.data: The image was specified using")


def test_count_tokens_counts_the_image(client: anthropic.Anthropic) -> None:
    plain = client.messages.count_tokens(
        model=MODELS["anthropic"], messages=[{"role": "user", "content": "what is it"}]
    )
    with_image = client.messages.count_tokens(
        model=MODELS["anthropic"],
        messages=[
            user(
                [
                    {"type": "text", "text": "what is it"},
                    image_block(_picture("PNG", (750, 750)), "image/png"),
                ]
            )
        ],
    )
    # Anthropic's w*h/750 for 750x750 px: 750 tokens.
    assert with_image.input_tokens >= plain.input_tokens + 750
