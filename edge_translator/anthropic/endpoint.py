"""What the app calls for the Messages API: ``POST /v1/messages`` and
``POST /v1/messages/count_tokens``.

Owns the Anthropic side of a request's way through the edge; the rest is the
app's, shared with the OpenAI API (admission, the proxy round trip, the
caller watch, the drain, the access log, ``answer``'s streaming):

- authentication: ``x-api-key`` (Anthropic's header) or ``Authorization:
  Bearer``, against the same credentials (``identity.Identities``: the
  ``[[keys]]``, and JWTs where configured); the ``anthropic-version`` and
  ``anthropic-beta`` headers are accepted and not needed;
- ``messages``: decode and check (``models``), resolve the model, write the
  ``CompletionRequest`` (``translate``), then the app's ``forward``; the
  answer is rendered by ``MESSAGES`` (this module's ``answer.ClientApi``:
  ``render``'s events and message, ``ping`` keep-alives, ``errors``' error
  event);
- ``count_tokens``: the same decode, checks and translation (so a request it
  counts is one ``messages`` would send), the same model allow-list (a model
  the caller may not use is 404, as from ``messages``), then
  ``{"input_tokens": N}`` with ``wire.estimate``'s estimate of that
  ``CompletionRequest``: the estimate the limits reserve with, not a
  tokenizer's count.

No HTTP server objects beyond ``plumbing.serve``'s ``Exchange``.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Generic, Protocol, TypeVar

import msgspec

from flatgate.edge_translator.answer import (
    Asked,
    ClientApi,
    Folding,
    Rendering,
    read_body,
)
from flatgate.edge_translator.anthropic.errors import error_event
from flatgate.edge_translator.anthropic.models import decode_count_tokens, decode_messages
from flatgate.edge_translator.anthropic.render import PING, EventRenderer, MessageAggregator
from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.edge_translator.catalog import resolve_model
from flatgate.edge_translator.errors import AuthenticationFailed, EdgeError, InvalidRequest
from flatgate.edge_translator.identity import Identities
from flatgate.edge_translator.keys import Identity
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.plumbing.accesslog import Entry
from flatgate.proxy.plumbing.auth import bearer_token
from flatgate.proxy.plumbing.serve import BodyPolicy, Exchange, valid_request_id
from flatgate.proxy.wire import codes
from flatgate.proxy.wire.estimate import estimate_request
from flatgate.proxy.wire.schema import JSON

__all__ = ["MESSAGES", "Ask", "MessagesEndpoint", "new_message_id"]

_JSON = [("content-type", JSON)]
# Message ids: 12 random bytes per process, then a counter (unique, not secret).
_ID_PREFIX = "msg_" + os.urandom(12).hex()
_ID_COUNT = itertools.count(1)


def new_message_id() -> str:
    """A fresh Anthropic-style message id."""
    return f"{_ID_PREFIX}{next(_ID_COUNT):x}"


class _Messages:
    """The Messages API's side of an answer (``answer.ClientApi``)."""

    beat = PING

    def renderer(self, ask: Asked, created: int) -> Rendering:
        return EventRenderer(message_id=ask.completion_id, model=ask.model)

    def aggregator(self, ask: Asked, created: int) -> Folding:
        return MessageAggregator(message_id=ask.completion_id, model=ask.model)

    def error_event(self, err: EdgeError) -> bytes:
        return error_event(err)


MESSAGES: ClientApi = _Messages()


class Ask(Protocol):
    """What the app's request holds that this module fills in."""

    entry: Entry
    frame: bytes
    completion_id: str
    model: str
    stream: bool
    api: ClientApi
    identity: Identity


A = TypeVar("A", bound=Ask)


class _Timer(Protocol):
    def observe(self, value: float) -> None: ...


class MessagesEndpoint(Generic[A]):
    """The Messages API's two endpoints, over the app's shared parts (``A``:
    the app's request type)."""

    __slots__ = (
        "_allowed",
        "_body_policy",
        "_forward",
        "_identities",
        "_models",
        "_translate_time",
    )

    def __init__(
        self,
        *,
        identities: Identities,
        models: Mapping[str, ModelConfig],
        body_policy: BodyPolicy,
        translate_time: _Timer,
        forward: Callable[[Exchange, A], Awaitable[int]],
        allowed: Callable[[Identity, str, str], None],
    ) -> None:
        """``forward`` sends a translated request to the proxy and answers it
        (checking the caller's model allow-list, among the rest); ``allowed``
        raises unless an identity may use a model (asked for by a name, resolved
        to a model): ``count_tokens``, which forwards nothing, checks it there."""
        self._identities = identities
        self._models = models
        self._body_policy = body_policy
        self._translate_time = translate_time
        self._forward = forward
        self._allowed = allowed

    def reload(self, *, identities: Identities, models: Mapping[str, ModelConfig]) -> None:
        """A reloaded config's credentials and models."""
        self._identities = identities
        self._models = models

    async def authenticate(self, ex: Exchange) -> Identity:
        """The caller, from ``x-api-key`` or ``Authorization: Bearer``."""
        ids = self._identities
        token = ex.header("x-api-key")
        if token is None:
            token = bearer_token(ex.header("authorization"))
        if token is None and not ids.open:
            raise AuthenticationFailed(
                "x-api-key header is required (or Authorization: Bearer).",
                code=codes.MISSING_API_KEY,
            )
        return ids.cached_token(token) or await ids.verify_token(token)

    def _model(self, ex: Exchange, ask: A, name: str) -> ModelConfig:
        """The model, and the request id (the client's, else the message id)."""
        entry = ask.entry
        entry.model = name
        model = resolve_model(self._models, name)
        entry.provider = model.provider
        ask.completion_id = new_message_id()
        request_id = ex.header("x-request-id") or ask.completion_id
        if not valid_request_id(request_id):
            raise InvalidRequest(
                "Invalid x-request-id header: 1 to 128 printable ASCII characters, no spaces.",
                param="x-request-id",
            )
        entry.request_id = request_id
        return model

    async def messages(self, ex: Exchange, ask: A, length: str | None) -> int:
        """``POST /v1/messages``."""
        entry = ask.entry
        tenant = ask.identity.tenant
        body = await read_body(ex, self._body_policy, length)
        started = time.perf_counter()
        entry.bytes_in = len(body)
        req = decode_messages(body)
        del body
        model = self._model(ex, ask, req.model)
        ask.frame = write_messages(
            req,
            provider=model.provider_id,
            model_name=model.name,
            tenant=tenant,
            request_id=entry.request_id or ask.completion_id,
        )
        self._translate_time.observe(time.perf_counter() - started)
        # What the answer needs of the request; the prompt is not kept.
        ask.model = model.name
        ask.stream = bool(req.stream)
        ask.api = MESSAGES
        del req
        return await self._forward(ex, ask)

    async def count_tokens(self, ex: Exchange, ask: A, length: str | None) -> int:
        """``POST /v1/messages/count_tokens``: an estimate, answered here."""
        entry = ask.entry
        body = await read_body(ex, self._body_policy, length)
        entry.bytes_in = len(body)
        req = decode_count_tokens(body)
        model = self._model(ex, ask, req.model)
        self._allowed(ask.identity, req.model, model.name)
        frame = write_messages(req, provider=model.provider_id, model_name=model.name)
        out = msgspec.json.encode({"input_tokens": estimate_request(frame)})
        entry.first_byte()
        entry.bytes_out = len(out)
        await ex.respond(200, [*_JSON, ("x-request-id", entry.request_id or "")], out)
        return 200
