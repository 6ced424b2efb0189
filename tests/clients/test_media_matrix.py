"""Images, documents and audio from the official SDKs, each client API to
each backend protocol: the openai SDK's Chat Completions (``image_url`` as a
data URL and as an https URL, ``file`` with a PDF and by file id,
``input_audio``) and Responses (``input_image``, ``input_file``, both by
file id too), and the anthropic SDK's Messages (``image`` from base64, from
a URL and by file id, with ``cache_control``, a PDF ``document``, a
plain-text one and one whose source is ``content``), whole and (an image
each) streamed, through the gateway to the stub speaking ``fbs``,
``openai``, ``openai-responses`` and ``anthropic``.

The stub echoes the last user message, each part it received described with
its byte count and digest (``tests.clients.media``), so an answer holding
the digest of the file sent proves its bytes crossed the edge (base64
decoded once), the wire and the backend's encoding intact; a URL part is
echoed as the URL, passed on and never fetched (``.invalid`` hosts). Where
a backend protocol has no place for a part (audio to ``anthropic`` and to
``openai-responses``, a file id to the other provider, an image by file id
to Chat Completions), the answer is a 400 ``untranslatable_request`` naming
the part, and through a backend with ``drop_unsupported`` the part is left
out and named in ``x-flatgate-dropped-fields``.

Each API's own SDK tests (its edge's helper's) cover its parts to its own
backend protocol in depth; this module is the cross-protocol matrix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import pytest

from tests.clients.conftest import PROTOCOLS, ClientStack, dropping, model
from tests.clients.media import (
    b64,
    bytes_echo,
    data_url,
    image_echo,
    jpeg,
    pdf,
    png,
    url_echo,
    wav,
)

pytestmark = pytest.mark.integration

KEY = "sk-flatgate-acme"
PROMPT = "what is in this"
PNG = png()
JPEG = jpeg()
PDF = pdf()
WAV = wav()
FACT = "The grass is green."
IMAGE_URL = "https://images.invalid/shot.png"
PDF_URL = "https://docs.invalid/paper.pdf"
PNG_SOURCE = {"type": "base64", "media_type": "image/png", "data": b64(PNG)}
# What a request's echo must hold, in order, or the part path its 400 names.
Echo = tuple[str, ...]


@dataclass(frozen=True)
class Case:
    """One request of one client API: its body (less ``model``), what the
    echo holds, and the backend protocols that refuse it (-> the path the
    400 names)."""

    api: str
    name: str
    body: Callable[[], dict[str, Any]]
    echo: Echo
    refused: dict[str, str]
    # A backend protocol whose echo differs (the part mapped to another shape).
    echoes: dict[str, Echo] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.api}-{self.name}"


def chat(*parts: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    content = [{"type": "text", "text": PROMPT}, *parts]
    return lambda: {"messages": [{"role": "user", "content": content}]}


def responses(*parts: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    content = [{"type": "input_text", "text": PROMPT}, *parts]
    return lambda: {"input": [{"role": "user", "content": content}]}


def messages(*blocks: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    content = [{"type": "text", "text": PROMPT}, *blocks]
    return lambda: {"max_tokens": 256, "messages": [{"role": "user", "content": content}]}


CASES = [
    Case(
        "chat",
        "image-data-url",
        chat({"type": "image_url", "image_url": {"url": data_url(PNG, "image/png")}}),
        (image_echo(PNG),),
        {},
    ),
    Case(
        "chat",
        "image-https-url",
        chat({"type": "image_url", "image_url": {"url": IMAGE_URL, "detail": "low"}}),
        (url_echo("image", IMAGE_URL),),
        {},
    ),
    Case(
        "chat",
        "file-pdf",
        chat(
            {
                "type": "file",
                "file": {"file_data": data_url(PDF, "application/pdf"), "filename": "p.pdf"},
            }
        ),
        (bytes_echo(PDF, "application/pdf"),),
        {},
    ),
    Case(
        "chat",
        "input-audio",
        chat({"type": "input_audio", "input_audio": {"data": b64(WAV), "format": "wav"}}),
        (bytes_echo(WAV, "audio/wav"),),
        {"anthropic": "messages[0].content[1]", "openai-responses": "messages[0].content[1]"},
    ),
    Case(
        "chat",
        "file-id",
        chat({"type": "file", "file": {"file_id": "file-abc123"}}),
        ("[file file_id file-abc123]",),
        {"anthropic": "messages[0].content[1]"},
    ),
    Case(
        "responses",
        "input-image",
        responses({"type": "input_image", "image_url": data_url(JPEG, "image/jpeg")}),
        (image_echo(JPEG),),
        {},
    ),
    Case(
        "responses",
        "input-image-url",
        responses({"type": "input_image", "image_url": IMAGE_URL, "detail": "auto"}),
        (url_echo("image", IMAGE_URL),),
        {},
    ),
    Case(
        "responses",
        "input-file",
        responses(
            {
                "type": "input_file",
                "filename": "p.pdf",
                "file_data": data_url(PDF, "application/pdf"),
            }
        ),
        (bytes_echo(PDF, "application/pdf"),),
        {},
    ),
    Case(
        "responses",
        "file-ids",
        responses(
            {"type": "input_image", "file_id": "file-img1"},
            {"type": "input_file", "file_id": "file-doc1"},
        ),
        ("[image file_id file-img1] [file file_id file-doc1]",),
        # Chat Completions' images take no file id; OpenAI's ids are not Anthropic's.
        {"openai": "messages[0].content[1]", "anthropic": "messages[0].content[1]"},
    ),
    Case(
        "messages",
        "image-base64",
        messages(
            {
                "type": "image",
                "source": PNG_SOURCE,
            }
        ),
        (image_echo(PNG),),
        {},
    ),
    Case(
        "messages",
        "image-url",
        messages({"type": "image", "source": {"type": "url", "url": IMAGE_URL}}),
        (url_echo("image", IMAGE_URL),),
        {},
    ),
    Case(
        "messages",
        "document-pdf",
        messages(
            {
                "type": "document",
                "source": {"type": "base64", "media_type": "application/pdf", "data": b64(PDF)},
                "title": "paper",
            }
        ),
        (bytes_echo(PDF, "application/pdf"),),
        {},
    ),
    Case(
        "messages",
        "image-cache-control",
        messages(
            {
                "type": "image",
                "source": PNG_SOURCE,
                "cache_control": {"type": "ephemeral"},
            }
        ),
        (image_echo(PNG),),
        {},
    ),
    Case(
        "messages",
        "document-text",
        messages(
            {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": FACT},
                "title": "facts",
            }
        ),
        (bytes_echo(FACT.encode(), "text/plain"),),
        {},
        # The OpenAI APIs have no text document: its text is a text part.
        {"openai": (FACT,), "openai-responses": (FACT,)},
    ),
    Case(
        "messages",
        "document-content",
        messages(
            {
                "type": "document",
                "source": {
                    "type": "content",
                    "content": [
                        {"type": "text", "text": "page one"},
                        {
                            "type": "image",
                            "source": PNG_SOURCE,
                        },
                    ],
                },
                "title": "deck",
            }
        ),
        ("page one", image_echo(PNG)),
        {},
    ),
    Case(
        "messages",
        "image-file-id",
        messages({"type": "image", "source": {"type": "file", "file_id": "file_011abc"}}),
        ("[image file_id file_011abc]",),
        # Anthropic's file ids are not OpenAI's.
        {"openai": "messages[0].content[1]", "openai-responses": "messages[0].content[1]"},
    ),
]


def send(stack: ClientStack, case: Case, name: str) -> str:
    """The echo of ``case`` sent to model ``name`` (an SDK's error raised)."""
    body = {**case.body(), "model": name}
    if case.api == "chat":
        with stack.client(KEY) as client:
            completion = client.chat.completions.create(**body)
        return completion.choices[0].message.content or ""
    if case.api == "responses":
        with stack.client(KEY) as client:
            text: str = client.responses.create(**body).output_text
        return text
    with anthropic.Anthropic(base_url=stack.url, api_key=KEY, max_retries=0) as messages:
        message = messages.messages.create(**body)
    return "".join(b.text for b in message.content if b.type == "text")


def error_of(exc: BaseException) -> dict[str, Any]:
    body: Any = getattr(exc, "body", None)
    error = body.get("error", body) if isinstance(body, dict) else {}
    return error if isinstance(error, dict) else {}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_part_reaches_each_backend_protocol(
    stack: ClientStack, case: Case, protocol: str
) -> None:
    name = model(protocol)
    if protocol in case.refused:
        with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as caught:
            send(stack, case, name)
        error = error_of(caught.value)
        assert error.get("code", "untranslatable_request") == "untranslatable_request", error
        # A part's path, in either spelling (``messages.[0]`` or ``messages[0]``).
        assert case.refused[protocol] in error["message"].replace(".[", "["), error
        return
    echo = send(stack, case, name)
    assert echo.startswith(PROMPT), echo
    at = 0
    for piece in case.echoes.get(protocol, case.echo):
        found = echo.find(piece, at)
        assert found >= 0, f"{piece!r} not in {echo!r}"
        at = found + len(piece)


def test_a_part_a_dropping_backend_cannot_take_is_left_out_and_named(stack: ClientStack) -> None:
    """Audio to an ``openai-responses`` backend with ``drop_unsupported``:
    the turn is answered without it, and the header names the part."""
    [case] = [c for c in CASES if c.id == "chat-input-audio"]
    with stack.client(KEY) as client:
        raw = client.chat.completions.with_raw_response.create(
            **case.body(), model=dropping("openai-responses")
        )
    assert raw.headers["x-flatgate-dropped-fields"].replace(".[", "[") == "messages[0].content[1]"
    assert raw.parse().choices[0].message.content == PROMPT


def streamed(stack: ClientStack, case: Case, name: str) -> str:
    """The echo of ``case`` sent to model ``name`` with ``stream: true``,
    joined from its deltas."""
    body = {**case.body(), "model": name, "stream": True}
    if case.api == "chat":
        with stack.client(KEY) as client:
            return "".join(
                chunk.choices[0].delta.content or ""
                for chunk in client.chat.completions.create(**body)
                if chunk.choices
            )
    if case.api == "responses":
        with stack.client(KEY) as client:
            return "".join(
                event.delta
                for event in client.responses.create(**body)
                if event.type == "response.output_text.delta"
            )
    del body["stream"]
    with (
        anthropic.Anthropic(base_url=stack.url, api_key=KEY, max_retries=0) as messages,
        messages.messages.stream(**body) as stream,
    ):
        return "".join(stream.text_stream)


STREAMED = [c for c in CASES if c.name in ("image-data-url", "input-image", "image-base64")]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", STREAMED, ids=[c.id for c in STREAMED])
def test_a_streamed_answer_echoes_the_part_too(
    stack: ClientStack, case: Case, protocol: str
) -> None:
    echo = streamed(stack, case, model(protocol))
    assert echo == f"{PROMPT} {case.echo[0]}", echo
