"""The Converse request body, as msgspec Structs (the service model's
``ConverseRequest`` less ``modelId``, which is the URL's
``/model/{modelId}/converse``); ConverseStream takes the same body.

The ``bedrock`` backend writes it (``backends.bedrock.converse``); the stub
reads it (``backends.bedrock.converse_stub``, with ``decode_request``, which
refuses a body that is not one, naming the field as msgspec's errors do).
Conventions as ``blocks``'s. Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.bedrock_converse.blocks import CachePoint, Message, SystemBlock

__all__ = [
    "ANY",
    "AUTO",
    "ConverseRequest",
    "InferenceConfig",
    "JsonSchema",
    "OutputConfig",
    "OutputFormat",
    "OutputStructure",
    "PerformanceConfig",
    "ServiceTier",
    "SpecificTool",
    "ToolChoice",
    "ToolConfig",
    "ToolDef",
    "ToolInputSchema",
    "ToolSpec",
    "decode_request",
]


class _Shape(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    pass


class InferenceConfig(_Shape):
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop_sequences: list[str] | None = None


class ToolInputSchema(_Shape):
    json: msgspec.Raw


class ToolSpec(_Shape):
    name: str
    input_schema: ToolInputSchema
    description: str | None = None
    strict: bool | None = None


class ToolDef(_Shape):
    """A tool (a union): a function's spec, or a cache point after the tools."""

    tool_spec: ToolSpec | None = None
    cache_point: CachePoint | None = None


class _Empty(_Shape):
    pass


class SpecificTool(_Shape):
    name: str


class ToolChoice(_Shape):
    """A union: ``auto`` and ``any`` are empty objects, ``tool`` names one."""

    auto: _Empty | None = None
    any: _Empty | None = None
    tool: SpecificTool | None = None


AUTO = ToolChoice(auto=_Empty())
ANY = ToolChoice(any=_Empty())


class ToolConfig(_Shape):
    tools: list[ToolDef]
    tool_choice: ToolChoice | None = None


class JsonSchema(_Shape):
    # The JSON Schema as a string (the service model's ``schema`` is one).
    schema: str
    name: str | None = None
    description: str | None = None


class OutputStructure(_Shape):
    json_schema: JsonSchema


class OutputFormat(_Shape):
    type: str  # "json_schema", the one there is (required: never omitted)
    structure: OutputStructure


class OutputConfig(_Shape):
    text_format: OutputFormat | None = None
    effort: str | None = None


class PerformanceConfig(_Shape):
    latency: str


class ServiceTier(_Shape):
    type: str


class ConverseRequest(_Shape):
    messages: list[Message] | None = None
    system: list[SystemBlock] | None = None
    inference_config: InferenceConfig | None = None
    tool_config: ToolConfig | None = None
    additional_model_request_fields: msgspec.Raw = msgspec.Raw()
    additional_model_response_field_paths: list[str] | None = None
    request_metadata: dict[str, str] | None = None
    output_config: OutputConfig | None = None
    performance_config: PerformanceConfig | None = None
    service_tier: ServiceTier | None = None
    # Read, never written (the stub ignores them): guardrails, prompts.
    guardrail_config: msgspec.Raw = msgspec.Raw()
    prompt_variables: msgspec.Raw = msgspec.Raw()


_decode = msgspec.json.Decoder(ConverseRequest).decode


def decode_request(body: bytes) -> ConverseRequest:
    """A Converse body; ``msgspec.ValidationError`` (naming the path) or
    ``msgspec.DecodeError`` when it is not one."""
    return _decode(body)
