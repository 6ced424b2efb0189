"""Gemini request -> ``CompletionRequest`` FlatBuffer: the Gemini edge's hot path.

Owns ``write_gemini``: a decoded ``GenerateContentRequest``
(``proxy.apis.gemini.request``, the one model of it) as a
``CompletionRequest`` buffer, through the edges' shared writer
(``wire.request.writer.RequestWriter``). The mapping:

- ``systemInstruction``'s text parts, joined, are the first message, role
  System (another part there is refused naming it);
- a ``user`` content (or one with no role) is, in order, a Tool message per
  ``functionResponse`` part (its ``id``, else the id of the oldest call of
  that name not yet answered; ``response``'s JSON is the result's text; its
  ``parts`` make it a Tool message of parts), then one User message: its
  text parts joined, or, when it has ``inlineData`` or ``fileData``, its
  parts in order (``inlineData``: the bytes, held to their declared
  ``mimeType``, an image, audio, a document (PDF, text) or a file by type;
  ``fileData``: its URI), dialect ``GEMINI``;
- a ``model`` content is one Assistant message: its text parts joined, a
  tool call per ``functionCall`` (its ``id``, else ``call_<content>_<part>``;
  ``args`` as written, ``{}`` for none), and its Gemini reasoning parts:
  a thought (``thought: true``) with its text, and each ``thoughtSignature``
  with ``opaque = b"<where>\\n<signature>"`` (``where``: ``gemini:text`` for
  a text part's, the call's id for a ``functionCall``'s, "" for a
  thought's), which a Gemini backend puts back on the right part;
- a part member no other API has (``executableCode``,
  ``codeExecutionResult``, ``videoMetadata``, ``mediaResolution``,
  ``partMetadata``), a part in a role that cannot hold it (a
  ``functionCall`` from the user), and a role other than ``user`` and
  ``model`` are refused naming them (``contents.1.parts.0.executableCode``).

``tools``: each ``functionDeclarations`` entry is a tool: its name,
description and ``parametersJsonSchema`` (JSON Schema as sent), or
``parameters`` (Google's OpenAPI subset, its ``type`` names lowered to JSON
Schema's); a declaration's ``response`` and ``responseJsonSchema`` (the
schema of what the function returns, which google-genai writes from a Python
function's return annotation) have no slot and are left out: they describe
the function's result, which the conversation carries when it comes back;
``behavior`` (``NON_BLOCKING`` calls) has none either and is refused naming it. Google's own tools
(``googleSearch``, ``codeExecution``, ...) are extras. ``toolConfig``:
``functionCallingConfig.mode`` AUTO -> Auto, ANY -> Required (one
``allowedFunctionNames`` entry -> Function with that name), NONE -> None;
several allowed names, ``VALIDATED`` or a ``retrievalConfig``: the whole
``toolConfig`` is an extra too (a Gemini backend sends it as written).

``generationConfig``: temperature, topP, topK, maxOutputTokens,
stopSequences, seed, presence and frequency penalties in their slots;
``candidateCount`` above 1 refused naming it (one candidate is answered);
``responseMimeType: application/json`` with ``responseJsonSchema`` (or
``responseSchema``, lowered as ``parameters``) -> a ``json_schema``
response format, without a schema -> ``json_object``; ``text/plain`` means
nothing; the other members (``thinkingConfig``, ``responseModalities``,
``responseLogprobs``, ``logprobs``, ``speechConfig``, ``mediaResolution``,
another ``responseMimeType``, ...) are the extras' ``generationConfig``.
``safetySettings``, ``cachedContent`` and ``labels`` are extras. Extras are
written in the Gemini dialect: a Gemini backend reads them as Gemini's own
fields, another judges them (named, or refused naming them); so are a body's
top-level fields the model does not know (``unknown``, as the endpoint reads
them). A body's ``model`` is ignored: the model is the path's. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from flatgate.edge_translator.errors import InvalidRequest
from flatgate.proxy.apis.gemini.content import Content, Part, blob_bytes
from flatgate.proxy.apis.gemini.request import GenerateContentRequest, GenerationConfig, Tool
from flatgate.proxy.apis.media import check_declared
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.parts import ContentPart, ReasoningPart
from flatgate.proxy.wire.request.writer import Call, RequestWriter, ToolSpec, WireMessage
from flatgate.proxy.wire.schema import ApiDialect, PartKind, Role, ToolChoiceMode

__all__ = ["SIGNED_TEXT", "json_schema_of", "write_gemini"]

# The ``where`` of the signature of the answer's text (the gemini backend's).
SIGNED_TEXT = "gemini:text"
_USER = int(Role.User)
_ASSISTANT = int(Role.Assistant)
_TOOL = int(Role.Tool)
_SYSTEM = int(Role.System)
_GEMINI = int(ApiDialect.GEMINI)
_TEXT = int(PartKind.TEXT)
_EMPTY_USER: WireMessage = (_USER, b"", b"", b"", (), False)
_NO_ARGS = b"{}"
_encode = msgspec.json.encode
_decode = msgspec.json.decode
# Part members no other client API has: refused wherever they stand.
_FOREIGN = ("executable_code", "code_execution_result", "video_metadata")
_MODES = {
    "AUTO": int(ToolChoiceMode.Auto),
    "ANY": int(ToolChoiceMode.Required),
    "NONE": int(ToolChoiceMode.None_),
    "MODE_UNSPECIFIED": int(ToolChoiceMode.Unset),
}
_SLOTTED = frozenset(
    {
        "temperature",
        "topP",
        "topK",
        "maxOutputTokens",
        "stopSequences",
        "seed",
        "presencePenalty",
        "frequencyPenalty",
        "candidateCount",
        "responseMimeType",
        "responseSchema",
        "responseJsonSchema",
    }
)

# Field lists taken once (``msgspec.structs.fields`` is not free): Google's
# own tools (a Tool's members other than functionDeclarations), and the
# generationConfig members with no slot, as (attribute, JSON name).
_GOOGLES_TOOLS = tuple(
    (f.name, f.encode_name)
    for f in msgspec.structs.fields(Tool)
    if f.name != "function_declarations"
)
_UNSLOTTED = tuple(
    (f.name, f.encode_name)
    for f in msgspec.structs.fields(GenerationConfig)
    if f.encode_name not in _SLOTTED
)
_NO_CONFIG = GenerationConfig()


def _refuse(path: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"{path}: {why}", param=path)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.title() for w in rest)


def _lowered(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: (v.lower() if k == "type" and isinstance(v, str) else _lowered(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_lowered(v) for v in node]
    return node


def json_schema_of(raw: msgspec.Raw, path: str) -> bytes:
    """Google's OpenAPI-subset schema (``parameters``, ``responseSchema``)
    as JSON Schema: its ``type`` names lowered (``OBJECT`` -> ``object``)."""
    try:
        return _encode(_lowered(_decode(raw)))
    except msgspec.DecodeError:
        raise _refuse(path, "not a schema object") from None


def _check_part(p: Part, where: str) -> None:
    for name in _FOREIGN:
        if getattr(p, name) is not None:
            raise _refuse(f"{where}.{_camel(name)}", "no other API has this part: not carried")
    if len(p.media_resolution):
        raise _refuse(f"{where}.mediaResolution", "a per-part resolution is not carried")
    if len(p.part_metadata):
        raise _refuse(f"{where}.partMetadata", "not carried")


def _media(mime: str, data: bytes, where: str) -> ContentPart:
    mime = mime.strip().lower()
    if mime.startswith("image/"):
        kind = PartKind.IMAGE
    elif mime.startswith("audio/"):
        kind = PartKind.AUDIO
    elif mime == "application/pdf" or mime.startswith("text/"):
        kind = PartKind.DOCUMENT
    else:
        kind = PartKind.FILE
    if data:
        check_declared(data, mime, where)
    return ContentPart(int(kind), data=data, media_type=mime, dialect=_GEMINI)


def _user_part(p: Part, where: str, parts: list[ContentPart]) -> None:
    if p.text is not None:
        if p.text:
            parts.append(ContentPart(_TEXT, text=p.text, dialect=_GEMINI))
    elif p.inline_data is not None:
        at = f"{where}.inlineData.data"
        try:
            data = blob_bytes(p.inline_data.data)
        except ValueError:
            raise InvalidRequest(f"{at}: not base64", param=at, code=codes.INVALID_MEDIA) from None
        if not data:
            raise InvalidRequest(f"{at}: the data is empty", param=at, code=codes.INVALID_MEDIA)
        parts.append(_media(p.inline_data.mime_type, data, at))
    elif p.file_data is not None:
        f = p.file_data
        kind = _media(f.mime_type or "", b"", where).kind if f.mime_type else int(PartKind.FILE)
        parts.append(
            ContentPart(kind, url=f.file_uri, media_type=f.mime_type or "", dialect=_GEMINI)
        )


class _Calls:
    """The calls of the conversation not yet answered, by name (a response
    without an ``id`` answers the oldest)."""

    __slots__ = ("open",)

    def __init__(self) -> None:
        self.open: dict[str, list[str]] = {}

    def made(self, name: str, ident: str) -> None:
        self.open.setdefault(name, []).append(ident)

    def answered(self, name: str, ident: str | None, where: str) -> str:
        waiting = self.open.get(name, [])
        if ident:
            if ident in waiting:
                waiting.remove(ident)
            return ident
        if not waiting:
            raise _refuse(where, f"answers no call of '{name}' in the conversation")
        return waiting.pop(0)


def _user(out: list[WireMessage], c: Content, i: int, calls: _Calls) -> None:
    texts: list[str] = []
    parts: list[ContentPart] = []
    media = False
    answered = False
    for j, p in enumerate(c.parts):
        where = f"contents.{i}.parts.{j}"
        _check_part(p, where)
        if p.thought or p.thought_signature or p.function_call is not None:
            what = "functionCall" if p.function_call is not None else "thought"
            raise _refuse(f"{where}.{what}", "only a model turn holds this part")
        fr = p.function_response
        if fr is not None:
            answered = True
            call_id = calls.answered(fr.name, fr.id, f"{where}.functionResponse").encode()
            result = bytes(fr.response) if len(fr.response) else _NO_ARGS
            if fr.parts:
                extra: list[ContentPart] = [
                    ContentPart(_TEXT, text=result.decode(), dialect=_GEMINI)
                ]
                for k, rp in enumerate(fr.parts):
                    sub = Part(inline_data=rp.inline_data, file_data=rp.file_data)
                    _user_part(sub, f"{where}.functionResponse.parts.{k}", extra)
                out.append((_TOOL, b"", b"", call_id, (), False, (), extra))
            else:
                out.append((_TOOL, result, b"", call_id, (), False))
            continue
        if p.inline_data is not None or p.file_data is not None:
            media = True
        elif p.text is not None:
            texts.append(p.text)
        _user_part(p, where, parts)
    if media:
        out.append((_USER, b"", b"", b"", (), False, (), parts))
        return
    data = "".join(texts).encode()
    if data:
        out.append((_USER, data))
    elif not answered:
        out.append(_EMPTY_USER)


def _signed(where: str, signature: str) -> ReasoningPart:
    return ReasoningPart(opaque=f"{where}\n{signature}".encode(), dialect=_GEMINI)


def _model(out: list[WireMessage], c: Content, i: int, calls: _Calls) -> None:
    texts: list[str] = []
    wire_calls: list[Call] = []
    reasoning: list[ReasoningPart] = []
    for j, p in enumerate(c.parts):
        where = f"contents.{i}.parts.{j}"
        _check_part(p, where)
        sig = p.thought_signature
        fc = p.function_call
        if p.thought:
            reasoning.append(ReasoningPart(p.text or "", f"\n{sig or ''}".encode(), _GEMINI))
        elif fc is not None:
            ident = fc.id or f"call_{i}_{j}"
            args = bytes(fc.args) if len(fc.args) else _NO_ARGS
            if not args.lstrip().startswith(b"{"):
                raise _refuse(f"{where}.functionCall.args", "not a JSON object")
            calls.made(fc.name, ident)
            wire_calls.append((ident.encode(), fc.name.encode(), args))
            if sig:
                reasoning.append(_signed(ident, sig))
        elif p.text is not None:
            texts.append(p.text)
            if sig:
                reasoning.append(_signed(SIGNED_TEXT, sig))
        else:
            what = "inlineData" if p.inline_data is not None else "fileData"
            if p.function_response is not None:
                what = "functionResponse"
            raise _refuse(f"{where}.{what}", "a model turn cannot hold this part")
    data = "".join(texts).encode()
    if reasoning:
        out.append((_ASSISTANT, data, b"", b"", wire_calls, False, reasoning))
    elif wire_calls:
        out.append((_ASSISTANT, data, b"", b"", wire_calls, False))
    elif data:
        out.append((_ASSISTANT, data))


def _system(out: list[WireMessage], c: Content) -> None:
    texts = []
    for j, p in enumerate(c.parts):
        if p.text is None or p.thought or p.thought_signature:
            raise _refuse(f"systemInstruction.parts.{j}", "only text parts are carried")
        texts.append(p.text)
    data = "".join(texts).encode()
    if data:
        out.append((_SYSTEM, data))


def _tools(req: GenerateContentRequest, extras: dict[str, Any]) -> list[ToolSpec]:
    specs: list[ToolSpec] = []
    own: list[msgspec.Raw] = []
    for k, t in enumerate(req.tools or ()):
        for name, spelled in _GOOGLES_TOOLS:
            value = getattr(t, name)
            if len(value):
                own.append(msgspec.Raw(_encode({spelled: value})))
        for m, d in enumerate(t.function_declarations or ()):
            at = f"tools.{k}.functionDeclarations.{m}"
            if d.behavior is not None:
                raise _refuse(f"{at}.behavior", "not carried")
            if len(d.parameters_json_schema):
                schema = bytes(d.parameters_json_schema)
            elif len(d.parameters):
                schema = json_schema_of(d.parameters, f"{at}.parameters")
            else:
                schema = b""
            specs.append((d.name.encode(), (d.description or "").encode(), schema, False))
    if own:
        extras["tools"] = own
    return specs


def _tool_choice(req: GenerateContentRequest, extras: dict[str, Any]) -> tuple[int, str]:
    tc = req.tool_config
    if tc is None:
        return int(ToolChoiceMode.Unset), ""
    fcc = tc.function_calling_config
    names = (fcc.allowed_function_names or []) if fcc is not None else []
    mode = (fcc.mode or "MODE_UNSPECIFIED") if fcc is not None else "MODE_UNSPECIFIED"
    choice = _MODES.get(mode)
    if choice is None and mode != "VALIDATED":
        raise _refuse("toolConfig.functionCallingConfig.mode", f"'{mode}' is no mode")
    if len(tc.retrieval_config) or len(names) > 1 or choice is None:
        extras["toolConfig"] = tc
    if choice is None:
        return int(ToolChoiceMode.Auto), ""
    if len(names) == 1 and choice == int(ToolChoiceMode.Required):
        return int(ToolChoiceMode.Function), names[0]
    return choice, ""


def _response_format(g: GenerationConfig, rest: dict[str, Any]) -> bytes:
    mime = (g.response_mime_type or "").lower()
    schema = b""
    if len(g.response_json_schema):
        schema = bytes(g.response_json_schema)
    elif len(g.response_schema):
        schema = json_schema_of(g.response_schema, "generationConfig.responseSchema")
    if mime == "application/json":
        if schema:
            return b'{"type":"json_schema","json_schema":{"name":"response","schema":%s}}' % schema
        return b'{"type":"json_object"}'
    if schema:
        raise _refuse(
            "generationConfig.responseSchema",
            "a response schema needs responseMimeType 'application/json'",
        )
    if mime and mime != "text/plain":
        rest["responseMimeType"] = g.response_mime_type
    return b""


def _top_k(value: float | None) -> int:
    if value is None:
        return 0
    if not 0 <= value < 2**31 or value != int(value):
        raise _refuse("generationConfig.topK", f"{value} is not a whole number of tokens")
    return int(value)


def write_gemini(
    req: GenerateContentRequest,
    *,
    provider: int,
    model_name: str,
    stream: bool = False,
    tenant: str = "",
    request_id: str = "",
    unknown: Mapping[str, msgspec.Raw] | None = None,
) -> bytes:
    """``req`` as a ``CompletionRequest`` buffer (see the module docstring;
    ``unknown``: the body's top-level fields the model does not know, carried
    as extras); ``InvalidRequest`` naming a field that cannot be carried."""
    wire: list[WireMessage] = []
    if req.system_instruction is not None:
        _system(wire, req.system_instruction)
    calls = _Calls()
    for i, c in enumerate(req.contents):
        role = c.role or "user"
        if role == "user":
            _user(wire, c, i, calls)
        elif role == "model":
            _model(wire, c, i, calls)
        else:
            raise _refuse(f"contents.{i}.role", f"'{role}' is neither 'user' nor 'model'")
    extras: dict[str, Any] = {}
    specs = _tools(req, extras)
    choice, choice_name = _tool_choice(req, extras) if specs else (0, "")
    if not specs and req.tool_config is not None:
        extras["toolConfig"] = req.tool_config
    g = req.generation_config or _NO_CONFIG
    response_format = b""
    if g is not _NO_CONFIG:
        if g.candidate_count is not None and g.candidate_count > 1:
            raise _refuse("generationConfig.candidateCount", "one candidate is answered: at most 1")
        rest: dict[str, Any] = {}
        response_format = _response_format(g, rest)
        for name, spelled in _UNSLOTTED:
            value = getattr(g, name)
            if value is None or (type(value) is msgspec.Raw and not len(value)):
                continue
            rest[spelled] = value
        if rest:
            extras["generationConfig"] = rest
    if req.safety_settings:
        extras["safetySettings"] = req.safety_settings
    if req.cached_content:
        extras["cachedContent"] = req.cached_content
    if req.labels:
        extras["labels"] = req.labels
    if unknown:
        for name, raw in unknown.items():
            extras.setdefault(name, raw)
    w = RequestWriter()
    w.strings(
        request_id=request_id,
        model_name=model_name,
        tenant=tenant,
        user="",
        tool_choice_name=choice_name,
        response_format=response_format,
        extras=_encode(extras) if extras else b"",
    )
    w.messages(wire)
    if specs:
        w.tools(specs)
    stops = [s.encode() for s in g.stop_sequences or () if s]
    if stops:
        w.stops(stops)
    return w.finish(
        provider=provider,
        tool_choice=choice,
        max_tokens=g.max_output_tokens or 0,
        temperature=g.temperature,
        top_p=g.top_p,
        top_k=_top_k(g.top_k),
        seed=g.seed,
        presence_penalty=g.presence_penalty,
        frequency_penalty=g.frequency_penalty,
        stream=stream,
        include_usage=stream,
        extras_dialect=_GEMINI if extras else 0,
    )
