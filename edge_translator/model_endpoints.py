"""The model endpoints' answers, ``GET /v1/models`` and ``GET
/v1/models/{id}``, in each client API's shape, over the models a caller may
use as ``tenancy.Tenancy`` lists them (``Listed``: the id shown, a
configured name or alias, and its ``ModelConfig``; an alias is a model of its
own, as in the list).

- **Anthropic's**, when the request carries an ``anthropic-version`` header
  (``wants_anthropic``): ``{"type": "model", "id", "display_name",
  "created_at"}`` items; the list ``{"data", "has_more", "first_id",
  "last_id"}``, paged as Anthropic documents: ``limit`` (1 to 1000, 20 when
  absent), then ``after_id`` (the page right after that id) or ``before_id``
  (the page right before it); ``has_more`` tells whether more follow in the
  direction asked; ``first_id`` / ``last_id`` are ``null`` on an empty page.
- **OpenAI's** otherwise: ``{"id", "object": "model", "created",
  "owned_by"}`` items, the list ``{"object": "list", "data"}`` holding every
  model. OpenAI documents no parameters for either endpoint and ignores a
  query string; so does this shape (the app does not read it).

In Anthropic's shape, a query parameter it does not document, a cursor that
names no model of the caller's list, and both cursors at once are refused
with a 400 naming the parameter (``InvalidRequest``); the app answers it in
the caller's shape, as the 404 of a model the caller may not use
(``unknown_model``).
``display_name`` is the model's ``[[models]] display_name``, else the id
shown; ``created_at`` its ``created_at`` (RFC 3339, UTC, whole seconds),
else the Unix epoch, which is also OpenAI's ``created``.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from urllib.parse import parse_qs

import msgspec

from flatgate.edge_translator.errors import InvalidRequest, ModelNotFound, shown
from flatgate.edge_translator.settings import ModelConfig
from flatgate.proxy.wire.digits import read_decimal

__all__ = [
    "ANTHROPIC_PAGE",
    "Listed",
    "anthropic_list",
    "anthropic_model",
    "openai_list",
    "openai_model",
    "unknown_model",
    "wants_anthropic",
]

# Anthropic's page sizes: 20 when `limit` is absent, at most 1000.
ANTHROPIC_PAGE = 20
_MAX_PAGE = 1000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ANTHROPIC_QUERY = frozenset({"limit", "after_id", "before_id"})


class Listed(msgspec.Struct, frozen=True, gc=False):
    """A model as the endpoints show it: ``id`` (its name or one of its
    aliases) and its entry."""

    id: str
    model: ModelConfig


class _OpenAIModel(msgspec.Struct):
    id: str
    created: int
    owned_by: str
    object: str = "model"


class _OpenAIList(msgspec.Struct):
    data: list[_OpenAIModel]
    object: str = "list"


class _AnthropicModel(msgspec.Struct):
    id: str
    display_name: str
    created_at: str
    type: str = "model"


class _AnthropicList(msgspec.Struct):
    data: list[_AnthropicModel]
    has_more: bool
    first_id: str | None
    last_id: str | None


_encode = msgspec.json.Encoder().encode


def wants_anthropic(anthropic_version: str | None) -> bool:
    """Whether a request with this ``anthropic-version`` header is answered
    in Anthropic's shape (any value: the header is what its SDKs send)."""
    return anthropic_version is not None


def _created(m: ModelConfig) -> datetime:
    return _EPOCH if m.created_at is None else m.created_at.astimezone(UTC)


def _openai(item: Listed) -> _OpenAIModel:
    return _OpenAIModel(item.id, int(_created(item.model).timestamp()), item.model.owned_by)


def _anthropic(item: Listed) -> _AnthropicModel:
    m = item.model
    stamp = _created(m).strftime("%Y-%m-%dT%H:%M:%SZ")
    return _AnthropicModel(item.id, m.display_name or item.id, stamp)


def openai_list(listed: Sequence[Listed]) -> bytes:
    """``GET /v1/models``'s body in OpenAI's shape."""
    return _encode(_OpenAIList([_openai(item) for item in listed]))


def openai_model(item: Listed) -> bytes:
    """``GET /v1/models/{id}``'s body in OpenAI's shape."""
    return _encode(_openai(item))


def anthropic_model(item: Listed, query: str = "") -> bytes:
    """``GET /v1/models/{id}``'s body in Anthropic's shape."""
    _args(query, frozenset())
    return _encode(_anthropic(item))


def anthropic_list(listed: Sequence[Listed], query: str = "") -> bytes:
    """``GET /v1/models``'s body in Anthropic's shape: the page ``query``
    asks for (``InvalidRequest`` naming a bad parameter)."""
    args = _args(query, _ANTHROPIC_QUERY)
    text = args.get("limit", str(ANTHROPIC_PAGE))
    limit = read_decimal(text)
    if limit is None or not 1 <= limit <= _MAX_PAGE:
        raise InvalidRequest(
            f"limit: expected an integer from 1 to {_MAX_PAGE}, got '{shown(text)}'.",
            param="limit",
        )
    after, before = args.get("after_id"), args.get("before_id")
    if after is not None and before is not None:
        raise InvalidRequest("before_id: give before_id or after_id, not both.", param="before_id")
    ids = [item.id for item in listed]
    if before is not None:
        end = _cursor(ids, before, "before_id")
        start = max(0, end - limit)
        has_more = start > 0
    else:
        start = 0 if after is None else _cursor(ids, after, "after_id") + 1
        end = min(len(ids), start + limit)
        has_more = end < len(ids)
    page = [_anthropic(item) for item in listed[start:end]]
    first = page[0].id if page else None
    last = page[-1].id if page else None
    return _encode(_AnthropicList(page, has_more, first, last))


def unknown_model(model_id: str) -> ModelNotFound:
    """What retrieving a model the caller may not use (or no model) raises."""
    return ModelNotFound(
        f"The model '{shown(model_id)}' does not exist or you do not have access to it.",
        param="model",
    )


def _cursor(ids: list[str], value: str, param: str) -> int:
    """The position of the model ``value`` names in ``ids``."""
    try:
        return ids.index(value)
    except ValueError:
        raise InvalidRequest(
            f"{param}: no model '{shown(value)}' in this list; "
            "give the first_id or last_id of a page of it.",
            param=param,
        ) from None


def _args(query: str, known: frozenset[str]) -> dict[str, str]:
    """The query's parameters (the last of each name), each one ``known``."""
    try:
        parsed = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise InvalidRequest(f"Invalid query string: '{shown(query)}'.") from None
    for name in parsed:
        if name not in known:
            allowed = ", ".join(sorted(known)) if known else "none"
            raise InvalidRequest(
                f"{shown(name)}: unknown query parameter (this endpoint takes: {allowed}).",
                param=shown(name),
            )
    return {name: values[-1] for name, values in parsed.items()}
