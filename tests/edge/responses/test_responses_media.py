"""The Responses edge's images and files: each ``input_image`` and
``input_file`` source written as the wire's content parts (raw bytes,
decoded once; URLs and file ids as they are), in a message and in a
``function_call_output``, and every malformed part a 400 naming it."""

from __future__ import annotations

import base64
import io
from typing import Any

import pytest
from PIL import Image

from flatgate.edge_translator.responses.translate import write_request
from flatgate.proxy.apis.errors import InvalidRequest
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.request.decode import Message, read_request
from flatgate.proxy.wire.schema import ApiDialect, PartKind
from tests.edge.responses.common import decoded

RESPONSES = int(ApiDialect.OPENAI_RESPONSES)
PDF = b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"


def png(width: int = 64, height: int = 32) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), "red").save(out, "PNG")
    return out.getvalue()


def data_url(media: str, data: bytes) -> str:
    return f"data:{media};base64,{base64.b64encode(data).decode()}"


def wire(**body: Any) -> list[Message]:
    req = decoded(**body)
    return read_request(write_request(req, provider=0, model_name="m")).messages


def user(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(parts)}]


def test_a_message_with_an_image_and_a_file_carries_every_part_in_order() -> None:
    image = png()
    (m,) = wire(
        input=user(
            {"type": "input_text", "text": "What is in these?"},
            {"type": "input_image", "image_url": data_url("image/png", image), "detail": "low"},
            {
                "type": "input_file",
                "file_data": data_url("application/pdf", PDF),
                "filename": "a.pdf",
            },
        )
    )
    assert (m.role, m.content) == ("user", "")
    assert m.parts == [
        ContentPart(kind=PartKind.TEXT, text="What is in these?", dialect=RESPONSES),
        ContentPart(
            kind=PartKind.IMAGE, data=image, media_type="image/png", dialect=RESPONSES, detail="low"
        ),
        ContentPart(
            kind=PartKind.DOCUMENT,
            data=PDF,
            media_type="application/pdf",
            dialect=RESPONSES,
            filename="a.pdf",
        ),
    ]


def test_urls_and_file_ids_are_carried_as_they_are() -> None:
    (m,) = wire(
        input=user(
            {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "high"},
            {"type": "input_image", "file_id": "file-img", "detail": "auto"},
            {"type": "input_file", "file_url": "https://example.com/a.pdf"},
            {"type": "input_file", "file_id": "file-doc", "filename": "b.pdf"},
        )
    )
    assert m.parts == [
        ContentPart(
            kind=PartKind.IMAGE, url="https://example.com/cat.png", dialect=RESPONSES, detail="high"
        ),
        ContentPart(kind=PartKind.IMAGE, file_id="file-img", dialect=RESPONSES, detail="auto"),
        ContentPart(kind=PartKind.DOCUMENT, url="https://example.com/a.pdf", dialect=RESPONSES),
        ContentPart(kind=PartKind.FILE, file_id="file-doc", dialect=RESPONSES, filename="b.pdf"),
    ]


def test_a_message_of_text_parts_keeps_the_text_path() -> None:
    (m,) = wire(
        input=user({"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"})
    )
    assert (m.content, m.parts) == ("ab", None)


def test_a_function_call_output_with_an_image_is_a_tool_message_with_parts() -> None:
    image = png(8, 8)
    call = {"type": "function_call", "call_id": "c1", "name": "shot", "arguments": "{}"}
    output = {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [
            {"type": "input_text", "text": "the screen:"},
            {"type": "input_image", "image_url": data_url("image/png", image)},
        ],
    }
    _, _, tool = wire(input=[*user({"type": "input_text", "text": "look"}), call, output])
    assert (tool.role, tool.tool_call_id, tool.content) == ("tool", "c1", "")
    assert tool.parts == [
        ContentPart(kind=PartKind.TEXT, text="the screen:", dialect=RESPONSES),
        ContentPart(kind=PartKind.IMAGE, data=image, media_type="image/png", dialect=RESPONSES),
    ]
    # Text parts alone keep the text path.
    text_output = {**output, "output": [{"type": "input_text", "text": "done"}]}
    _, _, tool = wire(input=[*user({"type": "input_text", "text": "look"}), call, text_output])
    assert (tool.content, tool.parts) == ("done", None)


def refused(part: dict[str, Any], *, before: int = 0) -> FlatgateError:
    """The 400 for a message whose part ``before`` + 1 is ``part``."""
    texts = [{"type": "input_text", "text": "x"}] * before
    with pytest.raises(InvalidRequest) as caught:
        wire(input=user(*texts, part))
    return caught.value


@pytest.mark.parametrize(
    ("part", "param", "code", "said"),
    [
        (  # a PNG declared as JPEG
            {"type": "input_image", "image_url": data_url("image/jpeg", png())},
            "input.[0].content.[1].image_url",
            "invalid_media",
            "appears to be a image/png",
        ),
        (
            {"type": "input_image", "image_url": "data:image/png;base64,not base64!"},
            "input.[0].content.[1].image_url",
            "invalid_media",
            "not valid base64",
        ),
        (
            {"type": "input_image", "image_url": data_url("application/pdf", PDF)},
            "input.[0].content.[1].image_url",
            "invalid_media",
            "not an image type",
        ),
        (
            {"type": "input_image", "image_url": "ftp://example.com/a.png"},
            "input.[0].content.[1].image_url",
            "invalid_request",
            "http(s) URL or a base64-encoded data URL",
        ),
        (
            {"type": "input_image", "detail": "auto"},
            "input.[0].content.[1].image_url",
            "invalid_request",
            "Missing required parameter",
        ),
        (
            {"type": "input_image", "image_url": "https://a/b.png", "file_id": "file-1"},
            "input.[0].content.[1].file_id",
            "invalid_request",
            "only one of image_url, file_id",
        ),
        (  # bare base64: OpenAI's guide documents a data URL
            {
                "type": "input_file",
                "file_data": base64.b64encode(PDF).decode(),
                "filename": "a.pdf",
            },
            "input.[0].content.[1].file_data",
            "invalid_media",
            "data URL",
        ),
        (
            {"type": "input_file", "file_url": "file:///etc/passwd"},
            "input.[0].content.[1].file_url",
            "invalid_request",
            "http(s) URL",
        ),
        (
            {"type": "input_file", "filename": "a.pdf"},
            "input.[0].content.[1].file_data",
            "invalid_request",
            "Missing required parameter",
        ),
        (
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
            "input.[0].content.[1].type",
            "unsupported_content_type",
            "not supported by the Responses API",
        ),
    ],
)
def test_a_bad_part_is_a_400_naming_it(
    part: dict[str, Any], param: str, code: str, said: str
) -> None:
    err = refused(part, before=1)
    assert (err.status, err.param, err.code.code) == (400, param, code)
    assert said in err.message


@pytest.mark.parametrize(
    ("part", "param"),
    [
        ({"type": "input_image", "image_url": "https://a/b.png", "detail": "max"}, "detail"),
        (
            {"type": "input_image", "image_url": "https://a/b.png", "cache_control": {"a": 1}},
            "cache_control",
        ),
        ({"type": "input_file", "file_id": "f", "detail": "original"}, "detail"),
    ],
)
def test_a_part_s_unknown_key_or_value_is_a_400_naming_its_path(
    part: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decoded(input=user(part))
    assert caught.value.param == f"input.[0].content.[0].{param}"


def test_an_assistant_message_holds_no_image() -> None:
    item = {
        "role": "assistant",
        "content": [{"type": "input_image", "image_url": "https://a/b.png"}],
    }
    with pytest.raises(InvalidRequest) as caught:
        decoded(input=[item])
    assert caught.value.param == "input.[0].content.[0].type"


def test_the_error_names_the_client_s_item_after_a_stored_chain() -> None:
    bad = user({"type": "input_image", "image_url": "data:image/png;base64,%%%"})
    req = decoded(input=bad)
    # Two items of a stored chain before the client's own.
    chained = req.with_items([*decoded(input="a").items, *decoded(input="b").items, *req.items])
    assert chained.first == 2
    with pytest.raises(InvalidRequest) as caught:
        write_request(chained, provider=0, model_name="m")
    assert caught.value.param == "input.[0].content.[0].image_url"


@pytest.mark.parametrize(
    ("part", "field"),
    [
        ({"type": "input_image"}, "image_url"),
        ({"type": "input_image", "image_url": "ftp://a/b.png"}, "image_url"),
        ({"type": "input_file", "file_url": "file:///etc/passwd"}, "file_url"),
        ({"type": "input_file", "file_data": "JVBERi0=", "filename": "a.pdf"}, "file_data"),
    ],
)
def test_what_needs_no_decoding_is_refused_when_the_request_is_decoded(
    part: dict[str, Any], field: str
) -> None:
    # In a function call's output too; before anything is written or stored.
    output = {"type": "function_call_output", "call_id": "c", "output": [part]}
    with pytest.raises(InvalidRequest) as caught:
        decoded(input=[output])
    assert caught.value.param == f"input.[0].output.[0].{field}"
