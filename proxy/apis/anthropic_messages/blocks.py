"""A Messages request's parts, as msgspec Structs: content blocks (with the
image and document blocks' sources), messages, tools, tool choice, metadata.

The one model of them: the edge decodes a client's request with them
(``request``), the ``anthropic`` backend encodes the body it sends with them
(``backends.anthropic.adapter``), and the stub serves a request decoded with
them (``backends.anthropic.stub_request``). Two switches make one Struct fit
each side:

- **Unknown fields.** The blocks, tools and messages forbid them
  (``forbid_unknown_fields``): the edge must not drop a client's field in
  silence, so a body with one fails its one pass and is read again
  (``request``), its unknown fields taken out for the extras. The stub reads
  past them instead: the same walk with ``read_past`` (``request.decode_served``).
- **Defaults on encoding.** ``omit_defaults`` (which changes no decoding)
  on the blocks and tools the adapter writes: a field left at its default is
  not written (no ``cache_control`` it was not given, no empty ``description``).
  An absent ``msgspec.Raw`` field's default is ``Raw()``, and msgspec omits a
  default by identity: leave such a field unset, never set it to a new empty
  ``Raw()`` (it would be written as nothing). The thinking blocks take no
  ``omit_defaults``: their ``thinking``, ``signature`` and ``data`` are always
  written, even empty, as the API requires.

What a field means, and what the edge refuses of them, is ``request``'s
docstring. Pure: no I/O.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import msgspec

__all__ = [
    "AnyChoice",
    "AutoChoice",
    "Base64Image",
    "Base64Pdf",
    "Block",
    "Choice",
    "CitationsConfig",
    "ContentSource",
    "DocumentBlock",
    "FileSource",
    "ImageBlock",
    "ImageMediaType",
    "Message",
    "MessageRole",
    "Metadata",
    "NoneChoice",
    "RedactedThinkingBlock",
    "TextBlock",
    "TextSource",
    "ThinkingBlock",
    "ToolChoice",
    "ToolDef",
    "ToolResultBlock",
    "ToolUseBlock",
    "UrlSource",
]


class TextBlock(
    msgspec.Struct,
    tag_field="type",
    tag="text",
    forbid_unknown_fields=True,
    omit_defaults=True,
    gc=False,
):
    text: str
    # A prompt-cache breakpoint, as the client wrote it (empty: none).
    cache_control: msgspec.Raw = msgspec.Raw()
    # Where the text came from (a previous answer's citations), as written
    # (empty or null: none). The adapter never writes it: a client's
    # citations reach a backend as a ``$blocks`` field.
    citations: msgspec.Raw = msgspec.Raw()


# Image and document sources (``parts`` turns them into ``ContentPart``s).
# No ``omit_defaults``: every field of a source is written, as the API wants.
# ``data`` typed ``bytes``: msgspec decodes the base64 as it parses (strict:
# padded, no whitespace), so it is decoded once, at the edge, and encoded
# again only by the ``anthropic`` adapter.
ImageMediaType: TypeAlias = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]


class Base64Image(
    msgspec.Struct, tag_field="type", tag="base64", forbid_unknown_fields=True, gc=False
):
    media_type: ImageMediaType
    data: bytes


class Base64Pdf(
    msgspec.Struct, tag_field="type", tag="base64", forbid_unknown_fields=True, gc=False
):
    media_type: Literal["application/pdf"]
    data: bytes


class TextSource(
    msgspec.Struct, tag_field="type", tag="text", forbid_unknown_fields=True, gc=False
):
    data: str
    media_type: Literal["text/plain"] = "text/plain"


class UrlSource(msgspec.Struct, tag_field="type", tag="url", forbid_unknown_fields=True, gc=False):
    url: str


class FileSource(
    msgspec.Struct, tag_field="type", tag="file", forbid_unknown_fields=True, gc=False
):
    # An id of Anthropic's Files API (the ``files-api-2025-04-14`` beta).
    file_id: str


class ImageBlock(
    msgspec.Struct,
    tag_field="type",
    tag="image",
    forbid_unknown_fields=True,
    omit_defaults=True,
    gc=False,
):
    source: Base64Image | UrlSource | FileSource
    cache_control: msgspec.Raw = msgspec.Raw()


class ContentSource(
    msgspec.Struct, tag_field="type", tag="content", forbid_unknown_fields=True, gc=False
):
    # A document made of blocks (a string: one text block).
    content: str | list[TextBlock | ImageBlock]


class CitationsConfig(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    enabled: bool | None = None


class DocumentBlock(
    msgspec.Struct,
    tag_field="type",
    tag="document",
    forbid_unknown_fields=True,
    omit_defaults=True,
    gc=False,
):
    source: Base64Pdf | TextSource | ContentSource | UrlSource | FileSource
    title: str | None = None
    context: str | None = None
    citations: CitationsConfig | None = None
    cache_control: msgspec.Raw = msgspec.Raw()


class ToolUseBlock(
    msgspec.Struct,
    tag_field="type",
    tag="tool_use",
    forbid_unknown_fields=True,
    omit_defaults=True,
    gc=False,
):
    id: str
    name: str
    # Kept as the caller's JSON text: it travels as the call's arguments.
    input: msgspec.Raw
    cache_control: msgspec.Raw = msgspec.Raw()


class ToolResultBlock(
    msgspec.Struct,
    tag_field="type",
    tag="tool_result",
    forbid_unknown_fields=True,
    omit_defaults=True,
    gc=False,
):
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock | DocumentBlock] | None = None
    is_error: bool | None = None
    cache_control: msgspec.Raw = msgspec.Raw()


class ThinkingBlock(
    msgspec.Struct, tag_field="type", tag="thinking", forbid_unknown_fields=True, gc=False
):
    thinking: str = ""
    # Anthropic's signature over the thinking, sent back as it came.
    signature: str = ""


class RedactedThinkingBlock(
    msgspec.Struct,
    tag_field="type",
    tag="redacted_thinking",
    forbid_unknown_fields=True,
    gc=False,
):
    data: str = ""


Block: TypeAlias = (
    TextBlock
    | ImageBlock
    | DocumentBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
)
# "system": a system message mid-conversation (the
# ``mid-conversation-system-2026-04-07`` beta), kept at its position.
MessageRole: TypeAlias = Literal["user", "assistant", "system"]


class Message(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    role: MessageRole
    content: str | list[Block]
    # A system message's per-message effort (``{"effort": ...}``: the
    # ``mid-conversation-output-config-2026-07-01`` beta; Claude Code's
    # ``per-turn-control-2026-07-01``), as written; ``effort`` reads it.
    output_config: msgspec.Raw = msgspec.Raw()


class ToolDef(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    name: str
    description: str | None = None
    # Kept as the caller's JSON text (empty: absent, a server tool's).
    input_schema: msgspec.Raw = msgspec.Raw()
    # Absent or "custom" for a client tool; a server tool names its version.
    type: str | None = None
    strict: bool | None = None
    cache_control: msgspec.Raw = msgspec.Raw()


class AutoChoice(msgspec.Struct, tag_field="type", tag="auto", omit_defaults=True, gc=False):
    disable_parallel_tool_use: bool | None = None


class AnyChoice(msgspec.Struct, tag_field="type", tag="any", omit_defaults=True, gc=False):
    disable_parallel_tool_use: bool | None = None


class ToolChoice(msgspec.Struct, tag_field="type", tag="tool", omit_defaults=True, gc=False):
    name: str
    disable_parallel_tool_use: bool | None = None


class NoneChoice(msgspec.Struct, tag_field="type", tag="none", gc=False):
    pass


Choice: TypeAlias = AutoChoice | AnyChoice | ToolChoice | NoneChoice


class Metadata(msgspec.Struct, gc=False):
    user_id: str | None = None
