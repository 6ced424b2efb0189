"""The OpenAI Chat Completions request as the stub validates it.

The stub reads the request with the one model of it, the Structs the edge
decodes with (``apis.openai_chat.request``), as OpenAI's server does: a key
of no name is ignored at any depth (the switch, ``request.decode_served``).
What the Structs' types refuse is said in OpenAI's words (``_refused``): a
missing or null ``model`` ("you must provide a model parameter"), an empty
``messages`` (``empty_array``), an unknown role or content part type, a
token limit or ``n`` below 1 (``integer_below_min_value``), ``temperature``
or ``top_p`` out of range, a ``tool_choice`` or tool ``type`` not allowed
(``invalid_value``, with the values allowed), and a null ``messages``,
``content``, ``tool_call_id`` or text part's ``text``, which is missing
(``missing_required_parameter``); any other as ``invalid_type``.
``to_stub_request`` then checks the rules a type cannot say and reads out a
``StubRequest``: a non-empty ``model``, an assistant message with content or
tool calls, a tool message with a ``tool_call_id``, text parts (and an
assistant's refusal parts), and in a user or tool message ``image_url``,
``input_audio`` and ``file`` parts, read back to the wire's content parts
(``apis.openai_chat.parts``: data URLs and base64 decoded, a part that does
not decode an ``invalid_value`` naming it) and echoed as
``dialect.described`` says them (kind, media type, bytes, digest), one
choice (``n``), ``stream_options`` only with ``stream``, tool parameters
that are an object, and a named ``tool_choice`` only with that tool. The
function tools are read out as the tools offered (``StubRequest.offered``,
none with ``tool_choice: "none"``), for the stub's ``offered`` tool mode.

Reading with the edge's Structs, the stub holds a request to the model's
bounds and types, which are OpenAI's: ``seed`` an int64, penalties in
[-2, 2], a tool call's ``type`` ``function`` and its ``arguments`` given, a
tool's and a forced tool choice's ``type`` given,
``stream_options.include_usage`` a boolean; the legacy ``function`` role is
refused (a tool message carries a tool's result). One bound it does not
hold: like vLLM, it takes any number of ``stop`` sequences (OpenAI takes 4;
flatgate's Anthropic clients may send more): a body with more is read again
without them, and they are put back (``_with_stops``).

Every failure is an ``Invalid`` carrying OpenAI's message, ``param``
(``messages[0].role``) and ``code``; ``decode_openai``, ``in_openai_words``,
``not_json``, ``missing``, ``at_least`` and ``in_range`` (and their
refusals, ``below_minimum`` and ``out_of_range``) say them as OpenAI does,
for every OpenAI API the stub serves (``responses.stub_request`` and
``stub.embeddings`` use them too). No I/O.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from flatgate.proxy.apis.errors import InvalidRequest
from flatgate.proxy.apis.openai_chat.parts import has_media, parts_of
from flatgate.proxy.apis.openai_chat.request import (
    AssistantMessage,
    ChatCompletionRequest,
    DeveloperMessage,
    FilePart,
    Message,
    RefusalPart,
    SystemMessage,
    TextPart,
    ToolChoiceFunction,
    ToolMessage,
    UserMessage,
    decode_served,
)
from flatgate.proxy.backends.dialect import OfferedTool, StubRequest, described, split_model
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.validation import quoted_span, read_validation
from flatgate.proxy.wire.schema import Role

__all__ = [
    "Invalid",
    "at_least",
    "below_minimum",
    "decode_chat_request",
    "decode_openai",
    "in_openai_words",
    "in_range",
    "missing",
    "not_json",
    "number_at",
    "out_of_range",
    "to_stub_request",
]

_T = TypeVar("_T")
_ROLES: dict[type, Role] = {
    SystemMessage: Role.System,
    DeveloperMessage: Role.Developer,
    UserMessage: Role.User,
    AssistantMessage: Role.Assistant,
    ToolMessage: Role.Tool,
}
_ROLE_LIST = "'system', 'assistant', 'user', 'function', 'tool', and 'developer'"
_PART_TYPES = ("text", "image_url", "input_audio", "refusal", "audio", "file")
_CHOICES = "'none', 'auto', and 'required'"
_INT32_MAX = 2**31 - 1
# The sampling fields' ranges, from 0 to these.
_RANGES = {"temperature": 2.0, "top_p": 1.0}
# Fields a request may hold as null that are missing if so (the others' null
# is a wrong type): by their path, an index as 0.
_NULL_IS_MISSING = {
    ("messages",),
    ("messages", 0, "content"),
    ("messages", 0, "tool_call_id"),
    ("messages", 0, "content", 0, "text"),
}
_fields = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_number = msgspec.json.Decoder(int | float).decode
_parameters = msgspec.json.Decoder(dict[str, object] | None).decode
_stops = msgspec.json.Decoder(list[str]).decode
_encode = msgspec.json.encode


class Invalid(FlatgateError, ValueError):
    """A request OpenAI would refuse (with a 400, unless ``status`` says);
    ``vendor_code`` is the ``code`` OpenAI's error carries."""

    default = codes.INVALID_REQUEST

    def __init__(
        self, message: str, param: str | None = None, code: str | None = None, status: int = 400
    ) -> None:
        super().__init__(message, param=param, status=status)
        self.vendor_code = code


def not_json() -> Invalid:
    """A body that is not JSON, as OpenAI says it."""
    return Invalid(
        "We could not parse the JSON body of your request. (HINT: This likely means you "
        "aren't using your HTTP library correctly. The OpenAI API expects a JSON payload.)"
    )


def decode_openai(decoder: msgspec.json.Decoder[_T], body: bytes) -> _T:
    """The body decoded by ``decoder``; ``Invalid`` naming the field, as OpenAI says it."""
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise in_openai_words(str(exc)) from None
    except msgspec.DecodeError:
        raise not_json() from None


def in_openai_words(message: str) -> Invalid:
    """msgspec's validation ``message`` as OpenAI says a refusal: a missing
    field, or a wrong type (``invalid_type``), naming the field."""
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
        raise below_minimum(param, value, low)


def in_range(param: str, value: float | None, high: float) -> None:
    if value is not None and not 0 <= value <= high:
        raise out_of_range(param, value, high)


def below_minimum(param: str, value: float, low: int = 1) -> Invalid:
    """``at_least``'s refusal."""
    return Invalid(
        f"Invalid '{param}': integer below minimum value. Expected a value >= {low}, "
        f"but got {value} instead.",
        param,
        "integer_below_min_value",
    )


def out_of_range(param: str, value: float, high: float) -> Invalid:
    """``in_range``'s refusal."""
    return Invalid(
        f"Invalid '{param}': expected a value between 0 and {high:g}, but got {value:g}.",
        param,
        "invalid_value",
    )


def _no_model() -> Invalid:
    return Invalid("you must provide a model parameter", None, None)


def _not_one_of(value: str, param: str, allowed: str) -> Invalid:
    return Invalid(
        f"Invalid value: '{value}'. Supported values are: {allowed}.", param, "invalid_value"
    )


def number_at(body: bytes, name: str) -> float:
    """The number the top-level field ``name`` of a JSON object holds, which
    a msgspec message that refuses it does not say."""
    value: float = _number(_fields(body)[name])
    return value


def _part_type(kind: str, param: str) -> Invalid:
    if kind in _PART_TYPES:
        return Invalid(
            f"Invalid value: '{kind}'. The stub accepts 'text' content parts here (media "
            "parts in user and tool messages, an assistant's 'refusal' parts).",
            param,
            "invalid_value",
        )
    return _not_one_of(kind, param, ", ".join(f"'{t}'" for t in _PART_TYPES))


def _out_of_bounds(param: str, reason: str, body: bytes) -> Invalid:
    """A top-level number or list the model's bounds refuse, in OpenAI's words."""
    if param in ("max_tokens", "max_completion_tokens", "n"):
        value = number_at(body, param)
        if value < 1:
            return below_minimum(param, value, 1)
        if param == "n":
            return Invalid("The stub answers one choice: 'n' must be 1.", "n", "unsupported_value")
        return Invalid(
            f"Invalid '{param}': integer above maximum value. Expected a value <= "
            f"{_INT32_MAX}, but got {value} instead.",
            param,
            "integer_above_max_value",
        )
    if param in _RANGES:
        return out_of_range(param, number_at(body, param), _RANGES[param])
    return Invalid(f"Invalid '{param}': {reason}.", param, "invalid_value")


def _refused(message: str, body: bytes) -> Invalid:
    """What the Structs refused (msgspec's ``message``), in OpenAI's words."""
    v = read_validation(message)
    path, reason = v.path, v.reason
    param = v.where()
    if (not path and v.missing == "model") or (path == ("model",) and reason.endswith("`null`")):
        return _no_model()
    if v.missing:
        return missing(v.where(field=v.missing))
    shape = tuple(0 if isinstance(p, int) else p for p in path)
    if shape in _NULL_IS_MISSING and reason.endswith("got `null`"):
        return missing(param)
    span = quoted_span(message)
    value = message[span[0] : span[1]] if span else ""
    if reason.startswith("Invalid value '"):  # a tagged union's tag
        if shape == ("messages", 0, "role"):
            if value == "function":
                return Invalid(
                    "Invalid value: 'function'. The stub does not take the legacy 'function' "
                    "role: send the result as a 'tool' message.",
                    param,
                    "invalid_value",
                )
            return _not_one_of(value, param, _ROLE_LIST)
        if shape == ("messages", 0, "content", 0, "type"):
            return _part_type(value, param)
    if reason.startswith("Invalid enum value '"):
        if shape == ("tool_choice",):
            return _not_one_of(value, param, _CHOICES)
        if shape[-1:] == ("type",):
            return _not_one_of(value, param, "'function'")
    if shape == ("messages",) and "length >= 1" in reason:
        return Invalid(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but "
            "got an empty array instead.",
            "messages",
            "empty_array",
        )
    if len(path) == 1 and (" >= " in reason or " <= " in reason):
        return _out_of_bounds(param, reason, body)
    return in_openai_words(message)


def decode_chat_request(body: bytes) -> ChatCompletionRequest:
    """The body as the model's ``ChatCompletionRequest``, keys of no name
    ignored; raises ``Invalid`` naming the field."""
    try:
        try:
            return decode_served(body)
        except msgspec.ValidationError as exc:
            if read_validation(str(exc)).path != ("stop",) or "length <= " not in str(exc):
                raise
        return _with_stops(body)
    except msgspec.ValidationError as exc:
        raise _refused(str(exc), body) from None
    except msgspec.DecodeError:
        raise not_json() from None


def _with_stops(body: bytes) -> ChatCompletionRequest:
    """A request with more stop sequences than the model's 4 (OpenAI's
    bound), read as vLLM takes it: the stub echoes up to any of them."""
    fields = _fields(body)
    try:
        stop = _stops(fields.pop("stop"))
    except msgspec.ValidationError as exc:  # a sequence that is no string
        raise msgspec.ValidationError(str(exc).replace(" - at `$", " - at `$.stop")) from None
    req = decode_served(_encode(fields))
    req.stop = stop
    return req


def _text(message: Message, where: str) -> str:
    """A message's text: the string, or its text (and, for the assistant,
    refusal) parts; a user or tool message with media parts is its parts
    as the echo describes them (``dialect.described``: their digests)."""
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(message, UserMessage | ToolMessage) and has_media(content):
        try:
            return described(parts_of(content, f"{where}.content", "[{}]"))
        except InvalidRequest as exc:
            raise Invalid(exc.message, exc.param, "invalid_value") from None
    assistant = isinstance(message, AssistantMessage)
    out = []
    for j, part in enumerate(content):
        if isinstance(part, TextPart):
            out.append(part.text)
        elif isinstance(part, RefusalPart) and assistant:
            out.append(part.refusal)
        else:
            kind = str(type(part).__struct_config__.tag)
            raise _part_type(kind, f"{where}.content[{j}].type")
    return "".join(out)


def _message(i: int, m: Message) -> tuple[int, str]:
    where = f"messages[{i}]"
    if isinstance(m, ToolMessage) and not m.tool_call_id:
        raise missing(f"{where}.tool_call_id")
    if isinstance(m, AssistantMessage) and m.content is None and not m.tool_calls:
        raise Invalid(
            "Invalid value for 'content': expected a string, got null.",
            f"{where}.content",
            "invalid_value",
        )
    if isinstance(m.content, list):
        for j, part in enumerate(m.content):
            if isinstance(part, FilePart) and bool(part.file.file_data) == bool(part.file.file_id):
                param = f"{where}.content[{j}].file"
                raise Invalid(
                    "Invalid file content part: give one of 'file_data' and 'file_id'.",
                    param,
                    "invalid_value",
                )
    return _ROLES[type(m)], _text(m, where)


def _forced_tool(r: ChatCompletionRequest) -> str:
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
    if not isinstance(choice, ToolChoiceFunction):
        return ""
    if choice.function.name not in {t.function.name for t in r.tools}:
        raise Invalid(
            f"Invalid 'tool_choice': function '{choice.function.name}' is not one of 'tools'.",
            "tool_choice.function.name",
            "invalid_value",
        )
    return choice.function.name


def _check_parameters(r: ChatCompletionRequest) -> None:
    """Each tool's parameters an object (or null), as OpenAI types them."""
    for i, tool in enumerate(r.tools or ()):
        params = bytes(tool.function.parameters)
        if not params or params.startswith(b"{"):
            continue
        try:
            _parameters(params)
        except msgspec.ValidationError as exc:
            param = f"tools[{i}].function.parameters"
            raise Invalid(f"Invalid type for '{param}': {exc}", param, "invalid_type") from None


def _offered(r: ChatCompletionRequest) -> tuple[OfferedTool, ...]:
    """The function tools the model may call (none with ``tool_choice: "none"``)."""
    if r.tool_choice == "none":
        return ()
    return tuple(
        OfferedTool(t.function.name, bytes(t.function.parameters).decode()) for t in r.tools or ()
    )


def to_stub_request(r: ChatCompletionRequest, request_id: str) -> StubRequest:
    """Check what the types cannot say, and read out the ``StubRequest``."""
    if not r.model:
        raise _no_model()
    messages = tuple(_message(i, m) for i, m in enumerate(r.messages))
    if r.n is not None and r.n > 1:
        raise Invalid("The stub answers one choice: 'n' must be 1.", "n", "unsupported_value")
    if r.stream_options is not None and not r.stream:
        raise Invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
            None,
        )
    _check_parameters(r)
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
        offered=_offered(r),
    )
