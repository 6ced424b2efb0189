"""Content parts at the ``anthropic`` backend (issue 36,
``backends.anthropic.parts``): the blocks each part becomes from each client
dialect, the Files API beta, what it refuses naming the part (or drops and
names with ``drop_unsupported``), and the stub reading the blocks back into
parts whose echo shows each one's digest."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from typing import Any

import pytest
from PIL import Image

from flatgate.proxy.backends.anthropic.adapter import AnthropicAdapter, encode_request
from flatgate.proxy.backends.anthropic.config import AnthropicConfig
from flatgate.proxy.backends.anthropic.parts import FILES_BETA, PartRefused
from flatgate.proxy.backends.anthropic.stub import AnthropicWire
from flatgate.proxy.backends.base import Inbound, Untranslatable
from flatgate.proxy.backends.dialect import Rejected, StubRequest
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.request.writer import WireMessage
from flatgate.proxy.wire.schema import PartKind, Role
from tests.backends.wire_requests import ANTHROPIC, CHAT, RESPONSES, assistant, msg, wire

TEXT, IMAGE, DOCUMENT = int(PartKind.TEXT), int(PartKind.IMAGE), int(PartKind.DOCUMENT)
AUDIO, FILE = int(PartKind.AUDIO), int(PartKind.FILE)
PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj <<>> endobj\n%%EOF\n"


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (48, 16), (0, 90, 200)).save(out, "PNG")
    return out.getvalue()


PNG = _png()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def user(*parts: ContentPart) -> WireMessage:
    return (int(Role.User), b"", b"", b"", (), False, (), parts)


def tool(call_id: str, *parts: ContentPart, failed: bool = False) -> WireMessage:
    return (int(Role.Tool), b"", b"", call_id.encode(), (), failed, (), parts)


def text(t: str, dialect: int = ANTHROPIC, extras: str = "") -> ContentPart:
    return ContentPart(TEXT, text=t, dialect=dialect, extras=extras)


def sent(req: Request, **kw: Any) -> tuple[dict[str, Any], list[str], list[str]]:
    """The body, the omitted names and the betas ``req`` is sent with."""
    omitted: list[str] = []
    betas: list[str] = []
    body = encode_request(req, model="claude", omitted=omitted, betas=betas, **kw)
    return json.loads(body), omitted, betas


def content(req: Request, **kw: Any) -> list[Any]:
    body, _, _ = sent(req, **kw)
    return body["messages"][-1]["content"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("dialect", [ANTHROPIC, CHAT, RESPONSES])
def test_an_image_s_bytes_are_a_base64_source_from_any_dialect(dialect: int) -> None:
    req = wire(
        [
            user(
                text("what is it?", dialect),
                ContentPart(IMAGE, data=PNG, media_type="image/png", dialect=dialect),
            )
        ]
    )
    assert content(req) == [
        {"type": "text", "text": "what is it?"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)},
        },
    ]


def test_an_image_with_no_media_type_or_another_spelling_is_sent_as_its_bytes_say() -> None:
    jpeg = io.BytesIO()
    Image.new("RGB", (8, 8)).save(jpeg, "JPEG")
    req = wire(
        [
            user(
                ContentPart(IMAGE, data=PNG, dialect=CHAT),
                ContentPart(IMAGE, data=jpeg.getvalue(), media_type="image/jpg", dialect=CHAT),
            )
        ]
    )
    assert [b["source"]["media_type"] for b in content(req)] == ["image/png", "image/jpeg"]


def test_an_image_url_is_passed_on_and_openai_s_detail_named() -> None:
    req = wire(
        [
            user(
                ContentPart(IMAGE, url="https://example.com/a.png", detail="high", dialect=CHAT),
                ContentPart(IMAGE, url="https://example.com/b.png", detail="auto", dialect=CHAT),
            )
        ]
    )
    body, omitted, _ = sent(req)
    assert body["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/b.png"}},
    ]
    assert omitted == ["detail"]


def test_an_anthropic_file_id_is_a_file_source_with_the_files_beta() -> None:
    req = wire(
        [
            user(
                ContentPart(IMAGE, file_id="file_011", dialect=ANTHROPIC),
                ContentPart(DOCUMENT, file_id="file_022", dialect=ANTHROPIC, title="Spec"),
            )
        ]
    )
    body, _, betas = sent(req)
    assert body["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "file", "file_id": "file_011"}},
        {"type": "document", "source": {"type": "file", "file_id": "file_022"}, "title": "Spec"},
    ]
    assert betas == [FILES_BETA, FILES_BETA]
    a = AnthropicAdapter(
        AnthropicConfig(
            name="a",
            url="https://api.anthropic.com/v1",
            protocol="anthropic",
            headers={"anthropic-beta": "other-1"},
        )
    )
    headers = dict(a.prepare(Inbound(b"", lambda: req, "r", "")).headers)
    assert headers["anthropic-beta"] == f"other-1,{FILES_BETA}"


def test_documents_of_each_source_with_title_context_and_citations() -> None:
    req = wire(
        [
            user(
                ContentPart(
                    DOCUMENT,
                    data=PDF,
                    media_type="application/pdf",
                    dialect=ANTHROPIC,
                    title="Report",
                    context="Q3",
                    citations=True,
                ),
                ContentPart(
                    DOCUMENT, text="plain words", media_type="text/plain", dialect=ANTHROPIC
                ),
                ContentPart(DOCUMENT, span=2, dialect=ANTHROPIC, title="Slides"),
                text("page one"),
                ContentPart(IMAGE, url="https://example.com/p2.png", dialect=ANTHROPIC),
                ContentPart(DOCUMENT, url="https://example.com/a.pdf", dialect=ANTHROPIC),
                text("summarise"),
            )
        ]
    )
    assert content(req) == [
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": b64(PDF)},
            "title": "Report",
            "context": "Q3",
            "citations": {"enabled": True},
        },
        {
            "type": "document",
            "source": {"type": "text", "data": "plain words", "media_type": "text/plain"},
        },
        {
            "type": "document",
            "source": {
                "type": "content",
                "content": [
                    {"type": "text", "text": "page one"},
                    {
                        "type": "image",
                        "source": {"type": "url", "url": "https://example.com/p2.png"},
                    },
                ],
            },
            "title": "Slides",
        },
        {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}},
        {"type": "text", "text": "summarise"},
    ]


def test_an_openai_file_s_bytes_are_a_document_titled_by_its_filename() -> None:
    req = wire(
        [
            user(
                ContentPart(
                    FILE, data=PDF, media_type="application/pdf", filename="a.pdf", dialect=CHAT
                ),
                ContentPart(FILE, data=b"col1,col2\n", media_type="text/csv", dialect=CHAT),
                ContentPart(FILE, data=PNG, media_type="image/png", dialect=RESPONSES),
            )
        ]
    )
    assert content(req) == [
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": b64(PDF)},
            "title": "a.pdf",
        },
        {
            "type": "document",
            "source": {"type": "text", "data": "col1,col2\n", "media_type": "text/plain"},
        },
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)},
        },
    ]


def test_a_part_s_messages_extras_are_merged_into_its_block() -> None:
    cache = '{"cache_control":{"type":"ephemeral","ttl":"1h"},"novel":1}'
    req = wire(
        [
            user(
                text("look", extras='{"cache_control":{"type":"ephemeral"}}'),
                ContentPart(
                    IMAGE, data=PNG, media_type="image/png", dialect=ANTHROPIC, extras=cache
                ),
            )
        ]
    )
    assert content(req) == [
        {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)},
            "cache_control": {"type": "ephemeral", "ttl": "1h"},
            "novel": 1,
        },
    ]


def test_extras_never_replace_a_field_the_adapter_writes() -> None:
    bad = ContentPart(IMAGE, url="https://x/a.png", dialect=ANTHROPIC, extras='{"source":{}}')
    with pytest.raises(Untranslatable, match=r"messages\[0\]\.content\[0\]\.extras: 'source'"):
        sent(wire([user(bad)]))


def test_a_tool_result_of_parts_is_a_tool_result_block_holding_them() -> None:
    req = wire(
        [
            msg(Role.User, "take a screenshot"),
            assistant(calls=[("toolu_1", "shot", "{}")]),
            tool(
                "toolu_1",
                text("the screen:"),
                ContentPart(IMAGE, data=PNG, media_type="image/png", dialect=ANTHROPIC),
                failed=True,
            ),
        ]
    )
    assert content(req) == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": [
                {"type": "text", "text": "the screen:"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)},
                },
            ],
            "is_error": True,
        }
    ]


@pytest.mark.parametrize(
    ("part", "what"),
    [
        (
            ContentPart(AUDIO, data=b"RIFF....WAVEfmt ", media_type="audio/wav", dialect=CHAT),
            "audio",
        ),
        (ContentPart(FILE, file_id="file-abc", dialect=CHAT), "a file id of another provider"),
        (
            ContentPart(IMAGE, file_id="file-abc", dialect=RESPONSES),
            "a file id of another provider",
        ),
        (
            ContentPart(FILE, data=b"\x00\x01zip", media_type="application/zip", dialect=CHAT),
            "a file of type 'application/zip'",
        ),
    ],
)
def test_what_anthropic_cannot_take_is_refused_naming_the_part_or_dropped(
    part: ContentPart, what: str
) -> None:
    req = wire([msg(Role.User, "hi"), user(text("listen", CHAT), part)])
    with pytest.raises(PartRefused) as info:
        sent(req)
    assert str(info.value).startswith(f"messages[1].content[1]: {what}"), str(info.value)
    assert info.value.param == "messages[1].content[1]"
    body, omitted, _ = sent(req, drop_unsupported=True)
    assert body["messages"][-1]["content"] == [
        {"type": "text", "text": "hi"},
        {"type": "text", "text": "listen"},
    ]
    assert omitted == ["messages[1].content[1]"]


def test_a_system_or_assistant_message_takes_its_text_parts_only() -> None:
    req = wire(
        [
            (
                int(Role.System),
                b"",
                b"",
                b"",
                (),
                False,
                (),
                [text("be ", CHAT), text("brief", CHAT)],
            ),
            msg(Role.User, "hi"),
        ]
    )
    body, _, _ = sent(req)
    assert body["system"] == [{"type": "text", "text": "be brief"}]
    image = ContentPart(IMAGE, url="https://x/a.png", dialect=CHAT)
    bad = wire([msg(Role.User, "hi"), (int(Role.Assistant), b"", b"", b"", (), False, (), [image])])
    with pytest.raises(PartRefused, match=r"messages\[1\]\.content\[0\]"):
        sent(bad)


def test_another_dialect_s_part_extras_are_judged_as_its_fields() -> None:
    part = ContentPart(
        IMAGE, url="https://x/a.png", dialect=CHAT, extras='{"prompt_cache_key":"k"}'
    )
    _, omitted, _ = sent(wire([user(part)]))
    assert omitted == ["prompt_cache_key"]


# -- the stub reads them back -------------------------------------------------


WIRE = AnthropicWire()


def parse(body: bytes, beta: str = "") -> StubRequest:
    headers = {"anthropic-version": "2023-06-01", "anthropic-beta": beta}
    return WIRE.parse(body, lambda name: headers.get(name) or None)


def test_the_stub_echoes_what_the_adapter_wrote_with_digests() -> None:
    req = wire(
        [
            msg(Role.User, "take a screenshot"),
            assistant(calls=[("toolu_1", "shot", "{}")]),
            tool(
                "toolu_1", ContentPart(IMAGE, data=PNG, media_type="image/png", dialect=ANTHROPIC)
            ),
            user(
                text("compare with"),
                ContentPart(DOCUMENT, data=PDF, media_type="application/pdf", dialect=CHAT),
                ContentPart(IMAGE, file_id="file_9", dialect=ANTHROPIC),
            ),
        ]
    )
    omitted: list[str] = []
    betas: list[str] = []
    body = encode_request(req, model="claude", omitted=omitted, betas=betas)
    got = parse(body, ",".join(betas))
    shot = f"[image image/png {len(PNG)} bytes sha256:{digest(PNG)} 48x16]"
    pdf = f"[document application/pdf {len(PDF)} bytes sha256:{digest(PDF)}]"
    assert got.messages[-2:] == (
        (Role.Tool, shot),
        (Role.User, f"compare with {pdf} [image file_id file_9]"),
    )
    assert got.last_user == f"compare with {pdf} [image file_id file_9]"


def _refused(body: bytes, beta: str = "") -> str:
    with pytest.raises(Rejected) as info:
        parse(body, beta)
    assert info.value.reply.status == 400
    return str(json.loads(info.value.reply.body)["error"]["message"])


def _request(*blocks: dict[str, Any], **top: Any) -> bytes:
    return json.dumps(
        {
            "model": "m",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": list(blocks)}],
            **top,
        }
    ).encode()


def test_the_stub_wants_the_files_beta_for_a_file_source() -> None:
    block = {"type": "image", "source": {"type": "file", "file_id": "file_1"}}
    assert FILES_BETA in _refused(_request(block))
    assert parse(_request(block), FILES_BETA).last_user == "[image file_id file_1]"


def test_the_stub_refuses_bytes_their_declared_type_belies() -> None:
    block = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/gif", "data": b64(PNG)},
    }
    message = _refused(_request(block))
    assert message.startswith("messages.0.content.0.source.data: The image was specified using")


def test_the_stub_takes_a_top_level_cache_control_as_anthropic_does() -> None:
    body = _request({"type": "text", "text": "hi"}, cache_control={"type": "ephemeral"})
    assert parse(body).last_user == "hi"
