"""The ``openai`` backend: OpenAI-compatible Chat Completions servers (OpenAI,
vLLM, llama.cpp, Ollama, SGLang, TGI, DeepSeek).

Request: ``POST {url}/chat/completions`` with ``stream: true`` and
``stream_options.include_usage`` always, the decoded request written with
msgspec (messages and tools have the API's shape already, see
``wire.request.decode``). Sent: model (the backend's ``model`` or the routed name),
messages, tools, tool_choice, parallel_tool_calls, temperature, top_p, stop,
seed, presence/frequency penalties, n, user, response_format, and max tokens
as ``max_tokens`` or ``max_completion_tokens`` (``max_tokens_field``).
``top_k`` is sent when given: vLLM, SGLang and llama.cpp take it (OpenAI's own
API refuses it, and its 400 reaches the caller). A tool result marked
``is_error`` (Anthropic's flag; OpenAI's tool messages have none) is sent as
its text with an ``Error:`` prefix, unless the text starts with "error"
already. Left out (and named in ``Outbound.omitted``): ``metadata`` (OpenAI
accepts it only for stored completions) and an assistant turn's reasoning
parts (Chat Completions has no field to send them back in).

The client's extras (``backends.extras``): Chat Completions ones are merged
at the top level (never over ``model``, ``messages``, ``stream`` or
``stream_options``), vendor fields included (``min_p``,
``repetition_penalty``, ``guided_json``, ...: vLLM, llama.cpp and Ollama take
them); Responses ones are mapped (``prompt_cache_key``,
``safety_identifier``, ``service_tier``, ``reasoning.effort`` ->
``reasoning_effort``, ``text.verbosity`` -> ``verbosity``, ``top_logprobs``
-> ``logprobs`` + ``top_logprobs``); Anthropic ones too
(``output_config.effort`` or ``thinking.budget_tokens`` ->
``reasoning_effort``); hosted tools and the fields mapped to nothing
(``include``, ``reasoning.summary``, ``cache_control``, ...) left out and
named, any other refused unless the backend sets ``drop_unsupported``.

Stream: SSE ``data:`` events, each a ``chat.completion.chunk``, into chunk
frames:

- ``delta.content`` -> content; a choice's ``logprobs`` (the object as the
  server sent it) -> the extras ``{"logprobs": {...}}`` (dialect
  ``OpenAIChat``) of the chunk that carries that delta's content;
  ``delta.reasoning`` / ``reasoning_content``
  (vLLM, DeepSeek, Ollama) -> reasoning; ``delta.role`` ignored (some servers
  repeat it); unknown keys ignored (``timings``, ``obfuscation``, ...);
- ``delta.tool_calls[]`` by ``index``: the first fragment of an index carries
  ``id`` and ``name`` (repeats are dropped; a new ``id`` on a used index is a
  new call, for servers that send every call as index 0); later fragments
  carry argument text; a call that ends with no arguments gets ``"{}"``;
- ``finish_reason`` ("" and null mean "not yet"): stop, length, tool_calls,
  content_filter, and the variants servers send (``eos``, ``function_call``,
  ``error``, ...); an unknown value is STOP; ``tool_calls`` whenever tool
  deltas were seen and the server said stop; vLLM's ``stop_reason``, when it
  is a string, is the stop sequence that matched (the final chunk's
  ``stop_sequence``);
- ``usage``: the last non-null value (on the finish chunk, or a chunk whose
  ``choices`` is ``[]``, null or absent), with ``cached_tokens`` and
  ``reasoning_tokens`` from the details;
- the final chunk (finish and usage) goes out at ``data: [DONE]``, or at the
  end of the body when every choice has finished (servers that send no
  ``[DONE]``);
- ``{"error": {...}}`` or ``{"error": "..."}`` mid-stream, a finish reason of
  ``error``, or a body that ends before a finish: one error chunk.

No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.backends.base import (
    Probe,
)
from flatgate.proxy.backends.extras import (
    messages_for_chat,
    read_extras,
    report_all,
    responses_for_chat,
    splice,
)
from flatgate.proxy.backends.json_api import (
    INT32_MAX,
    EventStream,
    JsonAdapter,
    failed_result,
    usage,
)
from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.wire import codes
from flatgate.proxy.wire.chunk.frames import ToolCallDelta, Usage
from flatgate.proxy.wire.chunk.writer import ChunkWriter
from flatgate.proxy.wire.request.decode import Message, Request, Tool
from flatgate.proxy.wire.schema import ApiDialect, FinishReason, ToolChoiceMode

__all__ = ["FINISH_REASONS", "OpenAIAdapter", "OpenAIConventions", "OpenAIStream", "encode_request"]

# finish_reason values, as servers send them.
FINISH_REASONS: dict[str, FinishReason] = {
    "stop": FinishReason.STOP,
    "eos": FinishReason.STOP,
    "eos_token": FinishReason.STOP,
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "insufficient_system_resource": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "max_tokens": FinishReason.LENGTH,
    "model_length": FinishReason.LENGTH,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "content_filter": FinishReason.CONTENT_FILTER,
    "error": FinishReason.ERROR,
    "network_error": FinishReason.ERROR,
    "abort": FinishReason.ERROR,
}


# -- the request ---------------------------------------------------------------


class _StreamOptions(msgspec.Struct, gc=False):
    include_usage: bool = True


class _Name(msgspec.Struct, gc=False):
    name: str


class _ForcedTool(msgspec.Struct, gc=False):
    function: _Name
    type: str = "function"


class _ChatRequest(msgspec.Struct, omit_defaults=True, gc=False):
    model: str
    messages: list[Message]
    # Required fields: omit_defaults would drop them if they had defaults.
    stream: bool
    stream_options: _StreamOptions
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: list[str] | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    n: int | None = None
    user: str | None = None
    tools: list[Tool] | None = None
    tool_choice: str | _ForcedTool | None = None
    parallel_tool_calls: bool | None = None
    response_format: msgspec.Raw | None = None


_ALWAYS_USAGE = _StreamOptions(include_usage=True)
_CHOICES: dict[int, str] = {
    ToolChoiceMode.Auto: "auto",
    ToolChoiceMode.None_: "none",
    ToolChoiceMode.Required: "required",
}
_encode = msgspec.json.Encoder().encode
_replace = msgspec.structs.replace


# Never taken from Chat Completions extras: the adapter's own.
_OWN = frozenset({"model", "messages", "stream", "stream_options"})
_FIELDS = frozenset(_ChatRequest.__struct_fields__)
_CHAT = int(ApiDialect.OPENAI_CHAT)
_RESPONSES = int(ApiDialect.OPENAI_RESPONSES)
_MESSAGES = int(ApiDialect.ANTHROPIC_MESSAGES)


def _mapped(messages: list[Message], omitted: list[str]) -> list[Message]:
    """The messages as Chat Completions takes them: each failed call's result
    marked in its text (see the module docstring) and the flag, which OpenAI
    would refuse, cleared; reasoning parts left out."""
    out = []
    for m in messages:
        mapped = m
        if m.is_error:
            mapped = _replace(mapped, content=failed_result(m.content or ""), is_error=False)
        if m.reasoning is not None:
            if m.reasoning:
                omitted.append("reasoning")
            mapped = _replace(mapped, reasoning=None)
        out.append(mapped)
    return out


def _extras(req: Request, omitted: list[str], drop: bool) -> list[tuple[str, bytes]]:
    fields = read_extras(req.extras)
    if not fields:
        return []
    if req.extras_dialect == _CHAT:
        return [(k, bytes(v)) for k, v in fields.items() if k not in _OWN]
    if req.extras_dialect == _RESPONSES:
        return responses_for_chat(fields, omitted, drop)
    if req.extras_dialect == _MESSAGES:
        return messages_for_chat(fields, omitted, drop)
    report_all(fields, req.extras_dialect, omitted, drop)
    return []


def encode_request(
    req: Request,
    *,
    model: str,
    max_tokens_field: str = "max_tokens",
    omitted: list[str] | None = None,
    drop_unsupported: bool = False,
) -> bytes:
    """The Chat Completions JSON body for ``req``; what it leaves out is
    appended to ``omitted``. A field of another dialect's extras with no
    mapping raises ``UnsupportedField`` unless ``drop_unsupported``."""
    if omitted is None:
        omitted = []
    choice: str | _ForcedTool | None = None
    if req.tool_choice == ToolChoiceMode.Function:
        choice = _ForcedTool(_Name(req.tool_choice_name))
    elif req.tool_choice:
        choice = _CHOICES.get(req.tool_choice)
    messages = req.messages
    if any(m.is_error or m.reasoning is not None for m in messages):
        messages = _mapped(messages, omitted)
    if req.metadata:
        omitted.append("metadata")
    out = _ChatRequest(
        model=model,
        messages=messages,
        stream=True,
        stream_options=_ALWAYS_USAGE,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k or None,
        stop=req.stop or None,
        seed=req.seed,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        n=req.n if req.n > 1 else None,
        user=req.user or None,
        tools=req.tools or None,
        tool_choice=choice,
        parallel_tool_calls=req.parallel_tool_calls if req.tools else None,
        response_format=msgspec.Raw(req.response_format.encode()) if req.response_format else None,
    )
    if req.max_tokens:
        if max_tokens_field == "max_completion_tokens":
            out.max_completion_tokens = req.max_tokens
        else:
            out.max_tokens = req.max_tokens
    extra = _extras(req, omitted, drop_unsupported) if req.extras else []
    for name, _ in extra:
        if name in _FIELDS:  # the client's own value wins
            setattr(out, name, None)
    return splice(_encode(out), extra)


# -- the stream ----------------------------------------------------------------


class _Function(msgspec.Struct, gc=False):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct, gc=False):
    index: int = 0
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct, gc=False):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None
    # vLLM: the stop string that matched (or the stop token's id).
    stop_reason: str | int | None = None
    # {"content": [...], "refusal": [...]} as the server sent it.
    logprobs: msgspec.Raw = msgspec.Raw()


class _PromptDetails(msgspec.Struct, gc=False):
    cached_tokens: int | None = None


class _CompletionDetails(msgspec.Struct, gc=False):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None


class _Error(msgspec.Struct, gc=False):
    message: str | None = None
    type: str | None = None
    code: str | int | None = None


class _Chunk(msgspec.Struct, gc=False):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    model: str | None = None
    error: _Error | str | None = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_DONE = b"[DONE]"
_NULL = msgspec.Raw(b"null")


class _Choices:
    """Per-choice state: the tool calls begun, the finish reason."""

    __slots__ = ("calls", "finish", "ids", "index", "stop_sequence", "used")

    def __init__(self, index: int) -> None:
        self.index = index
        self.calls: dict[int, int] = {}  # the server's index -> ours
        self.ids: dict[int, str] = {}  # ours -> the call id
        self.used: dict[int, bool] = {}  # ours -> arguments seen
        self.finish = FinishReason.NONE
        self.stop_sequence = ""


class OpenAIStream(EventStream):
    """One Chat Completions stream into chunk frames (see the module docstring)."""

    __slots__ = ("_choices", "_model", "_usage", "_writer")

    def __init__(self, request_id: str, model: str) -> None:
        super().__init__(request_id)
        self._model = model
        self._writer: ChunkWriter | None = None
        self._choices: dict[int, _Choices] = {}
        self._usage: Usage | None = None

    def _out(self, model: str | None) -> ChunkWriter:
        w = self._writer
        if w is None:
            w = self._writer = ChunkWriter(self._request_id, model or self._model)
        return w

    def _ended(self) -> bytes:
        choices = self._choices.values()
        if choices and all(c.finish for c in choices):
            return self._finish()  # a server that sends no [DONE]
        return super()._ended()

    def _event(self, name: bytes, data: bytes) -> bytes:
        if data[:6] == _DONE:
            return self._finish()
        chunk = _decode_chunk(data)
        if chunk.error:
            err = chunk.error
            message = err if isinstance(err, str) else err.message or str(err.type or "error")
            return self._fail(codes.BACKEND_STREAM_ERROR, message)
        if chunk.usage is not None:
            u = chunk.usage
            self._usage = usage(
                u.prompt_tokens,
                u.completion_tokens,
                u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else 0,
                u.completion_tokens_details.reasoning_tokens if u.completion_tokens_details else 0,
            )
        if not chunk.choices:
            return b""
        w = self._out(chunk.model)
        out = []
        for choice in chunk.choices:
            if not 0 <= choice.index <= INT32_MAX:
                raise ValueError(f"choice index {choice.index} out of range")
            state = self._choices.get(choice.index)
            if state is None:
                state = self._choices[choice.index] = _Choices(choice.index)
            delta = choice.delta
            logprobs = choice.logprobs
            if logprobs and logprobs != _NULL:
                # With the text they are the probabilities of, in its chunk.
                extras = (b'{"logprobs":' + bytes(logprobs) + b"}").decode()
                text = delta.content if delta is not None else None
                out.append(
                    w.chunk(
                        content=text or "", extras=extras, extras_dialect=_CHAT, index=choice.index
                    )
                )
                if delta is not None:
                    delta.content = None
            if delta is not None:
                if delta.content:
                    out.append(w.content(delta.content, choice.index))
                thought = delta.reasoning or delta.reasoning_content
                if thought:
                    out.append(w.reasoning(thought, choice.index))
                if delta.tool_calls:
                    out.extend(self._calls(w, state, delta.tool_calls))
            reason = choice.finish_reason
            if reason:
                finish = FINISH_REASONS.get(reason, FinishReason.STOP)
                if finish is FinishReason.ERROR:
                    out.append(
                        self._fail(codes.BACKEND_STREAM_ERROR, f"backend finished with {reason!r}")
                    )
                    break
                if finish is FinishReason.STOP and state.calls:
                    finish = FinishReason.TOOL_CALLS
                if finish is FinishReason.STOP and type(choice.stop_reason) is str:
                    state.stop_sequence = choice.stop_reason
                state.finish = finish
        return out[0] if len(out) == 1 else b"".join(out)

    def _calls(self, w: ChunkWriter, state: _Choices, calls: list[_ToolCallDelta]) -> list[bytes]:
        out = []
        for call in calls:
            fn = call.function
            args = (fn.arguments or "") if fn is not None else ""
            ours = state.calls.get(call.index)
            if ours is not None and call.id and state.ids.get(ours) != call.id:
                ours = None  # a new call on a used index
            if ours is None:
                ours = len(state.ids)
                state.calls[call.index] = ours
                state.ids[ours] = call.id or ""
                state.used[ours] = bool(args)
                name = (fn.name or "") if fn is not None else ""
                delta = ToolCallDelta(ours, call.id or "", name, args)
                out.append(w.chunk(tool_calls=(delta,), index=state.index))
            elif args:
                state.used[ours] = True
                out.append(w.arguments(ours, args, state.index))
        return out

    def _finish(self) -> bytes:
        """The terminal frames: "{}" for calls that got no arguments, then each
        finished choice's finish chunk, the last one with the usage."""
        choices = [c for c in self._choices.values() if c.finish]
        if not choices:
            return self._fail(codes.BACKEND_STREAM_TRUNCATED, "backend ended without a finish")
        self.done = True
        w = self._out(None)
        out = []
        for c in choices:
            for ours, used in c.used.items():
                if not used:
                    out.append(w.arguments(ours, "{}", c.index))
        last = choices[-1]
        for c in choices:
            usage = self._usage if c is last else None
            out.append(
                w.chunk(
                    finish_reason=c.finish,
                    usage=usage,
                    index=c.index,
                    stop_sequence=c.stop_sequence,
                )
            )
        return b"".join(out)


class OpenAIConventions(JsonAdapter):
    """What OpenAI's APIs share (this one and ``openai-responses``): the key
    as ``Authorization: Bearer``, readiness as ``GET {url}/models``."""

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self._models = config.url.rstrip("/") + "/models"

    def credential(self, key: str) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {key}")]

    def probe(self) -> Probe:
        if self.health:
            return super().probe()
        return Probe(self._models, [*self.auth, *self.extra])


class OpenAIAdapter(OpenAIConventions):
    protocol = "openai"
    path = "/chat/completions"

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self._field = config.max_tokens_field
        self._drop = config.drop_unsupported

    def encode(self, req: Request, model: str, omitted: list[str]) -> bytes:
        return encode_request(
            req,
            model=model,
            max_tokens_field=self._field,
            omitted=omitted,
            drop_unsupported=self._drop,
        )

    def translator(self, request_id: str, model: str) -> OpenAIStream:
        return OpenAIStream(request_id, self.model or model)
