"""msgspec's validation messages, read once: what is wrong, and where.

msgspec says what it refuses and where in one line:
``Expected `int`, got `str` - at `$.backends[0].port` ``; a field that is
missing or unknown is named in the reason (``Object missing required field
`name` ``). ``read_validation`` splits such a line into its reason, its path
(field names, array indexes, and ``None`` for a value of a dict, whose key
msgspec does not name: ``[...]``) and the field its reason names, so that
each caller writes the path its own way: the config's keys
(``backends[0].port``), OpenAI's ``param`` (``messages.[0].role``),
Anthropic's (``messages.0.role``); ``quoted_span`` finds the caller's value a
message quotes.

Pure: no I/O, and the only place that takes msgspec's messages apart.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["Validation", "quoted_span", "read_validation"]

_AT = " - at `$"
_MISSING = "Object missing required field `"
_UNKNOWN = "Object contains unknown field `"
# msgspec quotes the value it refuses: "Invalid enum value '...' - at `$.x`".
_QUOTED = re.compile(r"'(?P<value>.*)'(?: - at `[^`]*`)?$", re.S)


class Validation(NamedTuple):
    """One msgspec validation message, taken apart."""

    # What msgspec says is wrong, without where: "Expected `int`, got `str`".
    reason: str
    # Where, from the value's root: a field name, an array index, or None
    # for a dict's value (msgspec's `[...]`).
    path: tuple[str | int | None, ...]
    # The field a "missing required field" reason names ("" for another reason).
    missing: str
    # The field an "unknown field" reason names ("" for another reason).
    unknown: str

    def where(
        self, *, index: str = "[{}]", value: str = "[...]", field: str = "", root: str = ""
    ) -> str:
        """The path written out: ``index`` formats an array index (``"[{}]"``,
        ``".[{}]"``, ``".{}"``), ``value`` stands for a dict's value (``""``:
        left out), ``field`` is appended as one more name, and the whole hangs
        from ``root`` (a key already written out, ``""``: the top)."""
        out = [root]
        for part in (*self.path, field) if field else self.path:
            if part is None:
                out.append(value)
            elif isinstance(part, int):
                out.append(index.format(part))
            else:
                out.append("." + part)
        return "".join(out).lstrip(".")


def _named(reason: str, prefix: str) -> str:
    """The field between backquotes after ``prefix``, or ``""``."""
    if not reason.startswith(prefix):
        return ""
    name, sep, _ = reason[len(prefix) :].partition("`")
    return name if sep else ""


def _parts(path: str) -> tuple[str | int | None, ...]:
    """msgspec's ``.messages[0].content[...]`` as ``("messages", 0, "content", None)``."""
    parts: list[str | int | None] = []
    i, n = 0, len(path)
    while i < n:
        if path[i] == "[":
            end = path.find("]", i)
            end = n if end < 0 else end
            inside = path[i + 1 : end]
            parts.append(int(inside) if inside.isdigit() else None)
            i = end + 1
        else:
            start = i + 1 if path[i] == "." else i
            i = start
            while i < n and path[i] not in ".[":
                i += 1
            parts.append(path[start:i])
    return tuple(parts)


def read_validation(message: str) -> Validation:
    """``str(msgspec.ValidationError)`` taken apart (a message without a
    location is all reason, at the root)."""
    reason, sep, at = message.rpartition(_AT)
    # The location ends the message: "`$" + a path without backquotes + "`".
    if sep and at.endswith("`") and "`" not in at[:-1]:
        path = _parts(at[:-1])
    else:
        reason, path = message, ()
    return Validation(reason, path, _named(reason, _MISSING), _named(reason, _UNKNOWN))


def quoted_span(message: str) -> tuple[int, int] | None:
    """Where in ``message`` the value msgspec quotes is (an enum's, a tag's:
    the caller's own text, which a caller may want to cut), or ``None``."""
    found = _QUOTED.search(message)
    return None if found is None else found.span("value")
