"""What one client API supplies to the edge's shared flow: ``ClientApi``.

The app (``app``) runs every client API's requests through one flow: it
authenticates the caller, admits it against the worker's bounds and the
tenant's limits, reads the body, resolves the model, sends the
``CompletionRequest`` to the proxy (``proxy_link``), renders the answer as
frames arrive with keep-alives while the first token is awaited (``answer``),
watches the caller and the drain, and writes the access log. A client API
supplies only its own parts, through ``ClientApi``:

- its ``name`` in the access log;
- how its callers present their credential (``authenticate``);
- its request: ``decode`` (validated once, errors naming the ``param``),
  ``prepare`` (what the request needs of stored state before it is written:
  the Responses API's ``previous_response_id``, charged to the request's
  ``Budget`` as if the client had sent it), ``admitted`` (what the API keeps
  of a request, kept once it passed every check), ``write`` (the
  ``CompletionRequest`` FlatBuffer), ``new_id`` (its answer's id) and
  ``asked`` (what its answer needs of the request, as an ``Asked``);
- its answer: a ``renderer`` for streams, an ``aggregator`` for whole answers,
  ``beat``, its keep-alive, and ``finish``, told when an answer ends before
  its last byte goes out (the Responses API stores it there);
- its error shape: ``error_answer`` (the status and body of an error before
  the first byte) and ``error_event`` (the event that ends a stream with one).
  The headers every error answer carries are ``errors.error_headers``'s,
  whatever the shape.

An endpoint the edge answers itself, from a request decoded and resolved as
its API's completions are but never forwarded (Anthropic's
``count_tokens``), is a ``Local``. The app's routes (``Route``) pair a path's
API with its ``Local``, if any. Adding an API is a folder with a module that
implements these, and its routes in ``app``; an API that keeps no state
takes ``prepare``, ``admitted`` and ``finish`` from ``Stateless``.

Interfaces and values only: no I/O, no behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

import msgspec

from flatgate.edge_translator.identity import Identities
from flatgate.edge_translator.keys import Identity
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.serve import Exchange
from flatgate.proxy.wire.chunk.frames import Chunk, Usage

__all__ = [
    "Asked",
    "Budget",
    "ClientApi",
    "Folding",
    "Local",
    "Rendering",
    "Request",
    "Route",
    "Stateless",
]


class Request(Protocol):
    """A decoded request: all the shared flow reads of it is its model's name."""

    @property
    def model(self) -> str: ...


R = TypeVar("R", bound=Request)


class Asked(msgspec.Struct, frozen=True):
    """What an answer needs of its request (never the prompt), as the
    translate step returns it: the API it is answered in, its answer's id, its
    request id, the model's name, and its answer's shape; ``extra``, what
    that API's own renderers need besides (the Responses API's echoed
    request fields); ``stream_headers``, a stream's content headers when
    they are not server-sent events' (Gemini's JSON array stream)."""

    api: ClientApi[Any]
    completion_id: str
    request_id: str
    model: str
    stream: bool
    choices: int = 1
    include_usage: bool = False
    extra: Any = None
    stream_headers: list[tuple[str, str]] | None = None


class _Outcome(Protocol):
    """What a renderer and an aggregator both tell of the answer so far."""

    @property
    def finished(self) -> bool: ...

    @property
    def complete(self) -> bool: ...

    @property
    def usage(self) -> Usage | None: ...


class Rendering(_Outcome, Protocol):
    """A streamed answer's renderer (``openai.render.StreamRenderer``)."""

    def feed(self, chunk: Chunk) -> bytes: ...

    def end(self) -> bytes: ...

    def fail(self, err: FlatgateError) -> bytes:
        """The event that ends this begun stream with ``err`` (in sequence,
        for an API whose events are numbered)."""
        ...


class Folding(_Outcome, Protocol):
    """A whole answer's aggregator (``openai.render.Aggregator``)."""

    def feed(self, chunk: Chunk) -> None: ...

    def body(self) -> bytes: ...


class ClientApi(Protocol[R]):
    """One client API's own parts of the shared flow (see the module
    docstring); ``R`` is its decoded request."""

    @property
    def name(self) -> str:
        """What the access log calls it (``openai-chat``)."""
        ...

    @property
    def path(self) -> str:
        """Its completions endpoint (``POST``)."""
        ...

    @property
    def items_param(self) -> str:
        """The field a request's many objects are in (``messages``), named
        when a request holds more than the wire carries."""
        ...

    @property
    def beat(self) -> bytes:
        """What its streams send to keep a waiting client's connection up."""
        ...

    async def authenticate(self, ex: Exchange, identities: Identities) -> Identity:
        """The caller, from the headers its API's clients send."""
        ...

    def decode(self, body: bytes) -> R:
        """The body decoded and checked (``InvalidRequest`` naming the param)."""
        ...

    def new_id(self) -> str:
        """A fresh id for an answer (also the request id when none is sent)."""
        ...

    async def prepare(self, req: R, *, tenant: str, response_id: str, budget: Budget) -> R:
        """``req`` with what it needs of stored state, before it is written
        (``response_id``: its answer's id), ``budget`` charged for every byte
        it adds to what the client sent; ``FlatgateError`` to refuse it. Stores
        nothing: the request may still be refused."""
        ...

    async def admitted(self, asked: Asked, *, tenant: str) -> None:
        """The request passed every check (its model allow-list, its tenant's
        limits) and goes to the proxy: what the API keeps of a request is
        kept now (the Responses API's input), never for a refused one."""
        ...

    @property
    def carried_headers(self) -> tuple[str, ...]:
        """The client headers a backend of its API must get: ``write``'s
        ``headers`` (Anthropic's ``anthropic-beta``)."""
        ...

    def write(
        self,
        req: R,
        model: ModelConfig,
        *,
        tenant: str,
        request_id: str,
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        """``req`` as a ``CompletionRequest`` FlatBuffer for ``model``
        (``headers``: those of its ``carried_headers`` the client sent)."""
        ...

    def asked(self, req: R, completion_id: str, request_id: str, model: str) -> Asked:
        """What the answer to ``req`` needs of it."""
        ...

    def renderer(self, asked: Asked, created: int) -> Rendering: ...

    def aggregator(self, asked: Asked, created: int) -> Folding: ...

    async def finish(self, asked: Asked, answer: Rendering | Folding, *, tenant: str) -> None:
        """The answer has ended (whole, streamed, or failed after its first
        byte), its last byte not sent yet. Never raises: a failure to keep
        what it keeps is logged and counted, and the answer goes out."""
        ...

    def error_answer(self, err: FlatgateError, request_id: str | None) -> tuple[int, bytes]:
        """The status and JSON body ``err`` is answered with before the first byte."""
        ...

    def error_event(self, err: FlatgateError) -> bytes:
        """The event that ends a begun stream with ``err``."""
        ...


class Budget(Protocol):
    """What a request may still make the gateway hold beyond its body: the
    body limit's room and the caller's share of the worker's buffers
    (``flow``'s, over admission control)."""

    def charge(self, nbytes: int, param: str) -> None:
        """Hold ``nbytes`` more for this request until the proxy has it; a
        413 naming ``param`` past ``max_body_bytes``, a 429 or 503 (with
        ``Retry-After``) past a share."""
        ...


class Stateless:
    """``prepare``, ``admitted`` and ``finish`` for a client API that keeps no state."""

    __slots__ = ()

    async def prepare(self, req: R, *, tenant: str, response_id: str, budget: Budget) -> R:
        return req

    async def admitted(self, asked: Asked, *, tenant: str) -> None:
        return None

    async def finish(self, asked: Asked, answer: Rendering | Folding, *, tenant: str) -> None:
        return None


class Local(Protocol[R]):
    """An endpoint the edge answers itself: read, decoded and resolved as its
    route's API's completions are (that API's authentication, ids and error
    shape), checked against the caller's models, never forwarded, and no
    limit charged."""

    @property
    def path(self) -> str: ...

    def decode(self, body: bytes) -> R: ...

    async def answer(self, req: R, model: ModelConfig, *, tenant: str) -> bytes:
        """The body of the answer to ``req`` (its caller's ``tenant``'s)."""
        ...


class Route(msgspec.Struct, frozen=True):
    """A ``POST`` path: the API it speaks and, for an endpoint the edge
    answers itself, its ``Local`` (``None``: completions, forwarded)."""

    api: ClientApi[Any]
    local: Local[Any] | None = None
