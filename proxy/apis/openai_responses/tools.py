"""A Responses request's ``tools`` and ``tool_choice``: what the wire carries
of them, and what travels in the extras.

Owns the mapping of the tools a client declares:

- ``function`` tools become wire tools (name, description, parameters as the
  client's JSON text, strict: true unless the client says false, the
  Responses API's default);
- Codex's ``namespace`` groups are flattened: each function in one becomes a
  wire tool named ``<namespace>__<name>`` (``NAMESPACE_SEP``), and
  ``Tools.names`` maps that name back so that the answer's ``function_call``
  names the function and its namespace as the client declared them; the
  group's other members (``custom`` tools) travel in a group of their own in
  the extras; the group's description opens each function member's (a
  blank line between: ``Tools.written``, once the request is charged for
  the copies, ``Tools.expansion``), and heads the extras' group too;
- a function tool's, a namespace's and a function ``tool_choice``'s fields
  of no name are refused naming them, unless null or empty (they ask for
  nothing), and so is ``defer_loading: true`` (tool search: the wire sends
  every function); other tools and choices travel as written;
- every other tool (``web_search``, ``file_search``, ``code_interpreter``,
  ``computer_use_preview``, ``image_generation``, ``mcp``, ``local_shell``,
  ``custom``, and types this module does not know) is kept as the client's
  JSON object, for the extras' ``tools`` list.

``tool_choice``: ``auto`` / ``none`` / ``required`` and ``{"type":
"function", "name"}`` (a namespaced function by its own name, when only one
namespace has it) map to the wire; ``allowed_tools`` maps its mode and
travels in the extras too; a choice that names another kind of tool travels
in the extras only. Every failure is an ``InvalidRequest`` naming the
``param`` (``tools.[3].tools.[0].name``).

``ToolDef`` and ``ToolChoice`` are the tool and the choice of the request,
for every side: the edge reads a function or a namespace with them (strictly
through a subclass that forbids unknown fields, ``_KnownToolDef``, used only
by the edge's first pass), and the ``openai-responses`` adapter writes its
function tools and a forced function with them (``omit_defaults``: an
absent field is not written; it changes no decode). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import msgspec

from flatgate.proxy.apis.decoding import is_utf8, validation_text
from flatgate.proxy.apis.errors import InvalidRequest, shown
from flatgate.proxy.apis.openai_chat.request import param_from_error, unrecognized
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.request.writer import ToolSpec
from flatgate.proxy.wire.schema import ToolChoiceMode

__all__ = [
    "NAMESPACE_SEP",
    "ToolChoice",
    "ToolDef",
    "Tools",
    "invalid",
    "missing",
    "not_utf8",
    "read_tool_choice",
    "read_tools",
    "utf8",
]

# A namespaced function's wire name: namespace, this, name.
NAMESPACE_SEP = "__"
_NULL = b"null"
# Between a namespace's description and its function's own.
_GROUP_SEP = b"\n\n"


class ToolDef(msgspec.Struct, omit_defaults=True, gc=False):
    """A tool of any type (functions and namespaces are read; the rest travel
    raw); an adapter writes its function tools with it."""

    type: str
    name: str | None = None
    description: str | None = None
    parameters: msgspec.Raw = msgspec.Raw()
    strict: bool | None = None
    tools: list[msgspec.Raw] | None = None
    # Tool search's: false (or null) only, the wire sends every function.
    defer_loading: bool | None = None


class ToolChoice(msgspec.Struct, omit_defaults=True, gc=False):
    """A ``tool_choice`` object; an adapter writes a forced function with it."""

    type: str
    name: str | None = None
    mode: Literal["auto", "required"] | None = None


class _KnownToolDef(ToolDef, forbid_unknown_fields=True, gc=False):
    """A tool with no field of no name: the one pass (a hosted tool's own
    fields fail it, and are read leniently: it travels as written)."""


class _KnownToolChoice(ToolChoice, forbid_unknown_fields=True, gc=False):
    """The same for ``tool_choice``."""


_tool_decoder = msgspec.json.Decoder(ToolDef)
_known_tool_decoder = msgspec.json.Decoder(_KnownToolDef)
_choice_decoder = msgspec.json.Decoder(ToolChoice)
_known_choice_decoder = msgspec.json.Decoder(_KnownToolChoice)
_members = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_UNKNOWN = "Object contains unknown field"
# The types read here, not carried as written: their unknown keys are judged.
_READ = frozenset({"function", "namespace"})
_EMPTY = frozenset({b"null", b"[]", b"{}", b'""'})


class Tools:
    """The tools as the wire writes them (``specs``, each function's own
    description; ``written`` opens a namespaced one's with its group's), the
    namespaced names' origins (wire name -> (namespace, name)), and the
    client's JSON of the tools the wire cannot carry (``hosted``).

    A namespace's description is written once per function in it: a 1 MB
    description over 300 functions is 300 MB. ``expansion`` counts those
    bytes without writing them, so that the request is charged for them
    (``Budget.charge``) before ``written`` makes them."""

    __slots__ = ("expansion", "hosted", "names", "prefixes", "specs")

    def __init__(self) -> None:
        self.specs: list[ToolSpec] = []
        # Each spec's group description (b"": none), by the spec's index.
        self.prefixes: list[bytes] = []
        self.expansion = 0
        self.names: dict[str, tuple[str, str]] = {}
        self.hosted: list[bytes] = []

    def add(self, spec: ToolSpec, prefix: bytes = b"") -> None:
        self.specs.append(spec)
        self.prefixes.append(prefix)
        if prefix:
            self.expansion += len(prefix) + len(_GROUP_SEP)

    def written(self) -> list[ToolSpec]:
        """The specs as the wire writes them: a namespace's description opens
        each of its functions' (a blank line between)."""
        if not self.expansion:
            return self.specs
        return [
            (name, prefix + _GROUP_SEP + own if own else prefix, params, strict)
            if prefix
            else (name, own, params, strict)
            for (name, own, params, strict), prefix in zip(self.specs, self.prefixes, strict=True)
        ]


def invalid(param: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid value for '{param}': {why}", param=param)


def missing(param: str) -> InvalidRequest:
    return InvalidRequest(f"Missing required parameter: '{param}'.", param=param)


def not_utf8(param: str) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid value for '{param}': a string in it is not valid UTF-8.",
        param=param,
        code=codes.INVALID_JSON,
    )


def utf8(data: bytes, param: str) -> bytes:
    """``data``, JSON carried as the client wrote it, checked to be UTF-8
    (the decoder skips what it does not read, unchecked)."""
    if not is_utf8(data):
        raise not_utf8(param)
    return data


T = TypeVar("T")
S = TypeVar("S", bound=msgspec.Struct)


def _decoded(decoder: msgspec.json.Decoder[T], raw: bytes, where: str) -> T:
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        text = validation_text(exc)
        sub = param_from_error(text)
        raise InvalidRequest(
            f"Invalid request: {text} (in '{where}')", param=f"{where}.{sub}" if sub else where
        ) from exc


def _judged(
    known: msgspec.json.Decoder[Any], lenient: msgspec.json.Decoder[S], raw: bytes, where: str
) -> S:
    """``raw`` decoded; when it holds a field of no name and its type is one
    read here (not carried as written), that field refused unless null or
    empty (it asks for nothing)."""
    try:
        value: S = known.decode(raw)
        return value
    except msgspec.ValidationError as exc:
        if not str(exc).startswith(_UNKNOWN):
            return _decoded(lenient, raw, where)  # the same error, its param
    value = _decoded(lenient, raw, where)
    if getattr(value, "type", None) in _READ:
        names = type(value).__struct_fields__
        for key, member in _members(raw).items():
            if key not in names and bytes(member).strip() not in _EMPTY:
                raise unrecognized(f"{where}.{key}")
    return value


def _tool(raw: msgspec.Raw, where: str) -> ToolDef:
    return _judged(_known_tool_decoder, _tool_decoder, bytes(raw), where)


def _function(tool: ToolDef, where: str, seen: set[str], wire_name: str) -> ToolSpec:
    if tool.name is None:
        raise missing(f"{where}.name")
    params = bytes(tool.parameters)
    if params == _NULL:
        params = b""
    if params and not params.lstrip().startswith(b"{"):
        raise invalid(f"{where}.parameters", "expected an object.")
    if wire_name in seen:
        raise invalid(f"{where}.name", f"a tool named '{shown(wire_name)}' is given twice.")
    seen.add(wire_name)
    if tool.defer_loading:
        raise invalid(
            f"{where}.defer_loading",
            "flatgate sends every function tool to the model: deferred loading is not carried.",
        )
    description = (tool.description or "").encode()
    # The Responses API's strict defaults to true (Chat Completions' to false).
    strict = tool.strict is not False
    return wire_name.encode(), description, utf8(params, f"{where}.parameters"), strict


def read_tools(raws: list[msgspec.Raw]) -> Tools:
    """The request's ``tools``, mapped (see the module docstring)."""
    out = Tools()
    seen: set[str] = set()
    for i, raw in enumerate(raws):
        where = f"tools.[{i}]"
        tool = _tool(raw, where)
        if tool.type == "function":
            out.add(_function(tool, where, seen, tool.name or ""))
        elif tool.type == "namespace":
            if not tool.name:
                raise missing(f"{where}.name")
            others: list[bytes] = []
            prefix = (tool.description or "").encode()
            for j, member_raw in enumerate(tool.tools or ()):
                member_at = f"{where}.tools.[{j}]"
                member = _tool(member_raw, member_at)
                if member.type != "function":
                    others.append(utf8(bytes(member_raw), member_at))
                    continue
                wire_name = f"{tool.name}{NAMESPACE_SEP}{member.name}"
                out.add(_function(member, member_at, seen, wire_name), prefix)
                out.names[wire_name] = (tool.name, member.name or "")
            if others:
                group = {"type": "namespace", "name": tool.name, "description": tool.description}
                head = msgspec.json.encode(group)[:-1]
                out.hosted.append(head + b',"tools":[' + b",".join(others) + b"]}")
        else:
            out.hosted.append(utf8(bytes(raw), where))
    return out


_MODES = {
    b'"auto"': ToolChoiceMode.Auto,
    b'"none"': ToolChoiceMode.None_,
    b'"required"': ToolChoiceMode.Required,
}


def read_tool_choice(raw: bytes, tools: Tools) -> tuple[tuple[int, str], bytes]:
    """The wire's (``ToolChoiceMode``, function name) for ``tool_choice``, and
    its JSON when it also travels in the extras (``b""`` when not)."""
    if not raw or raw == _NULL:
        return (ToolChoiceMode.Unset, ""), b""
    mode = _MODES.get(raw.strip())
    if mode is not None:
        if mode != ToolChoiceMode.None_ and not tools.specs and not tools.hosted:
            raise invalid(
                "tool_choice", "'tool_choice' is only allowed when 'tools' are specified."
            )
        return (mode, ""), b""
    if raw.lstrip().startswith(b'"'):
        raise invalid("tool_choice", "expected 'none', 'auto', 'required' or an object.")
    choice = _judged(_known_choice_decoder, _choice_decoder, raw, "tool_choice")
    if choice.type == "function":
        if choice.name is None:
            raise missing("tool_choice.name")
        if any(spec[0] == choice.name.encode() for spec in tools.specs):
            return (ToolChoiceMode.Function, choice.name), b""
        inside = [wire for wire, (_, name) in tools.names.items() if name == choice.name]
        if len(inside) == 1:
            return (ToolChoiceMode.Function, inside[0]), b""
        raise invalid("tool_choice", f"no function named '{shown(choice.name)}' in 'tools'.")
    if choice.type == "allowed_tools":
        wire = ToolChoiceMode.Required if choice.mode == "required" else ToolChoiceMode.Auto
        return (wire, ""), utf8(raw, "tool_choice")
    return (ToolChoiceMode.Unset, ""), utf8(raw, "tool_choice")
