"""Gemini's embeddings at the edge: ``models/{model}:embedContent`` (one
input) and ``:batchEmbedContents`` (many), as an ``embeddings.flow.EmbedKind``
(the embeddings flow's steps, Gemini's authentication and errors).

The request (``apis.gemini.embed``): each content's text parts, joined, are
one input (a part other than text is refused naming it,
``requests.1.content.parts.0.inlineData``; an empty input too);
``outputDimensionality`` -> the request's ``dimensions``; ``taskType`` and
``title`` are extras of the Gemini dialect (a Gemini backend sends them, any
other names or refuses them). A body's ``model`` (a batch's requests must
name one) must be the path's (``models/<model>``), and a batch's requests
must share their settings, since they are one request on the wire: another
is refused naming it (``requests.2.taskType``). A member the model does not
know, at any depth, is refused naming it, as Google's servers refuse it (a
member spelled by its protobuf name, ``task_type``, is read as its camelCase
one). Token counts: as the OpenAI embeddings' estimate
(``embeddings.translate``'s way: UTF-8 bytes over four).

The answer: ``{"embedding": {"values": [...]}}`` for ``embedContent``,
``{"embeddings": [{"values": [...]}, ...]}`` for a batch, the floats as the
OpenAI embeddings render them (``embeddings.render``'s way: one ``tolist``,
each vector encoded by msgspec), in pieces for a large answer. No I/O.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterator
from typing import Any

import msgspec

from flatgate.edge_translator.client_api import ClientApi
from flatgate.edge_translator.embeddings.flow import Answer, Job
from flatgate.edge_translator.embeddings.render import CHUNK_FLOATS
from flatgate.edge_translator.errors import InvalidRequest
from flatgate.edge_translator.gemini.endpoint import GEMINI, known_body
from flatgate.proxy.apis.decoding import strict_twin
from flatgate.proxy.apis.gemini.content import Content
from flatgate.proxy.apis.gemini.embed import (
    BatchEmbedContentsRequest,
    EmbedContentRequest,
)
from flatgate.proxy.wire.embeddings import Embeddings, write_embedding_request
from flatgate.proxy.wire.request.estimate import estimate_tokens
from flatgate.proxy.wire.schema import ApiDialect

__all__ = ["GeminiEmbed"]

_GEMINI = int(ApiDialect.GEMINI)
_BIG_ENDIAN = sys.byteorder == "big"
_encode = msgspec.json.encode
# Strict: a member the model does not know, at any depth, is refused naming it.
_twins: dict[type, type] = {}
_single = msgspec.json.Decoder(strict_twin(EmbedContentRequest, _twins)).decode
_batch = msgspec.json.Decoder(strict_twin(BatchEmbedContentsRequest, _twins)).decode
# (settings as they go on the wire: dimensions, extras)
_Settings = tuple[int, dict[str, str]]


def _text(c: Content, where: str) -> str:
    texts = []
    for j, p in enumerate(c.parts):
        if p.text is None:
            member = next(
                (
                    f.encode_name
                    for f in msgspec.structs.fields(p)
                    if getattr(p, f.name) is not None
                ),
                "part",
            )
            path = f"{where}.parts.{j}.{member}"
            raise InvalidRequest(f"{path}: flatgate embeds text parts only", param=path)
        texts.append(p.text)
    text = "".join(texts)
    if not text:
        raise InvalidRequest(f"{where}: an input must not be empty", param=where)
    return text


def _settings(r: EmbedContentRequest) -> _Settings:
    extras = {}
    if r.task_type is not None:
        extras["taskType"] = r.task_type
    if r.title is not None:
        extras["title"] = r.title
    return r.output_dimensionality or 0, extras


class _Answer:
    __slots__ = ("_batch",)

    def __init__(self, batch: bool) -> None:
        self._batch = batch

    def size_bound(self, e: Embeddings) -> int:
        return e.count * e.dimensions * 25 + 32 * e.count + 64

    def pieces(self, e: Embeddings, model: str, *, whole: bool) -> Iterator[bytes]:
        n = e.dimensions
        step = max(1, e.count if whole else CHUNK_FLOATS // max(1, n))
        yield b'{"embeddings":[' if self._batch else b'{"embedding":'
        for start in range(0, e.count, step):
            end = min(e.count, start + step)
            values = array("f")
            values.frombytes(e.values[4 * n * start : 4 * n * end])
            if _BIG_ENDIAN:
                values.byteswap()
            floats = values.tolist()
            yield b"".join(
                (b"," if i else b"")
                + b'{"values":'
                + _encode(floats[(i - start) * n : (i - start + 1) * n])
                + b"}"
                for i in range(start, end)
            )
        yield b"]}" if self._batch else b"}"


class _Job:
    __slots__ = ("_batch", "_dimensions", "_extras", "_model", "_texts")

    def __init__(self, model: str, texts: list[str], settings: _Settings, *, batch: bool) -> None:
        self._model = model
        self._texts = texts
        self._dimensions, self._extras = settings
        self._batch = batch

    @property
    def model(self) -> str:
        return self._model

    @property
    def count(self) -> int:
        return len(self._texts)

    def write(self, *, provider: int, model_name: str, tenant: str, request_id: str) -> bytes:
        extras = self._extras
        return write_embedding_request(
            model_name,
            texts=self._texts,
            request_id=request_id,
            provider=provider,
            dimensions=self._dimensions,
            tenant=tenant,
            extras=_encode(extras).decode() if extras else "",
            extras_dialect=_GEMINI if extras else 0,
        )

    def estimate(self) -> int:
        size = sum(len(t) if t.isascii() else len(t.encode()) for t in self._texts)
        return estimate_tokens(size, 0)

    def answer(self) -> Answer:
        return _Answer(self._batch)


class GeminiEmbed:
    """One path's embeddings (``verb``: ``embedContent`` or ``batchEmbedContents``)."""

    __slots__ = ("_batch", "_model")

    name = "gemini-embeddings"

    def __init__(self, model: str, verb: str) -> None:
        self._model = model
        self._batch = verb == "batchEmbedContents"

    @property
    def api(self) -> ClientApi[Any]:
        return GEMINI

    def _named(self, model: str | None, where: str) -> None:
        if model is not None and model.removeprefix("models/") != self._model:
            raise InvalidRequest(
                f"{where}: the model must be the path's, 'models/{self._model}'", param=where
            )

    def decode(self, body: bytes) -> Job:
        if not self._batch:
            one = known_body(_single, EmbedContentRequest, body)
            self._named(one.model, "model")
            return _Job(self._model, [_text(one.content, "content")], _settings(one), batch=False)
        many = known_body(_batch, BatchEmbedContentsRequest, body)
        if not many.requests:
            raise InvalidRequest("requests: give at least one request", param="requests")
        first = _settings(many.requests[0])
        texts = []
        for i, r in enumerate(many.requests):
            where = f"requests.{i}"
            if r.model is None:
                raise InvalidRequest(f"{where}.model: Field required", param=f"{where}.model")
            self._named(r.model, f"{where}.model")
            if _settings(r) != first:
                path = f"{where}.taskType"
                raise InvalidRequest(
                    f"{path}: a batch's requests must share taskType, title and "
                    "outputDimensionality (they are one request)",
                    param=path,
                )
            texts.append(_text(r.content, f"{where}.content"))
        return _Job(self._model, texts, first, batch=True)
