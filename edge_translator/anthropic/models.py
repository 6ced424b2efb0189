"""The Anthropic Messages request, as msgspec Structs, and its one decoder.

Owns what ``POST /v1/messages`` (and ``/v1/messages/count_tokens``) accept:
``model``, ``max_tokens`` (required, as Anthropic requires), ``system`` (a
string or text blocks), ``messages`` whose content is a string or blocks
(``text``, ``tool_use``, ``tool_result`` with a string or text blocks and
``is_error``), ``tools`` (``name``, ``description``, ``input_schema``),
``tool_choice`` (``auto``, ``any``, ``tool``, ``none``, with
``disable_parallel_tool_use``), ``stop_sequences``, ``temperature``,
``top_p``, ``top_k``, ``metadata.user_id`` and ``stream``.

Unknown fields are ignored (``cache_control`` markers among them: accepted,
not carried), and so are ``thinking`` and ``redacted_thinking`` blocks (an
assistant turn's history; dropped on the way to the wire). Image and
document blocks, server tools and other block types are refused with a 400
that names them: the wire schema carries text, and silently dropping an image
would change what the model is asked (``translate`` raises those, and the
other per-block refusals, as it walks the blocks: one pass). Failures are
``InvalidRequest``s whose message names the field the way Anthropic does
(``messages.0.content.1.type: ...``); a body nested too deeply, or with text
that is not UTF-8 (``edge_translator.decoding``), is ``invalid_json``. Pure:
no I/O; the decoders are built once at import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal, TypeAlias, TypeVar

import msgspec

from flatgate.edge_translator.decoding import (
    UNDECODABLE,
    is_utf8,
    validation_text,
    why_undecodable,
)
from flatgate.edge_translator.errors import InvalidRequest, shown
from flatgate.proxy.plumbing.validation import read_validation
from flatgate.proxy.wire import codes

__all__ = [
    "AnyChoice",
    "AutoChoice",
    "Block",
    "CountTokensRequest",
    "DocumentBlock",
    "ImageBlock",
    "Message",
    "MessagesRequest",
    "Metadata",
    "NoneChoice",
    "RedactedThinkingBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolChoice",
    "ToolDef",
    "ToolResultBlock",
    "ToolUseBlock",
    "decode_count_tokens",
    "decode_messages",
    "misplaced",
    "not_an_object",
    "not_utf8",
    "unsupported",
]


class TextBlock(msgspec.Struct, tag_field="type", tag="text", gc=False):
    text: str


class ImageBlock(msgspec.Struct, tag_field="type", tag="image", gc=False):
    source: msgspec.Raw = msgspec.Raw()


class DocumentBlock(msgspec.Struct, tag_field="type", tag="document", gc=False):
    source: msgspec.Raw = msgspec.Raw()


class ToolUseBlock(msgspec.Struct, tag_field="type", tag="tool_use", gc=False):
    id: str
    name: str
    # Kept as the caller's JSON text: it travels as the call's arguments.
    input: msgspec.Raw


class ToolResultBlock(msgspec.Struct, tag_field="type", tag="tool_result", gc=False):
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock | DocumentBlock] | None = None
    is_error: bool | None = None


class ThinkingBlock(msgspec.Struct, tag_field="type", tag="thinking", gc=False):
    thinking: str = ""


class RedactedThinkingBlock(msgspec.Struct, tag_field="type", tag="redacted_thinking", gc=False):
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


class Message(msgspec.Struct, gc=False):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class ToolDef(msgspec.Struct, gc=False):
    name: str
    description: str | None = None
    # Kept as the caller's JSON text (empty: absent, a server tool's).
    input_schema: msgspec.Raw = msgspec.Raw()
    # Absent or "custom" for a client tool; a server tool names its version.
    type: str | None = None
    strict: bool | None = None


class AutoChoice(msgspec.Struct, tag_field="type", tag="auto", gc=False):
    disable_parallel_tool_use: bool | None = None


class AnyChoice(msgspec.Struct, tag_field="type", tag="any", gc=False):
    disable_parallel_tool_use: bool | None = None


class ToolChoice(msgspec.Struct, tag_field="type", tag="tool", gc=False):
    name: str
    disable_parallel_tool_use: bool | None = None


class NoneChoice(msgspec.Struct, tag_field="type", tag="none", gc=False):
    pass


class Metadata(msgspec.Struct, gc=False):
    user_id: str | None = None


_Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
_Int32 = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]


class CountTokensRequest(msgspec.Struct, gc=False):
    """``POST /v1/messages/count_tokens``: what the prompt is."""

    model: str
    messages: Annotated[list[Message], msgspec.Meta(min_length=1)]
    system: str | list[TextBlock] | None = None
    tools: list[ToolDef] | None = None
    tool_choice: AutoChoice | AnyChoice | ToolChoice | NoneChoice | None = None


class MessagesRequest(CountTokensRequest, kw_only=True):
    """``POST /v1/messages`` as far as flatgate carries it."""

    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]
    stop_sequences: list[str] | None = None
    temperature: _Unit | None = None
    top_p: _Unit | None = None
    top_k: _Int32 | None = None
    metadata: Metadata | None = None
    stream: bool | None = None


_decode_messages = msgspec.json.Decoder(MessagesRequest).decode
_decode_count = msgspec.json.Decoder(CountTokensRequest).decode

_CARRIED = "text, tool_use, tool_result (thinking and redacted_thinking are dropped)"


def _where(message: str) -> tuple[str, str]:
    """(Anthropic's path, msgspec's reason) of a validation message:
    ``$.messages[0].role`` is ``messages.0.role``."""
    v = read_validation(message)
    path = v.where(index=".{}", value="", field=v.missing)
    return path, "Field required" if v.missing else v.reason


def _invalid(exc: msgspec.ValidationError) -> InvalidRequest:
    path, reason = _where(validation_text(exc))
    if path.endswith(".type") and reason.startswith("Invalid value"):
        reason += f": flatgate carries content blocks of type {_CARRIED}"
    elif path.endswith(".role") and "'system'" in reason:
        reason += ": a system prompt is the top-level `system` field"
    return InvalidRequest(f"{path}: {reason}" if path else reason, param=path or None)


def unsupported(block: msgspec.Struct, where: str) -> InvalidRequest:
    """The 400 for a content block the wire cannot carry (an image, a document)."""
    kind = type(block).__struct_config__.tag
    return InvalidRequest(
        f"{where}: content blocks of type '{kind}' are not supported: flatgate carries text, "
        "tool_use and tool_result blocks.",
        param=where,
        code=codes.UNSUPPORTED_CONTENT_TYPE,
    )


def misplaced(block: msgspec.Struct, where: str) -> InvalidRequest:
    """The 400 for a tool_use block from the user, or a tool_result from the assistant."""
    if type(block) is ToolUseBlock:
        return InvalidRequest(
            f"{where}: tool_use blocks are only allowed in assistant messages", param=where
        )
    return InvalidRequest(
        f"{where}: tool_result blocks are only allowed in user messages", param=where
    )


def not_an_object(where: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: Input should be an object", param=where)


def not_utf8(where: str) -> InvalidRequest:
    """The 400 for JSON kept as written (an ``input_schema``, a ``tool_use``
    input) whose bytes are not UTF-8."""
    return InvalidRequest(
        f"{where}: a string in it is not valid UTF-8", param=where, code=codes.INVALID_JSON
    )


def _check_tools(req: CountTokensRequest) -> None:
    names = set()
    for i, tool in enumerate(req.tools or ()):
        if tool.type not in (None, "custom"):
            raise InvalidRequest(
                f"tools.{i}.type: tools of type '{shown(tool.type)}' (server tools) are not "
                "supported: flatgate carries client tools with an input_schema.",
                param=f"tools.{i}.type",
            )
        schema = bytes(tool.input_schema)
        if not schema:
            where = f"tools.{i}.input_schema"
            raise InvalidRequest(f"{where}: Field required", param=where)
        if not schema.lstrip().startswith(b"{"):
            raise not_an_object(f"tools.{i}.input_schema")
        if not is_utf8(schema):
            raise not_utf8(f"tools.{i}.input_schema")
        names.add(tool.name)
    choice = req.tool_choice
    if isinstance(choice, AnyChoice | ToolChoice) and not req.tools:
        raise InvalidRequest(
            "tool_choice: may only be specified while providing tools", param="tool_choice"
        )
    if isinstance(choice, ToolChoice) and choice.name not in names:
        raise InvalidRequest(
            f"tool_choice.name: tool '{shown(choice.name)}' not found in tools",
            param="tool_choice.name",
        )


def _not_json(why: str) -> InvalidRequest:
    return InvalidRequest(
        f"There was an issue with the request body: it is not valid JSON ({why}).",
        code=codes.INVALID_JSON,
    )


R = TypeVar("R", bound="CountTokensRequest")


def _decoded(decode: Callable[[bytes | memoryview], R], body: bytes | memoryview) -> R:
    """``decode(body)``, checked; every failure is an ``InvalidRequest``."""
    try:
        req = decode(body)
    except msgspec.ValidationError as exc:
        raise _invalid(exc) from exc
    except msgspec.DecodeError as exc:
        raise _not_json(str(exc)) from exc
    except UNDECODABLE as exc:
        raise _not_json(why_undecodable(exc)) from None
    _check_tools(req)
    return req


def decode_messages(body: bytes | memoryview) -> MessagesRequest:
    """Decode and check a ``/v1/messages`` body; every failure is an ``InvalidRequest``."""
    return _decoded(_decode_messages, body)


def decode_count_tokens(body: bytes | memoryview) -> CountTokensRequest:
    """Decode and check a ``/v1/messages/count_tokens`` body (no ``max_tokens``)."""
    return _decoded(_decode_count, body)
