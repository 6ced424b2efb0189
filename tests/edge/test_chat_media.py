"""The Chat Completions edge with images, audio and files: each part type
onto the wire as the client sent it (the bytes decoded once, the URL kept),
each bad part a 400 naming it in OpenAI's notation, and a message of text
parts written as it always was."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import pytest
from PIL import Image

from flatgate.edge_translator.errors import InvalidRequest
from flatgate.edge_translator.openai.translate import write_request
from flatgate.proxy.apis.openai_chat.request import decode_request
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.request.decode import Message, read_request
from flatgate.proxy.wire.schema import ApiDialect, PartKind

CHAT = int(ApiDialect.OPENAI_CHAT)


def png(size: tuple[int, int] = (64, 32)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (220, 20, 60)).save(out, "PNG")
    return out.getvalue()


def jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (48, 40), (30, 80, 200)).save(out, "JPEG")
    return out.getvalue()


def pdf() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (32, 32), (30, 80, 200)).save(out, "PDF")
    return out.getvalue()


WAV = b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00" + bytes(28)
MP3 = b"ID3\x04\x00\x00\x00\x00\x00\x00" + bytes(32)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def data_url(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{b64(data)}"


def image(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url, **extra}}


def written(*messages: dict[str, Any]) -> list[Message]:
    body = json.dumps({"model": "m", "messages": list(messages)}).encode()
    buf = write_request(decode_request(body), provider=1, model_name="m")
    return read_request(buf).messages


def parts_of(*content: dict[str, Any]) -> list[ContentPart]:
    (m,) = written({"role": "user", "content": list(content)})
    assert not m.content
    assert m.parts is not None
    return m.parts


def refused(*content: dict[str, Any], role: str = "user") -> InvalidRequest:
    body = json.dumps({"model": "m", "messages": [{"role": role, "content": list(content)}]})
    with pytest.raises(InvalidRequest) as info:
        write_request(decode_request(body.encode()), provider=1, model_name="m")
    assert info.value.status == 400
    return info.value


def test_an_image_data_url_is_its_bytes_with_its_type_and_detail() -> None:
    data = png()
    text, img = parts_of(
        {"type": "text", "text": "what color?"}, image(data_url(data, "image/png"), detail="low")
    )
    assert text == ContentPart(kind=PartKind.TEXT, text="what color?", dialect=CHAT)
    assert img == ContentPart(
        kind=PartKind.IMAGE, data=data, media_type="image/png", detail="low", dialect=CHAT
    )


def test_an_https_or_http_image_url_is_passed_on_as_a_url() -> None:
    a, b = parts_of(image("https://example.com/a.png", detail="high"), image("http://x/b.jpg"))
    assert a == ContentPart(
        kind=PartKind.IMAGE, url="https://example.com/a.png", detail="high", dialect=CHAT
    )
    assert b == ContentPart(kind=PartKind.IMAGE, url="http://x/b.jpg", dialect=CHAT)


@pytest.mark.parametrize(
    ("fmt", "data", "media"), [("wav", WAV, "audio/wav"), ("mp3", MP3, "audio/mpeg")]
)
def test_input_audio_is_its_decoded_bytes_typed_by_its_format(
    fmt: str, data: bytes, media: str
) -> None:
    (part,) = parts_of({"type": "input_audio", "input_audio": {"data": b64(data), "format": fmt}})
    assert part == ContentPart(kind=PartKind.AUDIO, data=data, media_type=media, dialect=CHAT)


def test_a_file_part_of_a_pdf_is_a_document_with_its_filename() -> None:
    data = pdf()
    (part,) = parts_of(
        {
            "type": "file",
            "file": {"file_data": data_url(data, "application/pdf"), "filename": "a.pdf"},
        }
    )
    assert part == ContentPart(
        kind=PartKind.DOCUMENT,
        data=data,
        media_type="application/pdf",
        filename="a.pdf",
        dialect=CHAT,
    )


@pytest.mark.parametrize(
    ("data", "media", "kind"),
    [
        (b"plain words\n", "text/plain", PartKind.DOCUMENT),
        (png(), "image/png", PartKind.IMAGE),
        (WAV, "audio/wav", PartKind.AUDIO),
    ],
)
def test_a_file_part_is_of_the_kind_its_media_type_says(
    data: bytes, media: str, kind: PartKind
) -> None:
    (part,) = parts_of({"type": "file", "file": {"file_data": data_url(data, media)}})
    assert (part.kind, part.data, part.media_type) == (kind, data, media)


def test_a_file_id_is_a_file_part_of_openais() -> None:
    (part,) = parts_of({"type": "file", "file": {"file_id": "file-abc", "filename": "r.pdf"}})
    assert part == ContentPart(
        kind=PartKind.FILE, file_id="file-abc", filename="r.pdf", dialect=CHAT
    )


def test_every_part_keeps_the_clients_order_and_the_message_its_role_and_name() -> None:
    data = jpeg()
    (m,) = written(
        {
            "role": "user",
            "name": "ann",
            "content": [
                {"type": "text", "text": "one"},
                image(data_url(data, "image/jpeg")),
                {"type": "text", "text": "two"},
            ],
        }
    )
    assert (m.role, m.name, m.content) == ("user", "ann", "")
    assert [p.kind for p in m.parts or ()] == [PartKind.TEXT, PartKind.IMAGE, PartKind.TEXT]
    assert [p.text for p in m.parts or ()] == ["one", "", "two"]


def test_a_tool_message_carries_its_image_as_parts_with_its_call_id() -> None:
    data = png()
    _, tool = written(
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": [{"type": "text", "text": "here"}, image(data_url(data, "image/png"))],
        },
    )
    assert (tool.role, tool.tool_call_id) == ("tool", "c1")
    assert [p.data for p in tool.parts or ()] == [b"", data]


def test_a_message_of_text_parts_is_written_as_its_text_as_before() -> None:
    def buffer(content: Any) -> bytes:
        body = {"model": "m", "messages": [{"role": "user", "content": content}]}
        return write_request(decode_request(json.dumps(body).encode()), provider=1, model_name="m")

    parts = [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]
    assert buffer(parts) == buffer("hello world")
    (m,) = read_request(buffer(parts)).messages
    assert (m.content, m.parts) == ("hello world", None)


def test_the_bytes_are_written_once_not_as_base64() -> None:
    data = png((200, 100))
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": [image(data_url(data, "image/png"))]}],
    }
    buf = write_request(decode_request(json.dumps(body).encode()), provider=1, model_name="m")
    assert buf.count(data) == 1
    assert b64(data).encode() not in buf


@pytest.mark.parametrize(
    ("part", "param"),
    [
        # a data URL without ;base64, and one that names no media type
        (image("data:image/png,abcd"), "messages.[0].content.[0].image_url.url"),
        (image("data:;base64,iVBORw0KGgo="), "messages.[0].content.[0].image_url.url"),
        # base64 that is not
        (image("data:image/png;base64,!!!notbase64"), "messages.[0].content.[0].image_url.url"),
        # a PNG declared as a JPEG
        (image(data_url(png(), "image/jpeg")), "messages.[0].content.[0].image_url.url"),
        # a data URL of another thing than an image
        (image(data_url(b"hello", "text/plain")), "messages.[0].content.[0].image_url.url"),
        # a scheme that is neither https, http nor data
        (image("ftp://example.com/a.png"), "messages.[0].content.[0].image_url.url"),
        (image("file:///etc/passwd"), "messages.[0].content.[0].image_url.url"),
        (
            {"type": "input_audio", "input_audio": {"data": "a b c", "format": "wav"}},
            "messages.[0].content.[0].input_audio.data",
        ),
        (
            {"type": "input_audio", "input_audio": {"data": b64(png()), "format": "mp3"}},
            "messages.[0].content.[0].input_audio.data",
        ),
        (
            {"type": "file", "file": {"file_data": b64(pdf())}},
            "messages.[0].content.[0].file.file_data",
        ),
        (
            {"type": "file", "file": {"file_data": data_url(png(), "application/pdf")}},
            "messages.[0].content.[0].file.file_data",
        ),
    ],
)
def test_a_part_that_does_not_decode_is_a_400_naming_it(part: dict[str, Any], param: str) -> None:
    err = refused(part)
    assert err.param == param
    assert err.code.code == "invalid_media"
    assert param in err.message


def test_the_error_names_the_part_where_it_stands() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "user", "content": [{"type": "text", "text": "x"}, image("gopher://x")]},
        ],
    }
    with pytest.raises(InvalidRequest) as info:
        write_request(decode_request(json.dumps(body).encode()), provider=1, model_name="m")
    assert info.value.param == "messages.[1].content.[1].image_url.url"


@pytest.mark.parametrize("role", ["system", "developer", "assistant"])
def test_media_outside_user_and_tool_messages_is_refused_at_decode(role: str) -> None:
    body = {"model": "m", "messages": [{"role": role, "content": [image("https://x/a.png")]}]}
    with pytest.raises(InvalidRequest) as info:
        decode_request(json.dumps(body).encode())
    assert info.value.param == "messages.[0].content.[0].type"
    assert info.value.code.code == "unsupported_content_type"


@pytest.mark.parametrize(
    ("file", "param"),
    [
        ({}, "messages.[0].content.[0].file"),
        (
            {"file_id": "file-1", "file_data": "data:application/pdf;base64,JVBERi0="},
            "messages.[0].content.[0].file",
        ),
        ({"filename": "a.pdf"}, "messages.[0].content.[0].file"),
    ],
)
def test_a_file_part_needs_one_source(file: dict[str, Any], param: str) -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "file", "file": file}]}],
    }
    with pytest.raises(InvalidRequest) as info:
        decode_request(json.dumps(body).encode())
    assert info.value.param == param


@pytest.mark.parametrize(
    ("part", "param"),
    [
        (image("https://x/a.png", detail="ultra"), "messages.[0].content.[0].image_url.detail"),
        (
            {"type": "input_audio", "input_audio": {"data": b64(WAV), "format": "ogg"}},
            "messages.[0].content.[0].input_audio.format",
        ),
        ({"type": "image_url", "image_url": {}}, "messages.[0].content.[0].image_url.url"),
        (
            {"type": "input_audio", "input_audio": {"format": "wav"}},
            "messages.[0].content.[0].input_audio.data",
        ),
    ],
)
def test_the_parts_are_typed_strictly(part: dict[str, Any], param: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": [part]}]}
    with pytest.raises(InvalidRequest) as info:
        decode_request(json.dumps(body).encode())
    assert info.value.param == param


def test_an_unknown_key_in_a_part_is_refused_naming_it_and_a_null_one_ignored() -> None:
    bad = {
        "model": "m",
        "messages": [{"role": "user", "content": [image("https://x/a.png", zoom=2)]}],
    }
    with pytest.raises(InvalidRequest) as info:
        decode_request(json.dumps(bad).encode())
    assert info.value.param == "messages.[0].content.[0].image_url.zoom"
    (part,) = parts_of(image("https://x/a.png", zoom=None))
    assert part.url == "https://x/a.png"
