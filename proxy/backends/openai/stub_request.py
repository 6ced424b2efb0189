"""The OpenAI Chat Completions request as the stub validates it.

msgspec Structs decode the body once (unknown fields ignored, as OpenAI does);
``to_stub_request`` then checks the rules a type cannot say and reads out a
``StubRequest``. Every failure is an ``Invalid`` carrying OpenAI's message,
``param`` (``messages[0].role``) and ``code``; ``decode_openai``, ``missing``,
``at_least`` and ``in_range`` say them as OpenAI does, for both of OpenAI's
APIs (``openai_responses_request`` uses them too). No I/O.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from flatgate.proxy.backends.dialect import StubRequest, split_model
from flatgate.proxy.plumbing.validation import read_validation
from flatgate.proxy.wire.schema import Role

__all__ = [
    "ChatRequest",
    "Invalid",
    "at_least",
    "decode_chat_request",
    "decode_openai",
    "in_range",
    "missing",
    "to_stub_request",
]

_T = TypeVar("_T")
_ROLES = {
    "system": Role.System,
    "developer": Role.Developer,
    "user": Role.User,
    "assistant": Role.Assistant,
    "tool": Role.Tool,
    "function": Role.Tool,
}
_ROLE_LIST = "'system', 'assistant', 'user', 'function', 'tool', and 'developer'"
_PART_TYPES = ("text", "image_url", "input_audio", "refusal", "audio", "file")


class Invalid(ValueError):
    """A request OpenAI would refuse (with a 400, unless ``status`` says)."""

    def __init__(
        self, message: str, param: str | None = None, code: str | None = None, status: int = 400
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.status = status


class Part(msgspec.Struct, gc=False):
    type: str
    text: str | None = None
    refusal: str | None = None


class Function(msgspec.Struct, gc=False):
    name: str
    arguments: str = ""


class Call(msgspec.Struct, gc=False):
    id: str
    function: Function
    type: str = "function"


class Message(msgspec.Struct, gc=False):
    role: str
    content: str | list[Part] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[Call] | None = None


class FunctionDef(msgspec.Struct, gc=False):
    name: str
    description: str | None = None
    parameters: dict[str, object] | None = None
    strict: bool | None = None


class Tool(msgspec.Struct, gc=False):
    function: FunctionDef
    type: str = "function"


class Named(msgspec.Struct, gc=False):
    name: str


class ToolChoice(msgspec.Struct, gc=False):
    function: Named
    type: str = "function"


class StreamOptions(msgspec.Struct, gc=False):
    include_usage: bool | None = None


class ChatRequest(msgspec.Struct, gc=False):
    model: str | None = None
    messages: list[Message] | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    tools: list[Tool] | None = None
    tool_choice: str | ToolChoice | None = None
    n: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None


_DECODER = msgspec.json.Decoder(ChatRequest)


def decode_chat_request(body: bytes) -> ChatRequest:
    """The body as a ``ChatRequest``; raises ``Invalid`` naming the field."""
    return decode_openai(_DECODER, body)


def decode_openai(decoder: msgspec.json.Decoder[_T], body: bytes) -> _T:
    """The body decoded by ``decoder``; ``Invalid`` naming the field, as OpenAI says it."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise _from_msgspec(str(exc)) from None
    except msgspec.DecodeError:
        raise Invalid(
            "We could not parse the JSON body of your request. (HINT: This likely means you "
            "aren't using your HTTP library correctly. The OpenAI API expects a JSON payload.)"
        ) from None


def _from_msgspec(message: str) -> Invalid:
    v = read_validation(message)
    if not v.path:
        return Invalid(f"Invalid request body: {message}", None, "invalid_type")
    if v.missing:
        return missing(v.where(field=v.missing))
    param = v.where()
    return Invalid(f"Invalid type for '{param}': {v.reason}", param, "invalid_type")


def missing(param: str) -> Invalid:
    return Invalid(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")


def at_least(param: str, value: int | None, low: int = 1) -> None:
    if value is not None and value < low:
        raise Invalid(
            f"Invalid '{param}': integer below minimum value. Expected a value >= {low}, "
            f"but got {value} instead.",
            param,
            "integer_below_min_value",
        )


def in_range(param: str, value: float | None, high: float) -> None:
    if value is not None and not 0 <= value <= high:
        raise Invalid(
            f"Invalid '{param}': expected a value between 0 and {high:g}, but got {value:g}.",
            param,
            "invalid_value",
        )


def _text(message: Message, where: str) -> str:
    """A message's text: the string, or its text (and, for the assistant, refusal) parts."""
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        if part.type == "text":
            if part.text is None:
                raise missing(f"{at}.text")
            out.append(part.text)
        elif part.type == "refusal" and message.role == "assistant":
            out.append(part.refusal or "")
        elif part.type in _PART_TYPES:
            raise Invalid(
                f"Invalid value: '{part.type}'. The stub accepts only 'text' content parts.",
                f"{at}.type",
                "invalid_value",
            )
        else:
            supported = ", ".join(f"'{t}'" for t in _PART_TYPES)
            raise Invalid(
                f"Invalid value: '{part.type}'. Supported values are: {supported}.",
                f"{at}.type",
                "invalid_value",
            )
    return "".join(out)


def _message(i: int, m: Message) -> tuple[int, str]:
    where = f"messages[{i}]"
    role = _ROLES.get(m.role)
    if role is None:
        raise Invalid(
            f"Invalid value: '{m.role}'. Supported values are: {_ROLE_LIST}.",
            f"{where}.role",
            "invalid_value",
        )
    if m.role == "tool" and not m.tool_call_id:
        raise missing(f"{where}.tool_call_id")
    if m.role == "function" and not m.name:
        raise missing(f"{where}.name")
    if m.content is None and not (m.role == "assistant" and m.tool_calls) and m.role != "function":
        if m.role == "assistant":
            raise Invalid(
                "Invalid value for 'content': expected a string, got null.",
                f"{where}.content",
                "invalid_value",
            )
        raise missing(f"{where}.content")
    return role, _text(m, where)


def _forced_tool(r: ChatRequest) -> str:
    choice = r.tool_choice
    if choice is None:
        return ""
    if not r.tools:
        raise Invalid(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
            "are specified.",
            "tool_choice",
            None,
        )
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise Invalid(
                f"Invalid value: '{choice}'. Supported values are: 'none', 'auto', and 'required'.",
                "tool_choice",
                "invalid_value",
            )
        return ""
    if choice.type != "function":
        raise Invalid(
            f"Invalid value: '{choice.type}'. Supported values are: 'function'.",
            "tool_choice.type",
            "invalid_value",
        )
    if choice.function.name not in {t.function.name for t in r.tools}:
        raise Invalid(
            f"Invalid 'tool_choice': function '{choice.function.name}' is not one of 'tools'.",
            "tool_choice.function.name",
            "invalid_value",
        )
    return choice.function.name


def to_stub_request(r: ChatRequest, request_id: str) -> StubRequest:
    """Check what the types cannot say, and read out the ``StubRequest``."""
    if not r.model:
        raise Invalid("you must provide a model parameter", None, None)
    if r.messages is None:
        raise missing("messages")
    if not r.messages:
        raise Invalid(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but "
            "got an empty array instead.",
            "messages",
            "empty_array",
        )
    messages = tuple(_message(i, m) for i, m in enumerate(r.messages))
    at_least("max_tokens", r.max_tokens)
    at_least("max_completion_tokens", r.max_completion_tokens)
    at_least("n", r.n)
    if r.n is not None and r.n > 1:
        raise Invalid("The stub answers one choice: 'n' must be 1.", "n", "unsupported_value")
    in_range("temperature", r.temperature, 2.0)
    in_range("top_p", r.top_p, 1.0)
    if r.stream_options is not None and not r.stream:
        raise Invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
            None,
        )
    for i, tool in enumerate(r.tools or ()):
        if tool.type != "function":
            raise Invalid(
                f"Invalid value: '{tool.type}'. Supported values are: 'function'.",
                f"tools[{i}].type",
                "invalid_value",
            )
    forced = _forced_tool(r)
    limit = r.max_completion_tokens if r.max_completion_tokens is not None else r.max_tokens
    model, fault, after = split_model(r.model)
    return StubRequest(
        request_id=request_id,
        model=model,
        messages=messages,
        max_tokens=limit or 0,
        forced_tool=forced,
        stream=bool(r.stream),
        fault=fault,
        fault_after=after,
        include_usage=bool(r.stream and r.stream_options and r.stream_options.include_usage),
        stop=(r.stop,) if isinstance(r.stop, str) else tuple(r.stop or ()),
    )
