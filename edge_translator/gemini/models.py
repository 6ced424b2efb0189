"""The model endpoints in Gemini's shape: ``GET /{v1beta,v1}/models`` and
``/models/{model}``, and ``GET /v1/models`` for a Gemini caller
(``wants_gemini``: a request with ``x-goog-api-key``, ``?key=`` or
``x-goog-api-client``, which only Google's clients send), over the models a
caller may use as ``tenancy.Tenancy`` lists them (``model_endpoints.Listed``).

A model is ``{"name": "models/<id>", "displayName", "version",
"supportedGenerationMethods"}`` (``displayName``: the model's
``[[models]] display_name``, else the id); the list ``{"models": [...]}``,
every model on one page (``pageSize`` and ``pageToken`` are read past: there is
no next page). A model id given as ``models/<id>`` is the id. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import parse_qs

import msgspec

from flatgate.edge_translator.model_endpoints import Listed

__all__ = ["METHODS", "gemini_list", "gemini_model", "model_id", "wants_gemini"]

# What every model the edge lists supports (Gemini's method names).
METHODS = ("generateContent", "streamGenerateContent", "countTokens", "embedContent")


class _Model(msgspec.Struct, rename="camel"):
    name: str
    display_name: str
    version: str
    supported_generation_methods: list[str]


class _List(msgspec.Struct):
    models: list[_Model]


_encode = msgspec.json.Encoder().encode


def wants_gemini(key_header: str | None, api_client: str | None, query: str) -> bool:
    """Whether a model endpoint's request comes from a Gemini client."""
    if key_header is not None or api_client is not None:
        return True
    return "key=" in query and "key" in parse_qs(query)


def model_id(path_id: str) -> str:
    """The id a path names (``models/<id>`` or ``<id>``)."""
    return path_id.removeprefix("models/")


def _model(item: Listed) -> _Model:
    return _Model("models/" + item.id, item.model.display_name or item.id, "001", list(METHODS))


def gemini_list(listed: Sequence[Listed]) -> bytes:
    """The models list's body in Gemini's shape."""
    return _encode(_List([_model(item) for item in listed]))


def gemini_model(item: Listed) -> bytes:
    """One model's body in Gemini's shape."""
    return _encode(_model(item))
