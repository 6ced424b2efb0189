"""The Anthropic Messages request as the stub validates it.

The body is decoded with the one model of the request (``request.decode_served``:
the edge's Structs, which the ``anthropic`` adapter writes the body with),
in the stub's own lenient way: a tool's, a block's and a message's fields it
does not know are read past, as Anthropic takes the fields it documents
there. Anthropic refuses unknown top-level fields ("Extra inputs are not
permitted"), and so does the stub: it takes those the model knows but
``thread`` (``NOT_TAKEN``), and two the model does not
(``ALSO_TAKEN``, which the edge carries as unknown fields). msgspec's errors
are worded as Anthropic words them (``_invalid``). ``to_stub_request`` then
checks the rules a type cannot say (roles are ``user`` and ``assistant``,
and ``system`` only as below, non-empty text, ``tool_use`` only from the
assistant, ``tool_result`` only from the user, objects where Anthropic wants
one, a forced tool that exists) and reads out a ``StubRequest`` (its custom
tools as the tools offered, none with ``tool_choice`` ``none``). Every
failure is an ``Invalid`` whose message names the field the way Anthropic
does (``messages.0.role: ...``).

Roles and texts: ``system`` (top-level, a string or text blocks) is a system
message; a message's text blocks are joined; each ``tool_result`` is a tool
message (its string or text blocks), so the echo's "last user message" is the
last user message that has text. A user message (or a ``tool_result``) with
an ``image`` or a ``document`` block is read into content parts
(``apis.anthropic_messages.parts``, as the edge reads them: bytes held to
their declared type) and its text is ``dialect.described(parts)``: each text
as it is, each other part described with its byte count and digest, so the
echo shows that the bytes arrived intact; a user turn of tool results only,
one of which holds an image or a document, is also that turn's user text
(the results described, joined), so that the echo, which answers the last
user text, shows them too. A ``file`` source is taken only
when the request's ``anthropic-beta`` names the Files API beta
(``parts.FILES_BETA``), as Anthropic requires.

- A ``{"role": "system"}`` message inside ``messages`` is taken only when the
  request's ``anthropic-beta`` names a ``mid-conversation-system-...`` beta
  (``extras.MID_SYSTEM_BETA``), where Anthropic's placement rules allow it
  (not first, right after a user message, not next to another system
  message); otherwise it is refused in Anthropic's words (``Unexpected role
  "system"...``), which clients such as Claude Code read to retry without it.
- An assistant's ``thinking`` block must carry a signature the stub made
  (``signature``: bound to the block's text), a ``redacted_thinking`` block
  the stub's data (``REDACTED_DATA``); anything else is refused as Anthropic
  refuses a forged one (``Invalid `signature` in `thinking` block``).
- ``thinking`` (``enabled`` or ``adaptive``) is kept in ``StubRequest.params``
  for the answer (``stub``), which then thinks first.

No I/O.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Sequence
from typing import TypeVar

import msgspec

from flatgate.proxy.apis.anthropic_messages.blocks import (
    AnyChoice,
    DocumentBlock,
    FileSource,
    ImageBlock,
    Message,
    NoneChoice,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolChoice,
    ToolResultBlock,
    ToolUseBlock,
)
from flatgate.proxy.apis.anthropic_messages.extras import mid_system, split_betas
from flatgate.proxy.apis.anthropic_messages.parts import MEDIA, block_parts
from flatgate.proxy.apis.anthropic_messages.request import MessagesRequest, decode_served
from flatgate.proxy.apis.errors import InvalidRequest
from flatgate.proxy.backends.anthropic.parts import FILES_BETA
from flatgate.proxy.backends.dialect import OfferedTool, StubRequest, described, split_model
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.validation import Validation, read_validation
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.schema import Role

__all__ = [
    "ALSO_TAKEN",
    "NOT_TAKEN",
    "REDACTED_DATA",
    "REDACTED_TRIGGER",
    "Invalid",
    "decode_messages_request",
    "signature",
    "to_stub_request",
]

# Top-level fields the stub takes that the model does not know (the edge
# carries them as unknown fields), and those it knows that the stub refuses.
ALSO_TAKEN = frozenset({"output_format", "inference_geo"})
NOT_TAKEN = ("thread",)
# Anthropic's documented test prompt that makes the model's thinking redacted.
REDACTED_TRIGGER = "ANTHROPIC_MAGIC_STRING_TRIGGER_REDACTED_THINKING"
_FAKE = b"flatgate-stub:"
# The data of the stub's redacted_thinking block (a fake it checks).
REDACTED_DATA = base64.b64encode(_FAKE + b"redacted").decode()
_UNEXPECTED_SYSTEM = (
    'messages: Unexpected role "system". The Messages API accepts a top-level `system` '
    'parameter, not "system" as an input message role.'
)
_BLOCKS = (
    "'text', 'image', 'document', 'tool_use', 'tool_result', 'thinking' and 'redacted_thinking'"
)
# msgspec's words for a bound ("Expected `int` >= 1"), and a quoted value.
_BOUND = re.compile(r"Expected `(?:int|float)` (>=|<=) (\S+)$")
_QUOTED = re.compile(r"'(.*)'$")
# Values kept as written that Anthropic reads as one type (the stub's checks).
_decode_object = msgspec.json.Decoder(dict[str, object] | None).decode
_decode_text = msgspec.json.Decoder(str | None).decode
_T = TypeVar("_T")


def signature(thinking: str) -> str:
    """The stub's signature of a thinking block's text: a deterministic fake,
    which it checks when the block comes back."""
    digest = hashlib.sha256(thinking.encode()).digest()[:24]
    return base64.b64encode(_FAKE + digest).decode()


class Invalid(FlatgateError, ValueError):
    """A request Anthropic would refuse with a 400 ``invalid_request_error``."""

    default = codes.INVALID_REQUEST


def _bound(op: str, number: str) -> str:
    n = float(number)
    shown = str(int(n)) if n.is_integer() else f"{n:g}"
    return f"Input should be {'greater' if op == '>=' else 'less'} than or equal to {shown}"


def _worded(v: Validation, where: str) -> str:
    """msgspec's reason for ``where`` in Anthropic's words (or the stub's,
    for a block type it does not take)."""
    reason = v.reason
    bound = _BOUND.match(reason)
    if bound:
        return _bound(*bound.groups())
    quoted = _QUOTED.search(reason)
    value = quoted.group(1) if quoted else ""
    if reason.startswith("Invalid enum value") and v.path[-1:] == ("role",):
        return "Input should be 'user' or 'assistant'"
    if not reason.startswith("Invalid value") or v.path[-1:] != ("type",):
        return reason
    if where == "tool_choice.type":
        return (
            f"Input tag {value!r} does not match any of the expected tags: "
            "'auto', 'any', 'tool', 'none'"
        )
    if v.path[0] == "messages" and len(v.path) == 5:  # messages.i.content.j.type
        return f"the stub accepts {_BLOCKS} blocks, not {value!r}"
    if v.path[0] == "messages" and len(v.path) == 7:  # in a tool_result's content
        return f"the stub accepts 'text', 'image' and 'document' blocks here, not {value!r}"
    return f"the stub accepts only 'text' blocks here, not {value!r}"


def _invalid(exc: msgspec.ValidationError) -> Invalid:
    # msgspec's $.messages[0].role is Anthropic's messages.0.role.
    v = read_validation(str(exc))
    if v.missing:
        return Invalid(f"{v.where(index='.{}', field=v.missing)}: Field required")
    if v.unknown:
        return Invalid(f"{v.where(index='.{}', field=v.unknown)}: Extra inputs are not permitted")
    where = v.where(index=".{}")
    if where == "messages" and v.reason.startswith("Expected `array` of length >= 1"):
        return Invalid("messages: at least one message is required")
    reason = _worded(v, where)
    return Invalid(f"{where}: {reason}" if where else f"Invalid request body: {reason}")


def _extra(name: str) -> Invalid:
    return Invalid(f"{name}: Extra inputs are not permitted")


def decode_messages_request(body: bytes) -> MessagesRequest:
    """The body as a ``MessagesRequest``; raises ``Invalid`` naming the field."""
    try:
        req, unknown = decode_served(body)
    except msgspec.ValidationError as exc:
        raise _invalid(exc) from None
    except msgspec.DecodeError:
        raise Invalid("There was an issue with the request body: it is not valid JSON.") from None
    for name in unknown:
        if name not in ALSO_TAKEN:
            raise _extra(name)
    for name in NOT_TAKEN:
        if getattr(req, name):
            raise _extra(name)
    return req


def _as(raw: msgspec.Raw, where: str, decode: Callable[[msgspec.Raw], _T]) -> _T | None:
    """A value kept as written, read as the type Anthropic wants there
    (``None``: absent or null)."""
    if not raw:
        return None
    try:
        return decode(raw)
    except msgspec.ValidationError as exc:
        raise Invalid(f"{where}: {exc}") from None


def _tag(block: msgspec.Struct) -> str:
    return str(block.__struct_config__.tag)


def _described(blocks: Sequence[msgspec.Struct], where: str, files: bool) -> str:
    """Text, image and document blocks as the echo's text (``described``)."""
    parts: list[ContentPart] = []
    for j, b in enumerate(blocks):
        at = f"{where}.{j}"
        if isinstance(b, TextBlock):
            _non_empty(b.text, at)
        elif (
            isinstance(b, ImageBlock | DocumentBlock)
            and isinstance(b.source, FileSource)
            and not files
        ):
            raise Invalid(
                f"{at}.source: file sources need the anthropic-beta header {FILES_BETA!r}"
            )
        try:
            block_parts(b, at, parts)  # type: ignore[arg-type]
        except InvalidRequest as exc:
            raise Invalid(exc.message) from None
    return described(parts)


def _text_of(blocks: Sequence[msgspec.Struct], where: str) -> str:
    out = []
    for j, b in enumerate(blocks):
        if not isinstance(b, TextBlock):
            raise Invalid(
                f"{where}.{j}.type: the stub accepts only 'text' blocks here, not {_tag(b)!r}"
            )
        out.append(_non_empty(b.text, f"{where}.{j}"))
    return "".join(out)


def _non_empty(text: str, where: str) -> str:
    top = where.split(".", 1)[0]
    if not text:
        raise Invalid(f"{top}: text content blocks must be non-empty")
    if not text.strip():
        raise Invalid(f"{top}: text content blocks must contain non-whitespace text")
    return text


def _system_message(i: int, m: Message, before: str | None, after: str | None) -> str:
    """The text of an in-place system message, checked where Anthropic checks it."""
    where = f"messages.{i}"
    if before is None:
        raise Invalid(
            f"{where}: a system message cannot be the first message; use the top-level "
            "`system` parameter"
        )
    if "system" in (before, after):
        raise Invalid(f"{where}: consecutive system messages are not allowed")
    if before != "user":
        raise Invalid(f"{where}: a system message must immediately follow a user message")
    if after not in (None, "assistant"):
        raise Invalid(f"{where}: a system message must be last or be followed by an assistant turn")
    if isinstance(m.content, str):
        return _non_empty(m.content, where)
    texts = []
    for j, b in enumerate(m.content):
        if not isinstance(b, TextBlock):
            raise Invalid(f"{where}.content.{j}.type: system messages take text blocks only")
        texts.append(_non_empty(b.text, f"{where}.content.{j}"))
    return "".join(texts)


def _thought(at: str, b: ThinkingBlock | RedactedThinkingBlock) -> None:
    if isinstance(b, ThinkingBlock):
        if not b.signature:
            raise Invalid(f"{at}.signature: Field required")
        if b.signature != signature(b.thinking):
            raise Invalid(f"{at}: Invalid `signature` in `thinking` block")
    elif b.data != REDACTED_DATA:
        raise Invalid(f"{at}: Invalid `data` in `redacted_thinking` block")


def _message(i: int, m: Message, last: bool, out: list[tuple[int, str]], files: bool) -> None:
    where = f"messages.{i}"
    role = Role.User if m.role == "user" else Role.Assistant
    if not m.content and not (last and m.role == "assistant"):
        raise Invalid(
            f"{where}: all messages must have non-empty content except for the optional "
            "final assistant message"
        )
    if isinstance(m.content, str):
        out.append((role, m.content))
        return
    texts = []
    media: list[msgspec.Struct] = []  # the text, image and document blocks, with media
    shown: list[str] = []  # the tool results holding media, described
    for j, b in enumerate(m.content):
        at = f"{where}.content.{j}"
        if isinstance(b, TextBlock):
            texts.append(_non_empty(b.text, at))
            media.append(b)
        elif isinstance(b, MEDIA):
            if m.role != "user":
                raise Invalid(f"{at}: {_tag(b)} blocks are only allowed in user messages")
            media.append(b)
        elif isinstance(b, ToolUseBlock):
            if m.role != "assistant":
                raise Invalid(f"{at}: tool_use blocks are only allowed in assistant messages")
            if _as(b.input, f"{at}.input", _decode_object) is None:
                raise Invalid(f"{at}.input: Field required")
        elif isinstance(b, ToolResultBlock):
            if m.role != "user":
                raise Invalid(f"{at}: tool_result blocks are only allowed in user messages")
            if not b.tool_use_id:
                raise Invalid(f"{at}.tool_use_id: Field required")
            content = b.content or ""
            if isinstance(content, str):
                text = content
            elif any(isinstance(c, MEDIA) for c in content):
                text = _described(content, f"{at}.content", files)
                shown.append(text)
            else:
                text = _text_of(content, f"{at}.content")
            out.append((Role.Tool, text))
        elif isinstance(b, ThinkingBlock | RedactedThinkingBlock):
            if m.role != "assistant":
                raise Invalid(f"{at}: {_tag(b)} blocks are only allowed in assistant messages")
            _thought(at, b)
        else:
            raise Invalid(f"{at}.type: the stub accepts {_BLOCKS} blocks, not {_tag(b)!r}")
    if len(media) > len(texts):
        out.append((role, _described(media, f"{where}.content", files)))
    elif shown and not texts:  # what a vision model answers about: the results' media
        out.append((role, " ".join(shown)))
    elif texts:
        out.append((role, "".join(texts)))


def _forced_tool(r: MessagesRequest) -> str:
    choice = r.tool_choice
    if isinstance(choice, AnyChoice | ToolChoice) and not r.tools:
        raise Invalid("tool_choice: may only be specified while providing tools")
    if not isinstance(choice, ToolChoice):
        return ""
    if not choice.name:
        raise Invalid("tool_choice.name: Field required")
    if choice.name not in {t.name for t in r.tools or ()}:
        raise Invalid(f"tool_choice.name: tool {choice.name!r} not found in tools")
    return choice.name


def _offered(r: MessagesRequest) -> tuple[OfferedTool, ...]:
    """The custom tools the model may call (none with ``tool_choice`` none;
    server tools are Anthropic's to run)."""
    if isinstance(r.tool_choice, NoneChoice):
        return ()
    return tuple(
        OfferedTool(t.name, bytes(t.input_schema).decode())
        for t in r.tools or ()
        if t.type in (None, "custom")
    )


def to_stub_request(r: MessagesRequest, request_id: str, betas: str = "") -> StubRequest:
    """Check what the types cannot say, and read out the ``StubRequest``
    (``betas``: the request's ``anthropic-beta`` header)."""
    thinking = _as(r.thinking, "thinking", _decode_object)
    _as(r.service_tier, "service_tier", _decode_text)
    for i, tool in enumerate(r.tools or ()):
        schema = _as(tool.input_schema, f"tools.{i}.input_schema", _decode_object)
        if tool.type in (None, "custom") and schema is None:
            raise Invalid(f"tools.{i}.custom.input_schema: Field required")
    if not r.model:
        raise Invalid("model: String should have at least 1 character")
    messages: list[tuple[int, str]] = []
    if isinstance(r.system, str):
        if r.system:
            messages.append((Role.System, r.system))
    elif r.system:
        messages.append((Role.System, _text_of(r.system, "system")))
    n = len(r.messages)
    listed = split_betas(betas)
    in_place = mid_system(listed)
    files = FILES_BETA in listed
    roles = [m.role for m in r.messages]
    for i, m in enumerate(r.messages):
        if m.role == "system":
            if not in_place:
                raise Invalid(_UNEXPECTED_SYSTEM)
            prev = roles[i - 1] if i else None
            nxt = roles[i + 1] if i + 1 < n else None
            messages.append((Role.System, _system_message(i, m, prev, nxt)))
            continue
        _message(i, m, i == n - 1, messages, files)
    forced = _forced_tool(r)
    model, fault, after = split_model(r.model)
    return StubRequest(
        request_id=request_id,
        model=model,
        messages=tuple(messages),
        max_tokens=r.max_tokens,
        forced_tool=forced,
        stream=bool(r.stream),
        fault=fault,
        fault_after=after,
        stop=tuple(r.stop_sequences or ()),
        params={"thinking": thinking} if _thinks(thinking) else {},
        offered=_offered(r),
    )


def _thinks(thinking: dict[str, object] | None) -> bool:
    return thinking is not None and thinking.get("type") in ("enabled", "adaptive")
