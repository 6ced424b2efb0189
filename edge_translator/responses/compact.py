"""``POST /v1/responses/compact``: the Responses API's compaction, as the
shared flow runs it (``CompactApi``, a ``client_api.ClientApi``, over the
Responses API's stored responses).

A compaction is a completion the edge asks of the route's own model, folded
into a ``response.compaction`` object instead of a ``response``:

- the request: ``apis.openai_responses.compact.decode_compact`` (``model``
  required: a 400 naming it; the endpoint's fields only), its
  ``previous_response_id`` resolved and charged as ``/v1/responses``' is
  (``ResponsesApi.prepare``), nothing stored; the same authentication,
  tenants, model allow-lists, limits and access log as every completion
  (the shared flow's);
- the ``CompletionRequest``: the conversation as ``/v1/responses`` writes
  it (``translate``), then one user message, the compaction prompt
  (``compact.PROMPT``), never streamed, its extras marked
  ``"$compact": true`` (``compact.COMPACT_MARK``);
- the answer (``CompactAggregator``): when the backend compacted itself (an
  ``openai-responses`` backend with ``compact = true``, whose items come as
  output items, ``{"output_item": ...}`` extras), its items as it sent them;
  otherwise the conversation's user messages as they were sent (``msg_...``
  ids where they had none, status ``completed``, a string content as one
  ``input_text`` part), then one ``compaction`` item (``cmp_...``) whose
  ``encrypted_content`` holds the model's answer, the summary
  (``compact.summary_item``); ``usage`` the backend's counts (zeros when it
  reported none: the object requires them); ``created_at`` the answer's.

A later ``POST /v1/responses`` whose input holds the compaction item sends
its summary to the backend as a user message (``translate``). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from flatgate.edge_translator.client_api import Asked, Budget, Folding, Rendering
from flatgate.edge_translator.errors import chunk_error
from flatgate.edge_translator.responses.echo import new_id
from flatgate.edge_translator.responses.endpoint import ResponsesApi
from flatgate.edge_translator.responses.output import usage_json
from flatgate.edge_translator.responses.translate import write_request
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.apis.openai_responses.compact import (
    COMPACT_MARK,
    COMPACT_PATH,
    COMPACTION,
    PROMPT,
    decode_compact,
    summary_item,
)
from flatgate.proxy.apis.openai_responses.items import Item
from flatgate.proxy.apis.openai_responses.request import Decoded
from flatgate.proxy.wire.chunk.frames import Chunk, Usage
from flatgate.proxy.wire.schema import ApiDialect, FinishReason

__all__ = ["CompactAggregator", "CompactApi", "retained"]

_encode = msgspec.json.encode
_extras = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_RESPONSES = int(ApiDialect.OPENAI_RESPONSES)
_MARK = msgspec.json.encode(COMPACT_MARK) + b":true"
_NO_USAGE = Usage(0, 0)


def retained(items: list[Item]) -> list[bytes]:
    """The user messages of ``items``, each as a compaction's output item."""
    out: list[bytes] = []
    for item in items:
        if item.type not in (None, "message") or item.role != "user":
            continue
        content = item.content
        parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else content
        message = {
            "id": item.id or new_id("msg"),
            "type": "message",
            "status": "completed",
            "role": "user",
            "content": parts or [],
        }
        out.append(_encode(message))
    return out


class CompactAggregator:
    """A compaction's chunks folded into its ``response.compaction`` object
    (``Folding``; see the module docstring)."""

    __slots__ = ("_created", "_id", "_items", "_kept", "_texts", "_usage", "finished")

    def __init__(self, response_id: str, created: int, kept: list[bytes]) -> None:
        self._id = response_id
        self._created = created
        self._kept = kept
        self._texts: list[str] = []
        self._items: list[bytes] = []
        self._usage: Usage | None = None
        self.finished = False

    @property
    def complete(self) -> bool:
        return self.finished

    @property
    def usage(self) -> Usage | None:
        return self._usage

    def feed(self, chunk: Chunk) -> None:
        """Take one chunk; an error chunk raises the ``FlatgateError`` it carries."""
        if chunk.error is not None or chunk.finish_reason == FinishReason.ERROR:
            raise chunk_error(chunk.error)
        if chunk.extras and chunk.extras_dialect == _RESPONSES:
            item = _extras(chunk.extras).get("output_item")
            if item is not None:
                self._items.append(bytes(item))
        if chunk.content:
            self._texts.append(chunk.content)
        if chunk.usage is not None:
            self._usage = chunk.usage
        if chunk.finish_reason:
            self.finished = True

    def body(self) -> bytes:
        """The ``response.compaction`` JSON body."""
        output = self._items or [
            *self._kept,
            _encode(summary_item(new_id("cmp"), "".join(self._texts))),
        ]
        head = _encode({"id": self._id, "object": COMPACTION})[:-1]
        return (
            head
            + b',"created_at":%d,"output":[' % self._created
            + b",".join(output)
            + b'],"usage":'
            + usage_json(self._usage or _NO_USAGE)
            + b"}"
        )


class CompactApi(ResponsesApi):
    """``POST /v1/responses/compact`` (see the module docstring): the
    Responses API's authentication, ids, stored chains and errors, with a
    compaction's request and answer."""

    __slots__ = ()

    path = COMPACT_PATH

    def decode(self, body: bytes) -> Decoded:
        return decode_compact(body)

    async def prepare(
        self, req: Decoded, *, tenant: str, response_id: str, budget: Budget
    ) -> Decoded:
        """``ResponsesApi.prepare``'s chain, and nothing to store."""
        req = await super().prepare(req, tenant=tenant, response_id=response_id, budget=budget)
        req.kept = ()
        return req

    async def admitted(self, asked: Asked, *, tenant: str) -> None:
        """Nothing: a compaction's input is not stored."""

    def write(
        self,
        req: Decoded,
        model: ModelConfig,
        *,
        tenant: str,
        request_id: str,
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        asking = req.with_items([*req.items, Item(role="user", content=PROMPT)])
        asking.first = req.first
        asking.extras = req.extras[:-1] + b"," + _MARK + b"}" if req.extras else b"{" + _MARK + b"}"
        return write_request(
            asking,
            provider=model.provider_id,
            model_name=model.name,
            tenant=tenant,
            request_id=request_id,
        )

    def asked(self, req: Decoded, completion_id: str, request_id: str, model: str) -> Asked:
        return Asked(
            self,
            completion_id,
            request_id,
            model,
            False,
            include_usage=True,
            extra=retained(req.items),
        )

    def renderer(self, asked: Asked, created: int) -> Rendering:
        raise TypeError("a compaction is never streamed")

    def aggregator(self, asked: Asked, created: int) -> Folding:
        return CompactAggregator(asked.completion_id, created, asked.extra)

    async def finish(self, asked: Asked, answer: Rendering | Folding, *, tenant: str) -> None:
        """Nothing: a compaction is not stored."""
