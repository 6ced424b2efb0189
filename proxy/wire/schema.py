"""The names the wire contract gives things, each defined once.

Enum values come from ``flatgate.generated`` (flatc's output for
``schema/gateway.fbs``); the Python names are mirrored here so that code reads
``FinishReason.STOP`` rather than flatc's CamelCase, and a test checks that
every value the schema defines has its name here. The file identifiers and
the HTTP media types of the contract live here too: the requests'
identifiers are their schemas' ``file_identifier`` (``gateway.fbs``'s and
``embeddings.fbs``'s; a test checks them against the generated code, which
does not export them), the chunk's and the embedding response's cannot come
from a schema (each declares one ``file_identifier``).

No I/O.
"""

from __future__ import annotations

import enum

from flatgate.generated.LLMGateway.ApiDialect import ApiDialect as _ApiDialect
from flatgate.generated.LLMGateway.FinishReason import FinishReason as _FinishReason
from flatgate.generated.LLMGateway.ModelProvider import ModelProvider as _ModelProvider
from flatgate.generated.LLMGateway.PartKind import PartKind as _PartKind
from flatgate.generated.LLMGateway.Role import Role as _Role
from flatgate.generated.LLMGateway.ToolChoiceMode import ToolChoiceMode as _ToolChoiceMode

__all__ = [
    "ADMITTED_HEADER",
    "BACKEND_HEADER",
    "BETA_HEADER",
    "CHUNK_IDENTIFIER",
    "COMPLETIONS_PATH",
    "EMBEDDINGS_PATH",
    "EMBEDDING_REQUEST_IDENTIFIER",
    "EMBEDDING_RESPONSE_IDENTIFIER",
    "FLATBUFFERS",
    "FRAMES",
    "JSON",
    "OMITTED_HEADER",
    "PROVIDERS",
    "REQUEST_IDENTIFIER",
    "SSE",
    "ApiDialect",
    "FinishReason",
    "PartKind",
    "Provider",
    "Role",
    "ToolChoiceMode",
    "finish_reason_of",
]

# CompletionRequest buffers: the schema's file_identifier.
REQUEST_IDENTIFIER = b"FGRQ"
# CompletionChunk buffers (finished with this identifier by every writer).
CHUNK_IDENTIFIER = b"FGCK"
# EmbeddingRequest buffers: schema/embeddings.fbs's file_identifier.
EMBEDDING_REQUEST_IDENTIFIER = b"FGEQ"
# EmbeddingResponse buffers (finished with this identifier by every writer).
EMBEDDING_RESPONSE_IDENTIFIER = b"FGEV"

# The proxy's two request paths: a CompletionRequest's, an EmbeddingRequest's
# (the edge posts to them; the stub serves them for fbs backends).
COMPLETIONS_PATH = "/v1/completions"
EMBEDDINGS_PATH = "/v1/embeddings"
# Request bodies to the proxy (Content-Type).
FLATBUFFERS = "application/x-flatbuffers"
# Size-prefixed chunk frames (Accept / Content-Type): the zero-copy relay.
FRAMES = "application/x-flatbuffers-stream"
# Server-sent events.
SSE = "text/event-stream"
JSON = "application/json"
# The proxy's answer names the backend that gave it (for the edge's log).
BACKEND_HEADER = "x-flatgate-backend"
# The answer names what its backend was not sent (fields and tools a backend
# of another dialect has no place for), comma-separated; the edge passes it on.
OMITTED_HEADER = "x-flatgate-dropped-fields"
# Anthropic's beta flags: a Messages client's, carried to an anthropic
# backend in the extras (``$headers``) and sent there as a header.
BETA_HEADER = "anthropic-beta"
# Sent by the edge to the proxy with a request whose tenant it has held to
# its limits already (the proxy does not count it again).
ADMITTED_HEADER = "x-flatgate-admitted"


class Provider(enum.IntEnum):
    """``LLMGateway.ModelProvider``."""

    OpenAI = _ModelProvider.OpenAI
    Anthropic = _ModelProvider.Anthropic
    SelfHosted = _ModelProvider.SelfHosted


# Provider names as the config file spells them.
PROVIDERS: dict[str, int] = {p.name: int(p) for p in Provider}


class Role(enum.IntEnum):
    """``LLMGateway.Role``."""

    User = _Role.User
    System = _Role.System
    Developer = _Role.Developer
    Assistant = _Role.Assistant
    Tool = _Role.Tool


class ToolChoiceMode(enum.IntEnum):
    """``LLMGateway.ToolChoiceMode``."""

    Unset = _ToolChoiceMode.Unset
    Auto = _ToolChoiceMode.Auto
    None_ = _ToolChoiceMode.None_
    Required = _ToolChoiceMode.Required
    Function = _ToolChoiceMode.Function


class ApiDialect(enum.IntEnum):
    """``LLMGateway.ApiDialect``: the client API an opaque payload is in."""

    UNSET = _ApiDialect.Unset
    OPENAI_CHAT = _ApiDialect.OpenAIChat
    ANTHROPIC_MESSAGES = _ApiDialect.AnthropicMessages
    OPENAI_RESPONSES = _ApiDialect.OpenAIResponses
    GEMINI = _ApiDialect.GeminiGenerateContent


class PartKind(enum.IntEnum):
    """``LLMGateway.PartKind``: what a content part is."""

    TEXT = _PartKind.Text
    IMAGE = _PartKind.Image
    DOCUMENT = _PartKind.Document
    AUDIO = _PartKind.Audio
    FILE = _PartKind.File


class FinishReason(enum.IntEnum):
    """``LLMGateway.FinishReason``; NONE means the stream goes on."""

    NONE = _FinishReason.None_
    STOP = _FinishReason.Stop
    LENGTH = _FinishReason.Length
    TOOL_CALLS = _FinishReason.ToolCalls
    CONTENT_FILTER = _FinishReason.ContentFilter
    ERROR = _FinishReason.Error


_FINISH_REASONS = {int(f): f for f in FinishReason}


def finish_reason_of(value: int) -> FinishReason:
    """The finish reason a wire value names; one this flatgate does not know (a
    newer writer's) is STOP: the stream has ended, for a reason it cannot name."""
    return _FINISH_REASONS.get(value, FinishReason.STOP)
