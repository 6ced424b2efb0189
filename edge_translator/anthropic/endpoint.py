"""What the app calls for the Anthropic Messages API: ``MESSAGES``, this API's
``client_api.ClientApi``, on ``POST /v1/messages``, and ``COUNT_TOKENS``, the
``client_api.Local`` the edge answers itself, on
``POST /v1/messages/count_tokens``.

Owns the Anthropic side of a request's way through the edge; the rest is the
app's shared flow (admission, the proxy round trip, the caller watch, the
drain, the access log, ``answer``'s streaming):

- authentication: ``x-api-key`` (Anthropic's header) or ``Authorization:
  Bearer``, against the same credentials (``identity.Identities``: the
  ``[[keys]]``, and JWTs where configured); the ``anthropic-version`` and
  ``anthropic-beta`` headers are accepted and not needed;
- ``MESSAGES``: ``models``' decode and checks, ``translate``'s writer,
  message ids; the answer is ``render``'s events and message, with ``ping``
  keep-alives; errors in Anthropic's shape (``errors``);
- ``COUNT_TOKENS``: the same decode, checks and translation (so a request it
  counts is one ``/v1/messages`` would send), the same model allow-list (a
  model the caller may not use is 404, as from ``/v1/messages``), then
  ``{"input_tokens": N}`` with ``wire.request.estimate``'s estimate of that
  ``CompletionRequest``: the estimate the limits reserve with, not a
  tokenizer's count.

No I/O beyond authentication's.
"""

from __future__ import annotations

import itertools
import os

import msgspec

from flatgate.edge_translator.anthropic.errors import error_body, error_event
from flatgate.edge_translator.anthropic.models import (
    CountTokensRequest,
    MessagesRequest,
    decode_count_tokens,
    decode_messages,
)
from flatgate.edge_translator.anthropic.render import PING, EventRenderer, MessageAggregator
from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.edge_translator.client_api import Asked, Folding, Rendering, Stateless
from flatgate.edge_translator.errors import AuthenticationFailed, EdgeError
from flatgate.edge_translator.identity import Identities
from flatgate.edge_translator.keys import Identity
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.plumbing.auth import bearer_token
from flatgate.proxy.plumbing.serve import Exchange
from flatgate.proxy.wire import codes
from flatgate.proxy.wire.request.estimate import estimate_request

__all__ = ["COUNT_TOKENS", "MESSAGES", "CountTokens", "MessagesApi", "new_message_id"]

# Message ids: 12 random bytes per process, then a counter (unique, not secret).
_ID_PREFIX = "msg_" + os.urandom(12).hex()
_ID_COUNT = itertools.count(1)


def new_message_id() -> str:
    """A fresh Anthropic-style message id."""
    return f"{_ID_PREFIX}{next(_ID_COUNT):x}"


class MessagesApi(Stateless):
    """The Messages API's parts of the shared flow (``ClientApi``)."""

    __slots__ = ()

    name = "anthropic-messages"
    path = "/v1/messages"
    beat = PING

    async def authenticate(self, ex: Exchange, identities: Identities) -> Identity:
        """The caller, from ``x-api-key`` or ``Authorization: Bearer``."""
        token = ex.header("x-api-key")
        if token is None:
            token = bearer_token(ex.header("authorization"))
        if token is None and not identities.open:
            raise AuthenticationFailed(
                "x-api-key header is required (or Authorization: Bearer).",
                code=codes.MISSING_API_KEY,
            )
        return identities.cached_token(token) or await identities.verify_token(token)

    def decode(self, body: bytes) -> MessagesRequest:
        return decode_messages(body)

    def new_id(self) -> str:
        return new_message_id()

    def write(
        self, req: MessagesRequest, model: ModelConfig, *, tenant: str, request_id: str
    ) -> bytes:
        return write_messages(
            req,
            provider=model.provider_id,
            model_name=model.name,
            tenant=tenant,
            request_id=request_id,
        )

    def asked(self, req: MessagesRequest, completion_id: str, request_id: str, model: str) -> Asked:
        return Asked(self, completion_id, request_id, model, bool(req.stream))

    def renderer(self, asked: Asked, created: int) -> Rendering:
        return EventRenderer(message_id=asked.completion_id, model=asked.model)

    def aggregator(self, asked: Asked, created: int) -> Folding:
        return MessageAggregator(message_id=asked.completion_id, model=asked.model)

    def error_answer(self, err: EdgeError, request_id: str | None) -> tuple[int, bytes]:
        return error_body(err, request_id)

    def error_event(self, err: EdgeError) -> bytes:
        return error_event(err)


class CountTokens:
    """``POST /v1/messages/count_tokens``: an estimate, answered at the edge
    (``Local``)."""

    __slots__ = ()

    path = "/v1/messages/count_tokens"

    def decode(self, body: bytes) -> CountTokensRequest:
        return decode_count_tokens(body)

    def answer(self, req: CountTokensRequest, model: ModelConfig) -> bytes:
        frame = write_messages(req, provider=model.provider_id, model_name=model.name)
        return msgspec.json.encode({"input_tokens": estimate_request(frame)})


MESSAGES = MessagesApi()
COUNT_TOKENS = CountTokens()
