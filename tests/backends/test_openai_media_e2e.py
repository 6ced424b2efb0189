"""Images, audio and a PDF end to end: the official ``openai`` SDK's Chat
Completions parts (``image_url`` as a data URL and as an https URL,
``input_audio``, a PDF ``file``) through ``flatgate gateway`` to a stub
speaking each backend protocol (``openai``, ``openai-responses``,
``anthropic``, ``fbs``), whose echo describes each part it received: its
byte count and digest match the bytes sent, so they arrived intact. Audio
reaches the protocols that take it; the others answer a 400 naming the
part."""

from __future__ import annotations

import base64
import hashlib
import io
import struct
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from PIL import Image

from tests.servers import Server, running
from tests.stacks import QUIET, write_stack

pytestmark = pytest.mark.integration

# Every backend protocol has a stub and a model (echo-<protocol>) in the
# stack. PROTOCOLS carry images and PDFs, AUDIO audio too; the others refuse
# audio naming the part (Anthropic's and the Responses API take none).
ALL = ("openai", "openai-responses", "anthropic", "fbs")
PROTOCOLS = ALL
AUDIO = ("openai", "fbs")
NO_AUDIO = ("openai-responses", "anthropic")


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 32), (220, 20, 60)).save(out, "PNG")
    return out.getvalue()


def pdf() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 32), (30, 80, 200)).save(out, "PDF")
    return out.getvalue()


def wav(samples: int = 800) -> bytes:
    frames = b"".join(struct.pack("<h", 8000 if (i // 20) % 2 else -8000) for i in range(samples))
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 16000, 2, 16)
    chunks = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    chunks += b"data" + struct.pack("<I", len(frames)) + frames
    return b"RIFF" + struct.pack("<I", len(chunks)) + chunks


PNG, PDF, WAV = png(), pdf(), wav()
URL = "https://example.com/cat.jpg"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def carried(data: bytes) -> str:
    """What the echo says of bytes that arrived intact."""
    return f"{len(data)} bytes sha256:{hashlib.sha256(data).hexdigest()[:12]}"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("chat-media")
    with (
        running("stub", ["--protocol", "openai"], d) as oai,
        running("stub", ["--protocol", "openai-responses"], d) as responses,
        running("stub", ["--protocol", "anthropic"], d) as anthropic,
        running("stub", [], d) as fbs,
    ):
        cfg = write_stack(
            d / "g.toml",
            proxy=QUIET,
            backends={
                "openai": {"url": f"{oai.url}/v1", "protocol": "openai"},
                "openai-responses": {"url": f"{responses.url}/v1", "protocol": "openai-responses"},
                "anthropic": {"url": f"{anthropic.url}/v1", "protocol": "anthropic"},
                "fbs": fbs.url,
            },
            routes={f"echo-{p}": p for p in ALL},
            models={f"echo-{p}": "OpenAI" for p in ALL},
        )
        with running("gateway", ["--config", cfg], d) as gateway:
            yield gateway


def ask(gateway: Server, protocol: str, content: list[dict[str, Any]], stream: bool) -> str:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    with client:
        messages: Any = [{"role": "user", "content": content}]
        if not stream:
            done = client.chat.completions.create(model=f"echo-{protocol}", messages=messages)
            return done.choices[0].message.content or ""
        events = client.chat.completions.create(
            model=f"echo-{protocol}", messages=messages, stream=True
        )
        return "".join(e.choices[0].delta.content or "" for e in events if e.choices)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_image_as_a_data_url_arrives_intact(
    gateway: Server, protocol: str, stream: bool
) -> None:
    echo = ask(
        gateway,
        protocol,
        [
            {"type": "text", "text": "what color is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(PNG)}"}},
        ],
        stream,
    )
    assert echo.startswith("what color is this? [image image/png")
    assert f"{carried(PNG)} 64x32]" in echo


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_image_url_is_passed_on_as_a_url(gateway: Server, protocol: str) -> None:
    echo = ask(
        gateway,
        protocol,
        [{"type": "image_url", "image_url": {"url": URL, "detail": "low"}}],
        stream=False,
    )
    assert echo == f"[image url {URL}]"


AUDIO_PARTS: list[dict[str, Any]] = [
    {"type": "text", "text": "transcribe"},
    {"type": "input_audio", "input_audio": {"data": b64(WAV), "format": "wav"}},
]


@pytest.mark.parametrize("protocol", AUDIO)
def test_input_audio_arrives_intact(gateway: Server, protocol: str) -> None:
    echo = ask(gateway, protocol, AUDIO_PARTS, stream=True)
    assert echo == f"transcribe [audio audio/wav {carried(WAV)}]"


@pytest.mark.parametrize("protocol", NO_AUDIO)
def test_input_audio_to_a_backend_that_takes_none_is_a_400_naming_it(
    gateway: Server, protocol: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        ask(gateway, protocol, AUDIO_PARTS, stream=False)
    assert info.value.code == "untranslatable_request"
    assert "content" in info.value.message and "[1]" in info.value.message
    assert "audio" in info.value.message


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_pdf_file_arrives_intact(gateway: Server, protocol: str) -> None:
    echo = ask(
        gateway,
        protocol,
        [
            {"type": "text", "text": "summarize"},
            {
                "type": "file",
                "file": {
                    "file_data": f"data:application/pdf;base64,{b64(PDF)}",
                    "filename": "r.pdf",
                },
            },
        ],
        stream=False,
    )
    assert echo.startswith("summarize [")
    assert f"application/pdf {carried(PDF)}]" in echo


def test_a_part_that_does_not_decode_is_a_400_naming_it(gateway: Server) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    with client, pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="echo-openai",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "x"},
                        {
                            "type": "input_audio",
                            "input_audio": {"data": "not base64!", "format": "mp3"},
                        },
                    ],
                }
            ],
        )
    assert info.value.status_code == 400
    assert info.value.code == "invalid_media"
    assert info.value.param == "messages.[0].content.[1].input_audio.data"


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_tool_results_image_arrives_intact(gateway: Server, protocol: str) -> None:
    """A tool message holding an image (Chat Completions' own API takes text
    only there): an ``openai`` backend gets it in a user message after the
    tool message, an ``anthropic`` one in the ``tool_result`` block."""
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    call = {"id": "c1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}
    messages: Any = [
        {"role": "user", "content": "take a screenshot"},
        {"role": "assistant", "tool_calls": [call]},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": [
                {"type": "text", "text": "here it is"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(PNG)}"}},
            ],
        },
    ]
    with client:
        done = client.chat.completions.create(model=f"echo-{protocol}", messages=messages)
    assert f"[image image/png {carried(PNG)} 64x32]" in (done.choices[0].message.content or "")
