"""The OpenAI Chat Completions request, as msgspec Structs: the one model of
it, which the edge decodes with (``decode``), the ``openai`` adapter writes
the request it sends upstream with (``backends.openai.adapter``), and the
stub reads the requests it serves with (``decode_served``).

Owns what the edge accepts: the message roles (system, developer, user,
assistant with tool calls, tool with its call id), text content parts, tools,
``tool_choice`` and the sampling parameters the wire schema carries; wrong
types, missing fields and out-of-range values become ``InvalidRequest`` with
OpenAI's ``param`` naming the field (``temperature``, ``messages.[0].role``).

Every other top-level field travels in the request's extras
(``CompletionRequest.extras``, dialect ``OpenAIChat``) as the client's own
bytes: the known ones (``EXTRA_FIELDS``: ``logprobs``, ``logit_bias``,
vendor sampling fields such as ``min_p`` ...) are ``msgspec.Raw`` fields of
the request, and any other is kept with its JSON text too (``Decoded``). The
backend then carries, maps or refuses each (``proxy.backends.extras``).
A body holding only known fields is decoded in one pass (the struct forbids
unknown fields); one that holds others is decoded again, leniently, with its
top-level fields as JSON text.

Inside the request the structs forbid unknown fields too, so that a key of
no name in a message, a part, a tool call, a tool, ``tool_choice`` or
``stream_options`` also fails the one pass: ``members.scrub_members`` then takes
out those that ask for nothing (null or empty) and refuses any other,
naming its path (``messages.[1].content.[0].cache_control``). Keys a
previous answer holds when a client sends it back (an assistant message's
``annotations``, a null ``audio`` or ``function_call``, a streamed call's
``index``) and ``stream_options.include_obfuscation`` are fields, mapped to
nothing; an assistant's ``refusal`` is carried as its text, its replayed
``reasoning_content`` (or ``reasoning``) as its reasoning part, a tool
message's ``name`` as the wire message's.

Content parts: ``text`` and ``refusal`` (joined, the message's text), and
in a user or tool message ``image_url`` (``{url, detail}``), ``input_audio``
(``{data, format}``) and ``file`` (``{file_data, file_id, filename}``, one
source given), each as strict as the rest (an unknown key in one is judged
as above). A media part in a system, developer or assistant message is 400
``unsupported_content_type`` naming it, as OpenAI refuses it; a tool
message may hold one (a tool's result that is an image; OpenAI's own API
takes text only there, and its ``openai`` backend maps it). What a media
part means on the wire is ``parts`` (the data URLs and base64 decoded once,
there). A body nested too deeply, or with text that is not UTF-8
(``decoding``), is ``invalid_json``.

Each side's strictness is a switch on the same Structs, not a second set:

- the edge: its one pass decodes ``_Strict``, a subclass that forbids
  unknown fields at the top as the nested Structs do; its second pass is
  ``members.decode_scrubbed``, which judges every member of no name;
- the adapter: ``ChatCompletionRequest`` and ``StreamOptions`` (and the
  user and tool messages and media parts it writes) omit their defaults
  when written (``omit_defaults``, which no decode reads): what the
  adapter does not set is not sent, in the fields' order (which is the
  edge's: msgspec reads a body fastest whose keys come in its Struct's
  order). It writes no field the edge does not read, so none had to be added
  here (one would widen what the edge accepts: it would need a Struct the
  edge's decoder never holds). Its messages and tools are the wire's values
  (``wire.request.decode``), in this API's shape by the schema's design,
  written as they are: no Python object per message is made to send them
  (but for a message with content parts, written with these Structs:
  ``backends.openai.parts``);
- the stub: ``decode_served`` reads with the edge's Structs and types, but
  ignores a key of no name at any depth, as OpenAI's server does: when the
  decode fails on one, every such key is taken out (``apis.lenient``'s
  ``without_unknown``, the Responses stub's too) and the body decoded
  again, so a body with none (what the adapter writes) is read in one pass.
  What the types refuse, the stub says in OpenAI's words
  (``backends.openai.stub_request``).

Pure: no I/O. The decoders are built once at import.
"""

from __future__ import annotations

from typing import Annotated, Literal, NoReturn, TypeAlias

import msgspec
import msgspec.inspect

from flatgate.proxy.apis.decoding import (
    UNDECODABLE,
    is_utf8,
    validation_text,
    why_undecodable,
)
from flatgate.proxy.apis.errors import InvalidRequest, shown
from flatgate.proxy.apis.lenient import without_unknown
from flatgate.proxy.apis.openai_chat.members import (
    Fields,
    decode_scrubbed,
    param_from_error,
    scrub,
    scrub_members,
    struct_info,
    unrecognized,
)
from flatgate.proxy.errors import codes

__all__ = [
    "BODY_ERRORS",
    "EXTRA_FIELDS",
    "AssistantMessage",
    "ChatCompletionRequest",
    "ContentPart",
    "Decoded",
    "DeveloperMessage",
    "Fields",
    "File",
    "FilePart",
    "FunctionCall",
    "FunctionDef",
    "ImageUrl",
    "ImageUrlPart",
    "InputAudio",
    "InputAudioPart",
    "Message",
    "RefusalPart",
    "StreamOptions",
    "SystemMessage",
    "TextPart",
    "ToolCall",
    "ToolChoice",
    "ToolChoiceFunction",
    "ToolChoiceName",
    "ToolDef",
    "ToolMessage",
    "UserMessage",
    "decode",
    "decode_request",
    "decode_scrubbed",
    "decode_served",
    "extras_json",
    "extras_object",
    "not_json",
    "param_from_error",
    "raise_invalid_body",
    "scrub",
    "scrub_members",
    "struct_info",
    "unrecognized",
]


# The structs a request's members are forbid unknown fields, so that a body
# with one fails the one pass and is read again by ``scrub``: a lenient struct
# would drop it in silence. Unknown keys cost nothing on the one pass. The
# parts omit their defaults when written (the adapter writes them): a detail
# or filename not set is not sent (the user and tool messages' name too).
class TextPart(msgspec.Struct, tag_field="type", tag="text", forbid_unknown_fields=True, gc=False):
    text: str


class ImageUrl(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    # An https or http URL, passed on as it is (never fetched), or a
    # ``data:<media type>;base64,...`` URL, decoded once at the edge.
    url: str
    detail: Literal["auto", "low", "high", "original"] | None = None


class ImageUrlPart(
    msgspec.Struct, tag_field="type", tag="image_url", forbid_unknown_fields=True, gc=False
):
    image_url: ImageUrl


class InputAudio(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    # Base64 (not a data URL), decoded once at the edge.
    data: str
    format: Literal["wav", "mp3"]


class InputAudioPart(
    msgspec.Struct, tag_field="type", tag="input_audio", forbid_unknown_fields=True, gc=False
):
    input_audio: InputAudio


class File(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    # A ``data:<media type>;base64,...`` URL, or an uploaded file's id: one of them.
    file_data: str | None = None
    file_id: str | None = None
    filename: str | None = None


class FilePart(msgspec.Struct, tag_field="type", tag="file", forbid_unknown_fields=True, gc=False):
    file: File


class RefusalPart(
    msgspec.Struct, tag_field="type", tag="refusal", forbid_unknown_fields=True, gc=False
):
    refusal: str


ContentPart: TypeAlias = TextPart | ImageUrlPart | InputAudioPart | FilePart | RefusalPart
Content: TypeAlias = str | list[ContentPart]


class FunctionCall(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    name: str
    arguments: str


class ToolCall(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    id: str
    function: FunctionCall
    type: Literal["function"] = "function"
    # A streamed call's position, echoed back by clients that collect deltas.
    index: int | None = None


class SystemMessage(
    msgspec.Struct, tag_field="role", tag="system", forbid_unknown_fields=True, gc=False
):
    content: Content
    name: str | None = None


class DeveloperMessage(
    msgspec.Struct, tag_field="role", tag="developer", forbid_unknown_fields=True, gc=False
):
    content: Content
    name: str | None = None


class UserMessage(
    msgspec.Struct,
    tag_field="role",
    tag="user",
    forbid_unknown_fields=True,
    omit_defaults=True,
    gc=False,
):
    content: Content
    name: str | None = None


class AssistantMessage(
    msgspec.Struct, tag_field="role", tag="assistant", forbid_unknown_fields=True, gc=False
):
    content: Content | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    # Carried as the message's text, after its content (as a refusal part).
    refusal: str | None = None
    # A previous answer's, echoed back (the SDKs' message serialized): its
    # url citations ask the model for nothing; audio and the deprecated
    # function_call only as null (a non-null one is refused by its type).
    annotations: msgspec.Raw = msgspec.Raw()
    audio: None = None
    function_call: None = None
    # The turn's reasoning, replayed (the Agents SDK for DeepSeek models:
    # ``reasoning_content``; ``reasoning`` as vLLM names it): its reasoning part.
    reasoning_content: str | None = None
    reasoning: str | None = None


class ToolMessage(
    msgspec.Struct,
    tag_field="role",
    tag="tool",
    forbid_unknown_fields=True,
    omit_defaults=True,
    gc=False,
):
    content: Content
    tool_call_id: str
    # The legacy function message's name: the wire's message name.
    name: str | None = None


Message: TypeAlias = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage


class FunctionDef(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    name: str
    description: str | None = None
    # Kept as the caller's JSON text: it travels as a string on the wire.
    parameters: msgspec.Raw = msgspec.Raw()
    strict: bool | None = None


class ToolDef(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    type: Literal["function"]
    function: FunctionDef


class ToolChoiceName(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    name: str


class ToolChoiceFunction(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    type: Literal["function"]
    function: ToolChoiceName


ToolChoice: TypeAlias = Literal["none", "auto", "required"] | ToolChoiceFunction


class StreamOptions(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    include_usage: bool = False
    # Padding that hides the deltas' lengths: flatgate's events carry none,
    # whatever the value (OpenAI's default is true); the answer is the same.
    include_obfuscation: bool | None = None


# The one default of the extra fields: a request without any is told by
# identity (``extras_json``).
_ABSENT = msgspec.Raw()
_Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
_Temp = Annotated[float, msgspec.Meta(ge=0.0, le=2.0)]
_Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]
_Positive = Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]
_Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class ChatCompletionRequest(msgspec.Struct, omit_defaults=True, gc=False):
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
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # Kept as JSON text; empty when absent (msgspec.Raw cannot be in a union).
    response_format: msgspec.Raw = msgspec.Raw()
    # Fields without a wire slot: the extras, as the client wrote them
    # (``EXTRA_FIELDS``); ``_ABSENT`` (empty, one object) when absent.
    logprobs: msgspec.Raw = _ABSENT
    top_logprobs: msgspec.Raw = _ABSENT
    logit_bias: msgspec.Raw = _ABSENT
    prediction: msgspec.Raw = _ABSENT
    modalities: msgspec.Raw = _ABSENT
    audio: msgspec.Raw = _ABSENT
    web_search_options: msgspec.Raw = _ABSENT
    service_tier: msgspec.Raw = _ABSENT
    store: msgspec.Raw = _ABSENT
    reasoning_effort: msgspec.Raw = _ABSENT
    verbosity: msgspec.Raw = _ABSENT
    prompt_cache_key: msgspec.Raw = _ABSENT
    prompt_cache_retention: msgspec.Raw = _ABSENT
    safety_identifier: msgspec.Raw = _ABSENT
    # vLLM, SGLang, llama.cpp, Ollama (through their OpenAI-compatible APIs).
    min_p: msgspec.Raw = _ABSENT
    repetition_penalty: msgspec.Raw = _ABSENT
    ignore_eos: msgspec.Raw = _ABSENT
    min_tokens: msgspec.Raw = _ABSENT
    chat_template_kwargs: msgspec.Raw = _ABSENT
    guided_json: msgspec.Raw = _ABSENT
    guided_regex: msgspec.Raw = _ABSENT
    guided_choice: msgspec.Raw = _ABSENT
    guided_grammar: msgspec.Raw = _ABSENT
    structured_outputs: msgspec.Raw = _ABSENT


class _Strict(ChatCompletionRequest, forbid_unknown_fields=True, gc=False):
    """The one-pass decode: a body with a field of no name above fails it."""


# The request's fields with no wire slot, in the struct's order.
EXTRA_FIELDS = ChatCompletionRequest.__struct_fields__[
    ChatCompletionRequest.__struct_fields__.index("logprobs") :
]
_KNOWN = frozenset(ChatCompletionRequest.__struct_fields__)
_FIRST_EXTRA = len(ChatCompletionRequest.__struct_fields__) - len(EXTRA_FIELDS)
_NONE_GIVEN = (_ABSENT,) * len(EXTRA_FIELDS)
_astuple = msgspec.structs.astuple
_KEY_OF = {k: msgspec.json.encode(k) + b":" for k in EXTRA_FIELDS}
_decoder = msgspec.json.Decoder(ChatCompletionRequest)
_strict_decoder = msgspec.json.Decoder(_Strict)
_encode = msgspec.json.encode
_UNKNOWN = "Object contains unknown field"


class Decoded:
    """A decoded, checked request, and its top-level fields' JSON when it
    holds fields of no name the request knows (``None`` otherwise): what
    ``extras_json`` makes the extras of."""

    __slots__ = ("fields", "req")

    def __init__(self, req: ChatCompletionRequest, fields: dict[str, msgspec.Raw] | None) -> None:
        self.req = req
        self.fields = fields

    @property
    def model(self) -> str:
        return self.req.model


def _check_parts(msg: Message, where: str) -> None:
    """Media parts only where OpenAI takes them (a user message; a tool
    message too, whose result may be an image: see the module docstring),
    and a ``file`` part with one source."""
    content = msg.content
    if content is None or isinstance(content, str):
        return
    media = isinstance(msg, UserMessage | ToolMessage)
    for j, part in enumerate(content):
        if isinstance(part, TextPart | RefusalPart):
            continue
        if not media:
            kind = type(part).__struct_config__.tag
            role = type(msg).__struct_config__.tag
            raise InvalidRequest(
                f"Content parts of type '{kind}' are not supported in '{role}' "
                "messages: only in 'user' (and 'tool') messages.",
                param=f"{where}.content.[{j}].type",
                code=codes.UNSUPPORTED_CONTENT_TYPE,
            )
        if isinstance(part, FilePart) and bool(part.file.file_data) == bool(part.file.file_id):
            raise InvalidRequest(
                "Invalid file content part: give one of 'file_data' (a base64 data URL) "
                "and 'file_id'.",
                param=f"{where}.content.[{j}].file",
            )


def _check(req: ChatCompletionRequest) -> None:
    for i, msg in enumerate(req.messages):
        _check_parts(msg, f"messages.[{i}]")
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


def not_json(why: str) -> InvalidRequest:
    """The 400 for a body that is not JSON, in OpenAI's words (every OpenAI
    API's edge)."""
    return InvalidRequest(
        f"We could not parse the JSON body of your request ({why}). "
        "The API expects a JSON payload.",
        code=codes.INVALID_JSON,
    )


# What decoding a body may raise (msgspec's ``ValidationError`` is a
# ``DecodeError``): each is the client's 400 (``raise_invalid_body``).
BODY_ERRORS = (msgspec.DecodeError, *UNDECODABLE)


def raise_invalid_body(exc: msgspec.DecodeError | RecursionError | UnicodeDecodeError) -> NoReturn:
    """Raise the 400 for a body that did not decode (``exc``, one of
    ``BODY_ERRORS``), in OpenAI's words (every OpenAI API's edge)."""
    if isinstance(exc, msgspec.ValidationError):
        text = validation_text(exc)
        raise InvalidRequest(f"Invalid request: {text}", param=param_from_error(text)) from exc
    if isinstance(exc, msgspec.DecodeError):
        raise not_json(str(exc)) from exc
    raise not_json(why_undecodable(exc)) from None


def extras_json(req: ChatCompletionRequest, fields: dict[str, msgspec.Raw] | None = None) -> bytes:
    """The extras' JSON object (``b""`` for none): the known extra fields
    given, then those of ``fields`` (``Decoded.fields``) the request does
    not know, each as sent. ``InvalidRequest`` when one is not UTF-8."""
    # astuple: a fifth of the time of reading the fields one by one
    values = _astuple(req)[_FIRST_EXTRA:]
    if not fields and values == _NONE_GIVEN:
        return b""  # the common request: every field has its slot
    members = [_KEY_OF[k] + v for k, v in zip(EXTRA_FIELDS, values, strict=True) if v]
    return extras_object(members, fields, _KNOWN)


def extras_object(members: list[bytes], fields: Fields | None, known: frozenset[str]) -> bytes:
    """The JSON object of ``members`` (each ``"key":value``), then of the
    fields of ``fields`` that ``known`` does not hold, each as sent and
    appended to ``members`` (every OpenAI API's extras). ``InvalidRequest``
    for a key of flatgate's own (``$``), or when a string in it is not UTF-8."""
    if fields:
        for k, v in fields.items():
            if k in known:
                continue
            if k[:1] == "$":  # flatgate's own extras keys, never a client's
                raise InvalidRequest(f"Unrecognized request argument supplied: {shown(k)}", param=k)
            members.append(_encode(k) + b":" + v)
    text = b"{" + b",".join(members) + b"}"
    if not is_utf8(text):
        raise InvalidRequest(
            "Invalid request: a string in a field flatgate passes on is not valid UTF-8.",
            code=codes.INVALID_JSON,
        )
    return text


def _decode_lenient(body: bytes | memoryview) -> tuple[ChatCompletionRequest, Fields | None]:
    """A body with a member of no name in it (``decode_scrubbed``), and its
    top-level fields' JSON when one of them is unknown."""
    req, fields = decode_scrubbed(_decoder, _INFO, body)
    return req, fields if not _KNOWN.issuperset(fields) else None


_INFO = struct_info(ChatCompletionRequest)


def decode(body: bytes | memoryview) -> Decoded:
    """Decode and validate a request body, with its extras; every failure is
    an ``InvalidRequest``."""
    try:
        unknown = None
        try:
            req: ChatCompletionRequest = _strict_decoder.decode(body)
        except msgspec.ValidationError as exc:
            if not str(exc).startswith(_UNKNOWN):
                raise
            req, unknown = _decode_lenient(body)
    except BODY_ERRORS as exc:
        raise_invalid_body(exc)
    _check(req)
    return Decoded(req, unknown)


def decode_served(body: bytes | memoryview) -> ChatCompletionRequest:
    """The request as a server of the API reads it (the stub): with the
    edge's Structs and their types, but a key of no name is ignored at any
    depth, not judged (see the module docstring). msgspec's errors are
    raised as they come, for the server to say in its own words."""
    try:
        return _decoder.decode(body)
    except msgspec.ValidationError as exc:
        if not str(exc).startswith(_UNKNOWN):
            raise
    return _decoder.decode(without_unknown(body, ChatCompletionRequest))


def decode_request(body: bytes | memoryview) -> ChatCompletionRequest:
    """``decode``'s request alone: its known extra fields are its own, the
    JSON of fields it does not know is ``decode``'s."""
    return decode(body).req
