"""The OpenAI Responses request as the stub validates it.

msgspec Structs decode the body once (unknown fields ignored, as OpenAI
does); ``to_stub_request`` then checks the rules a type cannot say and reads
out a ``StubRequest``, in OpenAI's words (``openai_request``'s helpers):

- ``model`` and ``input`` (a string, or a list of items) are required;
- items: ``message`` (the ``type`` may be left out; roles user, assistant,
  system, developer; content a string or ``input_text`` / ``output_text`` /
  ``refusal`` parts: the stub takes no images, files or audio),
  ``function_call`` (``call_id``, ``name``, ``arguments``),
  ``function_call_output`` (``call_id``, ``output``), ``reasoning``
  (``summary``; its ``encrypted_content`` must be one the stub made, see
  ``encrypted``), and the items of hosted tools (taken, not read);
- the stub stores nothing, whatever ``store`` says: a ``previous_response_id``,
  an ``item_reference`` or a reasoning item without its encrypted content
  names something it cannot have, and is a 404 as OpenAI answers with
  ``store: false``;
- ``max_output_tokens`` >= 1 (OpenAI's own minimum is 16: the stub is lenient,
  so that short echoes can be asked for), ``temperature`` in [0, 2],
  ``top_p`` in [0, 1], ``stream_options`` only with ``stream``, known
  ``include`` values, ``text.format`` of type text, json_object or
  json_schema (with a ``name``);
- the forced tool is ``tool_choice: {"type": "function", "name": ...}``,
  which must name a function tool.

``StubRequest.params`` keeps the settings the answer echoes (``tools``,
``reasoning``, ``include``, ...). No I/O.
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec

from flatgate.proxy.backends.dialect import StubRequest, split_model
from flatgate.proxy.backends.openai.stub_request import (
    Invalid,
    at_least,
    decode_openai,
    in_range,
    missing,
)
from flatgate.proxy.wire import codes
from flatgate.proxy.wire.schema import Role

__all__ = [
    "ENCRYPTED_INCLUDE",
    "ResponsesRequest",
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
_TEXT_PARTS = ("input_text", "output_text", "refusal")
_OTHER_PARTS = ("input_image", "input_file", "input_audio")
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
_FORMATS = ("text", "json_object", "json_schema")
_FAKE = b"flatgate-stub:"


def encrypted(item_id: str) -> str:
    """The stub's encrypted content of a reasoning item: a deterministic fake,
    which it checks when the item comes back."""
    return base64.b64encode(_FAKE + item_id.encode()).decode()


class Part(msgspec.Struct, gc=False):
    type: str
    text: str | None = None
    refusal: str | None = None


class Item(msgspec.Struct, gc=False):
    type: str | None = None
    role: str | None = None
    content: str | list[Part] | None = None
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[Part] | None = None
    summary: list[Part] | None = None
    encrypted_content: str | None = None


class ResponsesRequest(msgspec.Struct, gc=False):
    model: str | None = None
    input: str | list[Item] | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    include: list[str] | None = None
    reasoning: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    previous_response_id: str | None = None


_DECODER = msgspec.json.Decoder(ResponsesRequest)
# Settings the answer echoes, by name.
_ECHOED = (
    "instructions",
    "max_output_tokens",
    "tools",
    "tool_choice",
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
    """The body as a ``ResponsesRequest``; raises ``Invalid`` naming the field."""
    return decode_openai(_DECODER, body)


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
    out = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        if part.type in _TEXT_PARTS:
            text = part.refusal if part.type == "refusal" else part.text
            if text is None:
                raise missing(f"{at}.{'refusal' if part.type == 'refusal' else 'text'}")
            out.append(text)
        elif part.type in _OTHER_PARTS:
            raise Invalid(
                f"Invalid value: '{part.type}'. The stub accepts only text content parts.",
                f"{at}.type",
                "invalid_value",
            )
        else:
            raise _value(f"{at}.type", part.type, _TEXT_PARTS + _OTHER_PARTS)
    return "".join(out)


def _item(i: int, item: Item) -> tuple[int, str] | None:
    """One input item as a (role, text) message, or ``None`` for one the
    echo does not read."""
    where = f"input[{i}]"
    kind = item.type or ("message" if item.role is not None else None)
    if kind is None:
        raise missing(f"{where}.type")
    if kind == "message":
        role = _ROLES.get(item.role or "")
        if role is None:
            if item.role is None:
                raise missing(f"{where}.role")
            raise _value(f"{where}.role", item.role, tuple(_ROLES))
        if item.content is None:
            raise missing(f"{where}.content")
        return role, _text(item.content, f"{where}.content")
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
    if kind == "item_reference":
        raise _not_found(f"Item with id '{item.id}' not found.", "input")
    if kind in _HOSTED_ITEMS:
        return None
    raise _value(
        f"{where}.type",
        kind,
        ("message", "function_call", "function_call_output", "reasoning", "item_reference"),
    )


def _forced_tool(r: ResponsesRequest) -> str:
    choice = r.tool_choice
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
    functions = {t.get("name") for t in r.tools or () if t.get("type") == "function"}
    if name not in functions:
        raise Invalid(f"Tool choice '{name}' not found in 'tools' parameter.", "tool_choice", None)
    return name


def _check_tools(tools: list[dict[str, Any]]) -> None:
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if not isinstance(kind, str):
            raise missing(f"tools[{i}].type")
        if kind == "function" and not isinstance(tool.get("name"), str):
            raise missing(f"tools[{i}].name")


def _check_text(text: dict[str, Any]) -> None:
    fmt = text.get("format")
    if fmt is None:
        return
    if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str):
        raise missing("text.format.type")
    if fmt["type"] not in _FORMATS:
        raise _value("text.format.type", fmt["type"], _FORMATS)
    if fmt["type"] == "json_schema":
        for name in ("name", "schema"):
            if name not in fmt:
                raise missing(f"text.format.{name}")


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
    at_least("max_output_tokens", r.max_output_tokens)
    in_range("temperature", r.temperature, 2.0)
    in_range("top_p", r.top_p, 1.0)
    if r.stream_options is not None and not r.stream:
        raise Invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
            None,
        )
    for i, value in enumerate(r.include or ()):
        if value not in _INCLUDES:
            raise _value(f"include[{i}]", value, _INCLUDES)
    _check_tools(r.tools or [])
    if r.text is not None:
        _check_text(r.text)
    forced = _forced_tool(r)
    model, fault, after = split_model(r.model)
    params = {name: getattr(r, name) for name in _ECHOED}
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
    )
