"""The ``openai-responses`` backend: servers that speak OpenAI's Responses API
(OpenAI itself, vLLM, Ollama, LM Studio).

Request: ``POST {url}/responses`` (``url`` as for ``openai``: the API base
with its version) with ``stream: true``, or ``stream: false`` for an answer
the client did not stream (``JsonAdapter.whole_for``: unless the backend's
``whole_answers`` is off), and ``store: false`` always: flatgate stores
responses itself, at the edge, and chains ``previous_response_id`` there, so
the backend is never asked to keep anything (a client's ``store`` and
``previous_response_id`` are flatgate's, never sent). The credential,
headers, timeouts, TLS, readiness (``GET {url}/models``) and the statuses of
a refusal are the ``openai`` adapter's. The body, from the decoded request:

- the first message, when it is a system message, -> ``instructions``; every
  other system, developer and user message -> a ``message`` item with
  ``input_text``; an assistant turn -> its reasoning items, then a
  ``message`` item with ``output_text``, then a ``function_call`` item per
  tool call; a tool result -> ``function_call_output`` (a failed call's text
  marked as the ``openai`` adapter marks it);
- an assistant turn's reasoning parts of the Responses dialect that carry
  ``encrypted_content`` -> ``reasoning`` items (id, summary, encrypted
  content): with ``store: false`` an item without its encrypted content
  cannot be resolved by the server, so such a part, and reasoning of another
  dialect (an Anthropic signature), is left out;
- tools -> function tools (``strict`` sent always, ``false`` when the request
  says nothing: the Responses API's own default would be ``true``),
  tool_choice, parallel_tool_calls, max_tokens -> ``max_output_tokens``,
  temperature, top_p, response_format -> ``text.format`` (the Chat
  Completions shape flattened), metadata, user;
- left out: stop, seed, presence/frequency penalties, n, top_k, a message's
  ``name`` (the Responses API has none of them).

The client's extras (``backends.extras``): Responses ones are merged at the
top level (never over ``model``, ``input`` or ``stream``; ``text`` merged
member by member with the mapped ``text.format``), except hosted tools,
which are appended to ``tools`` only when the backend's ``hosted_tools``
names them (otherwise left out: vLLM and Ollama do not run OpenAI's tools);
Chat Completions ones are mapped (``reasoning_effort`` ->
``reasoning.effort``, ``verbosity`` -> ``text.verbosity``, the fields of the
same name) and the rest left out; any other dialect's are left out. What is
left out is named in ``Outbound.omitted``.

Embeddings: ``POST {url}/embeddings``, as the ``openai`` adapter sends them
(``OpenAIConventions``): a server of the Responses API is an
OpenAI-compatible one.

The stream: ``backends.responses.stream``; the whole answer:
``backends.responses.whole``. No I/O.
"""

from __future__ import annotations

from typing import Any

import msgspec

from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.backends.extras import (
    FLATGATE_OWN,
    Fields,
    chat_for_responses,
    messages_for_chat,
    nested,
    read_extras,
    report_all,
    splice,
    tool_family,
    tool_types,
    tools_name,
)
from flatgate.proxy.backends.json_api import failed_result
from flatgate.proxy.backends.openai.adapter import OpenAIConventions
from flatgate.proxy.backends.responses.config import ResponsesConfig
from flatgate.proxy.backends.responses.stream import ResponsesStream
from flatgate.proxy.backends.responses.whole import ResponsesWhole
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import Message, Request
from flatgate.proxy.wire.schema import ApiDialect, ToolChoiceMode

__all__ = ["ResponsesAdapter", "encode_request"]

# -- the request ---------------------------------------------------------------


class _InputText(msgspec.Struct, tag="input_text", tag_field="type", gc=False):
    text: str


class _OutputText(msgspec.Struct, tag="output_text", tag_field="type", gc=False):
    text: str


class _MessageItem(msgspec.Struct, tag="message", tag_field="type", gc=False):
    role: str
    content: list[_InputText] | list[_OutputText]


class _FunctionCall(msgspec.Struct, tag="function_call", tag_field="type", gc=False):
    call_id: str
    name: str
    arguments: str


class _FunctionOutput(msgspec.Struct, tag="function_call_output", tag_field="type", gc=False):
    call_id: str
    output: str


class _Summary(msgspec.Struct, tag="summary_text", tag_field="type", gc=False):
    text: str


class _Reasoning(msgspec.Struct, tag="reasoning", tag_field="type", omit_defaults=True):
    summary: list[_Summary]
    encrypted_content: str
    id: str = ""


_Item = _MessageItem | _FunctionCall | _FunctionOutput | _Reasoning


class _FunctionTool(msgspec.Struct, tag="function", tag_field="type", omit_defaults=True):
    name: str
    parameters: msgspec.Raw
    # Required: the API's default is true, a Chat Completions client's false.
    strict: bool
    description: str = ""


class _Forced(msgspec.Struct, tag="function", tag_field="type", gc=False):
    name: str


class _ResponsesRequest(msgspec.Struct, omit_defaults=True, gc=False):
    model: str
    input: list[_Item]
    # Required fields: omit_defaults would drop them if they had defaults.
    stream: bool
    store: bool
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    # Function tools, then the hosted tools the backend runs (as sent).
    tools: list[Any] | None = None
    tool_choice: str | _Forced | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, msgspec.Raw] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None


_FIELDS = frozenset(_ResponsesRequest.__struct_fields__)
# Never taken from Responses extras: the adapter's own (`tools` and `text`
# are merged, not replaced).
_OWN = frozenset({"model", "input", "stream", "tools", "text"}) | FLATGATE_OWN
_NO_SCHEMA = msgspec.Raw(b'{"type":"object","properties":{}}')
_CHOICES: dict[int, str] = {
    ToolChoiceMode.Auto: "auto",
    ToolChoiceMode.None_: "none",
    ToolChoiceMode.Required: "required",
}
_DIALECT = int(ApiDialect.OPENAI_RESPONSES)
_CHAT = int(ApiDialect.OPENAI_CHAT)
_MESSAGES = int(ApiDialect.ANTHROPIC_MESSAGES)
_encode = msgspec.json.Encoder().encode
_decode_fields = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_JSON_SCHEMA = msgspec.Raw(b'"json_schema"')


def _reasoning(parts: list[ReasoningPart], where: str, omitted: list[str]) -> list[_Item]:
    out: list[_Item] = []
    for j, part in enumerate(parts):
        if part.dialect != _DIALECT or not part.opaque:
            omitted.append("reasoning")
            continue
        try:
            encrypted = part.opaque.decode()
        except UnicodeDecodeError:
            raise Untranslatable(
                f"{where}.reasoning[{j}]: encrypted content that is not UTF-8"
            ) from None
        summary = [_Summary(part.text)] if part.text else []
        out.append(_Reasoning(summary, encrypted, part.id))
    return out


def _input(messages: list[Message], omitted: list[str]) -> tuple[str | None, list[_Item]]:
    """``instructions`` and the input items (see the module docstring)."""
    instructions = None
    items: list[_Item] = []
    for i, m in enumerate(messages):
        role = m.role
        if m.name:
            omitted.append("name")
        if role == "assistant":
            if m.reasoning:
                items += _reasoning(m.reasoning, f"messages[{i}]", omitted)
            if m.content:
                items.append(_MessageItem("assistant", [_OutputText(m.content)]))
            for call in m.tool_calls or ():
                fn = call.function
                items.append(_FunctionCall(call.id, fn.name, fn.arguments or "{}"))
        elif role == "tool":
            text = m.content or ""
            items.append(
                _FunctionOutput(m.tool_call_id, failed_result(text) if m.is_error else text)
            )
        elif i == 0 and role == "system" and m.content is not None:
            instructions = m.content
        else:
            items.append(_MessageItem(role, [_InputText(m.content or "")]))
    return instructions, items


def _text_format(response_format: str) -> msgspec.Raw:
    """Chat Completions' ``response_format`` as ``text.format``: a
    ``json_schema`` format's members move up a level (``name``, ``schema``,
    ``strict``, ``description``); ``text`` and ``json_object`` are alike."""
    data = response_format.encode()
    try:
        fields = _decode_fields(data)
        inner = fields.get("json_schema")
        if inner is not None:
            flat = {"type": _JSON_SCHEMA, **_decode_fields(inner)}
            return msgspec.Raw(_encode(flat))
    except msgspec.DecodeError:
        raise Untranslatable("response_format: not a JSON object") from None
    return msgspec.Raw(data)


def _tools(req: Request) -> list[Any]:
    return [
        _FunctionTool(
            t.function.name,
            t.function.parameters or _NO_SCHEMA,
            bool(t.function.strict),
            t.function.description,
        )
        for t in req.tools
    ]


def _left_out(req: Request, omitted: list[str]) -> None:
    for name, given in (
        ("stop", bool(req.stop)),
        ("seed", req.seed is not None),
        ("presence_penalty", req.presence_penalty is not None),
        ("frequency_penalty", req.frequency_penalty is not None),
        ("n", req.n > 1),
        ("top_k", bool(req.top_k)),
    ):
        if given:
            omitted.append(name)


def _same_dialect(
    fields: Fields, out: _ResponsesRequest, hosted: frozenset[str], omitted: list[str]
) -> dict[str, msgspec.Raw | Fields]:
    """Responses extras: hosted tools appended to ``out.tools`` when the
    backend runs them; the rest, to splice into the body."""
    extra: dict[str, msgspec.Raw | Fields] = {}
    for key, raw in fields.items():
        if key == "tools":
            for kind, tool in tool_types(raw):
                if tool_family(kind) in hosted:
                    out.tools = [*(out.tools or ()), tool]
                else:
                    omitted.append(tools_name(kind))
        elif key == "text":
            extra["text"] = dict(nested(raw, "text"))
        elif key not in _OWN:
            extra[key] = raw
    return extra


def encode_request(
    req: Request,
    *,
    model: str,
    hosted_tools: tuple[str, ...] = (),
    omitted: list[str] | None = None,
    drop_unsupported: bool = False,
    whole: bool = False,
) -> bytes:
    """The Responses API JSON body for ``req`` (``whole``: asking for the
    answer whole, ``stream: false``); ``Untranslatable`` if it cannot be (an
    extra field of another dialect with no mapping, unless
    ``drop_unsupported``). What it leaves out is appended to ``omitted``."""
    if omitted is None:
        omitted = []
    _left_out(req, omitted)
    instructions, items = _input(req.messages, omitted)
    choice: str | _Forced | None = None
    if req.tool_choice == ToolChoiceMode.Function:
        choice = _Forced(req.tool_choice_name)
    elif req.tool_choice:
        choice = _CHOICES.get(req.tool_choice)
    out = _ResponsesRequest(
        model=model,
        input=items,
        stream=not whole,
        store=False,
        instructions=instructions,
        max_output_tokens=req.max_tokens or None,
        temperature=req.temperature,
        top_p=req.top_p,
        tools=_tools(req) or None,
        tool_choice=choice,
        parallel_tool_calls=req.parallel_tool_calls if req.tools else None,
        text={"format": _text_format(req.response_format)} if req.response_format else None,
        metadata=req.metadata or None,
        user=req.user or None,
    )
    extra: dict[str, msgspec.Raw | Fields] = {}
    if req.extras:
        fields = read_extras(req.extras)
        if req.extras_dialect == _DIALECT:
            extra = _same_dialect(fields, out, frozenset(hosted_tools), omitted)
        elif req.extras_dialect == _CHAT:
            extra = chat_for_responses(fields, omitted, drop_unsupported)
        elif req.extras_dialect == _MESSAGES:
            # As for Chat Completions: an effort, from output_config or a
            # thinking budget, is the Responses API's reasoning.effort.
            for _, effort in messages_for_chat(fields, omitted, drop_unsupported):
                extra = {"reasoning": {"effort": msgspec.Raw(effort)}}
        else:
            report_all(fields, req.extras_dialect, omitted, drop_unsupported)
    if not extra:
        return _encode(out)
    text = extra.pop("text", None)
    if isinstance(text, dict):  # the client's members win over the mapped format
        out.text = {**(out.text or {}), **text}
    spliced = []
    for name, value in extra.items():
        if name in _FIELDS:  # the client's own value wins
            setattr(out, name, None)
        spliced.append((name, _encode(value) if isinstance(value, dict) else bytes(value)))
    return splice(_encode(out), spliced)


class ResponsesAdapter(OpenAIConventions):
    """``openai``'s conventions (credential, probe, refusals), the Responses body,
    its stream and its whole answer."""

    protocol = "openai-responses"
    path = "/responses"

    def __init__(self, config: ResponsesConfig) -> None:
        super().__init__(config)
        self._hosted = config.hosted_tools

    def encode(self, req: Request, model: str, omitted: list[str], whole: bool) -> bytes:
        return encode_request(
            req,
            model=model,
            hosted_tools=self._hosted,
            omitted=omitted,
            drop_unsupported=self._drop,
            whole=whole,
        )

    def translator(
        self, request_id: str, model: str, whole: bool = False
    ) -> ResponsesStream | ResponsesWhole:
        if whole:
            return ResponsesWhole(request_id, self.model or model)
        return ResponsesStream(request_id, self.model or model)
