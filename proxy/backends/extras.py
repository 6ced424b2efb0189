"""The client's own fields at a backend: merged, mapped, or reported as left out.

A request's ``extras`` (``wire.request.decode.Request``) is one JSON object
of the client's fields that have no slot in the schema, as its API spells
them, tagged with that API (``extras_dialect``). Each JSON adapter applies
one rule to it:

- a backend of the same dialect gets the fields merged into its body at the
  top level (``read_extras`` + ``splice``): the client's value wins over a
  mapped one, except for the fields an adapter keeps for itself (``model``,
  ``stream``, its message list);
- a backend of another dialect gets the fields its documented mapping
  carries, and reports the rest;
- a hosted tool (``HOSTED_TOOLS``: a tool that only the provider runs, such
  as ``web_search``) reaches a backend only if its ``hosted_tools`` setting
  names it; anywhere else it is reported as ``tools[<type>]``.

What a backend is not sent is named in ``Outbound.omitted``; the proxy turns
that into the ``x-flatgate-dropped-fields`` header (``omitted_header``) and the
``flatgate_dropped_fields_total`` counter (``omitted_label``: names from a
closed set, so that a caller's field names cannot grow the label set).

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import msgspec

from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.wire.schema import ApiDialect

__all__ = [
    "FLATGATE_OWN",
    "HOSTED_TOOLS",
    "MAX_OMITTED_NAMES",
    "Fields",
    "chat_for_responses",
    "hosted_tool",
    "nested",
    "omitted_header",
    "omitted_label",
    "read_extras",
    "report_all",
    "responses_for_chat",
    "splice",
    "tool_family",
    "tool_types",
    "tools_name",
]

# An extras object's members: name -> the value's JSON text.
Fields = dict[str, msgspec.Raw]

# Responses fields that are flatgate's own business, never a backend's: the
# edge stores responses (`store`) and prepends the chain a
# `previous_response_id` names; no backend is sent them, and none reports them.
FLATGATE_OWN = frozenset({"store", "previous_response_id"})
# Fields of the same name and meaning in Chat Completions and Responses.
_SHARED = frozenset(
    {"prompt_cache_key", "prompt_cache_retention", "safety_identifier", "service_tier"}
)

# Tool types of the Responses API that the provider runs itself (or whose
# calls only its own models make): the names a backend's `hosted_tools` may
# list. A dated variant (`web_search_2025_08_26`) is its family's.
HOSTED_TOOLS = (
    "web_search",
    "web_search_preview",
    "file_search",
    "code_interpreter",
    "computer",
    "computer_use_preview",
    "image_generation",
    "mcp",
    "local_shell",
    "shell",
    "apply_patch",
    "tool_search",
    "programmatic_tool_calling",
)
_HOSTED = frozenset(HOSTED_TOOLS)
_DATED = re.compile(r"_\d{4}_\d{2}_\d{2}$")

# The header names at most this many fields (then "...").
MAX_OMITTED_NAMES = 32
_NAME = re.compile(r"[A-Za-z0-9_.\[\]-]{1,64}")

# Every name an adapter reports that is a known field of one of the three
# client APIs (or a field of the schema an adapter leaves out): the label
# values of the omitted-fields counter. Anything else counts as "other".
_KNOWN = frozenset(
    {
        # the schema's own fields, left out by a backend that has no place for them
        "frequency_penalty",
        "metadata",
        "n",
        "name",
        "presence_penalty",
        "reasoning",
        "response_format",
        "seed",
        "stop",
        "top_k",
        "user",
        # OpenAI Responses
        "background",
        "context_management",
        "conversation",
        "include",
        "max_tool_calls",
        "prompt",
        "prompt_cache_key",
        "prompt_cache_retention",
        "reasoning.effort",
        "reasoning.summary",
        "safety_identifier",
        "service_tier",
        "store",
        "stream_options",
        "text",
        "text.format",
        "text.verbosity",
        "tools",
        "top_logprobs",
        "truncation",
        # OpenAI Chat Completions
        "audio",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "modalities",
        "prediction",
        "reasoning_effort",
        "verbosity",
        "web_search_options",
        # Anthropic Messages
        "cache_control",
        "container",
        "mcp_servers",
        "system",
        "thinking",
        "betas",
        *(f"tools[{t}]" for t in HOSTED_TOOLS),
        "tools[custom]",
        "tools[namespace]",
        "tools[other]",
    }
)

_RESPONSES = int(ApiDialect.OPENAI_RESPONSES)
_decode_extras = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_encode = msgspec.json.encode


def read_extras(text: str) -> Fields:
    """The extras object's fields, each value as its JSON text; ``{}`` for
    none. ``Untranslatable`` when it is not a JSON object."""
    if not text:
        return {}
    try:
        return _decode_extras(text.encode())
    except msgspec.DecodeError as exc:
        raise Untranslatable(f"extras: not a JSON object ({exc})") from None


def splice(body: bytes, fields: Iterable[tuple[str, bytes]]) -> bytes:
    """``body`` (one JSON object's text) with ``fields`` (name, JSON value
    text) appended as top-level members; the caller makes sure no name is in
    ``body`` already."""
    members = [_encode(name) + b":" + value for name, value in fields]
    if not members:
        return body
    joined = b",".join(members)
    if body == b"{}":
        return b"{" + joined + b"}"
    return body[:-1] + b"," + joined + b"}"


def tool_family(kind: str) -> str:
    """A tool type without its date (``web_search_2025_08_26`` -> ``web_search``)."""
    return _DATED.sub("", kind)


def hosted_tool(kind: str) -> bool:
    """Whether a tool of this type is one only its provider runs."""
    return tool_family(kind) in _HOSTED


class _Kind(msgspec.Struct, gc=False):
    type: str = ""


_decode_kind = msgspec.json.Decoder(_Kind).decode


def tool_types(raw: msgspec.Raw) -> list[tuple[str, msgspec.Raw]]:
    """The tools of an extras ``tools`` value, each as (type, its JSON text);
    ``Untranslatable`` when it is not a list of objects."""
    try:
        tools = msgspec.json.decode(raw, type=list[msgspec.Raw])
        return [(_decode_kind(t).type, t) for t in tools]
    except msgspec.DecodeError as exc:
        raise Untranslatable(f"extras.tools: not a list of tool objects ({exc})") from None


def tools_name(kind: str) -> str:
    """How a tool left out is named: ``tools[<type family>]``."""
    return f"tools[{tool_family(kind) or 'other'}]"


def omitted_label(name: str) -> str:
    """The counter's label for an omitted field's name (see the module docstring)."""
    return name if name in _KNOWN else "other"


def omitted_header(names: Iterable[str]) -> str:
    """The ``x-flatgate-dropped-fields`` value: each name once, in order, those that
    a header cannot carry as ``other``, at most ``MAX_OMITTED_NAMES``."""
    seen: dict[str, None] = {}
    for name in names:
        seen[name if _NAME.fullmatch(name) else "other"] = None
    out = list(seen)
    if len(out) > MAX_OMITTED_NAMES:
        out = [*out[:MAX_OMITTED_NAMES], "..."]
    return ",".join(out)


def nested(raw: msgspec.Raw, where: str) -> Mapping[str, msgspec.Raw]:
    """An extras value that must be an object (``reasoning``, ``text``), its
    members as JSON text; ``Untranslatable`` naming ``where`` otherwise."""
    try:
        return _decode_extras(raw)
    except msgspec.DecodeError:
        raise Untranslatable(f"extras.{where}: not a JSON object") from None


def _null(raw: msgspec.Raw) -> bool:
    return bytes(raw) == b"null"


def responses_for_chat(fields: Fields, omitted: list[str]) -> list[tuple[str, bytes]]:
    """Responses extras for a Chat Completions body: the fields of the same
    name, ``reasoning.effort`` -> ``reasoning_effort``, ``text.verbosity`` ->
    ``verbosity``, ``top_logprobs`` -> ``logprobs`` + ``top_logprobs``; every
    other field (hosted tools, ``include``, ``reasoning.summary``, ...) is
    named in ``omitted``."""
    out: list[tuple[str, bytes]] = []
    for key, raw in fields.items():
        if key in _SHARED:
            out.append((key, bytes(raw)))
        elif key in FLATGATE_OWN:
            continue
        elif key == "reasoning":
            for k, v in nested(raw, key).items():
                if k == "effort":
                    out.append(("reasoning_effort", bytes(v)))
                elif not _null(v):
                    omitted.append(f"reasoning.{k}")
        elif key == "text":
            for k, v in nested(raw, key).items():
                if k == "verbosity":
                    out.append(("verbosity", bytes(v)))
                elif not _null(v):
                    omitted.append(f"text.{k}")
        elif key == "top_logprobs":
            out += [("logprobs", b"true"), ("top_logprobs", bytes(raw))]
        elif key == "tools":
            omitted.extend(tools_name(kind) for kind, _ in tool_types(raw))
        else:
            omitted.append(key)
    return out


def chat_for_responses(fields: Fields, omitted: list[str]) -> dict[str, msgspec.Raw | Fields]:
    """Chat Completions extras for a Responses body: the fields of the same
    name, ``top_logprobs``, ``reasoning_effort`` -> ``reasoning.effort`` and
    ``verbosity`` -> ``text.verbosity`` (objects, to merge with the body's
    own); every other field is named in ``omitted``."""
    out: dict[str, msgspec.Raw | Fields] = {}
    for key, raw in fields.items():
        if key in _SHARED or key == "top_logprobs":
            out[key] = raw
        elif key == "reasoning_effort":
            out["reasoning"] = {"effort": raw}
        elif key == "verbosity":
            out["text"] = {"verbosity": raw}
        else:
            omitted.append(key)
    return out


def report_all(fields: Fields, dialect: int, omitted: list[str]) -> None:
    """Name every field in ``omitted``, for a backend no field of this
    dialect maps to: each tool by its type, flatgate's own fields not at all."""
    responses = dialect == _RESPONSES
    for key, raw in fields.items():
        if responses and key in FLATGATE_OWN:
            continue
        if key == "tools":
            try:
                omitted.extend(tools_name(kind) for kind, _ in tool_types(raw))
            except Untranslatable:
                omitted.append(key)
        else:
            omitted.append(key)
