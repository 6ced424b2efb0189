"""What every backend protocol provides, and what they share.

A backend protocol is an ``Adapter``: it turns the caller's request (an
``Inbound``, made once per request by the service) into what its server is
sent (``prepare``), its server's answer into chunk frames (a
``Translator``), a refusal before the first byte into a ``Refusal`` the proxy
can act on (``refusal``), and says how to probe its server's readiness
(``probe``). Adapters are pure: the proxy's service does the I/O.

Embeddings are one exchange, not a stream: an adapter whose protocol serves
them (``embeddings``) writes what its server is sent (``prepare_embeddings``)
and turns the server's whole 200 body into one ``EmbeddingResponse`` buffer
(``embeddings_answer``); a refusal is ``refusal``'s, as for completions. One
whose protocol has none (``anthropic``) refuses them (``Untranslatable``).

Status classes, the same for every protocol::

    200                      the answer: translated to frames as it arrives
    401, 402, 403           AUTH: flatgate's own credential or account is wrong (never
                             the caller's)
    429                      RATE_LIMITED: cool the backend down for Retry-After, try another
    408, 5xx, 529            UNAVAILABLE: cool down, try another
    other 4xx                REJECTED: the caller's request; passed through, no failover

No I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.transport.credentials import Refreshing
from flatgate.proxy.wire.embeddings import EmbeddingInput
from flatgate.proxy.wire.parts import ContentPart
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.schema import PartKind

__all__ = [
    "Adapter",
    "Inbound",
    "Outbound",
    "PartRefused",
    "PartsOut",
    "Probe",
    "Refusal",
    "RefusalKind",
    "Translator",
    "TranslatorError",
    "Untranslatable",
    "classify",
    "refuse",
]


class TranslatorError(FlatgateError, ValueError):
    """A backend's answer that cannot be translated into chunk frames."""

    default = codes.BACKEND_PROTOCOL_ERROR


class Untranslatable(FlatgateError, ValueError):
    """A request that cannot be written in a backend's API (the caller's to fix)."""

    default = codes.UNTRANSLATABLE_REQUEST


def refuse(field: str, why: str, omitted: list[str], drop: bool) -> None:
    """A field of the request the backend's API cannot take, for ``why``:
    ``Untranslatable`` naming it, unless ``drop`` (the backend's
    ``drop_unsupported``): then it is left out and named in ``omitted``."""
    if not drop:
        raise Untranslatable(
            f"{field}: {why}: remove it, or set drop_unsupported = true on the backend to drop it",
            param=field,
        )
    omitted.append(field)


class PartRefused(Untranslatable):
    """A content part a backend's API cannot take (``target``: "an anthropic
    backend"); ``param`` names it."""

    def __init__(self, where: str, what: str, target: str) -> None:
        super().__init__(
            f"{where}: {what} cannot be sent to {target}: remove it, or set "
            "drop_unsupported = true on the backend to drop it"
        )
        self.param = where


class PartsOut:
    """What writing a message's content parts reports: the names of what was
    left out, and whether to leave out (``drop``, the backend's
    ``drop_unsupported``) what would be refused; ``target`` says whose API
    refuses it ("an anthropic backend")."""

    __slots__ = ("drop", "omitted")
    target = "this backend"

    def __init__(self, omitted: list[str], drop: bool) -> None:
        self.omitted = omitted
        self.drop = drop

    def refuse(self, where: str, what: str) -> None:
        if not self.drop:
            raise PartRefused(where, what, self.target)
        self.omitted.append(where)

    def text_of(self, parts: Sequence[ContentPart], where: str) -> str:
        """A system or an assistant message's parts as its text: the text
        parts joined; any other part refused (or dropped)."""
        texts = []
        for k, part in enumerate(parts):
            if part.kind == _TEXT:
                texts.append(part.text)
            else:
                self.refuse(
                    f"{where}.content[{k}]",
                    "a part other than text in a system or an assistant message",
                )
        return "".join(texts)


class RefusalKind(enum.Enum):
    REJECTED = "rejected"
    AUTH = "auth"
    RATE_LIMITED = "rate_limited"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A backend's answer other than 200: what it means and what it said."""

    kind: RefusalKind
    status: int
    message: str
    # Seconds the backend asked to wait (Retry-After), when it said.
    retry_after: float | None = None


_T = TypeVar("_T")
_TEXT = int(PartKind.TEXT)


# Not frozen: one is made per request, and a frozen dataclass's __init__ costs
# four times a plain one's (0.5 against 0.13 us); no adapter assigns to it.
@dataclass(slots=True)
class Inbound(Generic[_T]):
    """The caller's request as the proxy holds it: its ``body`` (a
    ``Request`` or an ``EmbeddingRequest`` buffer), ``request()``, which
    verifies and decodes the body (once per request, however many backends
    are tried; ``MalformedBuffer``), its id, and the caller's credential (the
    ``authorization`` header, ``""`` for none)."""

    body: bytes
    request: Callable[[], _T]
    request_id: str
    authorization: str


@dataclass(frozen=True, slots=True)
class Outbound:
    """What a backend is sent."""

    url: str
    headers: list[tuple[str, str]]
    body: bytes
    # What of the request the backend is not sent, each field named once
    # (``backends.extras``: ``tools[web_search]``, ``include``, ``reasoning``).
    omitted: tuple[str, ...] = ()
    # Whether the backend was asked for a whole answer (not a stream): its
    # translator is then ``translator(..., whole=True)``'s.
    whole: bool = False


@dataclass(frozen=True, slots=True)
class Probe:
    """How to check a backend is ready: ``GET url`` (200 means ready), or, with
    ``connect_only``, that a connection (TLS included) can be made."""

    url: str
    headers: list[tuple[str, str]]
    connect_only: bool = False


class Translator(Protocol):
    """One answer's body bytes, as they arrive, into whole size-prefixed chunk frames.

    Exactly one terminal chunk per stream (a finish, or an error): once it is
    written, ``done`` is true and later bytes are ignored.
    """

    @property
    def done(self) -> bool: ...

    def feed(self, piece: bytes) -> bytes:
        """The frames the bytes so far complete (``b""`` if none yet); raises
        ``TranslatorError`` for bytes that cannot be translated."""
        ...

    def end(self) -> bytes:
        """At the end of the body: the terminal frame, when the backend's own
        did not come (an error chunk: the stream is never silently cut)."""
        ...


class Adapter(Protocol):
    """One configured backend's protocol."""

    protocol: str
    # The credential it presents that expires and is fetched off the
    # request's path (``transport.credentials``; the service starts its
    # refresher per worker): None for a static key or none.
    credentials: Refreshing[Any] | None
    # Whether the protocol serves embeddings (a class attribute).
    embeddings: bool
    # Whether the caller's request is translated into the backend's API (the
    # JSON APIs: their first byte may take a reasoning model's minutes, and the
    # request's model name is read) or sent untouched (fbs).
    translated: bool

    def prepare(self, call: Inbound[Request]) -> Outbound:
        """What to send for the caller's request; the fbs passthrough sends
        its body and never calls ``call.request()``."""
        ...

    def translator(self, request_id: str, model: str, whole: bool = False) -> Translator:
        """The translator of one answer; ``whole``: of the whole answer
        ``prepare`` asked for (``Outbound.whole``)."""
        ...

    def prepare_embeddings(self, call: Inbound[EmbeddingInput]) -> Outbound:
        """What to send for the caller's ``EmbeddingRequest`` (the fbs
        passthrough sends its body and never calls ``call.request()``).
        Raises ``Untranslatable`` when the protocol has no embeddings API
        (``embeddings`` is false), and for a field of the request the backend
        can neither carry nor map (``extras``)."""
        ...

    def embeddings_answer(
        self, body: bytes, request_id: str, model: str, max_bytes: int | None = None
    ) -> bytes:
        """The server's whole 200 ``body`` as one ``EmbeddingResponse`` buffer
        (fbs: ``body`` itself, verified); ``model`` names the answer's model
        when the server names none. ``ValueError`` for a body that is not an
        embeddings answer, or is longer than ``max_bytes`` (the service's
        ``max_response_bytes``)."""
        ...

    def refusal(self, status: int, headers: Mapping[str, str], body: bytes) -> Refusal: ...

    def probe(self) -> Probe: ...


def classify(status: int) -> RefusalKind:
    """The class of a non-200 status (see the module docstring)."""
    if status in (401, 402, 403):  # 402: the gateway's own account (billing)
        return RefusalKind.AUTH
    if status == 429:
        return RefusalKind.RATE_LIMITED
    if status == 408 or status >= 500:
        return RefusalKind.UNAVAILABLE
    return RefusalKind.REJECTED
