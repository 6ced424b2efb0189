"""The OpenAI Chat Completions answer, as msgspec Structs: the whole
``chat.completion`` and the stream's ``chat.completion.chunk`` events.

One model for the answer's readers and its writer:

- the ``openai`` backend reads a server's answer with them
  (``backends.openai.stream``, an event at a time, with ``decode_chunk``;
  ``backends.openai.whole``, once, with ``decode_completion``). Servers
  differ, so the read is lenient: every field may be absent or null, and
  keys of no name are ignored (``annotations``, ``audio``, ``service_tier``,
  llama.cpp's ``timings``, vLLM's ``token_ids``, ...);
- the edge writes its answer with them (``edge_translator.openai.render``):
  the role, reasoning, tool-call and finish deltas, the usage, the error
  event (``ChatCompletionChunk(error=...)``) and the whole
  ``chat.completion``. What it writes per token (a content delta) and a
  chunk's head it writes from bytes it keeps, not through these.

The switch between reading and writing is in each field's default, not in
a second set of Structs. A field the writer may leave out has ``None`` as
its default and its Struct omits defaults (``omit_defaults=True``: a delta
holds only what it says). A field the writer must write whatever its value
(a choice's ``index`` and ``finish_reason``, a whole message's ``content``,
``null`` with tool calls) is in a Struct that writes every field, and a
field there that only a server sends (vLLM's ``stop_reason``; a delta tool
call's ``id``, ``type`` and ``function`` after its first fragment) defaults
to ``msgspec.UNSET``, which is never written and reads as false, as ``None``
does. Logprobs are kept as the server wrote them (``Choice.logprobs``,
``ChunkChoice.logprobs``: ``msgspec.Raw``); ``ChoiceLogprobs`` is their
object's two lists, which the edge joins for a whole answer.

OpenAI's own schema models an answer's message apart from a request's
assistant message (``request.AssistantMessage``, which the edge reads
strictly), and a streamed tool call apart from a whole one: so do these.

Pure: no I/O. The decoders are built once at import.
"""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType

__all__ = [
    "AnswerMessage",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatError",
    "ChatFunction",
    "Choice",
    "ChoiceLogprobs",
    "ChunkChoice",
    "CompletionTokensDetails",
    "Delta",
    "DeltaToolCall",
    "MessageToolCall",
    "PromptTokensDetails",
    "Usage",
    "decode_chunk",
    "decode_completion",
    "decode_logprobs",
]


class ChatFunction(msgspec.Struct, omit_defaults=True, gc=False):
    """A tool call's function: whole in a message, a fragment in a delta."""

    name: str | None = None
    arguments: str | None = None


class PromptTokensDetails(msgspec.Struct, gc=False):
    cached_tokens: int | None = None


class CompletionTokensDetails(msgspec.Struct, gc=False):
    reasoning_tokens: int | None = None


class Usage(msgspec.Struct, gc=False):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None


class ChatError(msgspec.Struct, gc=False):
    """An ``{"error": {...}}``'s object (a server may send a string instead)."""

    message: str | None = None
    type: str | None = None
    param: str | None = None
    code: str | int | None = None


# -- the stream: chat.completion.chunk -------------------------------------------


class DeltaToolCall(msgspec.Struct, gc=False):
    """A tool call's fragment, by ``index``: the first has ``id``, ``type``
    and the function's ``name``, the others argument text."""

    index: int = 0
    id: str | UnsetType | None = UNSET
    type: str | UnsetType | None = UNSET
    function: ChatFunction | UnsetType | None = UNSET


class Delta(msgspec.Struct, omit_defaults=True, gc=False):
    role: str | None = None
    content: str | None = None
    # The model's refusal (what it said instead of an answer).
    refusal: str | None = None
    # The model's reasoning: vLLM's and Ollama's ``reasoning``, DeepSeek's
    # (and the edge's) ``reasoning_content``.
    reasoning: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChunkChoice(msgspec.Struct, gc=False):
    index: int = 0
    delta: Delta | None = None
    finish_reason: str | None = None
    # vLLM: the stop string that matched (or the stop token's id).
    stop_reason: str | int | None = None
    # {"content": [...], "refusal": [...]} as the server sent it.
    logprobs: msgspec.Raw = msgspec.Raw()


class ChatCompletionChunk(msgspec.Struct, omit_defaults=True, gc=False):
    """One event of a stream; a usage-only one has no (or empty) ``choices``,
    and a failure after the first byte is an event with ``error`` alone."""

    choices: list[ChunkChoice] | None = None
    usage: Usage | None = None
    model: str | None = None
    error: ChatError | str | None = None


# -- the whole answer: chat.completion -------------------------------------------


class MessageToolCall(msgspec.Struct, gc=False):
    id: str | None = None
    function: ChatFunction | None = None
    type: str | None = "function"


class AnswerMessage(msgspec.Struct, omit_defaults=True, gc=False):
    role: str | None = None
    # ``null`` is written (the answer of a turn of tool calls alone).
    content: str | UnsetType | None = UNSET
    refusal: str | None = None
    tool_calls: list[MessageToolCall] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class ChoiceLogprobs(msgspec.Struct, gc=False):
    """A choice's ``logprobs`` object: a token's entry per item, as written."""

    content: list[msgspec.Raw] | None = None
    refusal: list[msgspec.Raw] | None = None


class Choice(msgspec.Struct, gc=False):
    index: int = 0
    message: AnswerMessage | None = None
    finish_reason: str | None = None
    # {"content": [...], "refusal": [...]} as written (the writer sets it:
    # ``null`` for none).
    logprobs: msgspec.Raw = msgspec.Raw()
    # vLLM: the stop string that matched (or the stop token's id).
    stop_reason: str | int | UnsetType | None = UNSET


class ChatCompletion(msgspec.Struct, omit_defaults=True, gc=False):
    id: str | None = None
    created: int | None = None
    model: str | None = None
    choices: list[Choice] | None = None
    usage: Usage | None = None
    object: str | None = None
    system_fingerprint: str | None = None
    # What some servers answer a 200 with instead.
    error: ChatError | str | None = None


decode_chunk = msgspec.json.Decoder(ChatCompletionChunk).decode
decode_completion = msgspec.json.Decoder(ChatCompletion).decode
decode_logprobs = msgspec.json.Decoder(ChoiceLogprobs).decode
