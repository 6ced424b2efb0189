"""What the app calls for the OpenAI Chat Completions API: ``CHAT``, this
API's ``client_api.ClientApi``, on ``POST /v1/chat/completions``.

Owns the OpenAI side of a request's way through the edge; the rest is the
app's shared flow (admission, the proxy round trip, the caller watch, the
drain, the access log, ``answer``'s streaming):

- authentication: ``Authorization: Bearer`` against the edge's credentials
  (``identity.Identities``: the ``[[keys]]``, and JWTs where configured);
- the request: its ``proxy.apis`` package's decode and checks, ``translate``'s writer,
  ``mapping``'s completion ids; the answer's shape (``stream``, ``n``,
  ``stream_options.include_usage``);
- the answer: ``render``'s ``chat.completion.chunk`` events and
  ``chat.completion`` body, SSE comments as keep-alives;
- errors in OpenAI's shape (``FlatgateError.body``, ``render.error_event``).

Also the shape of every answer off the client APIs' paths (``GET
/v1/models``, ``/metrics``, a 404). No I/O beyond authentication's.
"""

from __future__ import annotations

from collections.abc import Mapping

from flatgate.edge_translator.client_api import Asked, Folding, Rendering, Stateless
from flatgate.edge_translator.identity import Identities
from flatgate.edge_translator.keys import Identity
from flatgate.edge_translator.openai.mapping import new_request_id
from flatgate.edge_translator.openai.render import Aggregator, StreamRenderer, error_event
from flatgate.edge_translator.openai.translate import write_request
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.apis.errors import openai_body
from flatgate.proxy.apis.openai_chat.request import Decoded, decode
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.serve import Exchange

__all__ = ["CHAT", "KEEPALIVE", "BearerApi", "ChatApi"]

# What a keep-alive tick sends: an SSE comment, which clients skip.
KEEPALIVE = b": keep-alive\n\n"


class BearerApi:
    """What the OpenAI APIs (Chat Completions, Responses) share of a
    ``ClientApi``: the caller's ``Authorization: Bearer`` credential, and
    SSE comments as keep-alives."""

    __slots__ = ()

    beat = KEEPALIVE

    async def authenticate(self, ex: Exchange, identities: Identities) -> Identity:
        auth = ex.header("authorization")
        return identities.cached(auth) or await identities.verify(auth)


class ChatApi(BearerApi, Stateless):
    """OpenAI Chat Completions' parts of the shared flow (``ClientApi``)."""

    __slots__ = ()

    name = "openai-chat"
    path = "/v1/chat/completions"
    items_param = "messages"

    def decode(self, body: bytes) -> Decoded:
        return decode(body)

    def new_id(self) -> str:
        return new_request_id()

    carried_headers = ()

    def write(
        self,
        d: Decoded,
        model: ModelConfig,
        *,
        tenant: str,
        request_id: str,
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        return write_request(
            d.req,
            provider=model.provider_id,
            model_name=model.name,
            tenant=tenant,
            request_id=request_id,
            fields=d.fields,
        )

    def asked(self, d: Decoded, completion_id: str, request_id: str, model: str) -> Asked:
        req = d.req
        return Asked(
            self,
            completion_id,
            request_id,
            model,
            bool(req.stream),
            req.n or 1,
            bool(req.stream_options and req.stream_options.include_usage),
        )

    def renderer(self, asked: Asked, created: int) -> Rendering:
        return StreamRenderer(
            completion_id=asked.completion_id,
            created=created,
            model=asked.model,
            include_usage=asked.include_usage,
            choices=asked.choices,
        )

    def aggregator(self, asked: Asked, created: int) -> Folding:
        return Aggregator(
            completion_id=asked.completion_id,
            created=created,
            model=asked.model,
            choices=asked.choices,
        )

    def error_answer(self, err: FlatgateError, request_id: str | None) -> tuple[int, bytes]:
        return err.status, openai_body(err)

    def error_event(self, err: FlatgateError) -> bytes:
        return error_event(err)


CHAT = ChatApi()
