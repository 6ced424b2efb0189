"""What the app calls for the OpenAI Responses API: ``RESPONSES``, this API's
``client_api.ClientApi``, on ``POST /v1/responses``, and the answers of the
stored responses' endpoints.

Owns the Responses side of a request's way through the edge; the rest is
the app's shared flow (admission, the proxy round trip, the caller watch,
the drain, the access log, ``answer``'s streaming):

- authentication: ``Authorization: Bearer``, as Chat Completions';
- the request: its ``proxy.apis`` package's decode and checks, ``translate``'s writer,
  ``resp_...`` ids (``echo.new_id``); ``prepare`` resolves
  ``previous_response_id`` through the stored responses
  (``store.StoredResponses``): that response's input items, then its output
  items, then the new input (``items.CARRIED`` types only); an unknown,
  expired or another tenant's id is a 404 (``previous_response_not_found``,
  ``param: "previous_response_id"``), one answered but not stored for its
  size a 400 saying so (``store.StoredResponses.too_large``), the chain charged to the request's
  budget as if the client had sent it. With ``store`` (true unless the
  client says false) the whole input, ids given, is saved once the request
  has passed every check and before it is forwarded (``admitted``; a chain's
  runs shared with the response it continues, ``store.list_pieces``), and
  ``finish`` saves the ``response`` object once the answer has
  ended (whole, streamed, or failed after its first byte), its reasoning
  items' ``encrypted_content`` kept whether or not the client asked to see
  it (a chain needs it; ``GET`` serves the response as stored);
- the answer: ``render``'s events and ``response`` object, echoing the
  request (``echo``); SSE comments as keep-alives, as Chat Completions';
- errors in OpenAI's shape (``FlatgateError.body``); a stream that fails after
  its first byte ends with ``response.failed`` (``render.RenderedFailure``),
  or, for a failure no renderer saw, an ``error`` event.

Also ``retrieve_answer``, ``delete_answer`` and ``input_items_answer``, the
answers of ``GET`` and ``DELETE /v1/responses/{id}`` and ``GET
/v1/responses/{id}/input_items`` over what the store gave (the app reads the
store, with the caller's tenant, and sends these). No I/O beyond
authentication's and the store's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import msgspec

from flatgate.edge_translator.client_api import Asked, Budget, Folding, Rendering
from flatgate.edge_translator.errors import InvalidRequest, shown
from flatgate.edge_translator.openai.endpoint import BearerApi
from flatgate.edge_translator.responses.echo import Echo, echo_of, new_id
from flatgate.edge_translator.responses.items import CARRIED, encode_items, list_answer
from flatgate.edge_translator.responses.render import (
    DONE,
    Aggregator,
    RenderedFailure,
    StreamRenderer,
)
from flatgate.edge_translator.responses.store import StoredResponses, Turn, list_pieces
from flatgate.edge_translator.responses.translate import write_request
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.apis.errors import openai_body, openai_detail
from flatgate.proxy.apis.openai_responses.items import decode_items, decode_stored_output
from flatgate.proxy.apis.openai_responses.request import Decoded, decode_request
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.limits.blobs import Pieces

__all__ = [
    "RESPONSES",
    "ResponsesApi",
    "delete_answer",
    "input_items_answer",
    "retrieve_answer",
]

log = logging.getLogger("flatgate.edge")

_encode = msgspec.json.Encoder().encode


def _not_found(response_id: str) -> FlatgateError:
    return FlatgateError(
        f"Response with id '{shown(response_id)}' not found.", code=codes.RESPONSE_NOT_FOUND
    )


class ResponsesApi(BearerApi):
    """The Responses API's parts of the shared flow (``ClientApi``), over
    ``store`` (``None``: nothing is stored, and ``previous_response_id`` finds
    nothing); the app sets ``store`` once it has one."""

    __slots__ = ("store",)

    name = "openai-responses"
    path = "/v1/responses"
    items_param = "input"

    def __init__(self, store: StoredResponses | None = None) -> None:
        self.store = store

    def decode(self, body: bytes) -> Decoded:
        return decode_request(body)

    def new_id(self) -> str:
        return new_id("resp")

    async def prepare(
        self, req: Decoded, *, tenant: str, response_id: str, budget: Budget
    ) -> Decoded:
        """``req`` with ``previous_response_id``'s chain before its input,
        ``budget`` charged for the chain and for the copies of a namespace's
        description (``Decoded.expansion``), and, when it is to be stored, its
        input's runs made (``admitted`` stores them): the chain's runs as
        stored, shared, then the previous output's items and the new input."""
        budget.charge(req.expansion, "tools")
        store = self.store
        previous = req.req.previous_response_id
        runs: Pieces = ()
        new = req.items
        if previous is not None:
            turn = await self.previous_turn(tenant, previous)
            if turn is None:
                size = await store.too_large(tenant, previous) if store is not None else None
                if size is not None:
                    raise InvalidRequest(
                        f"Previous response with id '{shown(previous)}' was answered but not "
                        f"stored: its input and output took {size} bytes, over the gateway's "
                        "[state] max_stored_response_bytes. Send the conversation as input "
                        "instead of previous_response_id.",
                        param="previous_response_id",
                    )
                raise FlatgateError(
                    f"Previous response with id '{shown(previous)}' not found.",
                    param="previous_response_id",
                    code=codes.PREVIOUS_RESPONSE_NOT_FOUND,
                )
            budget.charge(turn.size, "previous_response_id")
            try:
                before = [i for i in decode_items(turn.items) if i.type in CARRIED]
                output = [i for i in decode_stored_output(turn.response) if i.type in CARRIED]
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise FlatgateError(
                    f"The stored response '{shown(previous)}' could not be read.",
                    param="previous_response_id",
                ) from exc
            req = req.with_items([*before, *output, *new])
            runs = (*turn.runs, encode_items(output)[1:-1])
        if self.keeps(req):
            req.kept = list_pieces((*runs, encode_items(new)[1:-1]))
        return req

    async def previous_turn(self, tenant: str, response_id: str) -> Turn | None:
        """The response ``previous_response_id`` names, as stored (``None``:
        not found)."""
        store = self.store
        return await store.turn(tenant, response_id) if store is not None else None

    def keeps(self, req: Decoded) -> bool:
        """Whether ``prepare`` makes ``req``'s input to keep (``Decoded.kept``):
        when it is to be stored."""
        return self.store is not None and req.req.store is not False

    async def admitted(self, asked: Asked, *, tenant: str) -> None:
        """The input ``prepare`` made, stored (a failure to store is the
        store's to log and count; the request goes on)."""
        echo: Echo = asked.extra
        store = self.store
        if store is None or not echo.kept:
            return
        kept = echo.kept.pop()
        try:
            await store.save_input(tenant, asked.completion_id, kept)
        except Exception:  # never raises: the request goes on
            log.exception("saving the input of response %s failed", asked.completion_id)

    carried_headers = ()

    def write(
        self,
        req: Decoded,
        model: ModelConfig,
        *,
        tenant: str,
        request_id: str,
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        return write_request(
            req,
            provider=model.provider_id,
            model_name=model.name,
            tenant=tenant,
            request_id=request_id,
        )

    def asked(self, req: Decoded, completion_id: str, request_id: str, model: str) -> Asked:
        echo = echo_of(req)
        if req.kept:  # until ``admitted`` stores it, and no longer
            echo.kept.append(req.kept)
        return Asked(
            self,
            completion_id,
            request_id,
            model,
            bool(req.req.stream),
            include_usage=True,
            extra=echo,
        )

    def renderer(self, asked: Asked, created: int) -> Rendering:
        return StreamRenderer(
            response_id=asked.completion_id, created=created, model=asked.model, echo=asked.extra
        )

    def aggregator(self, asked: Asked, created: int) -> Folding:
        return Aggregator(
            response_id=asked.completion_id, created=created, model=asked.model, echo=asked.extra
        )

    async def finish(self, asked: Asked, answer: Rendering | Folding, *, tenant: str) -> None:
        """The ``response`` object saved, when stored (a failure to save is
        the store's to log and count; the answer goes out)."""
        echo: Echo = asked.extra
        store = self.store
        if store is None or not echo.store:
            return
        if not isinstance(answer, StreamRenderer | Aggregator):
            return
        try:
            await store.save_response(
                tenant, asked.completion_id, answer.response_json(stored=True)
            )
        except Exception:  # finish never raises: the answer goes out
            log.exception("saving response %s failed", asked.completion_id)

    def error_answer(self, err: FlatgateError, request_id: str | None) -> tuple[int, bytes]:
        return err.status, openai_body(err)

    def error_event(self, err: FlatgateError) -> bytes:
        """``response.failed`` when a renderer saw the failure; else an
        ``error`` event (no response began: keep-alives only): its fields at
        the top level, as OpenAI sends them and the SDKs read them, and as
        an ``error`` object (``type``, ``code``, ``message``, ``param``), as
        the Open Responses specification's ``ErrorStreamingEvent`` has them;
        then the terminal ``[DONE]``."""
        if isinstance(err, RenderedFailure):
            return err.event
        body = {
            "type": "error",
            "code": err.code.code,
            "message": err.message,
            "param": err.param,
            "error": openai_detail(err),
            "sequence_number": 0,
        }
        return b"event: error\ndata: " + _encode(body) + b"\n\n" + DONE


RESPONSES = ResponsesApi()


def retrieve_answer(stored: bytes | None, response_id: str) -> tuple[int, bytes]:
    """``GET /v1/responses/{id}``: the stored ``response`` object, or a 404."""
    if stored is None:
        return 404, openai_body(_not_found(response_id))
    return 200, stored


def delete_answer(found: bool, response_id: str) -> tuple[int, bytes]:
    """``DELETE /v1/responses/{id}``: whether the store had it for this tenant."""
    if not found:
        return 404, openai_body(_not_found(response_id))
    return 200, _encode({"id": response_id, "object": "response", "deleted": True})


def input_items_answer(
    stored: bytes | None, response_id: str, query: str = ""
) -> tuple[int, bytes]:
    """``GET /v1/responses/{id}/input_items``: the stored input items as a
    list (``limit``, ``order``, ``after`` from the query string), or a 404
    (a 400 naming a bad parameter)."""
    if stored is None:
        return 404, openai_body(_not_found(response_id))
    try:
        return 200, list_answer(stored, query)
    except FlatgateError as err:
        return err.status, openai_body(err)
