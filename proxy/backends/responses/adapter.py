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
a refusal are the ``openai`` adapter's. The body, from the decoded request,
written with the Responses API's one model (``apis.openai_responses``: its
items, tools and tool choice; its top level ``request.WrittenRequest``, the
request's own fields):

- the first message, when it is a system message, -> ``instructions``; every
  other system, developer and user message -> a ``message`` item with
  ``input_text``; an assistant turn -> its reasoning items, then a
  ``message`` item with ``output_text``, then a ``function_call`` item per
  tool call; a tool result -> ``function_call_output`` (a failed call's text
  marked as the ``openai`` adapter marks it);
- a message with content parts (an image, a document, a file) -> a
  ``message`` item of its role whose content is the parts as the Responses
  API writes them (``parts.written_parts``: ``input_text``,
  ``input_image``, ``input_file``; what it refuses or leaves out), a tool
  result with parts -> ``function_call_output`` with that content list (a
  failed call's first text part marked); an assistant turn's parts must
  be text (joined into its ``output_text``);
- an assistant turn's reasoning parts of the Responses dialect that carry
  ``encrypted_content`` -> ``reasoning`` items (id, summary, encrypted
  content): with ``store: false`` an item without its encrypted content
  cannot be resolved by the server, so such a part, and reasoning of another
  dialect (an Anthropic signature), is left out; a part that is another
  server's ``compaction`` item (``apis.openai_responses.compact``: its id
  ``cmp_...``) -> that ``compaction`` item;
- tools -> function tools (``strict`` sent always, ``false`` when the request
  says nothing: the Responses API's own default would be ``true``),
  tool_choice, parallel_tool_calls, max_tokens -> ``max_output_tokens``,
  temperature, top_p, presence_penalty, frequency_penalty (the Open
  Responses specification's request has both), response_format ->
  ``text.format`` (the Chat Completions shape flattened), metadata, user;
- left out: stop, seed, n, top_k, a message's ``name`` (the Responses API
  has none of them).

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

Azure OpenAI: a backend with Azure's keys (``backends.azure``) gets
``AzureResponsesAdapter``, this adapter with Azure's conventions over it
(``openai.azure``: its URL, credential, readiness and content-filter
refusal); ``responses_adapter`` chooses.

A compaction (``apis.openai_responses.compact``) to a backend whose
``compact`` is on: ``POST {url}/responses/compact``
(``backends.responses.compact``); to any other, the request it is.

The stream: ``backends.responses.stream``; the whole answer:
``backends.responses.whole``. No I/O.
"""

from __future__ import annotations

from typing import Any, cast

import msgspec

from flatgate.proxy.apis.openai_responses.compact import compaction_item
from flatgate.proxy.apis.openai_responses.items import (
    InputText,
    Item,
    ItemRole,
    OutputText,
    SummaryText,
)
from flatgate.proxy.apis.openai_responses.request import WrittenRequest
from flatgate.proxy.apis.openai_responses.tools import ToolChoice, ToolDef
from flatgate.proxy.backends.azure import is_azure
from flatgate.proxy.backends.base import Inbound, Outbound, Untranslatable
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
from flatgate.proxy.backends.openai.azure import AzureConventions
from flatgate.proxy.backends.responses.compact import COMPACT_SUFFIX, compact_body, marked
from flatgate.proxy.backends.responses.config import ResponsesConfig
from flatgate.proxy.backends.responses.parts import written_parts
from flatgate.proxy.backends.responses.stream import ResponsesStream
from flatgate.proxy.backends.responses.whole import ResponsesWhole
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import Message, Request
from flatgate.proxy.wire.schema import JSON, ApiDialect, ToolChoiceMode

__all__ = ["AzureResponsesAdapter", "ResponsesAdapter", "encode_request", "responses_adapter"]

# -- the request ---------------------------------------------------------------

# The body's fields (``WrittenRequest``'s, the request's own).
_FIELDS = frozenset(WrittenRequest.__struct_fields__)
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


def _reasoning(
    parts: list[ReasoningPart], messages: list[Message], m: Message, omitted: list[str]
) -> list[Item]:
    out: list[Item] = []
    for j, part in enumerate(parts):
        if part.dialect != _DIALECT or not part.opaque:
            omitted.append("reasoning")
            continue
        try:
            encrypted = part.opaque.decode()
        except UnicodeDecodeError:
            where = f"messages[{next(i for i, n in enumerate(messages) if n is m)}]"
            raise Untranslatable(
                f"{where}.reasoning[{j}]: encrypted content that is not UTF-8"
            ) from None
        compaction = compaction_item(part)
        if compaction is not None:
            out.append(compaction)
            continue
        summary = [SummaryText(part.text)] if part.text else []
        out.append(
            Item(
                type="reasoning",
                id=part.id or None,
                summary=summary,
                encrypted_content=encrypted,
            )
        )
    return out


def _calls(m: Message) -> list[Item]:
    """An assistant turn's tool calls as ``function_call`` items."""
    return [
        Item(
            type="function_call",
            call_id=call.id,
            name=call.function.name,
            arguments=call.function.arguments or "{}",
        )
        for call in m.tool_calls or ()
    ]


def _with_parts(m: Message, where: str, omitted: list[str], drop: bool) -> Item:
    """A message that holds more than text (``parts.written_parts``), at
    ``where`` (``messages[1]``, as refusals name it): a message item of its
    role, or a tool result's ``function_call_output`` with a content list."""
    parts = written_parts(m.parts or [], where, omitted, drop)
    role = m.role
    if role == "tool":
        if m.is_error:
            head = parts[0] if parts else None
            if isinstance(head, InputText):
                parts[0] = InputText(failed_result(head.text))
            else:
                parts.insert(0, InputText(failed_result("")))
        return Item(type="function_call_output", call_id=m.tool_call_id, output=parts)
    if role == "assistant":
        # A model's own turn is text: an image in it has no output part.
        texts = [p.text for p in parts if isinstance(p, InputText)]
        if len(texts) < len(parts):
            raise Untranslatable(f"{where}: an assistant message holds text parts only")
        return Item("message", "assistant", [OutputText("".join(texts))])
    return Item("message", cast(ItemRole, role), parts)


def _input(
    messages: list[Message], omitted: list[str], drop: bool = False
) -> tuple[str | None, list[Item]]:
    """``instructions`` and the input items (see the module docstring)."""
    instructions = None
    rest = messages
    if messages:
        first = messages[0]
        if first.role == "system" and first.content is not None and not first.parts:
            if first.name:
                omitted.append("name")
            instructions = first.content
            rest = messages[1:]
    items: list[Item] = []
    add = items.append
    # The roles most messages have first: a per-message test is per item.
    first_index = len(messages) - len(rest)
    for i, m in enumerate(rest, first_index):
        role = m.role
        if m.name:
            omitted.append("name")
        if m.parts:
            if role == "assistant" and m.reasoning:
                items += _reasoning(m.reasoning, messages, m, omitted)
            add(_with_parts(m, f"messages[{i}]", omitted, drop))
            if role == "assistant" and m.tool_calls:
                items += _calls(m)
            continue
        if role == "user":
            add(Item("message", "user", [InputText(m.content or "")]))
        elif role == "assistant":
            if m.reasoning:
                items += _reasoning(m.reasoning, messages, m, omitted)
            if m.content:
                add(Item("message", "assistant", [OutputText(m.content)]))
            if m.tool_calls:
                items += _calls(m)
        elif role == "tool":
            text = m.content or ""
            output = failed_result(text) if m.is_error else text
            add(Item(type="function_call_output", call_id=m.tool_call_id, output=output))
        else:
            # The wire's other roles (system, developer) are the item's.
            add(Item("message", cast(ItemRole, role), [InputText(m.content or "")]))
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
    # Required: ``strict``, whose default is true in the API, a Chat
    # Completions client's false.
    return [
        ToolDef(
            "function",
            t.function.name,
            t.function.description or None,
            t.function.parameters or _NO_SCHEMA,
            bool(t.function.strict),
        )
        for t in req.tools
    ]


def _left_out(req: Request, omitted: list[str]) -> None:
    # One test per field (most requests have none of them).
    if req.stop:
        omitted.append("stop")
    if req.seed is not None:
        omitted.append("seed")
    if req.n > 1:
        omitted.append("n")
    if req.top_k:
        omitted.append("top_k")


def _same_dialect(
    fields: Fields, body: Any, hosted: frozenset[str], omitted: list[str]
) -> dict[str, msgspec.Raw | Fields]:
    """Responses extras: hosted tools appended to the body's ``tools`` when
    the backend runs them; the rest, to put in the body."""
    extra: dict[str, msgspec.Raw | Fields] = {}
    for key, raw in fields.items():
        if key == "tools":
            for kind, tool in tool_types(raw):
                if tool_family(kind) in hosted:
                    body.tools = [*(body.tools or ()), tool]
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
    instructions, items = _input(req.messages, omitted, drop_unsupported)
    choice: str | ToolChoice | None = None
    if req.tool_choice == ToolChoiceMode.Function:
        choice = ToolChoice("function", req.tool_choice_name)
    elif req.tool_choice:
        choice = _CHOICES.get(req.tool_choice)
    # Its fields are the request's, its values any (a derived Struct: ``Any``).
    body: Any = WrittenRequest(
        model=model,
        input=items,
        # Written whatever they are (left out only when not given).
        stream=not whole,
        store=False,
        instructions=instructions,
        max_output_tokens=req.max_tokens or None,
        temperature=req.temperature,
        top_p=req.top_p,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        # Function tools, then the hosted tools the backend runs (as sent).
        tools=_tools(req) if req.tools else None,
        tool_choice=choice,
        parallel_tool_calls=req.parallel_tool_calls if req.tools else None,
        text={"format": _text_format(req.response_format)} if req.response_format else None,
        metadata=req.metadata or None,
        user=req.user or None,
    )
    if not req.extras:
        return _encode(body)
    fields = read_extras(req.extras)
    extra: dict[str, msgspec.Raw | Fields] = {}
    if req.extras_dialect == _DIALECT:
        extra = _same_dialect(fields, body, frozenset(hosted_tools), omitted)
    elif req.extras_dialect == _CHAT:
        extra = chat_for_responses(fields, omitted, drop_unsupported)
    elif req.extras_dialect == _MESSAGES:
        # As for Chat Completions: an effort, from output_config or a
        # thinking budget, is the Responses API's reasoning.effort.
        for _, effort in messages_for_chat(fields, omitted, drop_unsupported):
            extra = {"reasoning": {"effort": msgspec.Raw(effort)}}
    else:
        report_all(fields, req.extras_dialect, omitted, drop_unsupported)
    text = extra.pop("text", None)
    if isinstance(text, dict):  # the client's members win over the mapped format
        body.text = {**(body.text or {}), **text}
    spliced = []
    for name, value in extra.items():
        if name in _FIELDS:  # the client's own value wins, in its field
            setattr(body, name, value)
        else:
            spliced.append((name, _encode(value) if isinstance(value, dict) else bytes(value)))
    return splice(_encode(body), spliced)


class ResponsesAdapter(OpenAIConventions):
    """``openai``'s conventions (credential, probe, refusals), the Responses body,
    its stream and its whole answer."""

    protocol = "openai-responses"
    path = "/responses"

    def __init__(self, config: ResponsesConfig) -> None:
        super().__init__(config)
        self._hosted = config.hosted_tools
        self._compact = config.compact

    def encode(self, req: Request, model: str, omitted: list[str], whole: bool) -> bytes:
        return encode_request(
            req,
            model=model,
            hosted_tools=self._hosted,
            omitted=omitted,
            drop_unsupported=self._drop,
            whole=whole,
        )

    def prepare(self, call: Inbound[Request]) -> Outbound:
        """A compaction to a backend that compacts (``compact``): its own
        endpoint's request; any other request as every JSON backend's."""
        req = call.request()
        if not (self._compact and marked(req)):
            return super().prepare(call)
        omitted: list[str] = []
        instructions, items = _input(req.messages[:-1], omitted, self._drop)
        body = compact_body(req, self.model or req.model_name, instructions, items)
        headers = self.headers(call.request_id, call.authorization, JSON)
        kept = tuple(dict.fromkeys(omitted))
        return Outbound(self.base + COMPACT_SUFFIX, headers, body, kept, True)

    def translator(
        self, request_id: str, model: str, whole: bool = False
    ) -> ResponsesStream | ResponsesWhole:
        if whole:
            return ResponsesWhole(request_id, self.model or model)
        return ResponsesStream(request_id, self.model or model)


class AzureResponsesAdapter(AzureConventions, ResponsesAdapter):
    """The ``openai-responses`` adapter with Azure OpenAI's conventions
    (``openai.azure``): ``/openai/v1/responses`` or
    ``/openai/responses?api-version=``."""


def responses_adapter(config: ResponsesConfig) -> ResponsesAdapter:
    """The ``openai-responses`` protocol's adapter for ``config``: Azure's
    when its keys say Azure."""
    return AzureResponsesAdapter(config) if is_azure(config) else ResponsesAdapter(config)
