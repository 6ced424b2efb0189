"""The ``openai-responses`` adapter's content parts: each part kind and
source from each client dialect written as the Responses API's
``input_image`` / ``input_file`` / ``input_text``, what it refuses (audio,
another provider's file id) or leaves out and names, tool results with
parts, and the stub reading them back (its echo shows each part's digest).

Buffers are written with the wire's ``RequestWriter`` (``wire_requests``),
so each dialect's parts are tested whatever its edge writes today."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from typing import Any

import pytest
from PIL import Image

from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.dialect import described
from flatgate.proxy.backends.responses.adapter import encode_request
from flatgate.proxy.backends.responses.stub_request import (
    decode_responses_request,
    to_stub_request,
)
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.request.writer import WireMessage
from flatgate.proxy.wire.schema import PartKind, Role
from tests.backends.wire_requests import ANTHROPIC, CHAT, RESPONSES, msg, wire

PDF = b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
IMAGE, DOCUMENT, AUDIO, FILE, TEXT = (
    int(k)
    for k in (PartKind.IMAGE, PartKind.DOCUMENT, PartKind.AUDIO, PartKind.FILE, PartKind.TEXT)
)


def png(width: int = 40, height: int = 20) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), "green").save(out, "PNG")
    return out.getvalue()


def data_url(media: str, data: bytes) -> str:
    return f"data:{media};base64,{base64.b64encode(data).decode()}"


def with_parts(
    role: Role, *parts: ContentPart, call_id: str = "", failed: bool = False
) -> WireMessage:
    return (int(role), b"", b"", call_id.encode(), (), failed, (), parts)


def sent(req: Request, **kw: Any) -> tuple[dict[str, Any], list[str]]:
    omitted: list[str] = []
    body = json.loads(encode_request(req, model="m", omitted=omitted, **kw))
    return body, omitted


def content(*parts: ContentPart, **kw: Any) -> tuple[list[dict[str, Any]], list[str]]:
    body, omitted = sent(wire([with_parts(Role.User, *parts)]), **kw)
    (item,) = body["input"]
    assert (item["type"], item["role"]) == ("message", "user")
    return item["content"], omitted


@pytest.mark.parametrize("dialect", [CHAT, RESPONSES, ANTHROPIC])
def test_an_image_s_bytes_and_url_from_any_dialect(dialect: int) -> None:
    image = png()
    parts, omitted = content(
        ContentPart(kind=TEXT, text="look", dialect=dialect),
        ContentPart(kind=IMAGE, data=image, media_type="image/png", dialect=dialect, detail="low"),
        ContentPart(kind=IMAGE, url="https://example.com/a.jpg", dialect=dialect),
    )
    assert parts == [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": data_url("image/png", image), "detail": "low"},
        {"type": "input_image", "image_url": "https://example.com/a.jpg", "detail": "auto"},
    ]
    assert omitted == []


@pytest.mark.parametrize("dialect", [CHAT, RESPONSES, ANTHROPIC])
def test_a_pdf_s_bytes_and_url(dialect: int) -> None:
    parts, _ = content(
        ContentPart(
            kind=DOCUMENT, data=PDF, media_type="application/pdf", dialect=dialect, filename="r.pdf"
        ),
        ContentPart(kind=DOCUMENT, url="https://example.com/r.pdf", dialect=dialect),
    )
    assert parts == [
        {"type": "input_file", "file_data": data_url("application/pdf", PDF), "filename": "r.pdf"},
        {"type": "input_file", "file_url": "https://example.com/r.pdf"},
    ]


def test_a_document_without_a_filename_is_named_by_its_title_else_by_its_type() -> None:
    parts, omitted = content(
        ContentPart(
            kind=DOCUMENT, data=PDF, media_type="application/pdf", dialect=ANTHROPIC, title="Q3"
        ),
        ContentPart(kind=DOCUMENT, data=PDF, media_type="application/pdf", dialect=ANTHROPIC),
    )
    assert [p["filename"] for p in parts] == ["Q3", "document.pdf"]
    assert omitted == []  # the title is the filename


@pytest.mark.parametrize("dialect", [CHAT, RESPONSES])
def test_openai_file_ids_are_carried(dialect: int) -> None:
    parts, _ = content(
        ContentPart(kind=IMAGE, file_id="file-img", dialect=dialect, detail="high"),
        ContentPart(kind=FILE, file_id="file-doc", dialect=dialect, filename="d.pdf"),
    )
    assert parts == [
        {"type": "input_image", "file_id": "file-img", "detail": "high"},
        {"type": "input_file", "file_id": "file-doc", "filename": "d.pdf"},
    ]


@pytest.mark.parametrize(
    ("part", "why"),
    [
        (ContentPart(kind=FILE, file_id="file_011", dialect=ANTHROPIC), "another provider's"),
        (ContentPart(kind=IMAGE, file_id="file_011", dialect=ANTHROPIC), "another provider's"),
        (ContentPart(kind=AUDIO, data=b"RIFF", media_type="audio/wav", dialect=CHAT), "audio"),
    ],
)
def test_what_it_cannot_take_is_refused_by_name_unless_dropped(part: ContentPart, why: str) -> None:
    req = wire(
        [msg(Role.User, "first"), with_parts(Role.User, ContentPart(kind=TEXT, text="x"), part)]
    )
    with pytest.raises(Untranslatable) as caught:
        encode_request(req, model="m")
    assert str(caught.value).startswith("messages[1].content[1]: ")
    assert why in str(caught.value) and "drop_unsupported" in str(caught.value)
    body, omitted = sent(req, drop_unsupported=True)
    assert body["input"][1]["content"] == [{"type": "input_text", "text": "x"}]
    assert omitted == ["messages[1].content[1]"]


def test_anthropic_documents_text_and_parts_and_their_fields() -> None:
    image = png(4, 4)
    parts, omitted = content(
        # A plain-text document: its title, context and text, as input_text.
        ContentPart(
            kind=DOCUMENT,
            text="The memo.",
            media_type="text/plain",
            dialect=ANTHROPIC,
            title="Memo",
            context="internal",
            citations=True,
            extras='{"cache_control":{"type":"ephemeral"}}',
        ),
        # A document made of parts: its title, then its parts, inline.
        ContentPart(kind=DOCUMENT, span=2, dialect=ANTHROPIC, title="Deck"),
        ContentPart(kind=TEXT, text="slide one", dialect=ANTHROPIC),
        ContentPart(kind=IMAGE, data=image, media_type="image/png", dialect=ANTHROPIC),
        # A PDF's context goes before it.
        ContentPart(
            kind=DOCUMENT,
            data=PDF,
            media_type="application/pdf",
            dialect=ANTHROPIC,
            title="Q3",
            context="the board's copy",
        ),
    )
    assert parts == [
        {"type": "input_text", "text": "Memo\n\ninternal\n\nThe memo."},
        {"type": "input_text", "text": "Deck"},
        {"type": "input_text", "text": "slide one"},
        {"type": "input_image", "image_url": data_url("image/png", image), "detail": "auto"},
        {"type": "input_text", "text": "the board's copy"},
        {"type": "input_file", "file_data": data_url("application/pdf", PDF), "filename": "Q3"},
    ]
    # As on a text block: citations and cache_control mapped to nothing, named.
    assert omitted == ["messages.content.citations", "cache_control"]


def test_another_extras_field_on_a_part_is_refused_by_name_unless_dropped() -> None:
    part = ContentPart(kind=IMAGE, url="https://a/b.png", dialect=ANTHROPIC, extras='{"x":1}')
    with pytest.raises(Untranslatable, match=r"messages\.content\.x"):
        content(part)
    _, omitted = content(part, drop_unsupported=True)
    assert omitted == ["messages.content.x"]


def test_a_tool_result_with_an_image_is_a_function_call_output_with_a_content_list() -> None:
    image = png(8, 8)
    shot = ContentPart(kind=IMAGE, data=image, media_type="image/png", dialect=ANTHROPIC)
    req = wire(
        [
            msg(Role.User, "take a screenshot"),
            (int(Role.Assistant), b"", b"", b"", [(b"call_1", b"shot", b"{}")], False),
            with_parts(Role.Tool, ContentPart(kind=TEXT, text="here"), shot, call_id="call_1"),
            with_parts(Role.Tool, shot, call_id="call_2", failed=True),
        ]
    )
    body, _ = sent(req)
    ok, failed = body["input"][2:]
    assert ok == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": [
            {"type": "input_text", "text": "here"},
            {"type": "input_image", "image_url": data_url("image/png", image), "detail": "auto"},
        ],
    }
    assert failed["output"][0] == {"type": "input_text", "text": "Error"}


def test_a_leading_system_message_with_parts_is_a_message_not_instructions() -> None:
    req = wire([with_parts(Role.System, ContentPart(kind=IMAGE, url="https://a/b.png"))])
    body, _ = sent(req)
    assert "instructions" not in body
    assert body["input"][0]["role"] == "system"


def test_an_assistant_turn_s_parts_must_be_text() -> None:
    text = with_parts(
        Role.Assistant, ContentPart(kind=TEXT, text="a"), ContentPart(kind=TEXT, text="b")
    )
    body, _ = sent(wire([msg(Role.User, "q"), text]))
    assert body["input"][1]["content"] == [{"type": "output_text", "text": "ab"}]
    image = with_parts(Role.Assistant, ContentPart(kind=IMAGE, url="https://a/b.png"))
    with pytest.raises(Untranslatable, match=r"messages\[1\]"):
        encode_request(wire([msg(Role.User, "q"), image]), model="m")


def test_the_stub_reads_the_parts_back_and_echoes_their_digests() -> None:
    image = png(64, 32)
    parts = (
        ContentPart(kind=TEXT, text="what is this?", dialect=CHAT),
        ContentPart(kind=IMAGE, data=image, media_type="image/png", dialect=CHAT),
        ContentPart(kind=DOCUMENT, data=PDF, media_type="application/pdf", dialect=CHAT),
        ContentPart(kind=IMAGE, url="https://example.com/a.png", dialect=CHAT),
    )
    req = wire([with_parts(Role.User, *parts)])
    got = to_stub_request(decode_responses_request(encode_request(req, model="m")), "r1")
    digest = hashlib.sha256(image).hexdigest()[:12]
    echoed = got.last_user
    assert f"[image image/png {len(image)} bytes sha256:{digest} 64x32]" in echoed
    pdf = hashlib.sha256(PDF).hexdigest()[:12]
    assert f"[document application/pdf {len(PDF)} bytes sha256:{pdf}]" in echoed
    assert echoed == described(
        [
            ContentPart(kind=TEXT, text="what is this?"),
            ContentPart(kind=IMAGE, data=image, media_type="image/png"),
            ContentPart(kind=DOCUMENT, data=PDF, media_type="application/pdf"),
            ContentPart(kind=IMAGE, url="https://example.com/a.png"),
        ]
    )
