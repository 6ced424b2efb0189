"""Gemini's contents and parts, as msgspec Structs: ``Content`` (a role and
its parts) and ``Part`` (text, thought, ``inlineData``, ``fileData``,
``functionCall``, ``functionResponse``, ``executableCode``,
``codeExecutionResult``, with ``thoughtSignature`` and ``videoMetadata``).

The one model of them: the ``gemini`` and ``vertex`` backends write their
request's contents with them (``backends.gemini.encode``), read their answer's
candidates with them (``answer``), and the stub reads a request with them
(``backends.gemini.stub_wire``); the edge's Gemini API will read its clients
with the same ones.

Gemini spells its fields in camelCase (``rename="camel"``: ``inline_data`` is
``inlineData``); a part is a union written as an object with one data member
set (``thought``, ``thoughtSignature`` and ``videoMetadata`` go beside it):
every member defaults to ``None`` and ``omit_defaults`` writes only the ones
set. ``Blob.data`` is the base64 text as the JSON carries it (``str``):
Google writes the standard alphabet, google-genai (pydantic) the URL-safe
one, and protobuf's JSON reads both, so ``blob_bytes`` decodes either
(msgspec's ``bytes`` reads the standard one only); a writer gives
``b64(data)``. ``thoughtSignature`` is kept as the base64 text the
API sent (``str``): it is opaque, and goes back exactly as it came. A
function call's ``args``, a function response's ``response`` are
``msgspec.Raw`` (their JSON as written). Decoding ignores fields this model
does not know (a newer API's) and is lenient about what is absent, as a
server's answer must be. Protobuf's JSON takes a field by its proto name
too (``mime_type`` for ``mimeType``), and google-genai writes some of its
request that way (a blob's and a file's members, ``thinkingConfig``'s, a
declaration's ``parameters_json_schema``): the Structs it does so for read
both spellings, the snake_case one into a twin field that ``__post_init__``
folds into the camelCase one (``fold``), so the twin is never written.
Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii

import msgspec

__all__ = [
    "Blob",
    "CodeExecutionResult",
    "Content",
    "ExecutableCode",
    "FileData",
    "FunctionCall",
    "FunctionResponse",
    "FunctionResponseBlob",
    "FunctionResponsePart",
    "Part",
    "VideoMetadata",
    "b64",
    "blob_bytes",
    "fold",
]


_URL_SAFE = bytes.maketrans(b"-_", b"+/")


def b64(data: bytes) -> str:
    """Bytes as the base64 text a Gemini body carries."""
    return base64.b64encode(data).decode("ascii")


def blob_bytes(text: str) -> bytes:
    """A Gemini body's base64 text (either alphabet, as protobuf's JSON
    reads it; padding optional) as bytes; ``ValueError`` for one that is
    not base64."""
    raw = text.encode("ascii", "strict").translate(_URL_SAFE)
    raw += b"=" * (-len(raw) % 4)
    try:
        return binascii.a2b_base64(raw, strict_mode=True)
    except binascii.Error as exc:
        raise ValueError(f"not base64: {exc}") from None


class _Shape(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """Gemini's conventions: camelCase names, absent members not written."""


def fold(obj: msgspec.Struct, *names: str) -> None:
    """Each ``<name>_snake`` twin read (proto JSON's other spelling) moved
    into ``<name>``, the twin left unset so that it is never written (each
    ``__post_init__`` calls it only when a twin is set: Structs built by the
    encoder pay one test)."""
    for name in names:
        twin = f"{name}_snake"
        value = getattr(obj, twin)
        if isinstance(value, msgspec.Raw):
            if len(value):
                setattr(obj, name, value)
                # The field's own default object: omit_defaults knows an
                # absent Raw by identity (another empty Raw is written as nothing).
                default = next(f.default for f in msgspec.structs.fields(obj) if f.name == twin)
                setattr(obj, twin, default)
        elif value is not None:
            setattr(obj, name, value)
            setattr(obj, twin, None)


def _required(value: object, where: str) -> None:
    if not value:
        raise ValueError(f"Object missing required field `{where}`")


class Blob(_Shape):
    """``inlineData``: bytes with their MIME type (base64 in the JSON)."""

    mime_type: str = ""
    data: str = ""
    display_name: str | None = None
    mime_type_snake: str | None = msgspec.field(default=None, name="mime_type")
    display_name_snake: str | None = msgspec.field(default=None, name="display_name")

    def __post_init__(self) -> None:
        if self.mime_type_snake is not None or self.display_name_snake is not None:
            fold(self, "mime_type", "display_name")
        if not self.mime_type:
            _required(self.mime_type, "mimeType")


class FileData(_Shape):
    """``fileData``: a file by URI (the Files API's, ``gs://`` at Vertex, a URL)."""

    file_uri: str = ""
    mime_type: str | None = None
    display_name: str | None = None
    file_uri_snake: str | None = msgspec.field(default=None, name="file_uri")
    mime_type_snake: str | None = msgspec.field(default=None, name="mime_type")
    display_name_snake: str | None = msgspec.field(default=None, name="display_name")

    def __post_init__(self) -> None:
        if self.file_uri_snake is not None or self.mime_type_snake is not None:
            fold(self, "file_uri", "mime_type", "display_name")
        elif self.display_name_snake is not None:
            fold(self, "display_name")
        if not self.file_uri:
            _required(self.file_uri, "fileUri")


class FunctionCall(_Shape):
    name: str
    args: msgspec.Raw = msgspec.Raw()
    id: str | None = None


class FunctionResponseBlob(Blob):
    """A function response's ``inlineData`` (Gemini 3's multimodal function
    responses): a ``Blob``'s members, a type of its own in Google's API."""


class FunctionResponsePart(_Shape):
    """A part of a function's response (multimodal function responses)."""

    inline_data: FunctionResponseBlob | None = None
    file_data: FileData | None = None


class FunctionResponse(_Shape):
    name: str
    response: msgspec.Raw
    id: str | None = None
    parts: list[FunctionResponsePart] | None = None
    will_continue: bool | None = None
    scheduling: str | None = None


class ExecutableCode(_Shape):
    code: str
    language: str = "PYTHON"


class CodeExecutionResult(_Shape):
    outcome: str
    output: str | None = None


class VideoMetadata(_Shape):
    start_offset: str | None = None
    end_offset: str | None = None
    fps: float | None = None
    start_offset_snake: str | None = msgspec.field(default=None, name="start_offset")
    end_offset_snake: str | None = msgspec.field(default=None, name="end_offset")

    def __post_init__(self) -> None:
        if self.start_offset_snake is not None or self.end_offset_snake is not None:
            fold(self, "start_offset", "end_offset")


class Part(_Shape):
    """One part of a content: exactly one data member set."""

    text: str | None = None
    inline_data: Blob | None = None
    file_data: FileData | None = None
    function_call: FunctionCall | None = None
    function_response: FunctionResponse | None = None
    executable_code: ExecutableCode | None = None
    code_execution_result: CodeExecutionResult | None = None
    # Beside the data member: a thought (its text is a thought summary), the
    # signature of the model's thinking, a video's clip.
    thought: bool | None = None
    thought_signature: str | None = None
    video_metadata: VideoMetadata | None = None
    # Read, never written: a part's resolution setting, and members of a
    # newer API this model does not know the shape of.
    media_resolution: msgspec.Raw = msgspec.Raw()
    part_metadata: msgspec.Raw = msgspec.Raw()


class Content(_Shape):
    """A turn: ``role`` ``user`` or ``model`` (none in ``systemInstruction``)."""

    parts: list[Part] = msgspec.field(default_factory=list)
    role: str | None = None
