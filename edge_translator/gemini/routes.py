"""The Gemini API's routes, for the app's table: ``GeminiRoutes``.

Under ``/v1beta`` and ``/v1`` (google-genai calls ``/v1``, Gemini CLI
``/v1beta``): ``POST models/{model}:generateContent`` and
``:streamGenerateContent`` (the shared flow, with a ``GeminiApi`` made for
the path: ``endpoint.for_path``), ``:countTokens`` (answered at the edge,
``endpoint.CountTokens``), ``:embedContent`` and ``:batchEmbedContents`` (the
embeddings flow, in Gemini's shape: ``embed``); ``POST
tunedModels/{model}:<verb>`` refused naming the model (flatgate serves its
configured models); ``GET /v1beta/models`` and ``/v1beta/models/{model}`` in
Gemini's shape (``models``; ``/v1/models`` is the app's, which answers a
Gemini caller in this shape too). Every POST is access-logged by its path
alone (never the query, where a Gemini client may put its key). No I/O
beyond the flows'.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from flatgate.edge_translator.client_api import Route
from flatgate.edge_translator.embeddings.flow import EmbeddingsFlow
from flatgate.edge_translator.errors import InvalidRequest, shown
from flatgate.edge_translator.flow import Flow
from flatgate.edge_translator.gemini.embed import GeminiEmbed
from flatgate.edge_translator.gemini.endpoint import GEMINI, CountTokens, for_path
from flatgate.edge_translator.gemini.models import gemini_list, gemini_model, model_id
from flatgate.edge_translator.model_endpoints import unknown_model
from flatgate.edge_translator.routes import Endpoint, Shape
from flatgate.proxy.plumbing.accesslog import Entry
from flatgate.proxy.plumbing.serve import Exchange
from flatgate.proxy.wire.schema import JSON

__all__ = ["EMBED_VERBS", "PREFIXES", "GeminiRoutes", "Handler"]

Handler = Callable[[Exchange, Entry, Mapping[str, str]], Awaitable[int]]
PREFIXES = ("/v1beta", "/v1")
EMBED_VERBS = ("embedContent", "batchEmbedContents")
_CHAT_VERBS = ("generateContent", "streamGenerateContent")
_JSON = [("content-type", JSON)]


class GeminiRoutes:
    """The Gemini routes' handlers over the worker's shared ``flow`` and
    its embeddings flow (``embed``)."""

    __slots__ = ("_embed", "_flow")

    def __init__(self, flow: Flow, embed: EmbeddingsFlow) -> None:
        self._flow = flow
        self._embed = embed

    def endpoints(self) -> list[Endpoint[Any]]:
        """The table's rows (before ``/v1/models/{id...}``, which serves ``GET`` only)."""
        rows: list[Endpoint[Any]] = []
        for prefix in PREFIXES:
            for verb in (*_CHAT_VERBS, "countTokens", *EMBED_VERBS):
                rows.append(
                    Endpoint(
                        f"{prefix}/models/{{model}}:{verb}",
                        ("POST",),
                        self._handler(verb),
                        shape=Shape.GEMINI,
                    )
                )
            rows.append(
                Endpoint(
                    f"{prefix}/tunedModels/{{model...}}",
                    ("POST",),
                    self._tuned,
                    shape=Shape.GEMINI,
                    label=f"{prefix}/tunedModels",
                )
            )
        rows.append(
            Endpoint("/v1beta/models", ("GET",), self.list_models, shape=Shape.GEMINI, logged=False)
        )
        rows.append(
            Endpoint(
                "/v1beta/models/{id...}",
                ("GET",),
                self.get_model,
                shape=Shape.GEMINI,
                label="/v1beta/models/{id}",
                logged=False,
            )
        )
        return rows

    def _handler(self, verb: str) -> Handler:
        flow = self._flow
        if verb in EMBED_VERBS:

            async def embed(ex: Exchange, entry: Entry, params: Mapping[str, str]) -> int:
                return await self._embed.run(ex, entry, GeminiEmbed(params["model"], verb))

            return embed
        if verb == "countTokens":

            async def count(ex: Exchange, entry: Entry, params: Mapping[str, str]) -> int:
                return await flow.run(ex, entry, Route(GEMINI, CountTokens(params["model"])))

            return count

        async def generate(ex: Exchange, entry: Entry, params: Mapping[str, str]) -> int:
            return await flow.run(ex, entry, Route(for_path(params["model"], verb, ex.query)))

        return generate

    async def _tuned(self, ex: Exchange, entry: Entry, params: Mapping[str, str]) -> int:
        entry.api = GEMINI.name
        name = shown("tunedModels/" + params["model"].partition(":")[0])
        raise InvalidRequest(
            f"model: flatgate serves its configured models, not tuned ones ('{name}').",
            param="model",
        )

    async def list_models(self, ex: Exchange, entry: Entry, params: Mapping[str, str]) -> int:
        """The models the caller may use, in Gemini's shape."""
        flow = self._flow
        identity = await GEMINI.authenticate(ex, flow.identities)
        await ex.respond(200, _JSON, gemini_list(flow.tenancy.listed(identity)))
        return 200

    async def get_model(self, ex: Exchange, entry: Entry, params: Mapping[str, str]) -> int:
        """One model the caller may use (else a 404, as for no such model)."""
        flow = self._flow
        identity = await GEMINI.authenticate(ex, flow.identities)
        wanted = model_id(params["id"])
        item = flow.tenancy.visible(identity, wanted)
        if item is None:
            raise unknown_model(wanted)
        await ex.respond(200, _JSON, gemini_model(item))
        return 200
