"""The ``openai`` adapter with content parts: each part of each client API
written as a Chat Completions content part (or mapped, or refused naming
it, or dropped and named with ``drop_unsupported``), and the stub reading
them back, its echo showing the digests of the bytes sent."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from collections.abc import Sequence
from typing import Any

import pytest
from PIL import Image

from flatgate.edge_translator.openai.translate import write_request
from flatgate.proxy.apis.openai_chat.request import decode_request
from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.extras import UnsupportedField
from flatgate.proxy.backends.openai.adapter import encode_request
from flatgate.proxy.backends.openai.stub_request import (
    Invalid,
    decode_chat_request,
    to_stub_request,
)
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.request.decode import Request, read_request
from flatgate.proxy.wire.request.writer import WireMessage
from flatgate.proxy.wire.schema import PartKind, Role
from tests.backends.wire_requests import ANTHROPIC, CHAT, RESPONSES, assistant, wire

TEXT, IMAGE, DOCUMENT, AUDIO, FILE = (int(k) for k in PartKind)


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 32), (220, 20, 60)).save(out, "PNG")
    return out.getvalue()


def pdf() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 32), (30, 80, 200)).save(out, "PDF")
    return out.getvalue()


PNG = png()
PDF = pdf()
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00" + bytes(28)
MP3 = b"ID3\x04\x00\x00\x00\x00\x00\x00" + bytes(32)
OGG = b"OggS\x00\x02" + bytes(20)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def user(*parts: ContentPart, role: Role = Role.User, call_id: str = "") -> WireMessage:
    return (int(role), b"", b"", call_id.encode(), (), False, (), parts)


def tool(call_id: str, *parts: ContentPart, failed: bool = False) -> WireMessage:
    return (int(Role.Tool), b"", b"", call_id.encode(), (), failed, (), parts)


def text(t: str, dialect: int = ANTHROPIC) -> ContentPart:
    return ContentPart(kind=TEXT, text=t, dialect=dialect)


def sent(
    req: Request, *, drop: bool = False, omitted: list[str] | None = None
) -> list[dict[str, Any]]:
    body = json.loads(encode_request(req, model="m", omitted=omitted, drop_unsupported=drop))
    messages: list[dict[str, Any]] = body["messages"]
    return messages


def content_of(*parts: ContentPart, drop: bool = False, omitted: list[str] | None = None) -> Any:
    (m,) = sent(wire([user(*parts)]), drop=drop, omitted=omitted)
    assert m["role"] == "user"
    return m["content"]


def refusal(*messages: WireMessage) -> str:
    with pytest.raises(Untranslatable) as info:
        sent(wire(list(messages)))
    return str(info.value)


@pytest.mark.parametrize("dialect", [CHAT, RESPONSES, ANTHROPIC])
def test_an_images_bytes_are_a_data_url_and_its_url_a_url(dialect: int) -> None:
    got = content_of(
        text("look", dialect),
        ContentPart(kind=IMAGE, data=PNG, media_type="image/png", detail="low", dialect=dialect),
        ContentPart(kind=IMAGE, url="https://x/a.png", dialect=dialect),
    )
    assert got == [
        {"type": "text", "text": "look"},
        {
            "type": "image_url",
            "image_url": {"url": f"data:image/png;base64,{b64(PNG)}", "detail": "low"},
        },
        {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
    ]


@pytest.mark.parametrize(
    ("data", "media", "fmt"),
    [(WAV, "audio/wav", "wav"), (MP3, "audio/mpeg", "mp3"), (MP3, "audio/mp3", "mp3")],
)
def test_wav_and_mp3_are_input_audio(data: bytes, media: str, fmt: str) -> None:
    got = content_of(ContentPart(kind=AUDIO, data=data, media_type=media, dialect=RESPONSES))
    assert got == [{"type": "input_audio", "input_audio": {"data": b64(data), "format": fmt}}]


def test_other_audio_is_refused_naming_it_or_dropped_and_named() -> None:
    ogg = ContentPart(kind=AUDIO, data=OGG, media_type="audio/ogg", dialect=RESPONSES)
    why = refusal(user(text("hear"), ogg))
    assert why.startswith("messages[0].content[1]: audio of type 'audio/ogg'")
    assert "drop_unsupported" in why
    omitted: list[str] = []
    assert content_of(text("hear"), ogg, drop=True, omitted=omitted) == [
        {"type": "text", "text": "hear"}
    ]
    assert omitted == ["messages[0].content[1]"]


def test_a_pdf_is_a_file_part_with_its_data_and_a_filename() -> None:
    named = ContentPart(
        kind=DOCUMENT, data=PDF, media_type="application/pdf", filename="r.pdf", dialect=CHAT
    )
    titled = ContentPart(
        kind=DOCUMENT, data=PDF, media_type="application/pdf", title="Report", dialect=ANTHROPIC
    )
    bare = ContentPart(kind=DOCUMENT, data=PDF, media_type="application/pdf", dialect=ANTHROPIC)
    url = f"data:application/pdf;base64,{b64(PDF)}"
    assert content_of(named, titled, bare) == [
        {"type": "file", "file": {"file_data": url, "filename": "r.pdf"}},
        {"type": "file", "file": {"file_data": url, "filename": "Report"}},
        {"type": "file", "file": {"file_data": url, "filename": "document.pdf"}},
    ]


def test_a_documents_context_is_a_text_part_before_it() -> None:
    doc = ContentPart(
        kind=DOCUMENT,
        data=PDF,
        media_type="application/pdf",
        context="from the 2024 audit",
        dialect=ANTHROPIC,
    )
    got = content_of(doc)
    assert got[0] == {"type": "text", "text": "from the 2024 audit"}
    assert got[1]["type"] == "file"


def test_a_plain_text_document_is_a_text_part_of_its_title_context_and_text() -> None:
    doc = ContentPart(
        kind=DOCUMENT,
        text="The grass is green.",
        media_type="text/plain",
        title="Facts",
        context="a note",
        dialect=ANTHROPIC,
    )
    as_bytes = ContentPart(kind=DOCUMENT, data=b"line one\n", media_type="text/plain", dialect=CHAT)
    assert content_of(doc, as_bytes) == [
        {"type": "text", "text": "Facts\n\na note\n\nThe grass is green."},
        {"type": "text", "text": "line one\n"},
    ]


def test_a_document_of_parts_is_its_title_then_its_parts_inline() -> None:
    doc = ContentPart(kind=DOCUMENT, span=2, title="Slides", dialect=ANTHROPIC)
    got = content_of(
        doc,
        text("page one"),
        ContentPart(kind=IMAGE, data=PNG, media_type="image/png", dialect=ANTHROPIC),
        text("after"),
    )
    assert [p["type"] for p in got] == ["text", "text", "image_url", "text"]
    assert [p.get("text") for p in got] == ["Slides", "page one", None, "after"]


@pytest.mark.parametrize("dialect", [CHAT, RESPONSES])
def test_an_openai_file_id_is_a_file_part(dialect: int) -> None:
    part = ContentPart(kind=FILE, file_id="file-1", filename="a.pdf", dialect=dialect)
    assert content_of(part) == [
        {"type": "file", "file": {"file_id": "file-1", "filename": "a.pdf"}}
    ]


def test_another_providers_file_id_and_a_documents_url_are_refused_or_dropped() -> None:
    foreign = ContentPart(kind=DOCUMENT, file_id="file_011", dialect=ANTHROPIC)
    by_url = ContentPart(kind=DOCUMENT, url="https://x/a.pdf", dialect=ANTHROPIC)
    image_id = ContentPart(kind=IMAGE, file_id="file-9", dialect=RESPONSES)
    assert "another provider" in refusal(user(text("a"), foreign))
    assert "by URL" in refusal(user(by_url))
    assert "image by file id" in refusal(user(image_id))
    omitted: list[str] = []
    assert content_of(foreign, by_url, image_id, text("x"), drop=True, omitted=omitted) == [
        {"type": "text", "text": "x"}
    ]
    assert omitted == [
        "messages[0].content[0]",
        "messages[0].content[1]",
        "messages[0].content[2]",
    ]


def test_anthropic_fields_on_a_part_are_treated_as_on_a_text_block() -> None:
    marked = ContentPart(
        kind=IMAGE,
        data=PNG,
        media_type="image/png",
        dialect=ANTHROPIC,
        extras='{"cache_control":{"type":"ephemeral"}}',
    )
    cited = ContentPart(
        kind=DOCUMENT, text="t", media_type="text/plain", citations=True, dialect=ANTHROPIC
    )
    omitted: list[str] = []
    got = content_of(marked, cited, omitted=omitted)
    assert "cache_control" not in json.dumps(got)
    assert omitted == ["cache_control", "messages.content.citations"]
    odd = ContentPart(kind=IMAGE, url="https://x", dialect=ANTHROPIC, extras='{"shade":1}')
    with pytest.raises(UnsupportedField) as info:
        content_of(odd)
    assert info.value.param == "messages.content.shade"
    omitted = []
    content_of(odd, drop=True, omitted=omitted)
    assert omitted == ["messages.content.shade"]


def test_a_tool_results_images_follow_the_run_of_tool_messages_in_a_user_message() -> None:
    shot = ContentPart(kind=IMAGE, data=PNG, media_type="image/png", dialect=ANTHROPIC)
    calls = [("c1", "shot", "{}"), ("c2", "shot", "{}")]
    got = sent(
        wire(
            [
                assistant("", calls),
                tool("c1", text("first"), shot),
                tool("c2", shot, failed=True),
                user(text("thanks")),
            ]
        )
    )
    assert [m["role"] for m in got] == ["assistant", "tool", "tool", "user", "user"]
    assert got[1] == {"role": "tool", "content": "first", "tool_call_id": "c1"}
    assert got[2] == {"role": "tool", "content": "Error", "tool_call_id": "c2"}
    url = {"url": f"data:image/png;base64,{b64(PNG)}"}
    assert got[3]["content"] == [{"type": "image_url", "image_url": url}] * 2
    assert got[4]["content"] == [{"type": "text", "text": "thanks"}]


def test_a_tool_run_at_the_end_gets_its_user_message_too() -> None:
    shot = ContentPart(kind=IMAGE, url="https://x/s.png", dialect=ANTHROPIC)
    got = sent(wire([assistant("", [("c1", "shot", "{}")]), tool("c1", shot)]))
    assert [m["role"] for m in got] == ["assistant", "tool", "user"]
    assert got[1]["content"] == ""


def test_media_in_a_system_message_is_refused_naming_it() -> None:
    shot = ContentPart(kind=IMAGE, url="https://x/s.png", dialect=ANTHROPIC)
    why = refusal(user(text("be brief"), shot, role=Role.System))
    assert why.startswith("messages[0].content[1]: a system message's part")
    omitted: list[str] = []
    (m,) = sent(wire([user(text("be brief"), shot, role=Role.System)]), drop=True, omitted=omitted)
    assert m == {"role": "system", "content": "be brief"}
    assert omitted == ["messages[0].content[1]"]


def test_a_text_only_request_has_no_parts_and_is_sent_as_before() -> None:
    req = wire([(int(Role.User), b"hello")])
    assert json.loads(encode_request(req, model="m"))["messages"] == [
        {"role": "user", "content": "hello"}
    ]


# -- through the stub -----------------------------------------------------------


def through_stub(body: dict[str, Any]) -> str:
    """``body`` (a Chat client's) through the edge and the adapter, as the
    stub reads it: the echo of its last user message."""
    frame = write_request(decode_request(json.dumps(body).encode()), provider=1, model_name="m")
    sent_body = encode_request(read_request(frame), model="echo")
    return to_stub_request(decode_chat_request(sent_body), "r").last_user


def test_the_stub_echoes_each_parts_digest_of_the_bytes_sent() -> None:
    content: Sequence[dict[str, Any]] = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(PNG)}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        {"type": "input_audio", "input_audio": {"data": b64(WAV), "format": "wav"}},
        {
            "type": "file",
            "file": {"file_data": f"data:application/pdf;base64,{b64(PDF)}", "filename": "r.pdf"},
        },
        {"type": "file", "file": {"file_id": "file-7"}},
    ]
    echo = through_stub({"model": "m", "messages": [{"role": "user", "content": content}]})
    assert echo == (
        "what is this? "
        f"[image image/png {len(PNG)} bytes sha256:{digest(PNG)} 64x32] "
        "[image url https://example.com/cat.jpg] "
        f"[audio audio/wav {len(WAV)} bytes sha256:{digest(WAV)}] "
        f"[document application/pdf {len(PDF)} bytes sha256:{digest(PDF)}] "
        "[file file_id file-7]"
    )


def test_the_stub_echoes_a_tool_results_image_moved_to_a_user_message() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "shoot"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "s", "arguments": "{}"}}
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": [
                    {"type": "text", "text": "done"},
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:image/png;base64,{b64(PNG)}"},
                    },
                ],
            },
        ],
    }
    assert through_stub(body) == f"[image image/png {len(PNG)} bytes sha256:{digest(PNG)} 64x32]"


def test_the_stub_refuses_a_part_that_does_not_decode_naming_it() -> None:
    body = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}
                ],
            }
        ],
    }
    with pytest.raises(Invalid) as info:
        to_stub_request(decode_chat_request(json.dumps(body).encode()), "r")
    assert info.value.param == "messages[0].content[0].image_url.url"


def test_a_files_detail_has_no_chat_field_and_is_named() -> None:
    doc = ContentPart(
        kind=DOCUMENT, data=PDF, media_type="application/pdf", detail="high", dialect=RESPONSES
    )
    default = ContentPart(
        kind=DOCUMENT, data=PDF, media_type="application/pdf", detail="auto", dialect=RESPONSES
    )
    omitted: list[str] = []
    got = content_of(doc, default, omitted=omitted)
    assert [p["type"] for p in got] == ["file", "file"]
    assert "detail" not in json.dumps(got)
    assert omitted == ["detail"]


def test_a_user_message_whose_every_part_is_dropped_has_empty_text() -> None:
    ogg = ContentPart(kind=AUDIO, data=OGG, media_type="audio/ogg", dialect=RESPONSES)
    assert content_of(ogg, drop=True) == ""
