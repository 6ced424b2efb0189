"""The providers' documented media requests (``golden/``, each file's source
in ``golden/README.md``) through the gateway to the stub in every backend
protocol: each is accepted, and the stub's echo of its user message
describes each part in the client's order, with the bytes' digest (the
doc's placeholder filled with bytes of the test's own) or the URL, passed on
as a URL and never fetched. Where a backend protocol has no place for a
part (``REFUSED``), the answer is a 400 ``untranslatable_request`` naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.clients.conftest import PROTOCOLS, ClientStack, model
from tests.clients.media import b64, bytes_echo, data_url, image_echo, jpeg, pdf, url_echo, wav

pytestmark = pytest.mark.integration

GOLDEN = Path(__file__).parent / "golden"
KEY = "sk-flatgate-acme"
JPEG = jpeg()
PDF = pdf()
WAV = wav()
BOARDWALK = (
    "https://upload.wikimedia.org/wikipedia/commons/thumb/d/dd/"
    "Gfp-wisconsin-madison-the-nature-boardwalk.jpg/"
    "2560px-Gfp-wisconsin-madison-the-nature-boardwalk.jpg"
)
ANT = "https://upload.wikimedia.org/wikipedia/commons/a/a7/Camponotus_flavomarginatus_ant.jpg"
LETTER = "https://www.berkshirehathaway.com/letters/2024ltr.pdf"
MODEL_CARD = (
    "https://assets.anthropic.com/m/1cd9d098ac3e6467/original/"
    "Claude-3-Model-Card-October-Addendum.pdf"
)
# The doc's placeholder -> the test's bytes.
FILL = {
    "$IMAGE_MEDIA_TYPE": "image/jpeg",
    "$IMAGE_BASE64": b64(JPEG),
    "$PDF_BASE64": b64(PDF),
    "{base64_string}": b64(PDF),
    "data:application/pdf;base64,...": data_url(PDF, "application/pdf"),
    "{base64str}": b64(WAV),
}
# Each file: what the echo holds, in order.
ECHOES: dict[str, tuple[str, ...]] = {
    "openai-chat-image-url.json": ("What is in this image?", url_echo("image", BOARDWALK)),
    "openai-chat-file-data.json": (
        bytes_echo(PDF, "application/pdf"),
        "What is the first dragon in the book?",
    ),
    "openai-chat-input-audio.json": ("What is in this recording?", bytes_echo(WAV, "audio/wav")),
    "openai-responses-image-url.json": ("what is in this image?", url_echo("image", BOARDWALK)),
    "openai-responses-file-url.json": ("what is in this file?", f" url {LETTER}]"),
    "openai-responses-file-data.json": (
        bytes_echo(PDF, "application/pdf"),
        "Summarize this document.",
    ),
    "anthropic-image-base64.json": (image_echo(JPEG), "What is in the above image?"),
    "anthropic-image-url.json": (url_echo("image", ANT), "What is in the above image?"),
    "anthropic-document-url.json": (
        f" url {MODEL_CARD}]",
        "What are the key findings in this document?",
    ),
    "anthropic-document-base64.json": (
        bytes_echo(PDF, "application/pdf"),
        "What are the key findings in this document?",
    ),
}
# (file, backend protocol) -> the part or field the 400 names: the backend's
# API has no place for it (Chat Completions takes no file by URL, the
# Responses API no audio, and the Messages API has no audio output to ask
# for with ``modalities``).
REFUSED: dict[tuple[str, str], str] = {
    ("openai-responses-file-url.json", "openai"): "messages[0].content[1]",
    ("anthropic-document-url.json", "openai"): "messages[0].content[0]",
    ("openai-chat-input-audio.json", "openai-responses"): "messages[0].content[1]",
    ("openai-chat-input-audio.json", "anthropic"): "'modalities'",
}


def body_of(name: str, protocol: str) -> dict[str, Any]:
    text = (GOLDEN / name).read_text()
    for placeholder, value in FILL.items():
        text = text.replace(placeholder, value)
    body: dict[str, Any] = json.loads(text)
    body["model"] = model(protocol)
    return body


def post(stack: ClientStack, name: str, body: dict[str, Any]) -> httpx.Response:
    if name.startswith("anthropic-"):
        path, headers = "/v1/messages", {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    else:
        path = "/v1/responses" if "-responses-" in name else "/v1/chat/completions"
        headers = {"authorization": f"Bearer {KEY}"}
    return httpx.post(f"{stack.url}{path}", json=body, headers=headers, timeout=30)


def answer_text(name: str, answer: dict[str, Any]) -> str:
    if name.startswith("anthropic-"):
        return "".join(b["text"] for b in answer["content"] if b["type"] == "text")
    if "-responses-" in name:
        return "".join(
            c["text"]
            for item in answer["output"]
            if item["type"] == "message"
            for c in item["content"]
            if c["type"] == "output_text"
        )
    content: str = answer["choices"][0]["message"]["content"]
    return content


def test_every_golden_file_has_its_echo() -> None:
    assert sorted(p.name for p in GOLDEN.glob("*.json")) == sorted(ECHOES)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", sorted(ECHOES))
def test_a_documented_request_reaches_the_backend_described(
    stack: ClientStack, name: str, protocol: str
) -> None:
    r = post(stack, name, body_of(name, protocol))
    if (name, protocol) in REFUSED:
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error.get("code", "untranslatable_request") == "untranslatable_request", error
        # A part's path, in either spelling (``messages.[0]`` or ``messages[0]``).
        assert REFUSED[name, protocol] in error["message"].replace(".[", "["), error
        return
    assert r.status_code == 200, r.text
    echo = answer_text(name, r.json())
    at = 0
    for piece in ECHOES[name]:
        found = echo.find(piece, at)
        assert found >= 0, f"{piece!r} not in {echo!r} (after {at})"
        at = found + len(piece)
