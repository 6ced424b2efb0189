"""The OpenAI Chat Completions request, as msgspec Structs, and its one decoder.

Owns what the edge accepts: the message roles (system, developer, user,
assistant with tool calls, tool with its call id), text content parts, tools,
``tool_choice`` and the sampling parameters the wire schema carries. Unknown
fields are accepted and ignored (OpenAI adds fields often); wrong types, missing
fields and out-of-range values become ``InvalidRequest`` with OpenAI's ``param``
naming the field (``temperature``, ``messages.[0].role``).

Content parts other than ``text`` (images, audio, files) are rejected with a
400 naming the part: the wire schema carries text only, and silently dropping
an image would change what the model is asked. A body nested too deeply, or
with text that is not UTF-8 (``decoding``), is ``invalid_json``.

Pure: no I/O. The decoder is built once at import.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias

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
    "AssistantMessage",
    "ChatCompletionRequest",
    "ContentPart",
    "DeveloperMessage",
    "FunctionCall",
    "FunctionDef",
    "Message",
    "StreamOptions",
    "SystemMessage",
    "TextPart",
    "ToolCall",
    "ToolChoiceFunction",
    "ToolDef",
    "ToolMessage",
    "UserMessage",
    "decode_request",
    "param_from_error",
]


class TextPart(msgspec.Struct, tag_field="type", tag="text", gc=False):
    text: str


class ImageUrlPart(msgspec.Struct, tag_field="type", tag="image_url", gc=False):
    image_url: msgspec.Raw = msgspec.Raw()


class InputAudioPart(msgspec.Struct, tag_field="type", tag="input_audio", gc=False):
    input_audio: msgspec.Raw = msgspec.Raw()


class FilePart(msgspec.Struct, tag_field="type", tag="file", gc=False):
    file: msgspec.Raw = msgspec.Raw()


class RefusalPart(msgspec.Struct, tag_field="type", tag="refusal", gc=False):
    refusal: str


ContentPart: TypeAlias = TextPart | ImageUrlPart | InputAudioPart | FilePart | RefusalPart
Content: TypeAlias = str | list[ContentPart]


class FunctionCall(msgspec.Struct, gc=False):
    name: str
    arguments: str


class ToolCall(msgspec.Struct, gc=False):
    id: str
    function: FunctionCall
    type: Literal["function"] = "function"


class SystemMessage(msgspec.Struct, tag_field="role", tag="system", gc=False):
    content: Content
    name: str | None = None


class DeveloperMessage(msgspec.Struct, tag_field="role", tag="developer", gc=False):
    content: Content
    name: str | None = None


class UserMessage(msgspec.Struct, tag_field="role", tag="user", gc=False):
    content: Content
    name: str | None = None


class AssistantMessage(msgspec.Struct, tag_field="role", tag="assistant", gc=False):
    content: Content | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    refusal: str | None = None


class ToolMessage(msgspec.Struct, tag_field="role", tag="tool", gc=False):
    content: Content
    tool_call_id: str


Message: TypeAlias = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage


class FunctionDef(msgspec.Struct, gc=False):
    name: str
    description: str | None = None
    # Kept as the caller's JSON text: it travels as a string on the wire.
    parameters: msgspec.Raw = msgspec.Raw()
    strict: bool | None = None


class ToolDef(msgspec.Struct, gc=False):
    type: Literal["function"]
    function: FunctionDef


class _ToolChoiceName(msgspec.Struct, gc=False):
    name: str


class ToolChoiceFunction(msgspec.Struct, gc=False):
    type: Literal["function"]
    function: _ToolChoiceName


class StreamOptions(msgspec.Struct, gc=False):
    include_usage: bool = False


_Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
_Temp = Annotated[float, msgspec.Meta(ge=0.0, le=2.0)]
_Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]
_Positive = Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]
_Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class ChatCompletionRequest(msgspec.Struct, gc=False):
    """``POST /v1/chat/completions`` as far as flatgate carries it."""

    model: str
    messages: Annotated[list[Message], msgspec.Meta(min_length=1)]
    temperature: _Temp | None = None
    top_p: _Unit | None = None
    # Not OpenAI's; vLLM, SGLang and llama.cpp take it (0: not given).
    top_k: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None = None
    max_tokens: _Positive | None = None
    max_completion_tokens: _Positive | None = None
    stop: str | Annotated[list[str], msgspec.Meta(max_length=4)] | None = None
    seed: _Int64 | None = None
    presence_penalty: _Penalty | None = None
    frequency_penalty: _Penalty | None = None
    n: Annotated[int, msgspec.Meta(ge=1, le=128)] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = None
    metadata: dict[str, str] | None = None
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceFunction | None = None
    parallel_tool_calls: bool | None = None
    # Kept as JSON text; empty when absent (msgspec.Raw cannot be in a union).
    response_format: msgspec.Raw = msgspec.Raw()


_decoder = msgspec.json.Decoder(ChatCompletionRequest)


def param_from_error(message: str) -> str | None:
    """OpenAI's ``param`` for a msgspec validation message.

    msgspec names the JSON path (``$.messages[0].role``); OpenAI writes it as
    ``messages.[0].role``. A missing field is named by the field itself; a
    dict value's path has no key in it (``$.metadata[...]``): the dict is named.
    """
    v = read_validation(message)
    return v.where(index=".[{}]", value="", field=v.missing) or None


def _reject_parts(content: Content | None, where: str) -> None:
    if content is None or isinstance(content, str):
        return
    for j, part in enumerate(content):
        if not isinstance(part, TextPart | RefusalPart):
            kind = type(part).__struct_config__.tag
            raise InvalidRequest(
                f"Content parts of type '{kind}' are not supported: flatgate carries text only.",
                param=f"{where}.content.[{j}].type",
                code=codes.UNSUPPORTED_CONTENT_TYPE,
            )


def _check(req: ChatCompletionRequest) -> None:
    for i, msg in enumerate(req.messages):
        _reject_parts(msg.content, f"messages.[{i}]")
    choice = req.tool_choice
    if choice is not None and choice != "none" and not req.tools:
        raise InvalidRequest(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
            "are specified.",
            param="tool_choice",
        )
    if isinstance(choice, ToolChoiceFunction):
        name = choice.function.name
        if not any(t.function.name == name for t in req.tools or ()):
            raise InvalidRequest(
                f"Invalid value for 'tool_choice': no function named '{shown(name)}' in 'tools'.",
                param="tool_choice",
            )
    for i, tool in enumerate(req.tools or ()):
        params = bytes(tool.function.parameters)
        if params and params != b"null" and not params.startswith(b"{"):
            raise InvalidRequest(
                f"Invalid type for 'tools.[{i}].function.parameters': expected an object.",
                param=f"tools.[{i}].function.parameters",
            )
        if not is_utf8(params):
            raise _not_utf8(f"tools.[{i}].function.parameters")
    if not is_utf8(bytes(req.response_format)):
        raise _not_utf8("response_format")


def _not_utf8(param: str) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid value for '{param}': a string in it is not valid UTF-8.",
        param=param,
        code=codes.INVALID_JSON,
    )


def _not_json(why: str) -> InvalidRequest:
    return InvalidRequest(
        f"We could not parse the JSON body of your request ({why}). "
        "The API expects a JSON payload.",
        code=codes.INVALID_JSON,
    )


def decode_request(body: bytes | memoryview) -> ChatCompletionRequest:
    """Decode and validate a request body; every failure is an ``InvalidRequest``."""
    try:
        req = _decoder.decode(body)
    except msgspec.ValidationError as exc:
        text = validation_text(exc)
        raise InvalidRequest(f"Invalid request: {text}", param=param_from_error(text)) from exc
    except msgspec.DecodeError as exc:
        raise _not_json(str(exc)) from exc
    except UNDECODABLE as exc:
        raise _not_json(why_undecodable(exc)) from None
    _check(req)
    return req
