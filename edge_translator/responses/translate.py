"""Responses request -> ``CompletionRequest`` FlatBuffer: the Responses edge's
hot path.

Owns ``write_request``: a decoded request (``request.Decoded``: its input
items, the stored chain before them when ``previous_response_id`` named one)
as a ``CompletionRequest`` buffer, through the edges' shared writer
(``wire.request.writer.RequestWriter``). What each item means on the wire:

- ``instructions``: a leading system message (OpenAI's "system (or
  developer) message"; every chat backend takes ``system``);
- a user, system or developer ``message``: a message of that role, its text
  parts joined (a message with nothing but text takes the writer's one-pack
  path); one with an ``input_image`` or ``input_file`` part carries all its
  parts, in order, as ``ContentPart``s (``apis.openai_responses.media``:
  base64 decoded once, here; a bad part is a 400 naming it,
  ``input.[1].content.[0].image_url``) and no text;
- consecutive assistant-side items (``reasoning``, assistant ``message``,
  ``function_call``) fold into one assistant message: the messages' texts
  (joined by a blank line between items), the calls in order (call id,
  name, arguments; a namespaced call's wire name is
  ``<namespace>__<name>``, as its tool's), and the reasoning items as
  ``ReasoningPart``s (the ``reasoning_text`` content joined by a blank
  line, or the summary texts when there is none; ``encrypted_content``
  as the opaque bytes; the item id; dialect ``OpenAIResponses``, or the
  dialect ``encrypted_of`` wrote into it). The ``function_call`` item's own
  ``id`` (``fc_...``) is not carried;
- ``function_call_output``: a tool message with its call id and text, or,
  when its ``output`` holds an image or a file, with its parts as a
  message's; one whose ``call_id`` no ``function_call`` before it made is
  refused naming it, in OpenAI's words (``No tool call found for function
  call output with call_id ...``; not checked after another server's
  compaction, which may hold the call);
- ``compaction`` (``apis.openai_responses.compact``): one flatgate made, a
  user message holding its summary (``summary_text``); another server's,
  its ``encrypted_content`` as an assistant turn's ``ReasoningPart`` of
  the Responses dialect whose id is the item's (``cmp_...``,
  ``compaction_part``), which only an ``openai-responses`` backend writes
  back, as the ``compaction`` item it was.

Reasoning from another dialect (an Anthropic backend's thinking
``signature``, or a ``redacted_thinking`` block's data) reaches a Responses
client as ``encrypted_content`` of the form ``fg1.<dialect>[.r].<base64url of
the payload>`` (``encrypted_of``), and goes back to the wire as that
dialect's part (``reasoning_part``), so that it survives the round trip to
the backend that made it. OpenAI's own ``encrypted_content`` travels as is.

Scalars: ``max_output_tokens`` is ``max_tokens``; ``temperature``,
``top_p``, ``presence_penalty`` and ``frequency_penalty`` their slots; a stream always asks for
usage (every Responses answer reports it). ``text.format`` is written as
Chat Completions' ``response_format`` (``response_format_of``); the extras
(``apis.openai_responses.request``) with dialect ``OpenAIResponses``. Items of other types can only
come from a stored chain (the decoder refuses them from a client) and are
not carried. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii

import msgspec

from flatgate.edge_translator.errors import InvalidRequest, shown
from flatgate.proxy.apis.openai_responses.compact import (
    compaction_part,
    summary_of,
    summary_text,
)
from flatgate.proxy.apis.openai_responses.items import (
    InputText,
    Item,
    OutputText,
    Part,
    ReasoningText,
    Refusal,
)
from flatgate.proxy.apis.openai_responses.media import content_parts, has_media
from flatgate.proxy.apis.openai_responses.request import (
    Decoded,
    JsonObjectFormat,
    JsonSchemaFormat,
    ResponsesRequest,
)
from flatgate.proxy.apis.openai_responses.tools import NAMESPACE_SEP
from flatgate.proxy.wire.digits import read_decimal
from flatgate.proxy.wire.parts import ContentPart, ReasoningPart
from flatgate.proxy.wire.request.writer import Call, RequestWriter, WireMessage
from flatgate.proxy.wire.schema import ApiDialect, Role

__all__ = [
    "ROLE_OF",
    "encrypted_of",
    "reasoning_part",
    "response_format_of",
    "text_of",
    "write_request",
]

ROLE_OF: dict[str | None, int] = {
    "user": Role.User,
    "system": Role.System,
    "developer": Role.Developer,
    "assistant": Role.Assistant,
}
_RESPONSES = int(ApiDialect.OPENAI_RESPONSES)
_BETWEEN = "\n\n"


def text_of(content: str | list[Part] | None) -> str:
    """A message's (or a tool output's) text: the string, or its text parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(
        p.text
        if isinstance(p, InputText | OutputText)
        else p.refusal
        if isinstance(p, Refusal)
        else ""
        for p in content
    )


_FOREIGN = "fg1."


def encrypted_of(part: ReasoningPart) -> str:
    """A reasoning part's payload as a Responses client's ``encrypted_content``
    (``""``: none): OpenAI's as it came, another dialect's wrapped."""
    if not part.opaque:
        return ""
    if part.dialect == _RESPONSES:
        return part.opaque.decode(errors="replace")
    body = base64.urlsafe_b64encode(part.opaque).decode()
    return f"{_FOREIGN}{part.dialect}{'.r' if part.redacted else ''}.{body}"


# The dialects ``encrypted_of`` wraps: every one but none and the Responses API's own.
_WRAPPED = frozenset(int(d) for d in ApiDialect) - {int(ApiDialect.UNSET), _RESPONSES}


def _foreign(text: str) -> tuple[bytes, int, bool] | None:
    """The payload, dialect and redacted flag ``encrypted_of`` wrapped, if it
    did; a dialect ``encrypted_of`` never writes is refused (the wire's
    dialect is a byte: a number past it would not fit)."""
    head, _, body = text[len(_FOREIGN) :].rpartition(".")
    dialect, _, flag = head.partition(".")
    if not dialect.isdigit() or flag not in ("", "r"):
        return None
    number = read_decimal(dialect, 3)
    if number not in _WRAPPED:
        raise InvalidRequest(
            "Invalid value for 'input': a reasoning item's encrypted_content names "
            f"dialect '{shown(dialect)}', which flatgate never wrote.",
            param="input",
        )
    try:
        return base64.urlsafe_b64decode(body), number, flag == "r"
    except (binascii.Error, ValueError):
        return None


def reasoning_part(item: Item) -> ReasoningPart:
    """A ``reasoning`` item as the wire's ``ReasoningPart``."""
    # The reasoning itself when the item has it, else its summary: a summary
    # is made from the reasoning, so the two are never both carried.
    text = ""
    if item.content and not isinstance(item.content, str):
        text = _BETWEEN.join(p.text for p in item.content if isinstance(p, ReasoningText))
    if not text:
        text = _BETWEEN.join(s.text for s in item.summary or ())
    encrypted = item.encrypted_content or ""
    if encrypted.startswith(_FOREIGN):
        foreign = _foreign(encrypted)
        if foreign is not None:
            opaque, dialect, redacted = foreign
            return ReasoningPart(
                text=text, opaque=opaque, dialect=dialect, id=item.id or "", redacted=redacted
            )
    return ReasoningPart(text=text, opaque=encrypted.encode(), dialect=_RESPONSES, id=item.id or "")


def response_format_of(req: ResponsesRequest) -> bytes:
    """``text.format`` as Chat Completions' ``response_format`` JSON (``b""``
    for plain text): ``{"type": "json_schema", "json_schema": {name,
    description, schema, strict}}`` or ``{"type": "json_object"}``."""
    fmt = req.text.format if req.text is not None else None
    if isinstance(fmt, JsonObjectFormat):
        return b'{"type":"json_object"}'
    if isinstance(fmt, JsonSchemaFormat):
        head: dict[str, str] = {"name": fmt.name}
        if fmt.description is not None:
            head["description"] = fmt.description
        out = b'{"type":"json_schema","json_schema":' + msgspec.json.encode(head)[:-1]
        out += b',"schema":' + bytes(fmt.schema)
        if fmt.strict is not None:
            out += b',"strict":' + (b"true" if fmt.strict else b"false")
        return out + b"}}"
    return b""


def _assistant(text: str | None, calls: list[Call], parts: list[ReasoningPart]) -> WireMessage:
    """One folded assistant turn."""
    data = text.encode() if text else b""
    if parts:
        return Role.Assistant, data, b"", b"", calls, False, parts
    if calls or not data:
        return Role.Assistant, data, b"", b"", calls, False
    return Role.Assistant, data


def _parts(content: list[Part], k: int, first: int, field: str) -> list[ContentPart]:
    """Item ``k``'s parts as the wire's; errors name the client's item
    (a stored item, before ``first``, was checked when it was sent)."""
    where = f"input.[{k - first}].{field}" if k >= first else "previous_response_id"
    return content_parts(content, where)


def _messages(instructions: str | None, items: list[Item], first: int) -> list[WireMessage]:
    wire: list[WireMessage] = []
    add = wire.append
    if instructions:
        add((Role.System, instructions.encode()))
    # The assistant turn being folded: its text (None: no turn), calls, parts.
    text: str | None = None
    calls: list[Call] = []
    parts: list[ReasoningPart] = []
    folding = False
    role_of = ROLE_OF
    # The calls made so far (a foreign compaction may hold calls: then none is checked).
    made: set[str] | None = set()
    for k, item in enumerate(items):
        kind = item.type
        if kind is None or kind == "message":
            content = item.content
            role = item.role
            media = type(content) is list and role != "assistant" and has_media(content)
            said = "" if media else content if type(content) is str else text_of(content)
            if role == "assistant":
                if not text:
                    text = said
                elif said:
                    text = f"{text}{_BETWEEN}{said}"
                folding = True
                continue
            if folding:
                add(_assistant(text, calls, parts))
                # New lists: the turn written holds the old ones.
                text, folding, calls, parts = None, False, [], []
            if media:
                held = _parts(content, k, first, "content")  # type: ignore[arg-type]
                add((role_of[role], b"", b"", b"", (), False, (), held))
                continue
            data = said.encode()
            add((role_of[role], data) if data else (role_of[role], b"", b"", b"", (), False))
        elif kind == "function_call":
            name = item.name or ""
            if item.namespace:
                name = f"{item.namespace}{NAMESPACE_SEP}{name}"
            calls.append(
                ((item.call_id or "").encode(), name.encode(), (item.arguments or "").encode())
            )
            if made is not None:
                made.add(item.call_id or "")
            folding = True
        elif kind == "reasoning":
            parts.append(reasoning_part(item))
            folding = True
        elif kind == "compaction":
            summary = summary_of(item.encrypted_content or "")
            if summary is None:  # another server's: for the backend that made it
                made = None
                parts.append(compaction_part(item))
                folding = True
                continue
            if folding:
                add(_assistant(text, calls, parts))
                text, folding, calls, parts = None, False, [], []
            add((Role.User, summary_text(summary).encode()))
        elif kind == "function_call_output":
            if folding:
                add(_assistant(text, calls, parts))
                # New lists: the turn written holds the old ones.
                text, folding, calls, parts = None, False, [], []
            if made is not None and (item.call_id or "") not in made:
                where = f"input.[{k - first}].call_id" if k >= first else "previous_response_id"
                raise InvalidRequest(
                    "No tool call found for function call output with call_id "
                    f"{shown(item.call_id or '')}.",
                    param=where,
                )
            call_id = (item.call_id or "").encode()
            output = item.output
            if type(output) is list and has_media(output):
                held = _parts(output, k, first, "output")
                add((Role.Tool, b"", b"", call_id, (), False, (), held))
            else:
                add((Role.Tool, text_of(output).encode(), b"", call_id, (), False))
    if folding:
        add(_assistant(text, calls, parts))
    return wire


def write_request(
    d: Decoded,
    *,
    provider: int,
    model_name: str,
    tenant: str = "",
    request_id: str = "",
) -> bytes:
    """``d`` as a ``CompletionRequest`` buffer (the schema-specific writer)."""
    req = d.req
    w = RequestWriter()
    mode, choice_name = d.choice
    w.strings(
        request_id=request_id,
        model_name=model_name,
        tenant=tenant,
        user=req.user or "",
        tool_choice_name=choice_name,
        response_format=response_format_of(req),
        extras=d.extras,
    )
    w.messages(_messages(req.instructions, d.items, d.first))
    tools = d.tools  # made here, once: each read of ``tools`` writes the copies
    if tools:
        w.tools(tools)
    if req.metadata:
        w.metadata(req.metadata)
    stream = bool(req.stream)
    return w.finish(
        provider=provider,
        tool_choice=mode,
        max_tokens=req.max_output_tokens or 0,
        temperature=req.temperature,
        top_p=req.top_p,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        stream=stream,
        include_usage=stream,
        parallel_tool_calls=req.parallel_tool_calls,
        extras_dialect=_RESPONSES if d.extras else 0,
    )
