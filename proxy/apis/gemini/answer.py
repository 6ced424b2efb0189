"""Gemini's answers, as msgspec Structs: ``GenerateContentResponse`` (the
whole answer of ``generateContent``, and each ``data:`` chunk of
``streamGenerateContent?alt=sse``), its candidates, safety ratings, prompt
feedback and usage, ``countTokens``' answer, and Google's error body.

The one model of them: the ``gemini`` and ``vertex`` backends read their
server's answer with them (``backends.gemini.whole``; ``backends.gemini.stream``
with ``StreamChunk``, the members of a chunk a translator acts on), the stub
writes its answers with them (``backends.gemini.stub_wire``), and the edge's
Gemini API will write its clients' answers with them.

Decoding is lenient, as a server's answer must be: every field has a
default, unknown fields are ignored. Finish reasons: ``FINISH_REASONS`` maps
each of the API's ``FinishReason`` values to ours (STOP -> STOP; MAX_TOKENS ->
LENGTH; SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII,
IMAGE_SAFETY, IMAGE_PROHIBITED_CONTENT, IMAGE_RECITATION, MODEL_ARMOR,
LANGUAGE -> CONTENT_FILTER: Google withheld the answer, a refusal;
MALFORMED_FUNCTION_CALL, UNEXPECTED_TOOL_CALL, TOO_MANY_TOOL_CALLS,
MISSING_THOUGHT_SIGNATURE, MALFORMED_RESPONSE -> ERROR: the model's output
could not be used, so the answer is not a finished one); any other (OTHER,
NO_IMAGE, a newer one) is STOP. Gemini says STOP for an answer that calls
functions: the translators make it TOOL_CALLS. ``FINISH_REASON_OF`` writes
ours back. ``BLOCK_REASONS`` are ``promptFeedback.blockReason``'s values (a
blocked prompt: no candidates). Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.gemini.content import Content, FunctionCall
from flatgate.proxy.wire.schema import FinishReason

__all__ = [
    "BLOCK_REASONS",
    "FINISH_REASONS",
    "FINISH_REASON_OF",
    "STATUS_OF",
    "Candidate",
    "ChunkCandidate",
    "ChunkContent",
    "ChunkPart",
    "CountTokensResponse",
    "ErrorBody",
    "ErrorStatus",
    "GenerateContentResponse",
    "ModalityTokenCount",
    "PromptFeedback",
    "SafetyRating",
    "StreamChunk",
    "UsageMetadata",
]

_FILTERED = (
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_RECITATION",
    "MODEL_ARMOR",
    "LANGUAGE",
)
_BROKEN = (
    "MALFORMED_FUNCTION_CALL",
    "UNEXPECTED_TOOL_CALL",
    "TOO_MANY_TOOL_CALLS",
    "MISSING_THOUGHT_SIGNATURE",
    "MALFORMED_RESPONSE",
)
FINISH_REASONS: dict[str, FinishReason] = {
    "STOP": FinishReason.STOP,
    "MAX_TOKENS": FinishReason.LENGTH,
    **dict.fromkeys(_FILTERED, FinishReason.CONTENT_FILTER),
    **dict.fromkeys(_BROKEN, FinishReason.ERROR),
}
FINISH_REASON_OF: dict[int, str] = {
    FinishReason.STOP: "STOP",
    FinishReason.TOOL_CALLS: "STOP",
    FinishReason.LENGTH: "MAX_TOKENS",
    FinishReason.CONTENT_FILTER: "SAFETY",
}
BLOCK_REASONS = frozenset(
    {
        "BLOCKED_REASON_UNSPECIFIED",
        "SAFETY",
        "OTHER",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "IMAGE_SAFETY",
        "MODEL_ARMOR",
        "JAILBREAK",
    }
)
# Google's error statuses (the names of its canonical error codes) and their HTTP statuses.
STATUS_OF: dict[str, int] = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ABORTED": 409,
    "ALREADY_EXISTS": 409,
    "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INTERNAL": 500,
    "DATA_LOSS": 500,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}


class _Shape(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    pass


class SafetyRating(_Shape):
    category: str = ""
    probability: str = ""
    blocked: bool | None = None
    # Vertex's: scores and severities.
    probability_score: float | None = None
    severity: str | None = None
    severity_score: float | None = None


class Candidate(_Shape):
    content: Content | None = None
    finish_reason: str | None = None
    safety_ratings: list[SafetyRating] | None = None
    index: int | None = None
    token_count: int | None = None
    finish_message: str | None = None
    avg_logprobs: float | None = None
    citation_metadata: msgspec.Raw = msgspec.Raw()
    grounding_metadata: msgspec.Raw = msgspec.Raw()
    url_context_metadata: msgspec.Raw = msgspec.Raw()
    logprobs_result: msgspec.Raw = msgspec.Raw()


class PromptFeedback(_Shape):
    block_reason: str | None = None
    block_reason_message: str | None = None
    safety_ratings: list[SafetyRating] | None = None


class ModalityTokenCount(_Shape):
    modality: str = ""
    token_count: int = 0


class UsageMetadata(_Shape):
    """Token counts. ``promptTokenCount`` includes ``cachedContentTokenCount``;
    ``candidatesTokenCount`` does not include ``thoughtsTokenCount``."""

    prompt_token_count: int | None = None
    cached_content_token_count: int | None = None
    candidates_token_count: int | None = None
    tool_use_prompt_token_count: int | None = None
    thoughts_token_count: int | None = None
    total_token_count: int | None = None
    prompt_tokens_details: list[ModalityTokenCount] | None = None
    cache_tokens_details: list[ModalityTokenCount] | None = None
    candidates_tokens_details: list[ModalityTokenCount] | None = None
    tool_use_prompt_tokens_details: list[ModalityTokenCount] | None = None
    traffic_type: str | None = None


class GenerateContentResponse(_Shape):
    candidates: list[Candidate] | None = None
    prompt_feedback: PromptFeedback | None = None
    usage_metadata: UsageMetadata | None = None
    model_version: str | None = None
    response_id: str | None = None
    create_time: str | None = None


class CountTokensResponse(_Shape):
    total_tokens: int = 0
    cached_content_token_count: int | None = None
    prompt_tokens_details: list[ModalityTokenCount] | None = None


class ErrorStatus(_Shape):
    """Google's error status: the HTTP code, the message, the status name
    (``RESOURCE_EXHAUSTED``), and details (``RetryInfo``, ``ErrorInfo``)."""

    code: int = 0
    message: str = ""
    status: str = ""
    details: list[msgspec.Raw] | None = None


class ErrorBody(_Shape):
    """An error response's body: ``{"error": {"code", "message", "status"}}``
    (a stream's error too: one ``data:`` event of it)."""

    error: ErrorStatus = msgspec.field(default_factory=ErrorStatus)


# -- a stream's chunk, as a translator reads it ------------------------------


class ChunkPart(_Shape):
    """A part of a streamed chunk: the members a translator acts on (the
    others, ``inlineData``, ``executableCode``, ..., are skipped unread)."""

    text: str | None = None
    thought: bool | None = None
    thought_signature: str | None = None
    function_call: FunctionCall | None = None


class ChunkContent(_Shape):
    parts: list[ChunkPart] = msgspec.field(default_factory=list)


class ChunkCandidate(_Shape):
    content: ChunkContent | None = None
    finish_reason: str | None = None


class StreamChunk(_Shape):
    """One ``data:`` event of ``streamGenerateContent?alt=sse`` as the
    ``gemini`` translators read it: the first candidate's parts and finish,
    the prompt's block reason, Google's ``error`` (a stream's error event),
    and the usage kept as its JSON (``usageMetadata`` repeats, growing, in
    every chunk: decoded once, the last one, with ``UsageMetadata``)."""

    candidates: list[ChunkCandidate] | None = None
    prompt_feedback: PromptFeedback | None = None
    usage_metadata: msgspec.Raw = msgspec.Raw()
    error: ErrorStatus | None = None
