"""The Gemini request body for a wire ``Request`` (``encode_gemini``), for
``models/{model}:generateContent`` and ``:streamGenerateContent?alt=sse``
(the same body; the model is the URL's, never the body's), at the Gemini API
and at Vertex AI alike.

The conversation is mapped:

- system and developer messages, wherever they stand, become
  ``systemInstruction``'s text parts, in order (Gemini has no system turn);
  their parts other than text are refused (``PartsOut.text_of``);
- a user message is a ``user`` content: its text, or its parts in order
  (``parts``: ``inlineData`` for bytes, ``fileData`` for URLs and Gemini
  file ids);
- an assistant message is a ``model`` content: its reasoning parts of the
  Gemini dialect first (a thought: ``{"text", "thought": true}`` with its
  ``thoughtSignature``), then its text, then a ``functionCall`` per tool
  call (its ``id``, ``name``, and ``args``: the parsed arguments, ``{}`` for
  none; arguments that are not a JSON object are refused naming the
  message). A Gemini reasoning part whose ``id`` is ``SIGNED_TEXT`` is the
  signature of the answer's text: it goes back on the text part (an empty
  one when the message has no text); one whose ``id`` is a tool call's id is
  that call's signature and goes back on its ``functionCall`` part: Gemini 3
  refuses a conversation whose function calls lost their signatures. A
  call's signature also rides in its id (``signed_call_id``:
  ``<id>__thought__<signature, URL-safe base64>``, LiteLLM's convention),
  since every client API sends a call's id back while only some carry
  reasoning parts of another provider (a Chat Completions or Messages
  client drops them): the id is split again here (``split_call_id``),
  Gemini is sent the id before the mark, and the signature the id carried
  when no reasoning part gives one;
  Reasoning of another dialect (Claude's signed thinking, OpenAI's encrypted
  reasoning) cannot be verified by Google: it is left out and named
  ``reasoning``;
- a tool's result is a ``functionResponse`` part in a ``user`` content: its
  ``id`` (the call's), ``name`` (the name of the call it answers, found in
  the conversation; a result that answers no call is refused naming the
  message), and ``response``: the result's text when it is a JSON object,
  else ``{"output": text}``, or ``{"error": text}`` when the wire says the
  call failed (the keys Google documents); a result's images and documents
  with bytes go in ``functionResponse.parts``;
- consecutive contents of one role are merged (the results of parallel
  calls go in one turn, as Gemini wants); no empty content is sent; a
  participant ``name`` has no field and is named in ``omitted``.

Tools: one ``functionDeclarations`` entry with each function's ``name``,
``description`` and ``parametersJsonSchema`` (the JSON Schema as sent:
Gemini takes JSON Schema there, where ``parameters`` is its OpenAPI subset);
``strict`` has no Gemini field and is named in ``omitted``. ``tool_choice``:
auto -> ``AUTO``, none -> ``NONE``, required -> ``ANY``, a named function ->
``ANY`` with ``allowedFunctionNames``. ``parallel_tool_calls = false`` has
no Gemini field: refused naming it (dropped: left out).

``generationConfig``: ``maxOutputTokens`` (the request's max_tokens),
``temperature`` (Gemini takes 0 to 2: above is refused naming it),
``topP``, ``topK``, ``stopSequences`` (at most 5: more refused naming
``stop``), ``seed``, ``presencePenalty``, ``frequencyPenalty``,
``n``: more than 1 refused (the translators read one candidate; one is
Gemini's default, so no ``candidateCount`` is written);
``response_format``: ``json_schema`` -> ``responseMimeType:
application/json`` with ``responseJsonSchema`` (the schema as sent),
``json_object`` -> ``responseMimeType: application/json``, ``text`` means
nothing. ``metadata`` and ``user`` have no field in the Gemini API: named in
``omitted``.

Thinking (``thinkingConfig``), from the client's extras: Chat Completions'
``reasoning_effort`` and Responses' ``reasoning.effort`` -> a
``thinkingBudget`` (``none`` 0, ``minimal`` and ``low`` 1024, ``medium``
8192, ``high`` 24576: the budgets Google's OpenAI compatibility documents)
with ``includeThoughts`` (the thought summaries come back as reasoning);
Responses' ``reasoning.summary`` -> ``includeThoughts``; Anthropic's
``thinking``: ``enabled`` -> its ``budget_tokens`` as the budget, with
``includeThoughts``; ``disabled`` -> budget 0; ``adaptive`` -> budget -1 (the
model decides); else its ``output_config.effort`` as an effort. Their other
fields are judged as at any backend of another dialect
(``backends.extras.report_all``, ``messages_for_chat``). Extras of the
Gemini dialect are Gemini's own fields: ``generationConfig``'s members are
laid over the mapped ones (the client's win), ``tools`` entries (Google's
own tools: ``googleSearch``, ``codeExecution``, ...) are appended to the
function declarations, and every other field (``safetySettings``,
``cachedContent``, ``toolConfig``, ``labels``, ...) is sent as the client
wrote it, in place of a mapped one; ``contents``, ``systemInstruction`` and
``model`` are the request's own and never taken from extras.

A field refused is an ``Untranslatable`` naming it, unless ``drop`` (the
backend's ``drop_unsupported``): then it is left out and named in
``omitted``. Written with the one model of the API (``apis.gemini``): bytes
base64 as the REST API wants. Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.gemini.content import Content, FunctionCall, FunctionResponse, Part
from flatgate.proxy.apis.gemini.request import (
    FunctionCallingConfig,
    FunctionDeclaration,
    GenerateContentRequest,
    GenerationConfig,
    ThinkingConfig,
    Tool,
    ToolConfig,
)
from flatgate.proxy.backends.base import Untranslatable, refuse
from flatgate.proxy.backends.extras import (
    Fields,
    messages_for_chat,
    nested,
    read_extras,
    report_all,
)
from flatgate.proxy.backends.gemini.parts import Parts, response_parts, user_parts
from flatgate.proxy.backends.json_api import object_arguments
from flatgate.proxy.wire.parts import ReasoningPart
from flatgate.proxy.wire.request.decode import Message, Request
from flatgate.proxy.wire.schema import ApiDialect, ToolChoiceMode

__all__ = ["EFFORT_BUDGETS", "SIGNED_TEXT", "encode_gemini", "signed_call_id", "split_call_id"]

# The ``id`` of a Gemini reasoning part that is the signature of the
# answer's text (not a thought's, not a function call's).
SIGNED_TEXT = "gemini:text"
EFFORT_BUDGETS = {
    "none": 0,
    "minimal": 1024,
    "low": 1024,
    "medium": 8192,
    "high": 24576,
    "max": 24576,
}

# Between a call's id and the signature it carries.
THOUGHT_MARK = "__thought__"
_GEMINI = int(ApiDialect.GEMINI)
_CHAT = int(ApiDialect.OPENAI_CHAT)
_RESPONSES = int(ApiDialect.OPENAI_RESPONSES)
_MESSAGES = int(ApiDialect.ANTHROPIC_MESSAGES)
_MAX_STOPS = 5
_EMPTY = msgspec.Raw(b"{}")
_ANY_OBJECT = msgspec.Raw(b'{"type":"object"}')
# Never taken from Gemini extras: the request's own.
_OWN = frozenset({"contents", "systemInstruction", "model"})
_NO_CONFIG = GenerationConfig()
_encode = msgspec.json.Encoder().encode
_decode_fields = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


class _ResponseFormat(msgspec.Struct, gc=False):
    type: str = ""
    json_schema: _JsonSchemaFormat | None = None


class _JsonSchemaFormat(msgspec.Struct, gc=False):
    schema: msgspec.Raw = msgspec.Raw()


class _Thinking(msgspec.Struct, gc=False):
    type: str = ""
    budget_tokens: int = 0


def signed_call_id(ident: str, signature: str | None) -> str:
    """A call's id carrying its signature (see the module docstring): the
    signature's base64 in the URL-safe alphabet, unpadded, so that the id
    stays one every client API takes (Anthropic's ``[a-zA-Z0-9_-]``)."""
    if not signature:
        return ident
    safe = signature.replace("+", "-").replace("/", "_").rstrip("=")
    return f"{ident}{THOUGHT_MARK}{safe}"


def split_call_id(ident: str) -> tuple[str, str | None]:
    """A call's id as Gemini knows it, and the signature it carried (None)."""
    base, mark, safe = ident.partition(THOUGHT_MARK)
    if not mark or not safe:
        return ident, None
    padded = safe.replace("-", "+").replace("_", "/") + "=" * (-len(safe) % 4)
    return base, padded


class _Signatures:
    """An assistant message's Gemini signatures: its thoughts, its text's, its calls'."""

    __slots__ = ("calls", "text", "thoughts")

    def __init__(self, parts: list[ReasoningPart], omitted: list[str]) -> None:
        self.thoughts: list[Part] = []
        self.text: str | None = None
        self.calls: dict[str, str] = {}
        for part in parts:
            if part.dialect != _GEMINI:
                omitted.append("reasoning")
                continue
            raw = part.opaque.decode("ascii", "replace")
            at = part.id
            if "\n" in raw:  # <where it goes, "" for a thought>\n<signature>
                at, _, raw = raw.rpartition("\n")
            signature = raw or None
            if at == SIGNED_TEXT:
                self.text = signature
            elif at:
                if signature:
                    self.calls[at] = signature
            elif part.text or signature:
                self.thoughts.append(
                    Part(text=part.text, thought=True, thought_signature=signature)
                )


class _Contents:
    __slots__ = ("calls", "contents", "system")

    def __init__(self) -> None:
        self.contents: list[Content] = []
        self.system: list[Part] = []
        self.calls: dict[str, str] = {}  # tool call id -> function name

    def add(self, role: str, parts: list[Part]) -> None:
        if not parts:
            return
        contents = self.contents
        if contents and contents[-1].role == role:
            contents[-1].parts.extend(parts)
        else:
            contents.append(Content(parts, role))


def _assistant(m: Message, where: str, conv: _Contents, omitted: list[str], out: Parts) -> None:
    signed = _Signatures(m.reasoning, omitted) if m.reasoning else None
    parts: list[Part] = list(signed.thoughts) if signed is not None else []
    content = m.content
    if m.parts:
        content = out.text_of(m.parts, where)
    text_signature = signed.text if signed is not None else None
    if content or text_signature:
        parts.append(Part(text=content or "", thought_signature=text_signature))
    for call in m.tool_calls or ():
        fn = call.function
        conv.calls[call.id] = fn.name
        ident, carried = split_call_id(call.id)
        signature = signed.calls.get(call.id) if signed is not None else None
        fc = FunctionCall(fn.name, object_arguments(fn.arguments, where), ident or None)
        parts.append(Part(function_call=fc, thought_signature=signature or carried))
    conv.add("model", parts)


def _result(m: Message, i: int, conv: _Contents, out: Parts) -> None:
    where = f"messages[{i}]"
    name = conv.calls.get(m.tool_call_id)
    if name is None:
        raise Untranslatable(
            f"{where}: a tool result that answers no call in the conversation "
            "(Gemini names the function a result answers)",
            param=where,
        )
    media = None
    text = m.content or ""
    if m.parts:
        text, found = response_parts(m.parts, where, out)
        media = found or None
    if m.is_error:
        response = msgspec.Raw(_encode({"error": text}))
    else:
        response = _object_or_none(text) or msgspec.Raw(_encode({"output": text}))
    ident = split_call_id(m.tool_call_id)[0]
    fr = FunctionResponse(name, response, ident or None, media)
    conv.add("user", [Part(function_response=fr)])


def _object_or_none(text: str) -> msgspec.Raw | None:
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    data = stripped.encode()
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return None
    return msgspec.Raw(data) if isinstance(value, dict) else None


_ROLES = {"user": "user", "assistant": "model"}


def _contents(req: Request, omitted: list[str], out: Parts) -> _Contents:
    conv = _Contents()
    contents = conv.contents
    for i, m in enumerate(req.messages):
        role = m.role
        if m.name:
            omitted.append("name")
        if m.parts is None and m.reasoning is None and not m.tool_calls and role in _ROLES:
            # The common message, text alone: no walk through ``add``.
            if m.content:
                ours = _ROLES[role]
                part = Part(m.content)
                if contents and contents[-1].role == ours:
                    contents[-1].parts.append(part)
                else:
                    contents.append(Content([part], ours))
            continue
        where = f"messages[{i}]"
        if role in ("system", "developer"):
            text = out.text_of(m.parts, where) if m.parts else m.content
            if text:
                conv.system.append(Part(text))
        elif role == "assistant":
            _assistant(m, where, conv, omitted, out)
        elif role == "tool":
            _result(m, i, conv, out)
        elif m.parts:
            conv.add("user", user_parts(m.parts, where, out))
        elif m.content:
            conv.add("user", [Part(m.content)])
    return conv


def _tools(
    req: Request, omitted: list[str], drop: bool
) -> tuple[list[Tool] | None, ToolConfig | None]:
    if not req.tools:
        return None, None
    declarations = []
    for t in req.tools:
        fn = t.function
        if fn.strict:
            omitted.append("strict")
        declarations.append(
            FunctionDeclaration(
                fn.name,
                fn.description or None,
                parameters_json_schema=fn.parameters or _ANY_OBJECT,
            )
        )
    mode = req.tool_choice
    config: FunctionCallingConfig | None = None
    if mode == ToolChoiceMode.Auto:
        config = FunctionCallingConfig("AUTO")
    elif mode == ToolChoiceMode.None_:
        config = FunctionCallingConfig("NONE")
    elif mode == ToolChoiceMode.Required:
        config = FunctionCallingConfig("ANY")
    elif mode == ToolChoiceMode.Function:
        config = FunctionCallingConfig("ANY", [req.tool_choice_name])
    if req.parallel_tool_calls is False:
        refuse("parallel_tool_calls", "Gemini has no such switch", omitted, drop)
    tool_config = ToolConfig(config) if config is not None else None
    return [Tool(function_declarations=declarations)], tool_config


def _format(req: Request, config: GenerationConfig, omitted: list[str], drop: bool) -> None:
    if not req.response_format:
        return
    try:
        rf = msgspec.json.decode(req.response_format, type=_ResponseFormat)
    except msgspec.DecodeError:
        raise Untranslatable("response_format: not a response format object") from None
    if rf.type == "json_schema" and rf.json_schema is not None and rf.json_schema.schema:
        config.response_mime_type = "application/json"
        config.response_json_schema = rf.json_schema.schema
    elif rf.type == "json_object":
        config.response_mime_type = "application/json"
    elif rf.type != "text":
        refuse("response_format", f"'{rf.type}' has no Gemini form", omitted, drop)


def _generation(req: Request, omitted: list[str], drop: bool) -> GenerationConfig:
    temperature = req.temperature
    if temperature is not None and temperature > 2:
        refuse("temperature", "Gemini takes 0 to 2", omitted, drop)
        temperature = None
    stops = req.stop or None
    if stops is not None and len(stops) > _MAX_STOPS:
        refuse("stop", f"Gemini takes at most {_MAX_STOPS} stop sequences", omitted, drop)
        stops = None
    if req.n > 1:
        refuse("n", "one candidate is read", omitted, drop)
    config = GenerationConfig(
        stop_sequences=stops,
        max_output_tokens=req.max_tokens or None,
        temperature=temperature,
        top_p=req.top_p,
        top_k=req.top_k or None,
        seed=req.seed,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
    )
    _format(req, config, omitted, drop)
    if req.metadata:
        omitted.append("metadata")
    if req.user:
        omitted.append("user")
    return config


def _effort(raw: msgspec.Raw | bytes, field: str) -> ThinkingConfig:
    try:
        effort = msgspec.json.decode(raw, type=str)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise Untranslatable(f"extras.{field}: not a string") from None
    budget = EFFORT_BUDGETS.get(effort)
    if budget is None:
        raise Untranslatable(f"extras.{field}: '{effort}' is no effort Gemini has a budget for")
    return ThinkingConfig(include_thoughts=True if budget else None, thinking_budget=budget)


def _foreign_thinking(
    fields: Fields, dialect: int, omitted: list[str], drop: bool
) -> ThinkingConfig | None:
    """Thinking asked for in another dialect's extras; the rest judged."""
    thinking: ThinkingConfig | None = None
    if dialect == _CHAT:
        raw = fields.pop("reasoning_effort", None)
        if raw is not None and bytes(raw) != b"null":
            thinking = _effort(raw, "reasoning_effort")
    elif dialect == _RESPONSES:
        raw = fields.pop("reasoning", None)
        if raw is not None and bytes(raw) != b"null":
            members = dict(nested(raw, "reasoning"))
            effort = members.pop("effort", None)
            if effort is not None and bytes(effort) != b"null":
                thinking = _effort(effort, "reasoning.effort")
            summary = members.pop("summary", None)
            legacy = members.pop("generate_summary", None)  # summary's older name
            if summary is None or bytes(summary) == b"null":
                summary = legacy
            if summary is not None and bytes(summary) not in (b"null", b'"none"'):
                thinking = thinking or ThinkingConfig()
                thinking.include_thoughts = True
            if members:
                fields["reasoning"] = msgspec.Raw(_encode(members))
    elif dialect == _MESSAGES:
        raw = fields.pop("thinking", None)
        if raw is not None:
            try:
                t = msgspec.json.decode(raw, type=_Thinking)
            except msgspec.DecodeError:
                raise Untranslatable("extras.thinking: not a thinking object") from None
            if t.type == "enabled":
                thinking = ThinkingConfig(include_thoughts=True, thinking_budget=t.budget_tokens)
            elif t.type == "disabled":
                thinking = ThinkingConfig(thinking_budget=0)
            elif t.type == "adaptive":
                thinking = ThinkingConfig(include_thoughts=True, thinking_budget=-1)
        for name, value in messages_for_chat(fields, omitted, drop):
            if name == "reasoning_effort" and thinking is None:
                thinking = _effort(value, "output_config.effort")
        return thinking
    report_all(fields, dialect, omitted, drop)
    return thinking


def _own(body: bytes, fields: Fields) -> bytes:
    """``body`` with the Gemini extras' fields laid over it (see the module docstring)."""
    top = _decode_fields(body)
    for name, raw in fields.items():
        if name in _OWN:
            continue
        if name == "generationConfig" and "generationConfig" in top:
            merged = _decode_fields(top["generationConfig"])
            merged.update(nested(raw, name))
            top[name] = msgspec.Raw(_encode(merged))
        elif name == "tools" and "tools" in top:
            try:
                mine = msgspec.json.decode(top["tools"], type=list[msgspec.Raw])
                theirs = msgspec.json.decode(raw, type=list[msgspec.Raw])
            except (msgspec.DecodeError, msgspec.ValidationError):
                raise Untranslatable("extras.tools: not a list of tools") from None
            top[name] = msgspec.Raw(_encode(mine + theirs))
        else:
            top[name] = raw
    return _encode(top)


def encode_gemini(req: Request, omitted: list[str], drop: bool) -> bytes:
    """The generateContent JSON body for ``req`` (see the module docstring);
    ``Untranslatable`` when it cannot be written. What is left out is
    appended to ``omitted``; ``drop``: leave out what would be refused."""
    conv = _contents(req, omitted, Parts(omitted, drop))
    tools, tool_config = _tools(req, omitted, drop)
    config = _generation(req, omitted, drop)
    own: Fields | None = None
    if req.extras:
        fields = read_extras(req.extras)
        if req.extras_dialect == _GEMINI:
            own = fields
        else:
            thinking = _foreign_thinking(fields, req.extras_dialect, omitted, drop)
            if thinking is not None:
                config.thinking_config = thinking
    body = GenerateContentRequest(
        contents=conv.contents,
        system_instruction=Content(conv.system) if conv.system else None,
        tools=tools,
        tool_config=tool_config,
        generation_config=config if config != _NO_CONFIG else None,
    )
    out = _encode(body)
    return _own(out, own) if own else out
