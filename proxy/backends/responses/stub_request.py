"""The OpenAI Responses request as the stub validates it.

The stub reads the request with the one model of it, the Structs the edge
decodes with (``apis.openai_responses``), as OpenAI does: members of no
name are ignored (the switch: when the decode fails on one, they are
dropped, ``lenient.without_unknown``, and the body decoded again), and what
the Structs refuse is said in OpenAI's words (the ``openai`` stub's helpers:
``integer_below_min_value`` and ``invalid_value`` for a number out of its
range, an unknown role, part type or format type, with the values allowed).
``to_stub_request`` then checks the rules a type cannot say and reads out a
``StubRequest``:

- ``model`` and ``input`` (a string, or a list of items) are required;
- items: ``message`` (the ``type`` may be left out; roles user, assistant,
  system, developer; content a string or ``input_text`` / ``output_text`` /
  ``refusal`` / ``input_image`` / ``input_file`` parts: a message with an
  image or a file is read into the wire's parts as the edge reads it
  (``apis.openai_responses.media``: its data URLs decoded, checked against
  their declared types) and echoed as ``dialect.described`` shows them, so
  that a test sees each part's kind, type, size and digest; no audio, as
  OpenAI),
  ``function_call`` (``call_id``, ``name``, ``arguments``),
  ``function_call_output`` (``call_id``, ``output``: a string or parts, as
  a message's), ``reasoning``
  (``summary``; its ``encrypted_content`` must be one the stub made, see
  ``encrypted``), ``compaction`` (its ``encrypted_content`` must be one the
  stub's ``/v1/responses/compact`` made, ``compaction_content``: read as a
  user message holding its summary), and the items of hosted tools (taken,
  not read);
- the stub stores nothing, whatever ``store`` says: a ``previous_response_id``,
  an ``item_reference`` or a reasoning item without its encrypted content
  names something it cannot have, and is a 404 as OpenAI answers with
  ``store: false``;
- ``max_output_tokens`` >= 1 (OpenAI's own minimum is 16: the stub is lenient,
  so that short echoes can be asked for), ``temperature`` in [0, 2],
  ``top_p`` in [0, 1], and the other bounds of the model (at most 16
  ``metadata`` keys, ``top_logprobs`` in [0, 20]); ``stream_options`` only
  with ``stream``, known ``include`` values, ``text.format`` of type text,
  json_object or json_schema (with a ``name`` and a ``schema``), each tool
  an object with a ``type`` (a function's with a ``name``);
- the forced tool is ``tool_choice: {"type": "function", "name": ...}``,
  which must name a function tool.

``StubRequest.params`` keeps the settings the answer echoes (``tools`` and
``tool_choice`` as JSON values, ``reasoning`` and ``text`` as the model's
Structs, ``include``, ...). No I/O.
"""

from __future__ import annotations

import base64
import json
from typing import Any, TypeVar

import msgspec
from msgspec import inspect as mi

from flatgate.proxy.apis.errors import InvalidRequest
from flatgate.proxy.apis.lenient import Tags, at_path, without_unknown
from flatgate.proxy.apis.openai_responses.items import (
    MEDIA_PARTS,
    TEXT_PARTS,
    InputAudio,
    Item,
    Part,
    Refusal,
)
from flatgate.proxy.apis.openai_responses.media import content_parts, has_media
from flatgate.proxy.apis.openai_responses.request import ResponsesRequest
from flatgate.proxy.backends.dialect import OfferedTool, StubRequest, described, split_model
from flatgate.proxy.backends.openai.stub_request import (
    Invalid,
    at_least,
    decode_openai,
    in_range,
    missing,
)
from flatgate.proxy.errors import codes
from flatgate.proxy.plumbing.validation import read_validation
from flatgate.proxy.wire.schema import Role

__all__ = [
    "ENCRYPTED_INCLUDE",
    "compacted",
    "compaction_content",
    "decode_responses_request",
    "encrypted",
    "to_stub_request",
]

# The `include` value that asks for reasoning items' encrypted content.
ENCRYPTED_INCLUDE = "reasoning.encrypted_content"
_INCLUDES = (
    ENCRYPTED_INCLUDE,
    "message.output_text.logprobs",
    "message.input_image.image_url",
    "web_search_call.action.sources",
    "web_search_call.results",
    "file_search_call.results",
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
)
_ROLES = {
    "user": Role.User,
    "assistant": Role.Assistant,
    "system": Role.System,
    "developer": Role.Developer,
}
# The part types a message may hold, as OpenAI lists them when it refuses one.
_PART_TYPES = tuple(
    str(p.__struct_config__.tag) for p in (*TEXT_PARTS, *MEDIA_PARTS) if p is not InputAudio
)
# What OpenAI lists when it refuses a role or a part type, in its order
# (msgspec gives a Literal's values sorted, and the part union's tags with
# ``reasoning_text``, which only a reasoning item holds).
_LISTED = (tuple(_ROLES), _PART_TYPES)
# Output items of hosted tools a history may hold: taken, not read.
_HOSTED_ITEMS = (
    "web_search_call",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "code_interpreter_call",
    "image_generation_call",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "custom_tool_call",
    "custom_tool_call_output",
)
_CHOICES = ("none", "auto", "required")
_FAKE = b"flatgate-stub:"


def encrypted(item_id: str) -> str:
    """The stub's encrypted content of a reasoning item: a deterministic fake,
    which it checks when the item comes back."""
    return base64.b64encode(_FAKE + item_id.encode()).decode()


_COMPACTED = _FAKE + b"compaction:"


def compaction_content(summary: str) -> str:
    """The stub's encrypted content of a compaction item (its
    ``/v1/responses/compact``): its summary behind a fake, which it checks
    when the item comes back (``compacted``)."""
    return base64.b64encode(_COMPACTED + summary.encode()).decode()


def compacted(content: str) -> str | None:
    """The summary in a compaction item's content the stub made; ``None``
    for any other."""
    try:
        data = base64.b64decode(content, validate=True)
    except ValueError:
        return None
    if not data.startswith(_COMPACTED):
        return None
    return data[len(_COMPACTED) :].decode(errors="replace")


_T = TypeVar("_T")
_DECODER = msgspec.json.Decoder(ResponsesRequest)
_decode = _DECODER.decode
# ``tools`` and ``tool_choice`` are kept as sent by the model; the stub reads
# them as OpenAI types them.
_tool_decoder = msgspec.json.Decoder(dict[str, Any])
_choice_decoder = msgspec.json.Decoder(str | dict[str, Any] | None)
# Settings the answer echoes, by name.
_ECHOED = (
    "instructions",
    "max_output_tokens",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "include",
    "reasoning",
    "text",
    "store",
    "metadata",
    "user",
)


def decode_responses_request(body: bytes) -> ResponsesRequest:
    """The body as a ``ResponsesRequest``, members of no name ignored; raises
    ``Invalid`` naming the field."""
    for _ in range(2):
        try:
            return _decode(body)
        except msgspec.ValidationError as exc:
            message = str(exc)
        except msgspec.DecodeError:
            break  # not JSON: decode_openai says so
        if read_validation(message).unknown:
            body = without_unknown(body, ResponsesRequest)
            continue
        _refuse_value(message, body)
        break
    return decode_openai(_DECODER, body)  # raises, in OpenAI's words


def _refuse_value(message: str, body: bytes) -> None:
    """Raise ``Invalid`` in OpenAI's words when ``message`` (msgspec's) refuses
    a value the model bounds or lists, or misses a required field at the top
    (``model``); other refusals are ``decode_openai``'s."""
    v = read_validation(message)
    if v.missing and not v.path:
        raise missing(v.missing)
    if not v.path or v.missing:
        return
    value, t = at_path(body, ResponsesRequest, v.path)
    param = v.where()
    if value is None and v.reason.endswith("got `null`"):
        raise missing(param)  # a null where a value is required
    if isinstance(t, Tags | mi.LiteralType) and isinstance(value, str):
        allowed = t if isinstance(t, Tags) else tuple(str(a) for a in t.values)
        listed = next((a for a in _LISTED if set(a) <= set(allowed)), allowed)
        raise _value(param, value, listed)
    if isinstance(t, mi.IntType) and type(value) is int:
        if t.ge is not None:
            at_least(param, value, t.ge)
        if t.le is not None and value > t.le:
            raise Invalid(
                f"Invalid '{param}': integer above maximum value. Expected a value <= "
                f"{t.le}, but got {value} instead.",
                param,
                "integer_above_max_value",
            )
    if isinstance(t, mi.FloatType) and type(value) in (int, float) and t.ge == 0:
        in_range(param, value, t.le if t.le is not None else float("inf"))
    if isinstance(t, mi.DictType) and isinstance(value, dict) and t.max_length is not None:
        raise Invalid(
            f"Invalid '{param}': too many properties. Expected an object with at most "
            f"{t.max_length} properties, but got an object with {len(value)} properties "
            "instead.",
            param,
            "object_above_max_properties",
        )


def _value(param: str, value: str, allowed: tuple[str, ...]) -> Invalid:
    supported = ", ".join(f"'{a}'" for a in allowed)
    return Invalid(
        f"Invalid value: '{value}'. Supported values are: {supported}.", param, "invalid_value"
    )


def _not_found(message: str, param: str) -> Invalid:
    return Invalid(message, param, None, 404)


def _text(content: str | list[Part] | None, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if has_media(content):
        # Images and files read back as the wire's parts, their data URLs
        # decoded: the echo describes them (kind, type, size, digest).
        try:
            return described(content_parts(content, where, "[{}]"))
        except InvalidRequest as exc:
            raise Invalid(exc.message, exc.param, "invalid_value") from None
    out = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        if isinstance(part, Refusal):
            out.append(part.refusal)
        elif isinstance(part, TEXT_PARTS):
            out.append(part.text)
        elif isinstance(part, MEDIA_PARTS):  # input_audio: not a Responses part
            raise _value(f"{at}.type", str(part.__struct_config__.tag), _PART_TYPES)
        else:
            raise _value(f"{at}.type", str(part.__struct_config__.tag), _PART_TYPES)
    return "".join(out)


def _item(i: int, item: Item) -> tuple[int, str] | None:
    """One input item as a (role, text) message, or ``None`` for one the
    echo does not read."""
    where = f"input[{i}]"
    kind = item.type or ("message" if item.role is not None else None)
    if kind is None:
        raise missing(f"{where}.type")
    if kind == "message":
        if item.role is None:
            raise missing(f"{where}.role")
        if item.content is None:
            raise missing(f"{where}.content")
        return _ROLES[item.role], _text(item.content, f"{where}.content")
    if kind == "function_call":
        for name in ("call_id", "name", "arguments"):
            if getattr(item, name) is None:
                raise missing(f"{where}.{name}")
        return None
    if kind == "function_call_output":
        if item.call_id is None:
            raise missing(f"{where}.call_id")
        if item.output is None:
            raise missing(f"{where}.output")
        return Role.Tool, _text(item.output, f"{where}.output")
    if kind == "reasoning":
        if item.summary is None:
            raise missing(f"{where}.summary")
        if item.encrypted_content is None:
            raise _not_found(
                f"Item with id '{item.id}' not found. Items are not persisted when `store` is "
                "set to false. Try again with `store` set to true, or remove this item from "
                "your input.",
                "input",
            )
        if item.encrypted_content != encrypted(item.id or ""):
            raise Invalid(
                f"The encrypted content for item {item.id} could not be verified.",
                f"{where}.encrypted_content",
                "invalid_encrypted_content",
            )
        return None
    if kind == "compaction":
        summary = compacted(item.encrypted_content or "")
        if summary is None:
            raise Invalid(
                f"The encrypted content for item {item.id} could not be verified.",
                f"{where}.encrypted_content",
                "invalid_encrypted_content",
            )
        return Role.User, summary
    if kind == "item_reference":
        raise _not_found(f"Item with id '{item.id}' not found.", "input")
    if kind in _HOSTED_ITEMS:
        return None
    raise _value(
        f"{where}.type",
        kind,
        (
            "message",
            "function_call",
            "function_call_output",
            "reasoning",
            "compaction",
            "item_reference",
        ),
    )


def _typed(decoder: msgspec.json.Decoder[_T], raw: msgspec.Raw, param: str) -> _T:
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:  # the value's own type: no path in it
        raise Invalid(f"Invalid type for '{param}': {exc}", param, "invalid_type") from None


def _forced_tool(choice: str | dict[str, Any] | None, tools: list[dict[str, Any]]) -> str:
    if choice is None:
        return ""
    if isinstance(choice, str):
        if choice not in _CHOICES:
            raise _value("tool_choice", choice, _CHOICES)
        return ""
    if choice.get("type") != "function":
        return ""  # a hosted tool, or allowed_tools: nothing the echo forces
    name = choice.get("name")
    if not isinstance(name, str):
        raise missing("tool_choice.name")
    functions = {t.get("name") for t in tools if t.get("type") == "function"}
    if name not in functions:
        raise Invalid(f"Tool choice '{name}' not found in 'tools' parameter.", "tool_choice", None)
    return name


def _tools(raws: list[msgspec.Raw]) -> list[dict[str, Any]]:
    """The tools as JSON objects, checked."""
    tools = [_typed(_tool_decoder, raw, f"tools[{i}]") for i, raw in enumerate(raws)]
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if not isinstance(kind, str):
            raise missing(f"tools[{i}].type")
        if kind == "function" and not isinstance(tool.get("name"), str):
            raise missing(f"tools[{i}].name")
    return tools


def _offered(
    choice: str | dict[str, Any] | None, tools: list[dict[str, Any]]
) -> tuple[OfferedTool, ...]:
    """The function tools the model may call (none with ``tool_choice: "none"``)."""
    if choice == "none":
        return ()
    return tuple(
        OfferedTool(t["name"], json.dumps(t.get("parameters") or {}))
        for t in tools
        if t.get("type") == "function"
    )


def to_stub_request(r: ResponsesRequest, request_id: str) -> StubRequest:
    """Check what the types cannot say, and read out the ``StubRequest``."""
    if not r.model:
        raise missing("model")
    if r.input is None:
        raise missing("input")
    if r.previous_response_id is not None:
        raise Invalid(
            f"Previous response with id '{r.previous_response_id}' not found.",
            "previous_response_id",
            # OpenAI's code, the same as flatgate's own
            codes.PREVIOUS_RESPONSE_NOT_FOUND.code,
            404,
        )
    messages: list[tuple[int, str]] = []
    if r.instructions:
        messages.append((Role.System, r.instructions))
    if isinstance(r.input, str):
        messages.append((Role.User, r.input))
    else:
        for i, item in enumerate(r.input):
            message = _item(i, item)
            if message is not None:
                messages.append(message)
    if r.stream_options is not None and not r.stream:
        raise Invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
            None,
        )
    for i, value in enumerate(r.include or ()):
        if value not in _INCLUDES:
            raise _value(f"include[{i}]", value, _INCLUDES)
    tools = _tools(r.tools) if r.tools is not None else None
    choice = _typed(_choice_decoder, r.tool_choice, "tool_choice") if r.tool_choice else None
    forced = _forced_tool(choice, tools or [])
    model, fault, after = split_model(r.model)
    params = {name: getattr(r, name) for name in _ECHOED}
    params["tools"] = tools
    params["tool_choice"] = choice
    return StubRequest(
        request_id=request_id,
        model=model,
        messages=tuple(messages),
        max_tokens=r.max_output_tokens or 0,
        forced_tool=forced,
        stream=bool(r.stream),
        fault=fault,
        fault_after=after,
        params=params,
        offered=_offered(choice, tools or []),
    )
