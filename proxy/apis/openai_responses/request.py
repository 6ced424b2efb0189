"""The OpenAI Responses request (``POST /v1/responses``), as msgspec Structs,
and its one decoder.

Owns what the edge accepts of a Responses request, and which of its fields
travel where (``translate`` writes them):

- Carried in the wire's slots: ``input``, a string or a list of items
  (``message`` items, whose ``type`` may be left out when ``role`` is given,
  roles ``user``, ``assistant``, ``system``, ``developer``, content a string
  or ``input_text`` / ``output_text`` / ``refusal`` / ``input_image`` /
  ``input_file`` parts (``media.content_parts`` says what an image or a
  file part becomes: its base64 decoded once, its bytes held to their
  declared type; ``translate`` calls it; its sources and URL schemes are
  checked here, ``media.check_part``);
  ``function_call``; ``function_call_output``, a string or a list of
  ``input_text`` / ``input_image`` / ``input_file`` parts;
  ``reasoning``, its summary and ``encrypted_content``; ``compaction``, its
  ``encrypted_content``: ``compact`` says what it becomes), ``instructions``,
  ``model``, ``max_output_tokens``, ``temperature``, ``top_p``,
  ``presence_penalty``, ``frequency_penalty`` (the Open Responses
  specification's and the answer's; the Chat Completions ranges),
  ``parallel_tool_calls``, ``tools`` and ``tool_choice`` (``tools``:
  functions, and Codex's ``namespace`` groups flattened), ``text.format``
  (as Chat Completions' ``response_format``), ``metadata``, ``user`` and
  ``stream``. ``previous_response_id`` is the edge's to resolve
  (``endpoint``), ``store`` too (and it travels in the extras).
- Extras, the fields with no slot, as the client sent them, in one JSON
  object (``CompletionRequest.extras``, dialect ``OpenAIResponses``):
  ``include``, ``prompt_cache_key``, ``reasoning``, ``safety_identifier``,
  ``store``, ``truncation``, ``service_tier``, ``top_logprobs``,
  ``max_tool_calls``, ``text`` when it holds more than a format
  (``verbosity``), the tools the wire cannot carry and a ``tool_choice``
  that names one (``tools``), and every top-level field this module does not
  know: OpenAI adds fields often, a Responses-native backend can use them,
  and other backends report what they leave out.
- Refused with a 400 naming the ``param``: ``input_audio`` parts (not a
  Responses part: ``unsupported_content_type``), ``item_reference`` items
  and item types other than the four above (the wire has no slot for a
  hosted tool's call in the history), ``background: true``,
  ``conversation`` and ``prompt`` (flatgate keeps no conversations or
  prompt templates).
- Mapped to nothing: ``stream_options.include_obfuscation`` (flatgate's
  events carry no obfuscation padding), and what a previous answer's items
  hold when sent back: an item's ``status``, an assistant message's
  ``phase``, an ``output_text`` part's ``annotations`` and ``logprobs`` (an
  item's ``id`` is kept in the store, and a reasoning item's is carried).
- Inside an item, a part, ``stream_options`` (and a function tool,
  ``tools``), a key of no name is refused naming its path
  (``input.[0].content.[0].cache_control``) unless it is null or empty (it
  asks for nothing): the structs forbid unknown fields, so a body with one
  fails the one pass, and ``decode_scrubbed`` judges it
  (``openai_chat.request.scrub_members``). A top-level key starting with ``$`` is
  flatgate's own, refused as in the other edges.

Wrong types and out-of-range values are ``InvalidRequest`` naming OpenAI's
``param`` (``input.[2].call_id``); a body nested too deeply or not UTF-8
(``decoding``) is ``invalid_json``. The body is decoded twice: once typed,
once as its top-level keys and their raw JSON (to find the extras and keep
their bytes), which costs about a quarter of the typed decode.

One model for every side. The checks and the extras above are the edge's;
the Structs are the request's, whoever reads or writes one:

- the stub reads the request it serves with ``ResponsesRequest`` too, as
  OpenAI does: a member of no name is ignored, not refused (the switch:
  ``lenient.without_unknown`` drops such members, where the edge's strict
  Structs would fail on one, before the stub's decode; see ``items``), and
  it says what it refuses in OpenAI's words;
- the ``openai-responses`` adapter writes its items and tools with the
  package's Structs (``items.Item``, ``tools.ToolDef``,
  ``tools.ToolChoice``) and its top level with ``WrittenRequest``, the
  switch for writing: ``ResponsesRequest``'s own fields, derived from it,
  each of any type and left out unless given. The edge holds ``tools`` and
  ``text`` as it reads them (each tool as sent, ``text`` typed); the
  adapter writes them otherwise (function tools as Structs; ``text`` as
  members, the client's unknown ones among them, which a typed ``text``
  cannot hold). No field is declared twice, and nothing the adapter writes
  widens what the edge accepts;
- ``omit_defaults`` on the ``text`` and ``reasoning`` Structs is for the
  stub's echo of them; it changes no decode.

Pure: no I/O; the decoders are built once at import.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from flatgate.proxy.apis.decoding import UNDECODABLE, why_undecodable
from flatgate.proxy.apis.errors import InvalidRequest, shown
from flatgate.proxy.apis.openai_chat.request import (
    BODY_ERRORS,
    decode_scrubbed,
    not_json,
    raise_invalid_body,
    struct_info,
)
from flatgate.proxy.apis.openai_responses.items import (
    InputAudio,
    InputFile,
    InputImage,
    InputItem,
    InputText,
    Item,
    OutputText,
    Part,
    ReasoningText,
    Refusal,
)
from flatgate.proxy.apis.openai_responses.media import audio_refused, check_part
from flatgate.proxy.apis.openai_responses.tools import (
    Tools,
    invalid,
    missing,
    read_tool_choice,
    read_tools,
    utf8,
)
from flatgate.proxy.wire.request.writer import ToolSpec
from flatgate.proxy.wire.schema import ToolChoiceMode

__all__ = [
    "Decoded",
    "JsonObjectFormat",
    "JsonSchemaFormat",
    "ResponsesRequest",
    "WrittenRequest",
    "decode_request",
]


class _TextFormat(msgspec.Struct, tag_field="type", tag="text", omit_defaults=True, gc=False):
    pass


class JsonObjectFormat(
    msgspec.Struct, tag_field="type", tag="json_object", omit_defaults=True, gc=False
):
    pass


class JsonSchemaFormat(
    msgspec.Struct, tag_field="type", tag="json_schema", omit_defaults=True, gc=False
):
    name: str
    schema: msgspec.Raw
    strict: bool | None = None
    description: str | None = None


class _TextConfig(msgspec.Struct, omit_defaults=True, gc=False):
    format: _TextFormat | JsonObjectFormat | JsonSchemaFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class _ReasoningConfig(msgspec.Struct, omit_defaults=True, gc=False):
    # New efforts and summary kinds come often: the backend judges the values.
    effort: str | None = None
    summary: str | None = None


class _StreamOptions(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    include_obfuscation: bool | None = None


_Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
_Temp = Annotated[float, msgspec.Meta(ge=0.0, le=2.0)]
_Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]
_Int32 = Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)]


class ResponsesRequest(msgspec.Struct, gc=False):
    """``POST /v1/responses``, as far as flatgate reads it (the module docstring
    says where each field goes)."""

    model: str
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    max_output_tokens: _Int32 | None = None
    temperature: _Temp | None = None
    top_p: _Unit | None = None
    presence_penalty: _Penalty | None = None
    frequency_penalty: _Penalty | None = None
    # Each tool kept raw: a hosted tool travels as the client wrote it.
    tools: list[msgspec.Raw] | None = None
    tool_choice: msgspec.Raw = msgspec.Raw()
    parallel_tool_calls: bool | None = None
    text: _TextConfig | None = None
    reasoning: _ReasoningConfig | None = None
    include: list[str] | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    metadata: Annotated[dict[str, str], msgspec.Meta(max_length=16)] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    stream: bool | None = None
    stream_options: _StreamOptions | None = None
    truncation: Literal["auto", "disabled"] | None = None
    service_tier: str | None = None
    top_logprobs: Annotated[int, msgspec.Meta(ge=0, le=20)] | None = None
    max_tool_calls: _Int32 | None = None
    background: bool | None = None
    conversation: msgspec.Raw = msgspec.Raw()
    prompt: msgspec.Raw = msgspec.Raw()


# ``ResponsesRequest`` as a writer fills it (the ``openai-responses``
# adapter): its fields, in its order, each of any type, left out unless
# given. Derived, not declared: the request's one list of fields, whose
# values the writer holds its own way (function tools as ``tools.ToolDef``,
# ``text`` as members); the items and tools in it are the package's Structs.
WrittenRequest = msgspec.defstruct(
    "WrittenRequest",
    [(name, Any, None) for name in ResponsesRequest.__struct_fields__],
    module=__name__,
    omit_defaults=True,
    gc=False,
)

# The request's fields as JSON keys; every other top-level key is an extra.
_KNOWN = frozenset(ResponsesRequest.__struct_fields__)
# Known fields that travel in the extras, as sent (``text`` too, when it holds
# more than ``format``); the rest have wire slots or are the edge's own.
_EXTRA_FIELDS = frozenset(
    {
        "include",
        "prompt_cache_key",
        "reasoning",
        "safety_identifier",
        "store",
        "truncation",
        "service_tier",
        "top_logprobs",
        "max_tool_calls",
    }
)
# Known fields that never travel in the extras (``text`` and ``tools`` are judged).
_WIRED = _KNOWN - _EXTRA_FIELDS - {"text"}
_KEY_OF = {k: msgspec.json.encode(k) + b":" for k in (*_EXTRA_FIELDS, "text", "tools")}
_NULL = b"null"
_NO_CHOICE = (int(ToolChoiceMode.Unset), "")
_NO_TOOLS = Tools()  # never changed: read_tools makes its own


class Decoded:
    """A decoded, checked request and what decoding learnt of it: the items
    of its input (the stored chain before them once ``endpoint``'s
    ``prepare`` has run), its tools as the wire writes them and the
    namespaced names' origins (``tools.Tools``), the wire's tool choice
    (``ToolChoiceMode``, function name), and the extras' JSON object."""

    __slots__ = ("_tools", "choice", "extras", "fields", "first", "items", "kept", "req")

    def __init__(
        self,
        req: ResponsesRequest,
        fields: dict[str, msgspec.Raw],
        items: list[Item],
        *,
        tools: Tools,
        choice: tuple[int, str],
        extras: bytes,
    ) -> None:
        self.req = req
        # The top-level fields' JSON as sent (extras, and echoed in the answer).
        self.fields = fields
        self.items = items
        # The index in ``items`` of the client's first input item (the stored
        # chain's come before it): ``input.[i]`` is ``items[first + i]``.
        self.first = 0
        self._tools = tools
        self.choice = choice
        self.extras = extras
        # Its input as the store keeps it (``store.list_pieces``), once
        # ``prepare`` has made it; empty: not to be stored.
        self.kept: tuple[bytes, ...] = ()

    @property
    def model(self) -> str:
        return self.req.model

    @property
    def tools(self) -> list[ToolSpec]:
        """The tools as the wire writes them (made at each call: after the
        request is charged for ``expansion``)."""
        return self._tools.written()

    @property
    def names(self) -> dict[str, tuple[str, str]]:
        """A namespaced function's wire name -> (namespace, name)."""
        return self._tools.names

    @property
    def expansion(self) -> int:
        """The bytes ``tools`` writes beyond what the client sent."""
        return self._tools.expansion

    def with_items(self, items: list[Item]) -> Decoded:
        """This request with ``items`` as its input (the stored chain
        prepended: the client's items last)."""
        made = Decoded(
            self.req, self.fields, items, tools=self._tools, choice=self.choice, extras=self.extras
        )
        made.first = self.first + len(items) - len(self.items)
        return made


_decoder = msgspec.json.Decoder(ResponsesRequest)
_fields_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])

# One pass over the body for a request with no field flatgate does not know
# (the common case): ``input`` decoded as ``ResponsesRequest`` types it, the
# other fields kept as their JSON text and then decoded one by one with
# their own types (each is small). A second pass over the whole body, to find
# the fields a typed decode ignores, costs as much again as the input's
# decode at 128 KB; it is taken only when an unknown field is there.
_ONE_PASS = tuple(f for f in msgspec.structs.fields(ResponsesRequest) if f.name != "input")
_OnePass = msgspec.defstruct(
    "_OnePass",
    [
        ("input", ResponsesRequest.__annotations__["input"], None),
        *((f.name, msgspec.Raw, msgspec.Raw()) for f in _ONE_PASS),
    ],
    forbid_unknown_fields=True,
    gc=False,
)
_one_pass = msgspec.json.Decoder(_OnePass)
_FIELD_DECODERS = {f.name: msgspec.json.Decoder(f.type) for f in _ONE_PASS}
_UNKNOWN = "Object contains unknown field"
_INFO = struct_info(ResponsesRequest)


def _decode_one_pass(
    body: bytes | memoryview,
) -> tuple[ResponsesRequest, dict[str, msgspec.Raw]] | None:
    """The request and its fields' JSON in one pass; ``None`` when it holds a
    field ``ResponsesRequest`` does not know (``ValidationError`` for a
    field of the wrong shape, its path as the typed decode gives it)."""
    try:
        head: Any = _one_pass.decode(body)
    except msgspec.ValidationError as exc:
        if str(exc).startswith(_UNKNOWN):
            return None
        raise
    fields: dict[str, msgspec.Raw] = {}
    values: dict[str, object] = {"input": head.input}
    for f in _ONE_PASS:
        raw = getattr(head, f.name)
        if not raw:
            continue
        fields[f.name] = raw
        try:
            values[f.name] = raw if f.type is msgspec.Raw else _FIELD_DECODERS[f.name].decode(raw)
        except msgspec.ValidationError as exc:
            if str(exc).startswith(_UNKNOWN):
                return None  # ``decode_scrubbed`` judges it
            text = str(exc).replace("`$", f"`$.{f.name}", 1)
            if "`$" not in str(exc):
                text = f"{text} - at `$.{f.name}`"
            raise msgspec.ValidationError(text) from None
    if "model" not in values:
        raise msgspec.ValidationError("Object missing required field `model`")
    return ResponsesRequest(**values), fields  # type: ignore[arg-type]


# The parts a message, or a function call's output, may hold.
_PARTS = (InputText, OutputText, Refusal, InputImage, InputFile)


def _check_parts(parts: list[Part], where: str, *, message: bool) -> None:
    for j, part in enumerate(parts):
        if isinstance(part, InputImage | InputFile):
            check_part(part, f"{where}.[{j}]")
            continue
        if isinstance(part, _PARTS):
            continue
        param = f"{where}.[{j}].type"
        if isinstance(part, InputAudio):
            raise audio_refused(param)
        kind = type(part).__struct_config__.tag
        raise invalid(param, f"'{kind}' is not a {'message' if message else 'output'} part.")


_ITEM_TYPES = "message, function_call, function_call_output, reasoning, compaction"


def _check_item(item: Item, where: str) -> None:
    """``item`` held to its type's fields (the decoder allows any of them)."""
    kind = item.type
    if kind is None or kind == "message":
        if item.role is None:
            raise missing(f"{where}.role" if kind else f"{where}.type")
        content = item.content
        if content is None:
            raise missing(f"{where}.content")
        if not isinstance(content, str):
            _check_parts(content, f"{where}.content", message=True)
            if item.role == "assistant":
                for j, held in enumerate(content):
                    if isinstance(held, InputImage | InputFile):
                        raise invalid(
                            f"{where}.content.[{j}].type",
                            "an assistant message holds output_text and refusal parts.",
                        )
    elif kind == "function_call":
        for name in ("call_id", "name", "arguments"):
            if getattr(item, name) is None:
                raise missing(f"{where}.{name}")
    elif kind == "function_call_output":
        if item.call_id is None:
            raise missing(f"{where}.call_id")
        output = item.output
        if output is None:
            raise missing(f"{where}.output")
        if not isinstance(output, str):
            _check_parts(output, f"{where}.output", message=False)
    elif kind == "reasoning":
        for j, part in enumerate(item.content or ()):
            if not isinstance(part, ReasoningText):
                raise invalid(f"{where}.content.[{j}].type", "expected 'reasoning_text'.")
    elif kind == "compaction":
        if item.encrypted_content is None:
            raise missing(f"{where}.encrypted_content")
    elif kind == "item_reference":
        raise InvalidRequest(
            f"Items of type 'item_reference' are not supported ({where}): send the item "
            "itself, or previous_response_id.",
            param=f"{where}.type",
        )
    else:
        raise InvalidRequest(
            f"Items of type '{shown(kind)}' are not supported ({where}): flatgate carries "
            f"{_ITEM_TYPES} items.",
            param=f"{where}.type",
        )


def _check(req: ResponsesRequest) -> None:
    if req.background:
        raise InvalidRequest(
            "background: true is not supported: flatgate answers every response in the "
            "request that asked for it.",
            param="background",
        )
    if req.conversation or req.prompt:
        for name, what in (("conversation", "conversations"), ("prompt", "prompt templates")):
            if bytes(getattr(req, name)) not in (b"", _NULL):
                raise InvalidRequest(
                    f"'{name}' is not supported: flatgate keeps no {what}; send the input "
                    "(or previous_response_id).",
                    param=name,
                )
    if not req.input and req.previous_response_id is None:
        raise missing("input")
    if isinstance(req.input, list):
        for i, item in enumerate(req.input):
            kind = item.type
            if (kind is None or kind == "message") and item.role and type(item.content) is str:
                continue  # the common item, checked in one line
            _check_item(item, f"input.[{i}]")
    fmt = req.text.format if req.text is not None else None
    if fmt is not None and type(fmt) is JsonSchemaFormat:
        schema = bytes(fmt.schema)
        if not schema.lstrip().startswith(b"{"):
            raise invalid("text.format.schema", "expected an object.")
        utf8(schema, "text.format.schema")


def _extras(
    req: ResponsesRequest, fields: dict[str, msgspec.Raw], tools: Tools, choice: bytes
) -> bytes:
    """The extras' JSON object: the fields the wire has no slot for, as sent
    (``b""``: none)."""
    parts: list[bytes] = []
    for key, raw in fields.items():
        if key in _WIRED:
            continue
        data = bytes(raw)
        if key in _EXTRA_FIELDS:
            if data != _NULL:
                parts.append(_KEY_OF[key] + utf8(data, key))
        elif key == "text":
            config = req.text
            if config is not None and (
                config.verbosity is not None or _fields_decoder.decode(data).keys() - {"format"}
            ):
                parts.append(_KEY_OF[key] + utf8(data, key))
        elif key not in _KNOWN:
            if key[:1] == "$":  # flatgate's own extras keys, never a client's
                raise InvalidRequest(
                    f"Unrecognized request argument supplied: {shown(key)}", param=key
                )
            parts.append(msgspec.json.encode(key) + b":" + utf8(data, key))
    if tools.hosted:
        parts.append(_KEY_OF["tools"] + b"[" + b",".join(tools.hosted) + b"]")
    if choice:
        parts.append(b'"tool_choice":' + choice)
    return b"{" + b",".join(parts) + b"}" if parts else b""


def decode_request(body: bytes | memoryview) -> Decoded:
    """Decode and check a request body; every failure is an ``InvalidRequest``."""
    try:
        got = _decode_one_pass(body)
        if got is None:
            req, fields = decode_scrubbed(_decoder, _INFO, body)
        else:
            req, fields = got
    except BODY_ERRORS as exc:
        raise_invalid_body(exc)
    _check(req)
    try:  # each tool is decoded again, a few frames deeper: the same bound holds
        tools = read_tools(req.tools) if req.tools else _NO_TOOLS
        if req.tool_choice:
            choice, choice_extra = read_tool_choice(bytes(req.tool_choice), tools)
        else:
            choice, choice_extra = _NO_CHOICE, b""
    except UNDECODABLE as exc:
        raise not_json(why_undecodable(exc)) from None
    inp = req.input
    items: list[Item] = [Item(role="user", content=inp)] if isinstance(inp, str) else [*(inp or ())]
    if tools.hosted or choice_extra or not _WIRED.issuperset(fields):
        extras = _extras(req, fields, tools, choice_extra)
    else:
        extras = b""  # the common request: every field has its slot
    return Decoded(req, fields, items, tools=tools, choice=choice, extras=extras)
