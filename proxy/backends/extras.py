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

A field a backend can neither carry nor map is refused (``unsupported``:
``UnsupportedField``, an ``Untranslatable`` naming it, which the proxy answers
with a 400 ``untranslatable_request``), unless the backend sets
``drop_unsupported``: then it is left out and named like the rest. Fields
mapped to nothing on purpose (``NOTHING``, each with why) are never refused:
they are left out and named; flatgate's own (``FLATGATE_OWN``) are not even
named. A hosted tool is left out and named, always (issue 21's rule).

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

from flatgate.proxy.apis.openai_responses.compact import COMPACT_MARK
from flatgate.proxy.backends.base import Untranslatable
from flatgate.proxy.wire.schema import ApiDialect

__all__ = [
    "FLATGATE_OWN",
    "HOSTED_TOOLS",
    "LOGPROBS_INCLUDE",
    "MAX_OMITTED_NAMES",
    "NOTHING",
    "Fields",
    "UnsupportedField",
    "chat_for_responses",
    "hosted_tool",
    "messages_for_chat",
    "nested",
    "omitted_header",
    "omitted_label",
    "placed",
    "read_extras",
    "report_all",
    "responses_for_chat",
    "splice",
    "tool_family",
    "tool_types",
    "tools_name",
    "unsupported",
]

# An extras object's members: name -> the value's JSON text.
Fields = dict[str, msgspec.Raw]

# Responses fields that are flatgate's own business, never a backend's: the
# edge stores responses (`store`) and prepends the chain a
# `previous_response_id` names, and marks a compaction (`$compact`, read by an
# `openai-responses` backend that compacts); no backend is sent them, and
# none reports them.
FLATGATE_OWN = frozenset({"store", "previous_response_id", COMPACT_MARK})
# Fields of the same name and meaning in Chat Completions and Responses.
_SHARED = frozenset(
    {"prompt_cache_key", "prompt_cache_retention", "safety_identifier", "service_tier"}
)

# Fields mapped to nothing on purpose at a backend of another dialect, per
# client API, with why: left out and named, never refused (``NOTHING[dialect]``).
# A value of ``False`` / ``"disabled"`` / null for the fields in ``_OFF`` asks
# for nothing, and means nothing anywhere.
_NOTHING_RESPONSES = {
    # Asks for output items only the Responses API makes: encrypted reasoning
    # (Codex always asks; a chat backend's reasoning comes as its text),
    # hosted tools' sources and outputs (those tools are left out anyway).
    "include": "output items only the Responses API makes",
    # A chat backend streams its reasoning as it is: there is no summary to ask for.
    "reasoning.summary": "no summaries of reasoning in another API",
    "reasoning.generate_summary": "no summaries of reasoning in another API",
    # Codex's telemetry ids for OpenAI's own services; no other API reads them.
    "client_metadata": "the client's telemetry ids for OpenAI",
    # Cache-routing hints: other backends cache (or not) by themselves.
    "prompt_cache_key": "a cache hint",
    "prompt_cache_retention": "a cache hint",
    # An abuse-monitoring id: the answer does not depend on it.
    "safety_identifier": "an abuse-monitoring id",
    # Hints at a backend with no such control (where there is one, the
    # adapter maps them): it thinks, and writes, as it is configured to.
    "reasoning.effort": "a hint, at a backend with no effort control",
    "text.verbosity": "a hint, at a backend with no verbosity control",
}
_NOTHING_CHAT = {
    "prompt_cache_key": "a cache hint",
    "prompt_cache_retention": "a cache hint",
    "safety_identifier": "an abuse-monitoring id",
}
_NOTHING_MESSAGES = {
    # OpenAI-compatible servers cache prompts by themselves (OpenAI: automatic
    # prefix caching; vLLM, llama.cpp: prefix caches).
    "cache_control": "prompt caching is automatic there",
    "$cache_control": "prompt caching is automatic there",
    # The client's Anthropic betas: features of Anthropic's API only (each
    # feature's own field is judged by itself).
    "$headers": "Anthropic's beta headers",
    # Anthropic's metadata holds only user_id, an abuse-monitoring id.
    "metadata": "an abuse-monitoring id",
    # Thinking the chat API cannot ask for by name: the backend decides
    # (adaptive), or does not think unless asked (disabled).
    "thinking.adaptive": "the backend decides how much to think",
    "thinking.disabled": "no reasoning_effort asks for no thinking",
    # A tool loaded on demand (Anthropic's tool search): the tool is sent in
    # full, which is what loading it up front is.
    "tools.defer_loading": "the tool is sent in full: loaded up front",
    # Arguments streamed without buffering them to check them first (the AI
    # SDK's anthropic() provider sets it on every tool when it streams):
    # OpenAI-compatible servers stream tool arguments as they come anyway.
    "tools.eager_input_streaming": "tool arguments stream unchecked there anyway",
    # Where a text came from (a previous answer's citations): the text is
    # sent, and the citations only describe it.
    "messages.content.citations": "the text is sent; citations only describe it",
}
# Gemini's thinking (a budget or level, thought summaries: Gemini CLI asks
# for them on every turn): another API's backend decides how much it thinks.
_NOTHING_GEMINI = {"generationConfig.thinkingConfig": "the backend decides how much to think"}
NOTHING: dict[int, dict[str, str]] = {
    int(ApiDialect.OPENAI_RESPONSES): _NOTHING_RESPONSES,
    int(ApiDialect.OPENAI_CHAT): _NOTHING_CHAT,
    int(ApiDialect.ANTHROPIC_MESSAGES): _NOTHING_MESSAGES,
    int(ApiDialect.GEMINI): _NOTHING_GEMINI,
}
# The extras judged member by member (an object of fields of its own).
_NESTED = {
    int(ApiDialect.OPENAI_RESPONSES): ("reasoning", "text"),
    int(ApiDialect.GEMINI): ("generationConfig",),
}
_OFF = frozenset(
    {
        "store",
        "logprobs",
        "truncation",
        "background",
        "parallel_tool_calls",
        "tools.defer_loading",
        "tools.eager_input_streaming",
    }
)
_OFF_VALUES = frozenset({b"null", b"false", b'"disabled"'})

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
        "tools.defer_loading",
        "tools.input_examples",
        "tools.eager_input_streaming",
        "tools.allowed_callers",
        "messages.content.citations",
        *(f"tools[{t}]" for t in HOSTED_TOOLS),
        "tools[custom]",
        "tools[namespace]",
        "tools[other]",
    }
)

_RESPONSES = int(ApiDialect.OPENAI_RESPONSES)
_CHAT = int(ApiDialect.OPENAI_CHAT)
_MESSAGES = int(ApiDialect.ANTHROPIC_MESSAGES)
# The Responses API's ``include`` entry that asks for the tokens' logprobs.
LOGPROBS_INCLUDE = "message.output_text.logprobs"
_decode_include = msgspec.json.Decoder(list[str] | None).decode
_decode_extras = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


class _Placed(msgspec.Struct, gc=False):
    """A ``$tools`` or ``$blocks`` entry, as far as another dialect reads it."""

    fields: dict[str, msgspec.Raw]
    block: str = ""


_decode_placed = msgspec.json.Decoder(list[_Placed]).decode
_encode = msgspec.json.encode


class UnsupportedField(Untranslatable):
    """A client field a backend can neither carry nor map; ``param`` names it."""

    def __init__(self, field: str) -> None:
        super().__init__(
            f"the field '{field}' cannot be sent to this backend, and flatgate has no "
            "mapping for it: remove it, or set drop_unsupported = true on the backend "
            "to drop it"
        )
        self.param = field


def unsupported(field: str, omitted: list[str], drop: bool) -> None:
    """A client field the backend can neither carry nor map: refused
    (``UnsupportedField`` naming it) unless ``drop`` (the backend's
    ``drop_unsupported``), then named in ``omitted``."""
    if not drop:
        raise UnsupportedField(field)
    omitted.append(field)


def _left_out(field: str, raw: msgspec.Raw, dialect: int, omitted: list[str], drop: bool) -> None:
    """A field of ``dialect`` that a backend of another one is not sent:
    nothing for an off value, named for one mapped to nothing, else refused
    unless dropped."""
    if field in _OFF and bytes(raw) in _OFF_VALUES:
        return
    if field in NOTHING.get(dialect, ()):
        omitted.append(field)
    else:
        unsupported(field, omitted, drop)


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


def responses_for_chat(fields: Fields, omitted: list[str], drop: bool) -> list[tuple[str, bytes]]:
    """Responses extras for a Chat Completions body: the fields of the same
    name, ``reasoning.effort`` -> ``reasoning_effort``, ``text.verbosity`` ->
    ``verbosity``, ``top_logprobs`` or an ``include`` that asks for
    ``LOGPROBS_INCLUDE`` -> ``logprobs`` (+ ``top_logprobs``); tools, the
    rest of ``include`` and the fields mapped to nothing (``NOTHING``) named
    in ``omitted``; any other refused unless ``drop`` (``unsupported``)."""
    out: list[tuple[str, bytes]] = []
    logprobs = False
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
                    _left_out(f"reasoning.{k}", v, _RESPONSES, omitted, drop)
        elif key == "text":
            for k, v in nested(raw, key).items():
                if k == "verbosity":
                    out.append(("verbosity", bytes(v)))
                elif k != "format" and not _null(v):  # format: the request's response_format
                    _left_out(f"text.{k}", v, _RESPONSES, omitted, drop)
        elif key == "top_logprobs":
            out.append(("top_logprobs", bytes(raw)))
            logprobs = True
        elif key == "include":
            asked = _include(raw)
            logprobs = logprobs or LOGPROBS_INCLUDE in asked
            if any(entry != LOGPROBS_INCLUDE for entry in asked):
                omitted.append("include")
        elif key == "tools":
            omitted.extend(tools_name(kind) for kind, _ in tool_types(raw))
        else:
            _left_out(key, raw, _RESPONSES, omitted, drop)
    if logprobs:
        out.append(("logprobs", b"true"))
    return out


def _include(raw: msgspec.Raw) -> list[str]:
    """A Responses ``include`` value's entries; ``Untranslatable`` when it is
    not a list of strings."""
    try:
        return _decode_include(raw) or []
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise Untranslatable("extras.include: not a list of strings") from None


class _Thinking(msgspec.Struct, gc=False):
    type: str = ""
    budget_tokens: int = 0


_decode_thinking = msgspec.json.Decoder(_Thinking).decode


class _Edit(msgspec.Struct, gc=False):
    type: str = ""


class _ContextManagement(msgspec.Struct, gc=False):
    edits: list[_Edit] = []


_decode_context = msgspec.json.Decoder(_ContextManagement).decode
# A context edit that only clears thinking: a backend of another dialect is
# never sent thinking blocks, so it changes nothing there (Claude Code sends
# one with every request).
_CLEAR_THINKING = "clear_thinking_"
_EFFORTS = {b'"low"': b'"low"', b'"medium"': b'"medium"', b'"high"': b'"high"', b'"max"': b'"high"'}


def _budget_effort(budget: int) -> bytes:
    """A thinking budget as a ``reasoning_effort``: below 4k tokens low,
    below 16k medium, else high."""
    return b'"low"' if budget < 4096 else b'"medium"' if budget < 16384 else b'"high"'


# A tool's and a content block's own fields, as another dialect names them.
_PLACED = {"$tools": "tools", "$blocks": "messages.content"}


def messages_for_chat(fields: Fields, omitted: list[str], drop: bool) -> list[tuple[str, bytes]]:
    """Anthropic Messages extras for a Chat Completions body:
    ``output_config.effort`` -> ``reasoning_effort`` (``max`` as ``high``),
    else ``thinking`` of type ``enabled`` -> ``reasoning_effort`` by its
    ``budget_tokens`` (``_budget_effort``); the fields mapped to nothing
    (``NOTHING``: cache_control, beta headers, metadata, adaptive or disabled
    thinking, a tool's ``defer_loading`` and ``eager_input_streaming``, a
    text block's ``citations``)
    named in ``omitted``; any other refused unless ``drop``. A tool's or a
    block's own fields (``$tools``, ``$blocks``) are named
    ``tools.<field>`` and ``messages.content.<field>``; a null one means
    nothing, and a thinking block's go with the block (never sent here)."""
    effort = b""
    messages = int(ApiDialect.ANTHROPIC_MESSAGES)
    for key, raw in fields.items():
        if key == "thinking":
            try:
                thinking = _decode_thinking(raw)
            except msgspec.DecodeError:
                raise Untranslatable("extras.thinking: not a thinking object") from None
            if thinking.type == "enabled":
                effort = effort or _budget_effort(thinking.budget_tokens)
            else:
                _left_out(f"thinking.{thinking.type or 'other'}", raw, messages, omitted, drop)
        elif key == "output_config":
            for k, v in nested(raw, key).items():
                if k == "effort" and bytes(v) in _EFFORTS:
                    effort = _EFFORTS[bytes(v)]
                elif not _null(v):
                    _left_out(f"output_config.{k}", v, messages, omitted, drop)
        elif key == "tools":
            omitted.extend(tools_name(kind) for kind, _ in tool_types(raw))
        elif key == "context_management" and _clears_thinking_only(raw):
            omitted.append("context_management")
        elif key in _PLACED:
            try:
                entries = _decode_placed(raw)
            except msgspec.DecodeError:
                raise Untranslatable(f"extras.{key}: not a list of entries") from None
            for entry in entries:
                placed(_PLACED[key], entry.fields, entry.block, omitted, drop)
        else:
            _left_out(key, raw, messages, omitted, drop)
    return [("reasoning_effort", effort)] if effort else []


def placed(prefix: str, fields: Fields, block: str, omitted: list[str], drop: bool) -> None:
    """A Messages tool's or content block's own fields (``$tools``,
    ``$blocks``) at a backend that cannot place them: each named
    ``<prefix>.<field>`` (a tool's ``defer_loading`` with the prefix
    ``tools``); a null one means nothing, a thinking
    block's are named (they go with their block), any other is judged as a
    field of its own (``NOTHING``'s named, else refused unless ``drop``)."""
    for name, value in fields.items():
        field = f"{prefix}.{name}"
        if block == "thinking":
            omitted.append(field)
        elif not _null(value):
            _left_out(field, value, _MESSAGES, omitted, drop)


def _clears_thinking_only(raw: msgspec.Raw) -> bool:
    """A ``context_management`` whose every edit clears thinking (mapped to
    nothing at a backend of another dialect: it is sent no thinking)."""
    try:
        edits = _decode_context(raw).edits
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
    return bool(edits) and all(e.type.startswith(_CLEAR_THINKING) for e in edits)


def chat_for_responses(
    fields: Fields, omitted: list[str], drop: bool
) -> dict[str, msgspec.Raw | Fields]:
    """Chat Completions extras for a Responses body: the fields of the same
    name, ``top_logprobs``, ``logprobs: true`` -> ``include:
    [LOGPROBS_INCLUDE]``, ``reasoning_effort`` -> ``reasoning.effort`` and
    ``verbosity`` -> ``text.verbosity`` (objects, to merge with the body's
    own); any other refused unless ``drop`` (``unsupported``), or named when
    it is mapped to nothing."""
    out: dict[str, msgspec.Raw | Fields] = {}
    for key, raw in fields.items():
        if key in _SHARED or key == "top_logprobs":
            out[key] = raw
        elif key == "logprobs" and bytes(raw) == b"true":
            out["include"] = msgspec.Raw(_encode([LOGPROBS_INCLUDE]))
        elif key == "reasoning_effort":
            out["reasoning"] = {"effort": raw}
        elif key == "verbosity":
            out["text"] = {"verbosity": raw}
        else:
            _left_out(key, raw, _CHAT, omitted, drop)
    return out


def report_all(fields: Fields, dialect: int, omitted: list[str], drop: bool) -> None:
    """The extras of a dialect no field of which this backend carries: each
    tool named by its type, a Responses ``reasoning`` or ``text`` and a
    Gemini ``generationConfig`` by their members (``text.format`` is the
    request's ``response_format``), the fields mapped to nothing
    (``NOTHING``) named, flatgate's own not at all, any other refused unless
    ``drop`` (``unsupported``)."""
    responses = dialect == _RESPONSES
    nests = _NESTED.get(dialect, ())
    for key, raw in fields.items():
        if responses and key in FLATGATE_OWN:
            continue
        if key == "tools":
            try:
                omitted.extend(tools_name(kind) for kind, _ in tool_types(raw))
            except Untranslatable:
                unsupported(key, omitted, drop)
        elif key in nests:
            for k, v in nested(raw, key).items():
                if not _null(v) and (key, k) != ("text", "format"):
                    _left_out(f"{key}.{k}", v, dialect, omitted, drop)
        else:
            _left_out(key, raw, dialect, omitted, drop)
