"""How a caller's JSON body fails to decode, beyond msgspec's own errors: said
once for every vendor API's decoder (``openai_chat.request``,
``anthropic_messages.request``, ...).

Owns the failures a hostile body provokes that msgspec does not raise as a
``msgspec.DecodeError``, so that each decoder turns them into its 400 instead
of letting them out as a 500:

- nesting deeper than the decoder's recursion limit, in any value (an
  unknown field it skips and a ``msgspec.Raw`` it keeps are walked too):
  ``RecursionError``, at about ``sys.getrecursionlimit()`` levels;
- a string that is not UTF-8 (a stray byte, an overlong form, an encoded
  surrogate such as ``ED A0 80``): ``UnicodeDecodeError``, for a string msgspec
  decodes (an escaped lone surrogate, ``"\\ud800"``, is already its
  ``DecodeError``);
- and what msgspec does not check at all: the bytes of a ``msgspec.Raw``
  (tool parameters, ``response_format``, ``input_schema``, a ``tool_use``
  input), kept as the caller wrote them and carried on the wire as strings,
  must be UTF-8 (``is_utf8``). An unknown field is skipped unread and
  carried nowhere: its bytes are not checked (that would decode every
  non-ASCII body twice).

Also ``validation_text``: a msgspec validation message, with the caller's
value it quotes (an enum's, a tag's) cut as ``errors.shown`` cuts names; and
``strict_twin``: a vendor model's Struct, and every Struct it holds, as
subclasses that refuse a member they do not know, for an edge that must name
what it cannot carry where the one model (shared with answers, which must
take a newer API's members) reads leniently; and ``respelled``: a decoded
body with each member named by its field's Python (protobuf) name renamed to
the name the Struct reads, for a protobuf JSON API, whose servers take either.
Pure: no I/O.
"""

from __future__ import annotations

import types
import typing
from typing import Any, TypeVar

import msgspec

from flatgate.proxy.apis.errors import ECHO_CHARS, shown
from flatgate.proxy.plumbing.validation import quoted_span

__all__ = [
    "UNDECODABLE",
    "is_utf8",
    "respelled",
    "strict_twin",
    "validation_text",
    "why_undecodable",
]

S = TypeVar("S", bound=msgspec.Struct)
# What decoding a body raises besides msgspec's errors (see the docstring).
UNDECODABLE = (RecursionError, UnicodeDecodeError)


def why_undecodable(exc: RecursionError | UnicodeDecodeError) -> str:
    """What is wrong with a body that raised one of ``UNDECODABLE``."""
    if isinstance(exc, UnicodeDecodeError):
        return f"a string in it is not valid UTF-8: {exc.reason}"
    return "it is nested too deeply"


def is_utf8(data: bytes) -> bool:
    """Whether ``data`` is UTF-8 (no overlong forms, no surrogates): free for
    ASCII, one decode otherwise."""
    if data.isascii():
        return True
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def validation_text(exc: msgspec.ValidationError) -> str:
    """``str(exc)``, the value it quotes cut to ``ECHO_CHARS`` characters."""
    text = str(exc)
    span = quoted_span(text)
    if span is not None and span[1] - span[0] > ECHO_CHARS:
        start, end = span
        text = text[:start] + shown(text[start:end]) + text[end:]
    return text


def _twin_of(tp: Any, made: dict[type, type]) -> Any:
    """``tp`` with each Struct in it replaced by its strict twin."""
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        if made.get(tp) is tp:
            raise TypeError(f"{tp.__name__} holds itself: no strict twin")
        return strict_twin(tp, made)
    args = typing.get_args(tp)
    if not args:
        return tp
    twins = tuple(_twin_of(a, made) for a in args)
    if twins == args:
        return tp
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return typing.Union[twins]  # noqa: UP007 (built from a tuple)
    return origin[twins if len(twins) > 1 else twins[0]]


def strict_twin(
    cls: type[S], made: dict[type, type] | None = None, *, here: bool = True
) -> type[S]:
    """A subclass of ``cls`` with ``forbid_unknown_fields``, its members of a
    Struct type (in a list, a union, a dict) the twins of theirs: decoding it
    raises msgspec's ``Object contains unknown field `x` - at `$.path` `` for
    a member no Struct in the tree knows. Same names, defaults and
    ``__post_init__``; an instance is a ``cls``. ``made`` shares the twins
    already built (a Struct met twice gets one). A Struct that holds itself
    has no twin (``TypeError``). ``here=False``: ``cls`` itself takes any
    member, only the Structs it holds refuse one (not kept in ``made``)."""
    made = {} if made is None else made
    known = made.get(cls)
    if known is not None and here:
        return known
    if here:
        made[cls] = cls  # met again before it is made: it holds itself
    annotations: dict[str, Any] = {}
    members: dict[str, Any] = {}
    for f in msgspec.structs.fields(cls):
        tp = _twin_of(f.type, made)
        if tp is f.type:
            continue
        annotations[f.name] = tp
        if f.default_factory is not msgspec.NODEFAULT:
            members[f.name] = msgspec.field(default_factory=f.default_factory, name=f.encode_name)
        elif f.default is not msgspec.NODEFAULT:
            members[f.name] = msgspec.field(default=f.default, name=f.encode_name)
        else:
            members[f.name] = msgspec.field(name=f.encode_name)
    namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
    twin = types.new_class(
        cls.__name__,
        (cls,),
        {"forbid_unknown_fields": here},
        lambda ns: ns.update({"__annotations__": annotations, **members, **namespace}),
    )
    if here:
        made[cls] = twin
    return twin


def _names(cls: type[msgspec.Struct]) -> dict[str, tuple[str, Any]]:
    """Each member name ``cls`` reads, and each field's Python name, as
    (the name it reads, the field's type); the read names win."""
    fields = msgspec.structs.fields(cls)
    names = {f.name: (f.encode_name, f.type) for f in fields}
    names.update({f.encode_name: (f.encode_name, f.type) for f in fields})
    return names


def respelled(node: Any, tp: Any) -> Any:
    """``node`` (JSON decoded to Python, as a value of type ``tp``) with each
    object member that a Struct of ``tp`` reads by another name (protobuf
    JSON's ``inline_data`` for ``inlineData``) under that name; members of no
    field, and every value of a ``msgspec.Raw`` (a schema, a call's
    arguments), as they were."""
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        if not isinstance(node, dict):
            return node
        names = _names(tp)
        out: dict[str, Any] = {}
        for key, value in node.items():
            known = names.get(key)
            if known is None:
                out[key] = value
            else:
                out.setdefault(known[0], respelled(value, known[1]))
        return out
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return respelled(node, inner[0]) if len(inner) == 1 else node
    if origin is list and isinstance(node, list):
        return [respelled(v, args[0]) for v in node]
    if origin is dict and isinstance(node, dict):
        return {k: respelled(v, args[1]) for k, v in node.items()}
    return node
