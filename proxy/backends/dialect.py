"""The stub's answer in no wire format: the deterministic echo and the faults.

Owns what the stub answers, whatever protocol it speaks:

- ``StubRequest``: what a wire module (``fbs``, ``openai``,
  ``openai_responses``, ``anthropic``) reads out of a request: roles and
  texts, the token limit, the forced tool, the function tools it offers
  (``OfferedTool``), ``stream``, the fault the request asks for, and the
  settings a protocol echoes;
- ``answer``: the echo of the last ``user`` message, one delta per
  whitespace-delimited word with the whitespace after it (``deltas_of``), cut
  before the first of the request's stop sequences it contains (finish
  ``stop``, naming the sequence), then at ``max_tokens`` deltas (finish
  ``length``, else ``stop``), or one tool call: when the request forces a
  tool (arguments ``{"input": "<last user message>"}``), or, in the
  ``offered`` tool mode (``ToolMode``, ``[stub] tools``), when it offers
  exactly one function tool, may call it, and its conversation ends with
  the user's new input (not a tool's result), with arguments its schema
  accepts (``arguments_for``);
- ``split_model``: a model name's fault suffix (``echo@die:2``);
- ``described``: a message's content parts as the echo shows them, so that
  a test can prove the bytes arrived intact: each text part's text, each
  other part one ``[kind media/type N bytes sha256:<12 hex> WxH]``
  description (``describe_part``);
- ``Wire`` and ``Rendering``: what each wire module provides to the server,
  and ``Reply`` / ``Rejected``, an answer before the first byte;
- ``id_header``: the response header echoing the request's id, only when the
  id is one a header can carry;
- ``vector``: the embeddings every protocol's stub answers with, a
  deterministic vector per input, derived from the input and the dimension
  by SHAKE-256, each float32 in ±[0.5, 1): the same input always gives the
  same vector. Built with integer operations over the whole vector, no
  Python float per number, and the vectors of short inputs are cached
  (benchmarks send the same ones);
- ``STUB_MAX_BODY``: the largest body the stub reads (and so what a request
  may expand to when it is verified).

Pure: no I/O.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, get_args

import msgspec

from flatgate.proxy.document.servers import Fault, ToolMode
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.serve import valid_request_id
from flatgate.proxy.wire.chunk.frames import Usage
from flatgate.proxy.wire.media import image_size
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.schema import FinishReason, PartKind, Role

__all__ = [
    "BEFORE_HEAD",
    "FAULTS",
    "LISTED_MODEL",
    "MID_STREAM",
    "STUB_MAX_BODY",
    "TOOL_MODES",
    "Answer",
    "Canned",
    "Fault",
    "HeaderFn",
    "Headers",
    "OfferedTool",
    "Rejected",
    "Rendering",
    "Reply",
    "StubRequest",
    "ToolCall",
    "ToolMode",
    "Wire",
    "answer",
    "arguments_for",
    "deltas_of",
    "describe_part",
    "described",
    "id_header",
    "is_streamed",
    "split_model",
    "vector",
]

FAULTS: tuple[str, ...] = get_args(Fault)

TOOL_MODES: tuple[str, ...] = get_args(ToolMode)

Headers = list[tuple[str, str]]
HeaderFn = Callable[[str], str | None]

# Faults answered with an error status before the first byte, and faults that
# strike after ``fault_after`` deltas of a streamed answer.
BEFORE_HEAD = frozenset({"fail", "rate_limit", "overloaded", "auth", "reject"})
MID_STREAM = frozenset({"die", "hang", "error"})

# The stub takes what the proxy may forward (its own limit is configurable).
STUB_MAX_BODY = 64 << 20

# The model the JSON protocols list at /v1/models (the stub answers any name).
LISTED_MODEL = "flatgate-echo"

_WORD = re.compile(r"\S+\s*")
_SUFFIX = re.compile(rf"@({'|'.join(FAULTS)})(?::(\d{{1,9}}))?$")


@dataclass(frozen=True, slots=True)
class OfferedTool:
    """A function tool a request offers: its name and its parameters' JSON
    Schema as JSON text (``""``: none given)."""

    name: str
    parameters: str = ""


@dataclass(frozen=True, slots=True)
class StubRequest:
    """What the stub needs of a request, in any protocol.

    ``messages`` are ``(Role, text)`` pairs; ``model`` is without its fault
    suffix; ``fault`` is ``""`` or one of ``FAULTS``, ``fault_after`` the
    deltas sent before a mid-stream fault strikes.
    """

    request_id: str
    model: str
    messages: tuple[tuple[int, str], ...]
    max_tokens: int
    forced_tool: str
    stream: bool
    metadata: dict[str, str] = field(default_factory=dict)
    fault: str = ""
    fault_after: int = 0
    # OpenAI's ``stream_options.include_usage``.
    include_usage: bool = False
    # Stop sequences: the echo ends before the first one it contains.
    stop: tuple[str, ...] = ()
    # A protocol's own settings that its answer echoes or acts on (the
    # Responses API's `tools`, `reasoning`, `include`, ...), as sent.
    params: dict[str, Any] = field(default_factory=dict)
    # The function tools the model may call, in the request's order: none
    # when its tool_choice says none (hosted and server tools are not here).
    offered: tuple[OfferedTool, ...] = ()

    @property
    def last_user(self) -> str:
        for role, content in reversed(self.messages):
            if role == Role.User:
                return content
        return ""

    @property
    def new_input(self) -> bool:
        """Whether the conversation ends with the user's input (system
        messages aside), not with a tool's result or the assistant."""
        for role, _ in reversed(self.messages):
            if role not in (Role.System, Role.Developer):
                return bool(role == Role.User)
        return False

    @property
    def prompt_tokens(self) -> int:
        return sum(len(content.split()) for _, content in self.messages)


_KIND_NAMES = {int(k): k.name.lower() for k in PartKind}


def describe_part(part: ContentPart) -> str:
    """One non-text part as the echo shows it: ``[image image/png 1234 bytes
    sha256:0123456789ab 64x32]`` for bytes (the size for an image whose
    header says it), ``[image url https://...]``, ``[file file_id file-1]``,
    ``[document text 12 bytes sha256:...]`` for a plain-text document."""
    kind = _KIND_NAMES.get(part.kind, str(part.kind))
    if part.data or (part.text and part.kind != PartKind.TEXT):
        data = part.data or part.text.encode()
        media = part.media_type or ("text/plain" if part.text else "-")
        digest = hashlib.sha256(data).hexdigest()[:12]
        out = f"[{kind} {media} {len(data)} bytes sha256:{digest}"
        size = image_size(data, part.media_type) if part.kind == PartKind.IMAGE else None
        return out + (f" {size[0]}x{size[1]}]" if size else "]")
    if part.url:
        return f"[{kind} url {part.url}]"
    if part.file_id:
        return f"[{kind} file_id {part.file_id}]"
    return f"[{kind} span {part.span}]" if part.span else f"[{kind}]"


def described(parts: list[ContentPart] | tuple[ContentPart, ...]) -> str:
    """A message's parts as the echo's text: text parts as they are, the
    others described (``describe_part``), joined by single spaces."""
    return " ".join(p.text if p.kind == PartKind.TEXT else describe_part(p) for p in parts)


def split_model(model: str) -> tuple[str, str, int]:
    """``(model, fault, fault_after)`` of ``name@fault`` or ``name@fault:N``;
    a name without a known fault suffix is the whole model."""
    m = _SUFFIX.search(model)
    if m is None:
        return model, "", 0
    return model[: m.start()], m.group(1), int(m.group(2) or 0)


def deltas_of(text: str, limit: int = 0) -> list[str]:
    """Split ``text`` into word deltas that join back to it exactly.

    With ``limit`` > 0, at most ``limit + 1`` deltas (enough to know it cut).
    """
    if limit > 0:
        words = [m.group() for m in itertools.islice(_WORD.finditer(text), limit + 1)]
    else:
        words = _WORD.findall(text)
    lead = text[: len(text) - len(text.lstrip())]
    if not words:
        return [text] if text else []
    words[0] = lead + words[0]
    return words


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    # JSON text: ``{"input": "<last user message>"}``.
    arguments: str

    def fragments(self) -> list[str]:
        """The arguments as a model streams them: word by word, at least two."""
        return deltas_of(self.arguments)


@dataclass(frozen=True, slots=True)
class Answer:
    deltas: tuple[str, ...]
    finish: FinishReason
    usage: Usage
    tool_call: ToolCall | None = None
    # The stop sequence the echo ended at ("" for none).
    stop_sequence: str = ""

    @property
    def text(self) -> str:
        return "".join(self.deltas)


def answer(req: StubRequest, tool_id_prefix: str = "call_", tools: ToolMode = "named") -> Answer:
    """The echo of ``req`` (see the module docstring), in tool mode ``tools``."""
    call = None
    if req.forced_tool:
        call = ToolCall("", req.forced_tool, json.dumps({"input": req.last_user}))
    elif tools == "offered" and len(req.offered) == 1 and req.new_input:
        [tool] = req.offered
        call = ToolCall("", tool.name, arguments_for(tool.parameters, req.last_user))
    if call is not None:
        call = ToolCall(f"{tool_id_prefix}{req.request_id or 'stub'}", call.name, call.arguments)
        return Answer((), FinishReason.TOOL_CALLS, Usage(req.prompt_tokens, 1), call)
    text, matched = _until_stop(req.last_user, req.stop)
    deltas = deltas_of(text, req.max_tokens)
    finish = FinishReason.STOP
    if req.max_tokens > 0 and len(deltas) > req.max_tokens:
        deltas = deltas[: req.max_tokens]
        finish = FinishReason.LENGTH
        matched = ""
    return Answer(tuple(deltas), finish, Usage(req.prompt_tokens, len(deltas)), None, matched)


# The empty value of each JSON Schema type a tool's parameter may have but
# a string (``_value_for``), made afresh each time.
_EMPTY: dict[str, Callable[[], Any]] = {
    "integer": int,
    "number": int,
    "boolean": bool,
    "array": list,
    "object": dict,
    "null": type(None),
}


def _value_for(schema: object, text: str) -> Any:
    """A value ``schema`` accepts: its first ``enum`` or its ``const``
    value, ``text`` for a string (or a schema that names no type it knows),
    else the type's empty value (0, false, [], {}, null)."""
    if not isinstance(schema, dict):
        return text
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    empty = _EMPTY.get(kind) if isinstance(kind, str) else None
    return text if empty is None else empty()


def arguments_for(parameters: str, text: str) -> str:
    """A tool call's arguments (JSON text) that ``parameters``, a JSON
    Schema's text, accepts: each ``required`` property a value of its type
    (``_value_for``: a string is ``text``, the last user message), nothing
    else; ``{"input": text}`` for a tool whose schema names no properties
    (none given, or ``{"type": "object"}``: any object)."""
    try:
        schema = json.loads(parameters) if parameters else None
    except ValueError:
        schema = None
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return json.dumps({"input": text})
    props: dict[str, Any] = schema["properties"]
    required = schema.get("required")
    names = [n for n in required if isinstance(n, str)] if isinstance(required, list) else []
    return json.dumps({name: _value_for(props.get(name), text) for name in names})


def _until_stop(text: str, stops: tuple[str, ...]) -> tuple[str, str]:
    """``text`` up to the earliest stop sequence in it, and that sequence (a
    model stops before emitting it; at one place, the longest wins)."""
    best, matched = len(text), ""
    for s in stops:
        at = text.find(s) if s else -1
        if at != -1 and (at < best or (at == best and len(s) > len(matched))):
            best, matched = at, s
    return text[:best], matched


class _StreamFlag(msgspec.Struct):
    stream: bool = False


_STREAM_FLAG = msgspec.json.Decoder(_StreamFlag)


def is_streamed(body: bytes) -> bool:
    """Whether a JSON body asks for ``"stream": true``, reading nothing else
    (canned mode); a body that does not decode is not streamed."""
    try:
        return _STREAM_FLAG.decode(body).stream
    except msgspec.DecodeError:
        return False


def id_header(name: str, request_id: str) -> Headers:
    """The response header ``name`` echoing ``request_id``, or none when the id
    is not one the proxy would take (``plumbing.serve.valid_request_id``): a
    value with CR/LF or text past Latin-1 cannot be sent as a header, and
    trying fails the answer with a 500 (which a proxy takes for a sick
    backend). The id is still echoed in the body."""
    return [(name, request_id)] if valid_request_id(request_id) else []


@dataclass(frozen=True, slots=True)
class Reply:
    """A whole HTTP answer: an error before the first byte, or a non-streamed one."""

    status: int
    headers: Headers
    body: bytes


class Rejected(FlatgateError):
    """A request the protocol refuses; ``reply`` is the error in its shape."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(str(reply.status), status=reply.status)
        self.reply = reply


class Rendering(Protocol):
    """One streamed answer in one wire format, as the bytes to send."""

    content_type: str

    def opening(self) -> bytes:
        """What precedes the first delta (may be empty)."""
        ...

    def steps(self) -> Iterator[bytes]:
        """One write per delta: a content delta or a tool call's argument fragment."""
        ...

    def closing(self) -> bytes:
        """The finish, usage and end-of-stream marker."""
        ...

    def error(self) -> bytes:
        """A mid-stream error in the protocol's shape (the ``error`` fault)."""
        ...


# Canned mode: the body and a request header in, the prebuilt answer out.
Canned = Callable[[bytes, HeaderFn], Reply]
# A wire with no POST endpoint but its ``path`` (``Wire.posts``).
NO_POSTS: Mapping[str, Callable[[bytes, HeaderFn], Reply]] = MappingProxyType({})


class Wire(Protocol):
    """One protocol's side of the stub: parsing, rendering, its error shapes."""

    # The completion endpoint (POST), the response header naming the request,
    # and the prefix of tool-call ids.
    path: str
    request_id_header: str
    tool_id_prefix: str
    # Every answer is a stream (fbs: chunk frames), whatever the request says.
    always_streams: bool
    # Other POST endpoints, each answered whole from its body (the Responses
    # API's /v1/responses/compact); ``NO_POSTS`` for none.
    posts: Mapping[str, Callable[[bytes, HeaderFn], Reply]]

    def route(self, method: str, path: str) -> Reply:
        """Any request other than ``POST path``: other endpoints, 404, 405."""
        ...

    def authorize(self, header: HeaderFn, api_key: str) -> Reply | None:
        """``None`` when the request carries ``api_key``, else the 401."""
        ...

    def parse(self, body: bytes, header: HeaderFn) -> StubRequest:
        """The request, validated by the protocol's rules; raises ``Rejected``."""
        ...

    def fault(self, fault: str, req: StubRequest) -> Reply:
        """The answer of a ``BEFORE_HEAD`` fault."""
        ...

    def complete(self, req: StubRequest, ans: Answer, header: HeaderFn) -> Reply:
        """The non-streamed answer."""
        ...

    def failed(self, req: StubRequest, header: HeaderFn) -> Reply:
        """The ``error`` fault of a non-streamed request."""
        ...

    def stream(self, req: StubRequest, ans: Answer, header: HeaderFn) -> Rendering:
        """The streamed answer."""
        ...

    def canned(self, count: int) -> Canned:
        """``count`` fixed ``"tok "`` deltas and a finish, built once."""
        ...


# Inputs up to this many bytes have their vectors cached (per dimension).
_CACHED_INPUT = 4096


@functools.lru_cache(maxsize=16)
def _masks(dimensions: int) -> tuple[int, int]:
    """Per float32 (little-endian words): keep the sign and the mantissa, and
    set the exponent of [0.5, 1)."""
    keep = int.from_bytes(b"\xff\xff\x7f\x80" * dimensions, "little")
    exponent = int.from_bytes(b"\x00\x00\x00\x3f" * dimensions, "little")
    return keep, exponent


def _vector(seed: bytes, dimensions: int) -> bytes:
    size = 4 * dimensions
    raw = hashlib.shake_256(seed + dimensions.to_bytes(4, "little")).digest(size)
    keep, exponent = _masks(dimensions)
    return ((int.from_bytes(raw, "little") & keep) | exponent).to_bytes(size, "little")


_cached_vector = functools.lru_cache(maxsize=512)(_vector)


def vector(seed: bytes, dimensions: int) -> bytes:
    """The vector of the input ``seed`` (``b"t"`` + its UTF-8 text, or ``b"i"``
    + its ids as little-endian int32) at ``dimensions``: ``4 * dimensions``
    bytes of little-endian float32, each in ±[0.5, 1)."""
    if len(seed) <= _CACHED_INPUT:
        return _cached_vector(seed, dimensions)
    return _vector(seed, dimensions)
