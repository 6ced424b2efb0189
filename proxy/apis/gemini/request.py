"""The Gemini request bodies, as msgspec Structs: ``generateContent`` and
``streamGenerateContent`` (``GenerateContentRequest``, the same body; the
model is the URL's ``models/{model}:generateContent``, never the body's) and
``countTokens`` (``CountTokensRequest``).

The ``gemini`` and ``vertex`` backends write them
(``backends.gemini.encode``); the stub reads them (``backends.gemini.stub_wire``,
with ``decode_request``, which refuses a body that is not one, naming the
field as msgspec's errors do); the edge's Gemini API will read its clients
with them. Conventions as ``content``'s (camelCase, absent members not
written). A tool other than function declarations (``googleSearch``,
``codeExecution``, ``urlContext``, ...) and the schemas (``parameters``,
``responseSchema``: Google's OpenAPI subset; ``parametersJsonSchema``,
``responseJsonSchema``: JSON Schema) are ``msgspec.Raw``: their JSON as
written. Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.apis.gemini.content import Content, fold

__all__ = [
    "FUNCTION_MODES",
    "CountTokensRequest",
    "FunctionCallingConfig",
    "FunctionDeclaration",
    "GenerateContentRequest",
    "GenerationConfig",
    "SafetySetting",
    "ThinkingConfig",
    "Tool",
    "ToolConfig",
    "decode_count_tokens",
    "decode_request",
]

# ``FunctionCallingConfig.mode``'s values.
FUNCTION_MODES = frozenset({"MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED"})


class _Shape(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    pass


class FunctionDeclaration(_Shape):
    name: str
    description: str | None = None
    parameters: msgspec.Raw = msgspec.Raw()
    parameters_json_schema: msgspec.Raw = msgspec.Raw()
    response: msgspec.Raw = msgspec.Raw()
    response_json_schema: msgspec.Raw = msgspec.Raw()
    behavior: str | None = None
    parameters_json_schema_snake: msgspec.Raw = msgspec.field(
        default=msgspec.Raw(), name="parameters_json_schema"
    )
    response_json_schema_snake: msgspec.Raw = msgspec.field(
        default=msgspec.Raw(), name="response_json_schema"
    )

    def __post_init__(self) -> None:
        if len(self.parameters_json_schema_snake) or len(self.response_json_schema_snake):
            fold(self, "parameters_json_schema", "response_json_schema")


class Tool(_Shape):
    """A tool entry: function declarations, or one of Google's own tools."""

    function_declarations: list[FunctionDeclaration] | None = None
    google_search: msgspec.Raw = msgspec.Raw()
    google_search_retrieval: msgspec.Raw = msgspec.Raw()
    code_execution: msgspec.Raw = msgspec.Raw()
    url_context: msgspec.Raw = msgspec.Raw()
    file_search: msgspec.Raw = msgspec.Raw()
    google_maps: msgspec.Raw = msgspec.Raw()
    computer_use: msgspec.Raw = msgspec.Raw()
    retrieval: msgspec.Raw = msgspec.Raw()
    enterprise_web_search: msgspec.Raw = msgspec.Raw()


class FunctionCallingConfig(_Shape):
    mode: str | None = None
    allowed_function_names: list[str] | None = None


class ToolConfig(_Shape):
    function_calling_config: FunctionCallingConfig | None = None
    retrieval_config: msgspec.Raw = msgspec.Raw()


class ThinkingConfig(_Shape):
    include_thoughts: bool | None = None
    # Tokens (0: no thinking, -1: the model decides); Gemini 2.5.
    thinking_budget: int | None = None
    # "minimal", "low", "medium", "high"; Gemini 3.
    thinking_level: str | None = None
    include_thoughts_snake: bool | None = msgspec.field(default=None, name="include_thoughts")
    thinking_budget_snake: int | None = msgspec.field(default=None, name="thinking_budget")
    thinking_level_snake: str | None = msgspec.field(default=None, name="thinking_level")

    def __post_init__(self) -> None:
        if (
            self.include_thoughts_snake is not None
            or self.thinking_budget_snake is not None
            or self.thinking_level_snake is not None
        ):
            fold(self, "include_thoughts", "thinking_budget", "thinking_level")


class GenerationConfig(_Shape):
    stop_sequences: list[str] | None = None
    response_mime_type: str | None = None
    response_schema: msgspec.Raw = msgspec.Raw()
    response_json_schema: msgspec.Raw = msgspec.Raw()
    response_modalities: list[str] | None = None
    candidate_count: int | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    # A number (google-genai writes it as a float: ``4.0``); a whole one.
    top_k: float | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    response_logprobs: bool | None = None
    logprobs: int | None = None
    enable_enhanced_civic_answers: bool | None = None
    speech_config: msgspec.Raw = msgspec.Raw()
    thinking_config: ThinkingConfig | None = None
    media_resolution: str | None = None
    image_config: msgspec.Raw = msgspec.Raw()


class SafetySetting(_Shape):
    category: str
    threshold: str
    method: str | None = None


class GenerateContentRequest(_Shape):
    contents: list[Content] = msgspec.field(default_factory=list)
    system_instruction: Content | None = None
    tools: list[Tool] | None = None
    tool_config: ToolConfig | None = None
    safety_settings: list[SafetySetting] | None = None
    generation_config: GenerationConfig | None = None
    cached_content: str | None = None
    # The model, in a body that names it (countTokens' generateContentRequest,
    # a batch's request); never in generateContent's.
    model: str | None = None
    # Vertex's billing labels.
    labels: dict[str, str] | None = None


class CountTokensRequest(_Shape):
    """``countTokens``: contents, or a whole generateContent request (with its model)."""

    contents: list[Content] | None = None
    generate_content_request: GenerateContentRequest | None = None


_decode = msgspec.json.Decoder(GenerateContentRequest).decode
_decode_count = msgspec.json.Decoder(CountTokensRequest).decode


def decode_request(body: bytes) -> GenerateContentRequest:
    """A generateContent body; ``msgspec.ValidationError`` (naming the path)
    or ``msgspec.DecodeError`` when it is not one."""
    return _decode(body)


def decode_count_tokens(body: bytes) -> CountTokensRequest:
    """A countTokens body (errors as ``decode_request``'s)."""
    return _decode_count(body)
