"""A Converse message's content blocks, as msgspec Structs: text, image,
document, audio, tool use and result, reasoning, cache points, and the
messages and system blocks that hold them.

The one model of them (the service model of ``bedrock-runtime``, shapes
``ContentBlock``, ``SystemContentBlock``, ``Message``): the ``bedrock``
backend writes its request with them (``backends.bedrock.converse``) and
reads its answer's message with them (``answer``), and the stub reads a
request with them (``backends.bedrock.converse_stub``).

Converse spells its fields in camelCase (``rename="camel"``: ``tool_use_id``
is ``toolUseId``) and its unions as an object with exactly one member set:
each union is a Struct whose members all default to ``None``, written with
``omit_defaults`` so only the one set goes out. A blob (an image's or a
document's ``bytes``, ``redactedContent``) is ``bytes``, which msgspec writes
and reads as base64, as the service's JSON protocol has it; the Python field
is ``data`` (``bytes`` would shadow the type in the class body). A
``Document`` (a tool's input, a JSON tool result) is ``msgspec.Raw``: its
JSON as written. Decoding ignores fields this model does not know (a newer
service's), and, as a server's answer must be, is lenient about what is
absent. Pure: no I/O.
"""

from __future__ import annotations

import msgspec

__all__ = [
    "AUDIO_FORMATS",
    "DOCUMENT_FORMATS",
    "IMAGE_FORMATS",
    "AudioBlock",
    "CachePoint",
    "CitationsConfig",
    "ContentBlock",
    "DocumentBlock",
    "DocumentSource",
    "DocumentText",
    "ImageBlock",
    "MediaSource",
    "Message",
    "ReasoningContent",
    "ReasoningText",
    "S3Location",
    "SystemBlock",
    "ToolResultBlock",
    "ToolResultContent",
    "ToolUseBlock",
]

# The formats the service model allows (``ImageFormat``, ``DocumentFormat``,
# ``AudioFormat``).
IMAGE_FORMATS = frozenset({"png", "jpeg", "gif", "webp"})
DOCUMENT_FORMATS = frozenset({"pdf", "csv", "doc", "docx", "xls", "xlsx", "html", "txt", "md"})
AUDIO_FORMATS = frozenset(
    {
        "mp3",
        "opus",
        "wav",
        "aac",
        "flac",
        "mp4",
        "ogg",
        "mkv",
        "mka",
        "x-aac",
        "m4a",
        "mpeg",
        "mpga",
        "pcm",
        "webm",
    }
)


class _Shape(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """Converse's conventions: camelCase names, absent members not written."""


class S3Location(_Shape):
    uri: str
    bucket_owner: str | None = None


class MediaSource(_Shape):
    """An image's, audio's or video's source: its bytes or an S3 object."""

    data: bytes | None = msgspec.field(default=None, name="bytes")
    s3_location: S3Location | None = None


class ImageBlock(_Shape):
    format: str
    source: MediaSource


class AudioBlock(_Shape):
    format: str
    source: MediaSource


class DocumentText(_Shape):
    text: str


class DocumentSource(_Shape):
    data: bytes | None = msgspec.field(default=None, name="bytes")
    s3_location: S3Location | None = None
    text: str | None = None
    content: list[DocumentText] | None = None


class CitationsConfig(_Shape):
    enabled: bool


class DocumentBlock(_Shape):
    name: str
    source: DocumentSource
    format: str | None = None
    context: str | None = None
    citations: CitationsConfig | None = None


class ToolUseBlock(_Shape):
    tool_use_id: str
    name: str
    input: msgspec.Raw
    type: str | None = None


class ToolResultContent(_Shape):
    json: msgspec.Raw = msgspec.Raw()
    text: str | None = None
    image: ImageBlock | None = None
    document: DocumentBlock | None = None


class ToolResultBlock(_Shape):
    tool_use_id: str
    content: list[ToolResultContent]
    status: str | None = None


class ReasoningText(_Shape):
    text: str
    signature: str | None = None


class ReasoningContent(_Shape):
    reasoning_text: ReasoningText | None = None
    redacted_content: bytes | None = None


class CachePoint(_Shape):
    type: str
    ttl: str | None = None


class ContentBlock(_Shape):
    """One block of a message (a union: exactly one member is set)."""

    text: str | None = None
    image: ImageBlock | None = None
    document: DocumentBlock | None = None
    audio: AudioBlock | None = None
    tool_use: ToolUseBlock | None = None
    tool_result: ToolResultBlock | None = None
    reasoning_content: ReasoningContent | None = None
    cache_point: CachePoint | None = None
    # Read, never written: the answer's citations and guardrail blocks.
    citations_content: msgspec.Raw = msgspec.Raw()
    guard_content: msgspec.Raw = msgspec.Raw()


class SystemBlock(_Shape):
    text: str | None = None
    cache_point: CachePoint | None = None
    guard_content: msgspec.Raw = msgspec.Raw()


class Message(_Shape):
    role: str
    content: list[ContentBlock]
