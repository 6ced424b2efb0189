"""What the app calls for the Anthropic Messages API: ``MESSAGES``, this API's
``client_api.ClientApi``, on ``POST /v1/messages``, and ``COUNT_TOKENS``, the
``client_api.Local`` the edge answers itself, on
``POST /v1/messages/count_tokens``.

Owns the Anthropic side of a request's way through the edge; the rest is the
app's shared flow (admission, the proxy round trip, the caller watch, the
drain, the access log, ``answer``'s streaming):

- authentication: ``x-api-key`` (Anthropic's header) or ``Authorization:
  Bearer``, against the same credentials (``identity.Identities``: the
  ``[[keys]]``, and JWTs where configured); the ``anthropic-version``
  header is accepted and not needed;
- ``MESSAGES``: ``apis.anthropic_messages.request``'s decode and checks, ``translate``'s writer,
  message ids; the answer is ``render``'s events and message, with ``ping``
  keep-alives; errors in Anthropic's shape (``errors``). ``message_start``'s
  ``input_tokens`` is the backend's count when its first chunk carries usage
  (Anthropic backends send it first), else ``wire.request.estimate``'s
  estimate of the written request (what ``count_tokens`` answers); the final
  ``message_delta`` carries the backend's count. The ``anthropic-beta``
  header reaches the extras when the flow hands ``write`` the client's
  headers;
- ``COUNT_TOKENS``: the same decode, checks and translation (so a request it
  counts is one ``/v1/messages`` would send), the same model allow-list (a
  model the caller may not use is 404, as from ``/v1/messages``), then
  ``{"input_tokens": N}`` with ``wire.request.estimate``'s estimate of that
  ``CompletionRequest``: the estimate the limits reserve with, not a
  tokenizer's count.

No I/O beyond authentication's.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from flatgate.edge_translator.anthropic.errors import error_body, error_event
from flatgate.edge_translator.anthropic.render import PING, EventRenderer, MessageAggregator
from flatgate.edge_translator.anthropic.translate import write_messages
from flatgate.edge_translator.client_api import Asked, Folding, Rendering, Stateless
from flatgate.edge_translator.errors import AuthenticationFailed
from flatgate.edge_translator.identity import Identities
from flatgate.edge_translator.ids import new_id
from flatgate.edge_translator.keys import Identity
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.apis.anthropic_messages.request import (
    CountTokensRequest,
    MessagesRequest,
    decode_count_tokens,
    decode_messages,
)
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.auth import bearer_token
from flatgate.proxy.plumbing.serve import Exchange
from flatgate.proxy.wire.request.estimate import estimate_request
from flatgate.proxy.wire.schema import BETA_HEADER

__all__ = ["COUNT_TOKENS", "MESSAGES", "CountTokens", "MessagesApi", "new_message_id"]

# What ``write`` keeps on the request for ``asked``: the prompt's estimate.
_ESTIMATE = "input_estimate"


def new_message_id() -> str:
    """A fresh Anthropic-style message id."""
    return new_id("msg_")


class MessagesApi(Stateless):
    """The Messages API's parts of the shared flow (``ClientApi``)."""

    __slots__ = ()

    name = "anthropic-messages"
    path = "/v1/messages"
    items_param = "messages"
    beat = PING
    # The client's headers an Anthropic backend must get, for ``write``'s
    # ``headers`` (the extras' ``$headers``).
    carried_headers = (BETA_HEADER,)

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
        self,
        req: MessagesRequest,
        model: ModelConfig,
        *,
        tenant: str,
        request_id: str,
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        """The buffer, and the prompt's estimate kept on ``req`` for ``asked``
        (``headers``: the client's, for ``anthropic-beta``)."""
        frame = write_messages(
            req,
            provider=model.provider_id,
            model_name=model.name,
            tenant=tenant,
            request_id=request_id,
            headers=headers,
        )
        setattr(req, _ESTIMATE, estimate_request(frame))
        return frame

    def asked(self, req: MessagesRequest, completion_id: str, request_id: str, model: str) -> Asked:
        estimate: int | None = getattr(req, _ESTIMATE, None)  # None: not written
        return Asked(self, completion_id, request_id, model, bool(req.stream), extra=estimate)

    def renderer(self, asked: Asked, created: int) -> Rendering:
        return EventRenderer(
            message_id=asked.completion_id, model=asked.model, input_tokens=asked.extra or 0
        )

    def aggregator(self, asked: Asked, created: int) -> Folding:
        return MessageAggregator(message_id=asked.completion_id, model=asked.model)

    def error_answer(self, err: FlatgateError, request_id: str | None) -> tuple[int, bytes]:
        return error_body(err, request_id)

    def error_event(self, err: FlatgateError) -> bytes:
        return error_event(err)


class CountTokens:
    """``POST /v1/messages/count_tokens``: an estimate, answered at the edge
    (``Local``)."""

    __slots__ = ()

    path = "/v1/messages/count_tokens"

    def decode(self, body: bytes) -> CountTokensRequest:
        return decode_count_tokens(body)

    async def answer(self, req: CountTokensRequest, model: ModelConfig, *, tenant: str) -> bytes:
        frame = write_messages(req, provider=model.provider_id, model_name=model.name)
        return msgspec.json.encode({"input_tokens": estimate_request(frame)})


MESSAGES = MessagesApi()
COUNT_TOKENS = CountTokens()
