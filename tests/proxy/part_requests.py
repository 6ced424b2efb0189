"""Requests with content parts for the wire tests: written by flatgate's
writer (``request``), or by hand with offsets shared (``shared_parts``), and
pillow's images (``picture``)."""

from __future__ import annotations

import io
import struct
from collections.abc import Sequence

import flatbuffers
from PIL import Image

from flatgate.generated.LLMGateway import CompletionRequest as fb_request
from flatgate.generated.LLMGateway import ContentPart as fb_part
from flatgate.generated.LLMGateway import Message as fb_message
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.request.verify import verify_request
from flatgate.proxy.wire.request.writer import RequestWriter
from flatgate.proxy.wire.schema import REQUEST_IDENTIFIER, ApiDialect, PartKind, Role

__all__ = ["HUGE_HEADER", "picture", "request", "shared_parts"]

ANTHROPIC = int(ApiDialect.ANTHROPIC_MESSAGES)


def picture(fmt: str, width: int, height: int, **options: bool) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, fmt, **options)
    return out.getvalue()


def request(*messages: Sequence[ContentPart], checked: bool = True) -> bytes:
    """A request of one user message per list of parts (verified unless
    ``checked`` is false)."""
    w = RequestWriter()
    w.strings(
        request_id="",
        model_name="m",
        tenant="",
        user="",
        tool_choice_name="",
        response_format=b"",
    )
    w.messages([(int(Role.User), b"", b"", b"", (), False, (), parts) for parts in messages])
    body = w.finish(provider=0)
    if checked:
        verify_request(body)
    return body


def shared_parts(refs: int, data: bytes) -> bytes:
    """One user message whose ``refs`` parts are all one image part."""
    b = flatbuffers.Builder(len(data) + 4 * refs + 256)
    vec = b.CreateByteVector(data)
    fb_part.Start(b)
    fb_part.AddKind(b, int(PartKind.IMAGE))
    fb_part.AddData(b, vec)
    fb_part.AddDialect(b, ANTHROPIC)
    part = fb_part.End(b)
    b.StartVector(4, refs, 4)
    for _ in range(refs):
        b.PrependUOffsetTRelative(part)
    parts = b.EndVector()
    fb_message.Start(b)
    fb_message.AddRole(b, int(Role.User))
    fb_message.AddParts(b, parts)
    message = fb_message.End(b)
    b.StartVector(4, 1, 4)
    b.PrependUOffsetTRelative(message)
    messages = b.EndVector()
    model = b.CreateString("m")
    fb_request.Start(b)
    fb_request.AddModelName(b, model)
    fb_request.AddMessages(b, messages)
    b.Finish(fb_request.End(b), REQUEST_IDENTIFIER)
    return bytes(memoryview(b.Bytes)[b.Head() :])


# A PNG's signature and IHDR chunk that say 10,000 px square: 24 bytes.
HUGE_HEADER = b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sII", 13, b"IHDR", 10_000, 10_000)
