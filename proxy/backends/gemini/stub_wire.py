"""The stub's Gemini side: a ``generateContent`` or
``streamGenerateContent`` request read into a ``StubRequest``, and the echo
(``dialect.Answer``) written as Google writes its answers. The ``gemini``
and ``vertex`` Wires (``stub``) route ``models/{model}:generateContent`` and
``:streamGenerateContent`` here.

``parse_gemini`` decodes the body with the one model of the API
(``apis.gemini``) and checks what Google checks before a model runs:
``contents`` given and not empty, each content's ``role`` ``user`` or
``model`` (absent: ``user``) with at least one part, each part with exactly
one data member (``text``, ``inlineData``, ``fileData``, ``functionCall``,
``functionResponse``, ``executableCode``, ``codeExecutionResult``),
``functionCall`` only from the model and ``functionResponse`` only from the
user, ``temperature`` from 0 to 2, ``topP`` from 0 to 1,
``maxOutputTokens`` at least 1, ``functionCallingConfig.mode`` one of the
API's, and, for a ``gemini-3`` model, as Gemini 3 does, a
``thoughtSignature`` on the first function call of each model step of the
current turn (the contents after the last user text), which must be the one
the stub gave (a signature of the function's name: ``signature``). A failure
is Google's 400: ``{"error": {"code": 400, "message", "status":
"INVALID_ARGUMENT"}}`` (``Rejected``; ``error_reply`` writes any status).

What the echo reads: the system instruction's text (a System message), each
content's text (its inline data and files described with their digests,
``dialect.described``, as the other stubs do; thoughts left out), a function
response as a Tool message (its ``response`` JSON), ``maxOutputTokens``,
``stopSequences``, the offered functions (``parametersJsonSchema`` or
``parameters``; none when the mode is ``NONE``), the forced one (mode
``ANY`` allowing exactly one name), and ``thinkingConfig.includeThoughts``
(the answer thinks first: a thought summary part).

``render_whole`` writes a ``GenerateContentResponse``: the thought (when
asked for), then the text with its ``thoughtSignature``, or a
``functionCall`` (no id, as the Gemini API sends none) signed with
``signature(name)``; ``finishReason`` (STOP, MAX_TOKENS), ``usageMetadata``
(``thoughtsTokenCount`` when it thought), ``modelVersion``, ``responseId``.
``GeminiRendering`` writes the same as server-sent events, ``data:`` lines
ended by CRLF pairs as Google's server writes them: the thought first, one
event per delta (only the delta's text is JSON-encoded per token), the whole
function call in one event, and a last event with an empty text part that
carries the signature, the finish reason and the usage (as Gemini 3's
streams end); a mid-stream ``error`` fault is an event with Google's error
object (``INTERNAL``). No I/O.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator

import msgspec

from flatgate.proxy.apis.gemini.answer import (
    FINISH_REASON_OF,
    STATUS_OF,
    Candidate,
    ErrorBody,
    ErrorStatus,
    GenerateContentResponse,
    UsageMetadata,
)
from flatgate.proxy.apis.gemini.content import Content, FunctionCall, Part, blob_bytes
from flatgate.proxy.apis.gemini.request import FUNCTION_MODES, decode_request
from flatgate.proxy.backends.dialect import (
    Answer,
    OfferedTool,
    Rejected,
    Reply,
    StubRequest,
    described,
    split_model,
)
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.schema import JSON, SSE, PartKind, Role

__all__ = [
    "GeminiRendering",
    "error_reply",
    "parse_gemini",
    "render_stream",
    "render_whole",
    "signature",
]

_enc = msgspec.json.encode
_DATA = ("text", "inline_data", "file_data", "function_call", "function_response")
_OTHER = ("executable_code", "code_execution_result")
_THINKS = "thoughts"
_FAKE = b"flatgate-stub-gemini:"


def signature(text: str) -> str:
    """The stub's thought signature of ``text``: a deterministic fake (base64,
    as Google's are), which it checks when a call's comes back."""
    return base64.b64encode(_FAKE + hashlib.sha256(text.encode()).digest()[:24]).decode()


def error_reply(status: int, code_name: str, message: str) -> Reply:
    """An error as Google answers one: ``{"error": {"code", "message", "status"}}``."""
    body = ErrorBody(ErrorStatus(status, message, code_name))
    return Reply(status, [("content-type", JSON)], _enc(body))


def _invalid(message: str) -> Rejected:
    return Rejected(error_reply(400, "INVALID_ARGUMENT", message))


def _members(part: Part) -> list[str]:
    return [f for f in (*_DATA, *_OTHER) if getattr(part, f) is not None]


def _media(part: Part) -> ContentPart:
    if part.inline_data is not None:
        blob = part.inline_data
        kind = PartKind.IMAGE if blob.mime_type.startswith("image/") else PartKind.DOCUMENT
        if blob.mime_type.startswith("audio/"):
            kind = PartKind.AUDIO
        try:
            data = blob_bytes(blob.data)
        except ValueError:
            raise _invalid("inlineData.data: not base64") from None
        return ContentPart(kind=int(kind), data=data, media_type=blob.mime_type)
    assert part.file_data is not None
    f = part.file_data
    kind = PartKind.IMAGE if (f.mime_type or "").startswith("image/") else PartKind.FILE
    return ContentPart(kind=int(kind), url=f.file_uri, media_type=f.mime_type or "")


def _check_signatures(contents: list[Content]) -> None:
    """Gemini 3's rule: each step of the current turn signs its first call."""
    start = 0
    for i, c in enumerate(contents):
        if c.role != "model" and any(p.text for p in c.parts):
            start = i
    for i in range(start, len(contents)):
        c = contents[i]
        calls = [p for p in c.parts if p.function_call is not None]
        if c.role != "model" or not calls:
            continue
        first = calls[0]
        assert first.function_call is not None
        name = first.function_call.name
        if not first.thought_signature:
            raise _invalid(
                f"Function call `{name}` in the `{i + 1}.` content block is missing a "
                "`thought_signature`."
            )
        # As bytes: google-genai sends it back in the URL-safe alphabet.
        try:
            signed = blob_bytes(first.thought_signature)
        except ValueError:
            signed = b""
        if signed != blob_bytes(signature(name)):
            raise _invalid("Corrupted thought signature.")


def _content(i: int, c: Content, out: list[tuple[int, str]]) -> None:
    where = f"contents[{i}]"
    role = c.role or "user"
    if role not in ("user", "model"):
        raise _invalid(f"Please use a valid role: user, model. ({where}.role)")
    if not c.parts:
        raise _invalid(f"{where}.parts: must not be empty.")
    parts: list[ContentPart] = []
    media = False
    for j, part in enumerate(c.parts):
        at = f"{where}.parts[{j}]"
        set_ = _members(part)
        if len(set_) != 1:
            raise _invalid(f"{at}: a part must have exactly one data member, not {set_}")
        if part.function_call is not None and role != "model":
            raise _invalid(f"{at}: a functionCall comes only from the model")
        if part.function_response is not None:
            if role != "user":
                raise _invalid(f"{at}: a functionResponse comes only from the user")
            out.append((Role.Tool, bytes(part.function_response.response).decode()))
        elif part.thought_signature is not None:
            try:
                blob_bytes(part.thought_signature)
            except ValueError:
                raise _invalid(f"{at}.thoughtSignature: not base64") from None
        if part.thought:
            continue
        if part.text is not None:
            parts.append(ContentPart(kind=int(PartKind.TEXT), text=part.text))
        elif part.inline_data is not None or part.file_data is not None:
            media = True
            parts.append(_media(part))
    if not parts:
        return
    kind = Role.User if role == "user" else Role.Assistant
    text = described(parts) if media else "".join(p.text for p in parts)
    if text or media:
        out.append((kind, text))


def parse_gemini(
    body: bytes, *, model: str = "", request_id: str = "", stream: bool = False
) -> StubRequest:
    """A generateContent body (``model``: the URL's, with its fault suffix;
    ``stream``: the streamGenerateContent method) as the echo reads it;
    ``Rejected`` with Google's 400 when Google would refuse it."""
    try:
        r = decode_request(body)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _invalid(f"Invalid JSON payload received. {exc}") from None
    if not r.contents:
        raise _invalid("* GenerateContentRequest.contents: contents is not specified")
    messages: list[tuple[int, str]] = []
    if r.system_instruction is not None:
        text = "".join(p.text or "" for p in r.system_instruction.parts)
        if text:
            messages.append((Role.System, text))
    for i, c in enumerate(r.contents):
        _content(i, c, messages)
    name, fault, after = split_model(model)
    if name.removeprefix("models/").startswith("gemini-3"):
        _check_signatures(r.contents)
    offered: list[OfferedTool] = []
    for tool in r.tools or ():
        for d in tool.function_declarations or ():
            schema = d.parameters_json_schema if len(d.parameters_json_schema) else d.parameters
            offered.append(OfferedTool(d.name, bytes(schema).decode() if len(schema) else ""))
    forced = ""
    fcc = r.tool_config.function_calling_config if r.tool_config is not None else None
    if fcc is not None and fcc.mode is not None:
        if fcc.mode not in FUNCTION_MODES:
            raise _invalid(f"toolConfig.functionCallingConfig.mode: invalid value {fcc.mode!r}")
        if fcc.mode == "NONE":
            offered = []
        elif (
            fcc.mode == "ANY"
            and fcc.allowed_function_names
            and len(fcc.allowed_function_names) == 1
        ):
            forced = fcc.allowed_function_names[0]
    config = r.generation_config
    max_tokens = 0
    stop: tuple[str, ...] = ()
    thinks = False
    if config is not None:
        if config.max_output_tokens is not None:
            if config.max_output_tokens < 1:
                raise _invalid("generationConfig.maxOutputTokens: must be at least 1")
            max_tokens = config.max_output_tokens
        if config.temperature is not None and not 0 <= config.temperature <= 2:
            raise _invalid("generationConfig.temperature: must be from 0 to 2")
        if config.top_p is not None and not 0 <= config.top_p <= 1:
            raise _invalid("generationConfig.topP: must be from 0 to 1")
        stop = tuple(config.stop_sequences or ())
        thinking = config.thinking_config
        thinks = bool(thinking is not None and thinking.include_thoughts)
    return StubRequest(
        request_id=request_id,
        model=name,
        messages=tuple(messages),
        max_tokens=max_tokens,
        forced_tool=forced,
        stream=stream,
        fault=fault,
        fault_after=after,
        stop=stop,
        params={_THINKS: True} if thinks else {},
        offered=tuple(offered),
    )


def _thought(req: StubRequest) -> str | None:
    if _THINKS not in req.params:
        return None
    return f"The user wrote {len(req.last_user.split())} words; I repeat them back."


def _usage(req: StubRequest, ans: Answer) -> UsageMetadata:
    u = ans.usage
    thought = _thought(req)
    thoughts = len(thought.split()) if thought is not None else None
    total = u.prompt_tokens + u.completion_tokens + (thoughts or 0)
    return UsageMetadata(
        prompt_token_count=u.prompt_tokens,
        candidates_token_count=u.completion_tokens,
        thoughts_token_count=thoughts,
        total_token_count=total,
    )


def _finish(ans: Answer) -> str:
    return FINISH_REASON_OF.get(ans.finish, "STOP")


def _call_part(ans: Answer) -> Part | None:
    call = ans.tool_call
    if call is None:
        return None
    fc = FunctionCall(call.name, msgspec.Raw(call.arguments.encode()))
    return Part(function_call=fc, thought_signature=signature(call.name))


def render_whole(req: StubRequest, ans: Answer) -> bytes:
    """The echo as a ``GenerateContentResponse``."""
    parts: list[Part] = []
    thought = _thought(req)
    if thought is not None:
        parts.append(Part(text=thought, thought=True))
    call = _call_part(ans)
    if call is not None:
        parts.append(call)
    else:
        parts.append(Part(text=ans.text, thought_signature=signature(ans.text)))
    candidate = Candidate(Content(parts, "model"), _finish(ans), index=0)
    out = GenerateContentResponse(
        candidates=[candidate],
        usage_metadata=_usage(req, ans),
        model_version=req.model,
        response_id=req.request_id or None,
    )
    return _enc(out)


_END = b"\r\n\r\n"
_TEXT_HEAD = b'data: {"candidates":[{"content":{"role":"model","parts":[{"text":'
_TEXT_TAIL = b'}]},"index":0}]}' + _END


def _event(doc: GenerateContentResponse | ErrorBody) -> bytes:
    return b"data: " + _enc(doc) + _END


class GeminiRendering:
    """One streamed echo as streamGenerateContent's server-sent events."""

    content_type = SSE

    __slots__ = ("_answer", "_req")

    def __init__(self, req: StubRequest, ans: Answer) -> None:
        self._req = req
        self._answer = ans

    def _chunk(self, parts: list[Part], **candidate: object) -> GenerateContentResponse:
        return GenerateContentResponse(
            candidates=[Candidate(Content(parts, "model"), index=0, **candidate)],  # type: ignore[arg-type]
            model_version=self._req.model,
            response_id=self._req.request_id or None,
        )

    def opening(self) -> bytes:
        thought = _thought(self._req)
        if thought is None:
            return b""
        return _event(self._chunk([Part(text=thought, thought=True)]))

    def steps(self) -> Iterator[bytes]:
        call = _call_part(self._answer)
        if call is not None:
            yield _event(self._chunk([call]))
            return
        for text in self._answer.deltas:
            yield _TEXT_HEAD + _enc(text) + _TEXT_TAIL

    def closing(self) -> bytes:
        ans = self._answer
        parts = (
            []
            if ans.tool_call is not None
            else [Part(text="", thought_signature=signature(ans.text))]
        )
        last = self._chunk(parts, finish_reason=_finish(ans))
        last.usage_metadata = _usage(self._req, ans)
        return _event(last)

    def error(self) -> bytes:
        status = ErrorStatus(
            STATUS_OF["INTERNAL"],
            "The stub's model failed mid-stream (the error fault).",
            "INTERNAL",
        )
        return _event(ErrorBody(status))


def render_stream(req: StubRequest, ans: Answer) -> Iterator[bytes]:
    """The echo as streamGenerateContent's events, opening to closing (no faults)."""
    r = GeminiRendering(req, ans)
    yield r.opening()
    yield from r.steps()
    yield r.closing()
