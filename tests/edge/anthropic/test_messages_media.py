"""Images and documents at the Messages edge (issue 36): each block and
source as the wire's content parts (``anthropic_messages.parts``, written by
``anthropic.translate``), read back from the buffer; the refusals (bad
base64, a media type the bytes belie, an unknown source type) as 400s
naming the block; ``count_tokens`` counting an image."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from typing import Any

import pytest
from PIL import Image

from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.edge_translator.errors import InvalidRequest
from flatgate.edge_translator.keys import hash_key
from flatgate.edge_translator.settings import KeyConfig
from flatgate.proxy.apis.anthropic_messages.request import decode_messages
from flatgate.proxy.backends.dialect import described
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.request.decode import Message, read_request
from flatgate.proxy.wire.request.verify import verify_request
from flatgate.proxy.wire.schema import ApiDialect, PartKind
from tests.edge.test_app import app_with, call

ANTHROPIC = int(ApiDialect.ANTHROPIC_MESSAGES)
TEXT, IMAGE, DOCUMENT = int(PartKind.TEXT), int(PartKind.IMAGE), int(PartKind.DOCUMENT)
EPHEMERAL = {"type": "ephemeral"}
PDF = b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"


def picture(fmt: str = "PNG", size: tuple[int, int] = (64, 32)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(out, fmt)
    return out.getvalue()


PNG = picture()
JPEG = picture("JPEG")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def image(data: bytes = PNG, media: str = "image/png", **fields: Any) -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media, "data": b64(data)},
        **fields,
    }


def body(content: Any, *before: dict[str, Any], **fields: Any) -> bytes:
    msgs = [*before, {"role": "user", "content": content}]
    return json.dumps({"model": "claude", "max_tokens": 16, "messages": msgs, **fields}).encode()


def written(data: bytes) -> tuple[list[Message], str]:
    """The wire messages and the extras of ``data``'s request, verified."""
    buf = write_messages(decode_messages(data), provider=1, model_name="claude")
    verify_request(buf)
    req = read_request(buf)
    return req.messages, req.extras


def parts_of(content: Any) -> list[ContentPart]:
    msgs, _ = written(body(content))
    (m,) = msgs
    assert m.role == "user" and not m.content
    assert m.parts is not None
    assert all(p.dialect == ANTHROPIC for p in m.parts)
    return m.parts


def refused(data: bytes, where: str, needle: str, code: str = "invalid_request") -> None:
    with pytest.raises(InvalidRequest) as info:
        written(data)
    assert info.value.param == where, info.value.message
    assert info.value.message.startswith(f"{where}: "), info.value.message
    assert needle in info.value.message, info.value.message
    assert info.value.code.code == code


def test_a_base64_image_is_its_raw_bytes_beside_the_text_in_order() -> None:
    parts = parts_of(
        [
            {"type": "text", "text": "what is this?"},
            image(),
            {"type": "text", "text": "and this?"},
            image(JPEG, "image/jpeg"),
        ]
    )
    assert [(p.kind, p.text, p.data, p.media_type) for p in parts] == [
        (TEXT, "what is this?", b"", ""),
        (IMAGE, "", PNG, "image/png"),
        (TEXT, "and this?", b"", ""),
        (IMAGE, "", JPEG, "image/jpeg"),
    ]
    digest = hashlib.sha256(PNG).hexdigest()[:12]
    assert f"[image image/png {len(PNG)} bytes sha256:{digest} 64x32]" in described(parts)


def test_a_text_only_message_keeps_its_text_shape() -> None:
    msgs, _ = written(body([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]))
    assert [(m.content, m.parts) for m in msgs] == [("ab", None)]


def test_url_and_file_sources_are_carried_as_they_came() -> None:
    parts = parts_of(
        [
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
            {"type": "image", "source": {"type": "file", "file_id": "file_011CNha8"}},
            {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
            {"type": "document", "source": {"type": "file", "file_id": "file_022"}},
        ]
    )
    assert [(p.kind, p.url, p.file_id, p.data) for p in parts] == [
        (IMAGE, "https://example.com/a.png", "", b""),
        (IMAGE, "", "file_011CNha8", b""),
        (DOCUMENT, "https://example.com/a.pdf", "", b""),
        (DOCUMENT, "", "file_022", b""),
    ]


def test_a_pdf_document_with_its_title_context_and_citations() -> None:
    (doc,) = parts_of(
        [
            {
                "type": "document",
                "source": {"type": "base64", "media_type": "application/pdf", "data": b64(PDF)},
                "title": "Report",
                "context": "Q3 figures",
                "citations": {"enabled": True},
            }
        ]
    )
    assert (doc.kind, doc.data, doc.media_type) == (DOCUMENT, PDF, "application/pdf")
    assert (doc.title, doc.context, doc.citations, doc.span) == ("Report", "Q3 figures", True, 0)


def test_a_plain_text_document_holds_its_text() -> None:
    (doc,) = parts_of(
        [
            {
                "type": "document",
                "source": {
                    "type": "text",
                    "media_type": "text/plain",
                    "data": "The grass is green.",
                },
                "citations": {"enabled": False},
            }
        ]
    )
    assert (doc.kind, doc.text, doc.media_type, doc.citations) == (
        DOCUMENT,
        "The grass is green.",
        "text/plain",
        False,
    )


def test_a_document_of_blocks_is_its_span_then_its_parts() -> None:
    parts = parts_of(
        [
            {
                "type": "document",
                "source": {
                    "type": "content",
                    "content": [{"type": "text", "text": "page one"}, image()],
                },
                "title": "Slides",
            },
            {"type": "document", "source": {"type": "content", "content": "just text"}},
            {"type": "text", "text": "summarise"},
        ]
    )
    assert [(p.kind, p.span, p.title, p.text) for p in parts] == [
        (DOCUMENT, 2, "Slides", ""),
        (TEXT, 0, "", "page one"),
        (IMAGE, 0, "", ""),
        (DOCUMENT, 1, "", ""),
        (TEXT, 0, "", "just text"),
        (TEXT, 0, "", "summarise"),
    ]
    assert parts[2].data == PNG


def test_each_block_s_cache_control_and_fields_travel_on_its_own_part() -> None:
    """In a message of parts, a breakpoint is on the block it was put on
    (the image here, not the last text), so no ``$cache_control`` entry."""
    msgs, extras = written(
        body(
            [
                {"type": "text", "text": "look", "citations": None},
                image(cache_control=EPHEMERAL, novel_field=[1]),
                {
                    "type": "text",
                    "text": "closely",
                    "cache_control": {"type": "ephemeral", "ttl": "1h"},
                },
            ]
        )
    )
    parts = msgs[0].parts
    assert parts is not None
    assert [json.loads(p.extras) if p.extras else None for p in parts] == [
        None,
        {"cache_control": EPHEMERAL, "novel_field": [1]},
        {"cache_control": {"type": "ephemeral", "ttl": "1h"}},
    ]
    assert "$cache_control" not in extras and "$blocks" not in extras


def test_images_in_a_tool_result_make_a_tool_message_of_parts_first() -> None:
    assistant = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}}],
    }
    msgs, extras = written(
        body(
            [
                {"type": "text", "text": "here it is"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "is_error": False,
                    "cache_control": EPHEMERAL,
                    "content": [{"type": "text", "text": "screenshot:"}, image()],
                },
            ],
            {"role": "user", "content": "take a screenshot"},
            assistant,
        )
    )
    tool, user = msgs[2], msgs[3]
    assert (tool.role, tool.tool_call_id, tool.content) == ("tool", "toolu_1", "")
    assert tool.parts is not None
    assert [(p.kind, p.text, p.data) for p in tool.parts] == [
        (TEXT, "screenshot:", b""),
        (IMAGE, "", PNG),
    ]
    # The user's text after its results: text only, so its text shape.
    assert (user.role, user.content, user.parts) == ("user", "here it is", None)
    # The tool_result block's own breakpoint stays an entry by wire message.
    assert json.loads(extras)["$cache_control"] == [
        {"at": "messages", "index": 2, "cache_control": EPHEMERAL}
    ]


def test_a_tool_result_of_text_blocks_stays_its_text() -> None:
    result = {
        "type": "tool_result",
        "tool_use_id": "t",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
    }
    msgs, _ = written(body([result]))
    assert [(m.role, m.content, m.parts) for m in msgs] == [("tool", "ab", None)]


def test_an_image_in_a_message_with_a_tool_result_keeps_both() -> None:
    result = {"type": "tool_result", "tool_use_id": "t", "content": "done"}
    msgs, _ = written(body([result, image()]))
    assert [(m.role, m.content) for m in msgs] == [("tool", "done"), ("user", "")]
    assert msgs[1].parts is not None and msgs[1].parts[0].data == PNG


def test_a_png_declared_as_jpeg_is_refused_in_anthropic_s_words() -> None:
    refused(
        body([image(PNG, "image/jpeg")]),
        "messages.0.content.0.source.data",
        "The image was specified using the image/jpeg media type, but the image appears to "
        "be a image/png image",
        "invalid_media",
    )


def test_a_png_declared_as_a_pdf_is_refused() -> None:
    doc = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf"}}
    doc["source"]["data"] = b64(PNG)  # type: ignore[index]
    refused(body([doc]), "messages.0.content.0.source.data", "image/png", "invalid_media")


@pytest.mark.parametrize("data", ["not base64!", "iVBORw0KGgo", "iVBO Rw0K"])
def test_data_that_is_not_base64_is_a_400_naming_it(data: str) -> None:
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    refused(
        body([{"type": "text", "text": "x"}, block]),
        "messages.0.content.1.source.data",
        "Invalid base64",
        "invalid_media",
    )


def test_empty_data_is_a_400_naming_it() -> None:
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}
    refused(body([block]), "messages.0.content.0.source.data", "empty", "invalid_media")


def test_inside_a_tool_result_the_path_goes_down_to_the_block() -> None:
    result = {"type": "tool_result", "tool_use_id": "t", "content": [image(PNG, "image/gif")]}
    refused(
        body([result]), "messages.0.content.0.content.0.source.data", "image/gif", "invalid_media"
    )


@pytest.mark.parametrize(
    ("block", "where", "needle"),
    [
        (
            {"type": "image", "source": {"type": "path", "path": "/etc/passwd"}},
            "messages.0.content.0.source.type",
            "Invalid value 'path': an image's source is of type base64, url or file",
        ),
        (
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/bmp", "data": "AA=="},
            },
            "messages.0.content.0.source.media_type",
            "image/bmp",
        ),
        (
            {"type": "image", "source": {"type": "url"}},
            "messages.0.content.0.source.url",
            "Field required",
        ),
        (
            {
                "type": "document",
                "source": {"type": "base64", "media_type": "text/csv", "data": "AA=="},
            },
            "messages.0.content.0.source.media_type",
            "text/csv",
        ),
        (
            {"type": "search_result", "source": "x"},
            "messages.0.content.0.type",
            "flatgate carries content blocks of type text, image, document",
        ),
    ],
)
def test_a_source_or_block_flatgate_does_not_carry_is_a_400_naming_it(
    block: dict[str, Any], where: str, needle: str
) -> None:
    refused(body([block]), where, needle)


def test_an_image_from_the_assistant_or_in_a_system_message_is_refused() -> None:
    first = {"role": "user", "content": "hi"}
    refused(
        json.dumps(
            {
                "model": "m",
                "max_tokens": 4,
                "messages": [first, {"role": "assistant", "content": [image()]}],
            }
        ).encode(),
        "messages.1.content.0",
        "image blocks are only allowed in user messages and tool results",
    )


def test_an_unknown_field_on_an_image_inside_a_tool_result_is_refused() -> None:
    result = {"type": "tool_result", "tool_use_id": "t", "content": [image(odd=1)]}
    refused(body([result]), "messages.0.content.0.content.0.odd", "Extra inputs")


async def test_count_tokens_counts_an_image_by_its_pixels() -> None:
    """``count_tokens`` writes the parts and estimates them (the wire
    estimate: Anthropic's w*h/750 for an image of 1000x750 px, 1000 tokens)."""
    key = "sk-acme"
    app, transport = app_with(keys=[KeyConfig("acme", hash_key(key))])
    big = picture("PNG", (1000, 750))

    async def count(content: Any) -> int:
        data = json.dumps({"model": "echo", "messages": [{"role": "user", "content": content}]})
        proto = await call(
            app, "POST", "/v1/messages/count_tokens", data.encode(), headers={"x-api-key": key}
        )
        assert proto.status == 200, proto.payload
        return int(proto.json()["input_tokens"])

    text = await count([{"type": "text", "text": "what is it"}])
    with_image = await count([{"type": "text", "text": "what is it"}, image(big)])
    assert with_image >= text + 1000
    assert transport.sent == []
