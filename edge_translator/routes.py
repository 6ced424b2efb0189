"""The edge's route table: path patterns, the methods each serves, and whose
error shape its answers take. Pure: no I/O, no client API's objects (the app
fills the table with its handlers, ``app.EdgeApp``).

A pattern is a path whose parameters are named in braces:

- ``{name}`` takes one or more characters of one segment, never a ``/``; it
  may sit mid-segment (``/v1beta/models/{model}:generateContent``);
- ``{name...}`` takes what is there, ``/`` included, nothing too (a model id
  such as ``accounts/acme/models/m``, judged by its handler, the empty one
  included): ``/v1/models/{id...}``.

Two parameters may not touch (``{a}{b}`` would be ambiguous). What they took
is handed to the handler by name (``Match.params``).

Finding a route is cheap where it matters: a pattern without parameters (the
client APIs' ``POST`` paths, the hot ones) is found by one dict lookup, with
its answer made in advance; only on a miss are the patterns tried, in the
order given, each behind a ``startswith`` of its text before its first
parameter.

A path without parameters wins over a pattern that would take it too:
``POST /v1/responses/compact`` is the compact endpoint's, and a ``GET``
there a 405 of its own, not ``/v1/responses/{id}``'s response ``compact``.

Methods. An endpoint serves its ``methods`` (``HEAD`` with ``GET``); the
``Allow`` header lists them. Another method is a 405 when the endpoint
``refuses`` it (by default every method it does not serve: the path is the
endpoint's, only the method is wrong). A method an endpoint neither serves nor
refuses makes the path none of its own, and the search goes on: a later
pattern may serve it, or no route matches and the path is unknown (a 404).
The edge's ``/v1/models/{id...}`` refuses only ``DELETE``, the method OpenAI's
API has there (deleting a fine-tuned model): a ``POST`` to
``/v1/models/x:frobnicate`` is no model's, and OpenAI answers a path it
has no endpoint for with a 404 ``Unknown request URL``, never a 405 telling
the caller to use ``GET``; so does the edge (``/v1/models/x:generateContent``
and Gemini's other verbs are the Gemini API's own patterns, before it).

Shapes. Each endpoint's errors take one client API's shape (``Shape``); a path
no route matches takes that of the API whose path it lies under (``families``:
``/v1/messages/...`` Anthropic's, ``/v1/responses/...`` the Responses API's),
and otherwise the caller's (``Shape.CALLER``: Anthropic's for a request that
sends ``anthropic-version``, which only Anthropic's clients send; Gemini's for
one with a Google key or ``x-goog-api-client``; OpenAI's otherwise).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Generic, TypeVar

__all__ = ["Endpoint", "Match", "Pattern", "Shape", "Table"]

T = TypeVar("T")

# The parameters of an exact path: none (one shared mapping, never written).
_NO_PARAMS: Mapping[str, str] = MappingProxyType({})
_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(\.\.\.)?\}")


class Shape(enum.Enum):
    """Whose error shape an answer takes."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    RESPONSES = "responses"
    GEMINI = "gemini"
    # Anthropic's for a request with anthropic-version, Gemini's for one with
    # a Google key (x-goog-api-key, ?key=) or x-goog-api-client, OpenAI's otherwise.
    CALLER = "caller"


class Pattern:
    """A path pattern (see the module docstring), compiled once."""

    __slots__ = ("_regex", "params", "prefix", "template")

    def __init__(self, template: str) -> None:
        if not template.startswith("/"):
            raise ValueError(f"a path pattern starts with '/': {template!r}")
        self.template = template
        parts: list[str] = []
        names: list[str] = []
        at = 0
        for param in _PARAM.finditer(template):
            literal = template[at : param.start()]
            if names and not literal:
                raise ValueError(f"two parameters touch in {template!r}")
            name = param[1]
            if name in names:
                raise ValueError(f"parameter {name!r} twice in {template!r}")
            names.append(name)
            parts += (literal, f"(?P<{name}>.*)" if param[2] else f"(?P<{name}>[^/]+)")
            at = param.end()
        parts.append(template[at:])
        literals = parts[::2]
        if any("{" in text or "}" in text for text in literals):
            raise ValueError(f"a brace that names no parameter in {template!r}")
        parts[::2] = [re.escape(text) for text in literals]
        self.params = tuple(names)
        # The text before the first parameter: a path without it cannot match.
        self.prefix = template[: template.index("{")] if names else template
        # DOTALL: a path is decoded, so a %0A in it is a newline, and an id still.
        self._regex = re.compile("".join(parts), re.DOTALL) if names else None

    @property
    def exact(self) -> bool:
        """Whether it has no parameter (matched by a dict lookup)."""
        return self._regex is None

    def match(self, path: str) -> Mapping[str, str] | None:
        """The parameters ``path`` gives, or ``None`` when it does not match."""
        regex = self._regex
        if regex is None:
            return _NO_PARAMS if path == self.template else None
        if not path.startswith(self.prefix):
            return None
        found = regex.fullmatch(path)
        return None if found is None else found.groupdict()

    def __repr__(self) -> str:
        return f"Pattern({self.template!r})"


class Endpoint(Generic[T]):
    """One row of the table: a pattern, the methods it serves, what handles
    it (``target``, the app's), its errors' shape, its metrics label (the
    pattern by default), whether its requests are access-logged, and the
    methods it ``refuses`` with a 405 (``None``: every one it does not serve)."""

    __slots__ = (
        "allow",
        "label",
        "logged",
        "methods",
        "pattern",
        "refuses",
        "serves",
        "shape",
        "target",
    )

    def __init__(
        self,
        pattern: str,
        methods: Iterable[str],
        target: T,
        *,
        shape: Shape,
        label: str | None = None,
        logged: bool = True,
        refuses: Iterable[str] | None = None,
    ) -> None:
        self.pattern = Pattern(pattern)
        self.methods = tuple(methods)
        if not self.methods:
            raise ValueError(f"{pattern!r} serves no method")
        self.target = target
        self.shape = shape
        self.label = pattern if label is None else label
        self.logged = logged
        serves = set(self.methods)
        if "GET" in serves:
            serves.add("HEAD")
        self.serves = frozenset(serves)
        self.refuses = None if refuses is None else frozenset(refuses) - self.serves
        # The Allow header of its 405s.
        self.allow = ", ".join(self.methods)

    def refused(self, method: str) -> bool:
        """Whether ``method`` is a 405 here (it is not served, and refused)."""
        if method in self.serves:
            return False
        return self.refuses is None or method in self.refuses

    def __repr__(self) -> str:
        return f"Endpoint({self.pattern.template!r}, {self.methods!r})"


class Match(Generic[T]):
    """A path's endpoint, the parameters its pattern took, and whether the
    method is one it serves (``False``: a 405 with its ``Allow``)."""

    __slots__ = ("allowed", "endpoint", "params")

    def __init__(self, endpoint: Endpoint[T], params: Mapping[str, str], allowed: bool) -> None:
        self.endpoint = endpoint
        self.params = params
        self.allowed = allowed

    def __repr__(self) -> str:
        return f"Match({self.endpoint!r}, {dict(self.params)!r}, allowed={self.allowed})"


class Table(Generic[T]):
    """The edge's routes: ``find`` a request's endpoint, ``shape_of`` a path
    no endpoint matches."""

    __slots__ = ("_exact", "_families", "_patterns", "endpoints")

    def __init__(
        self,
        endpoints: Iterable[Endpoint[T]],
        families: Mapping[str, Shape] | None = None,
    ) -> None:
        """``families``: the paths under which an unknown path is that API's
        (``{"/v1/messages": Shape.ANTHROPIC}``), longest first."""
        self.endpoints = tuple(endpoints)
        # An exact path's answers, made in advance: served, and refused.
        self._exact: dict[str, tuple[Match[T], Match[T] | None]] = {}
        self._patterns: list[Endpoint[T]] = []
        for e in self.endpoints:
            if not e.pattern.exact:
                self._patterns.append(e)
                continue
            path = e.pattern.template
            if path in self._exact:
                raise ValueError(f"{path!r} is in the table twice")
            self._exact[path] = (Match(e, _NO_PARAMS, True), Match(e, _NO_PARAMS, False))
        ordered = sorted((families or {}).items(), key=lambda kv: -len(kv[0]))
        self._families = tuple((p.rstrip("/"), p.rstrip("/") + "/", s) for p, s in ordered)

    def find(self, method: str, path: str) -> Match[T] | None:
        """The endpoint that serves ``method`` on ``path``; else the first that
        refuses it (a 405: an exact path's before any pattern's); else ``None``
        (no route: a 404)."""
        exact = self._exact.get(path)
        refused: Match[T] | None = None
        if exact is not None:
            served, wrong = exact
            endpoint = served.endpoint
            if method in endpoint.serves:
                return served
            if endpoint.refused(method):
                return wrong  # the literal path is its own, whatever a pattern takes
        for endpoint in self._patterns:
            params = endpoint.pattern.match(path)
            if params is None:
                continue
            if method in endpoint.serves:
                return Match(endpoint, params, True)
            if refused is None and endpoint.refused(method):
                refused = Match(endpoint, params, False)
        return refused

    def shape_of(self, path: str) -> Shape:
        """The error shape of ``path`` when no endpoint matches it: that of
        the family it lies under, else the caller's."""
        for prefix, under, shape in self._families:
            if path == prefix or path.startswith(under):
                return shape
        return Shape.CALLER
