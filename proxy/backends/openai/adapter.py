"""The ``openai`` backend: OpenAI-compatible Chat Completions servers (OpenAI,
vLLM, llama.cpp, Ollama, SGLang, TGI, DeepSeek).

Request: ``POST {url}/chat/completions``, the decoded request written with
the one model of it, ``apis.openai_chat.request.ChatCompletionRequest``
(what is not set is not written; its messages and tools are the wire's, which
have the API's shape already, see ``wire.request.decode``). A request the
client streams is sent with ``stream: true`` and
``stream_options.include_usage``, and its answer is ``stream``'s; one it did
not stream (``JsonAdapter.whole_for``: the backend's ``whole_answers``, on by
default) with ``stream: false`` and no ``stream_options`` (OpenAI refuses
them without ``stream``), and its ``chat.completion`` is ``whole``'s. Sent:
model (the backend's ``model`` or the routed name),
messages, tools, tool_choice, parallel_tool_calls, temperature, top_p, stop,
seed, presence/frequency penalties, n, user, response_format, and max tokens
as ``max_tokens`` or ``max_completion_tokens`` (``max_tokens_field``).
``top_k`` is sent when given: vLLM, SGLang and llama.cpp take it (OpenAI's own
API refuses it, and its 400 reaches the caller). A tool result marked
``is_error`` (Anthropic's flag; OpenAI's tool messages have none) is sent as
its text with an ``Error:`` prefix, unless the text starts with "error"
already. A message's content parts (images, documents, audio, files by id)
are written as Chat Completions content parts, mapped or refused as
``parts`` says (a tool message's images move to a user message after
it). Left out (and named in ``Outbound.omitted``): ``metadata`` (OpenAI
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

Embeddings (for ``openai-responses`` too): ``POST {url}/embeddings``, the
body and the answer ``backends.embeddings``'s, with chat's model, key and
headers.

Azure OpenAI (for ``openai-responses`` too) is configuration of these
adapters (``backends.azure``): a backend with Azure's keys gets this adapter
with Azure's conventions over it (``openai.azure``: its URLs, its ``api-key``
header or an Entra ID token, its content-filter refusal).

The stream translator and its finish reasons are ``stream``'s,
named here too (``OpenAIStream``, ``FINISH_REASONS``). No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.openai_chat.request import (
    EXTRA_FIELDS,
    ChatCompletionRequest,
    StreamOptions,
    ToolChoice,
    ToolChoiceFunction,
    ToolChoiceName,
)
from flatgate.proxy.backends.base import Inbound, Outbound, Probe, Translator
from flatgate.proxy.backends.embeddings import EMBEDDINGS_PATH, encode_embeddings, read_embeddings
from flatgate.proxy.backends.extras import (
    messages_for_chat,
    read_extras,
    report_all,
    responses_for_chat,
    splice,
)
from flatgate.proxy.backends.json_api import JsonAdapter, failed_result
from flatgate.proxy.backends.openai.config import OpenAIConfig
from flatgate.proxy.backends.openai.parts import Written, message_with_parts, user_message
from flatgate.proxy.backends.openai.stream import FINISH_REASONS, OpenAIStream
from flatgate.proxy.backends.openai.whole import OpenAIWhole
from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.wire.embeddings import EmbeddingInput
from flatgate.proxy.wire.request.decode import Message, Request
from flatgate.proxy.wire.schema import JSON, ApiDialect, ToolChoiceMode

__all__ = ["FINISH_REASONS", "OpenAIAdapter", "OpenAIConventions", "OpenAIStream", "encode_request"]

# -- the request ---------------------------------------------------------------

# The request is the one model of it (``apis.openai_chat.request``), which
# omits what is not set when written. Its messages and tools are typed as the
# edge reads them; the adapter writes the wire's (``wire.request.decode``),
# which have the same shape, as they are: msgspec writes what it is given, and
# no Python object is made per message.
_ALWAYS_USAGE = StreamOptions(include_usage=True)
_CHOICES: dict[int, ToolChoice] = {
    ToolChoiceMode.Auto: "auto",
    ToolChoiceMode.None_: "none",
    ToolChoiceMode.Required: "required",
}
_encode = msgspec.json.Encoder().encode
_replace = msgspec.structs.replace


# Never taken from Chat Completions extras: the adapter's own.
_OWN = frozenset({"model", "messages", "stream", "stream_options"})
# The fields the adapter sets (the model's, but its own, ``metadata``, which it
# leaves out, and the extra fields, which are the extras'), and their
# defaults: one that the client's Chat Completions extras carry is reset to
# its default, so that the client's own value is the one written.
_WRITTEN = frozenset(ChatCompletionRequest.__struct_fields__) - _OWN - {"metadata", *EXTRA_FIELDS}
_DEFAULTS = {f.name: f.default for f in msgspec.structs.fields(ChatCompletionRequest)}
_CHAT = int(ApiDialect.OPENAI_CHAT)
_RESPONSES = int(ApiDialect.OPENAI_RESPONSES)
_MESSAGES = int(ApiDialect.ANTHROPIC_MESSAGES)


def _mapped(messages: list[Message], omitted: list[str], drop: bool) -> list[object]:
    """The messages as Chat Completions takes them: each failed call's result
    marked in its text (see the module docstring) and the flag, which OpenAI
    would refuse, cleared; reasoning parts left out; content parts written
    as the API's (``parts``: a tool message's media moved to a user message
    after its run of tool messages)."""
    out: list[object] = []
    moved: list[Written] = []
    for i, m in enumerate(messages):
        if moved and m.role != "tool":
            out.append(user_message(moved))
            moved = []
        if m.parts:
            mapped, more = message_with_parts(i, m, omitted, drop)
            moved += more
            if isinstance(mapped, Message) and mapped.reasoning:
                omitted.append("reasoning")
                mapped = _replace(mapped, reasoning=None)
            out.append(mapped)
            continue
        mapped = m
        if m.is_error:
            mapped = _replace(mapped, content=failed_result(m.content or ""), is_error=False)
        if m.reasoning is not None:
            if m.reasoning:
                omitted.append("reasoning")
            mapped = _replace(mapped, reasoning=None)
        out.append(mapped)
    if moved:
        out.append(user_message(moved))
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
    whole: bool = False,
) -> bytes:
    """The Chat Completions JSON body for ``req`` (``whole``: asking for a
    whole answer, ``stream: false``; else a stream with its usage); what it
    leaves out is appended to ``omitted``. A field of another dialect's
    extras with no mapping raises ``UnsupportedField`` unless
    ``drop_unsupported``."""
    if omitted is None:
        omitted = []
    messages = req.messages
    if any(m.is_error or m.reasoning is not None or m.parts for m in messages):
        messages = _mapped(messages, omitted, drop_unsupported)  # type: ignore[assignment]
    if req.metadata:
        omitted.append("metadata")
    # The wire's messages and tools, written as they are (see above).
    out = ChatCompletionRequest(model, messages)  # type: ignore[arg-type]
    # Set field by field: a constructor's keywords cost more than the writing.
    out.stream = not whole
    if not whole:
        out.stream_options = _ALWAYS_USAGE
    if req.temperature is not None:
        out.temperature = req.temperature
    if req.top_p is not None:
        out.top_p = req.top_p
    if req.top_k:
        out.top_k = req.top_k
    if req.max_tokens:
        if max_tokens_field == "max_completion_tokens":
            out.max_completion_tokens = req.max_tokens
        else:
            out.max_tokens = req.max_tokens
    if req.stop:
        out.stop = req.stop
    if req.seed is not None:
        out.seed = req.seed
    if req.presence_penalty is not None:
        out.presence_penalty = req.presence_penalty
    if req.frequency_penalty is not None:
        out.frequency_penalty = req.frequency_penalty
    if req.n > 1:
        out.n = req.n
    if req.user:
        out.user = req.user
    if req.tools:
        out.tools = req.tools  # type: ignore[assignment]
        out.parallel_tool_calls = req.parallel_tool_calls
    if req.tool_choice == ToolChoiceMode.Function:
        out.tool_choice = ToolChoiceFunction("function", ToolChoiceName(req.tool_choice_name))
    elif req.tool_choice:
        out.tool_choice = _CHOICES.get(req.tool_choice)
    if req.response_format:
        out.response_format = msgspec.Raw(req.response_format.encode())
    extra = _extras(req, omitted, drop_unsupported) if req.extras else []
    for name, _ in extra:
        if name in _WRITTEN:
            setattr(out, name, _DEFAULTS[name])
    return splice(_encode(out), extra)


class OpenAIConventions(JsonAdapter):
    """What OpenAI's APIs share (this one and ``openai-responses``): the key
    as ``Authorization: Bearer``, readiness as ``GET {url}/models``, and
    embeddings at ``{url}/embeddings`` (``backends.embeddings``). Azure
    OpenAI's are ``openai.azure.AzureConventions``, over these."""

    embeddings = True

    def __init__(self, config: BackendConfig) -> None:
        super().__init__(config)
        self._models = self.base + "/models"
        self._embeddings = self.base + EMBEDDINGS_PATH

    def prepare_embeddings(self, call: Inbound[EmbeddingInput]) -> Outbound:
        omitted: list[str] = []
        req = call.request()
        payload = encode_embeddings(
            req, model=self.model or req.model_name, omitted=omitted, drop_unsupported=self._drop
        )
        headers = self.headers(call.request_id, call.authorization, JSON)
        return Outbound(self._embeddings, headers, payload, tuple(dict.fromkeys(omitted)))

    def embeddings_answer(
        self, body: bytes, request_id: str, model: str, max_bytes: int | None = None
    ) -> bytes:
        return read_embeddings(
            body, request_id=request_id, model=self.model or model, max_bytes=max_bytes
        )

    def credential(self, key: str) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {key}")]

    def probe(self) -> Probe:
        if self.health:
            return super().probe()
        return Probe(self._models, [*self.auth, *self.extra])


class OpenAIAdapter(OpenAIConventions):
    protocol = "openai"
    path = "/chat/completions"

    def __init__(self, config: OpenAIConfig) -> None:
        super().__init__(config)
        self._field = config.max_tokens_field

    def encode(self, req: Request, model: str, omitted: list[str], whole: bool) -> bytes:
        return encode_request(
            req,
            model=model,
            max_tokens_field=self._field,
            omitted=omitted,
            drop_unsupported=self._drop,
            whole=whole,
        )

    def translator(self, request_id: str, model: str, whole: bool = False) -> Translator:
        if whole:
            return OpenAIWhole(request_id, self.model or model)
        return OpenAIStream(request_id, self.model or model)
