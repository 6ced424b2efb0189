"""The model endpoints, ``GET /v1/models`` and ``GET /v1/models/{id}``, on the
app with fake protocol objects: Anthropic's shape (items, paging by
``limit`` / ``after_id`` / ``before_id``, its authentication and errors) for
a request with ``anthropic-version``, OpenAI's otherwise; the allow-lists
hiding models from both; the ``[[models]]`` keys they show
(``display_name``, ``created_at``) and their validation. The official SDKs
against a real gateway: ``test_models_sdk``."""

from __future__ import annotations

import json
import tomllib
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from flatgate.edge_translator.app import EdgeApp
from flatgate.edge_translator.keys import hash_key
from flatgate.edge_translator.model_endpoints import Listed, anthropic_list
from flatgate.edge_translator.settings import (
    EdgeConfigError,
    EdgeSection,
    EdgeSettings,
    KeyConfig,
    ModelConfig,
    parse_edge_settings,
)
from flatgate.proxy.limits import TenantConfig
from flatgate.proxy.plumbing.serve import ServerApp
from tests.edge import fakes

FEB_19 = datetime(2025, 2, 19, tzinfo=UTC)
MODELS = (
    ModelConfig(
        "house-model",
        "SelfHosted",
        aliases=("house",),
        owned_by="acme-labs",
        display_name="House Model",
        created_at=FEB_19,
    ),
    ModelConfig("org/llama-3", "OpenAI"),
    ModelConfig("secret", "Anthropic"),
)
KEY, LIMITED, NARROW = "sk-acme", "sk-globex", "sk-narrow"
ANTHROPIC = {"anthropic-version": "2023-06-01"}


def app_with(models: tuple[ModelConfig, ...] = MODELS) -> EdgeApp:
    settings = EdgeSettings(
        edge=EdgeSection(proxy_url="http://127.0.0.1:9/", access_log=False),
        models=models,
        keys=(
            KeyConfig("acme", hash_key(KEY)),
            KeyConfig("globex", hash_key(LIMITED)),
            KeyConfig("acme", hash_key(NARROW), models=("house",)),
        ),
        # globex may use house-model (so its alias) and nothing else.
        tenants=(TenantConfig("globex", models=("house-model",)),),
    )
    # The model endpoints never call the proxy: a transport that answers 500.
    transport = fakes.Transport(lambda sent: fakes.Response(500, [b"{}"]))
    return EdgeApp(settings, transport_factory=lambda: transport)


async def get(
    app: EdgeApp, path: str, headers: dict[str, str] | None = None, query: str = ""
) -> fakes.Protocol:
    proto = fakes.Protocol()
    scope = fakes.Scope("GET", path, headers)
    scope.query_string = query
    await ServerApp(app).__rsgi__(scope, proto)
    return proto


def bearer(key: str = KEY) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def anthropic(key: str = KEY, *, bearer_auth: bool = False) -> dict[str, str]:
    return {**ANTHROPIC, **(bearer(key) if bearer_auth else {"x-api-key": key})}


def anthropic_error(proto: fakes.Protocol) -> dict[str, Any]:
    body = proto.json()
    # Anthropic's own error bodies carry the request id beside the error.
    assert set(body) == {"type", "error", "request_id"} and body["type"] == "error"
    assert body["request_id"] == proto.header("request-id")
    err: dict[str, Any] = body["error"]
    assert set(err) == {"type", "message"}
    return err


def openai_error(proto: fakes.Protocol) -> dict[str, Any]:
    err: dict[str, Any] = proto.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


# -- OpenAI's shape ------------------------------------------------------------


async def test_openai_list_and_retrieve():
    app = app_with()
    body = (await get(app, "/v1/models", bearer())).json()
    epoch = 0
    stamp = int(FEB_19.timestamp())
    assert body == {
        "object": "list",
        "data": [
            {"id": "house-model", "object": "model", "created": stamp, "owned_by": "acme-labs"},
            {"id": "house", "object": "model", "created": stamp, "owned_by": "acme-labs"},
            {"id": "org/llama-3", "object": "model", "created": epoch, "owned_by": "flatgate"},
            {"id": "secret", "object": "model", "created": epoch, "owned_by": "flatgate"},
        ],
    }
    for item in body["data"]:
        proto = await get(app, f"/v1/models/{item['id']}", bearer())
        assert (proto.status, proto.json()) == (200, item)
        assert proto.header("content-type") == "application/json"


async def test_openai_retrieve_of_a_hidden_or_unknown_model_is_404_model_not_found():
    app = app_with()
    for key, model in ((LIMITED, "secret"), (LIMITED, "org/llama-3"), (KEY, "nope"), (KEY, "")):
        proto = await get(app, f"/v1/models/{model}", bearer(key))
        assert proto.status == 404
        err = openai_error(proto)
        assert (err["code"], err["param"], err["type"]) == (
            "model_not_found",
            "model",
            "invalid_request_error",
        )
        assert f"'{model}'" in err["message"]
    # What the caller may use is there.
    assert (await get(app, "/v1/models/house", bearer(LIMITED))).status == 200


async def test_allow_lists_hide_models_from_both_lists():
    app = app_with()

    async def ids(key: str, headers: dict[str, str]) -> tuple[list[str], list[str]]:
        oai = (await get(app, "/v1/models", bearer(key))).json()["data"]
        ant = (await get(app, "/v1/models", {**headers})).json()["data"]
        return [m["id"] for m in oai], [m["id"] for m in ant]

    # The tenant's list names house-model: its alias comes with it.
    assert await ids(LIMITED, anthropic(LIMITED)) == (["house-model", "house"],) * 2
    # The key's list names the alias only: the alias is listed, not the
    # model's own name (which the key may not call by).
    assert await ids(NARROW, anthropic(NARROW)) == (["house"],) * 2
    assert (await get(app, "/v1/models/house", anthropic(NARROW))).status == 200
    for hidden in ("house-model", "secret"):
        assert (await get(app, f"/v1/models/{hidden}", anthropic(NARROW))).status == 404
        assert (await get(app, f"/v1/models/{hidden}", bearer(NARROW))).status == 404


async def test_openai_callers_authenticate_with_bearer_only():
    app = app_with()
    for headers in ({}, {"x-api-key": KEY}, bearer("sk-wrong")):
        proto = await get(app, "/v1/models", headers)
        assert proto.status == 401
        assert openai_error(proto)["type"] == "invalid_request_error"
        assert (await get(app, "/v1/models/house", headers)).status == 401


# -- Anthropic's shape ---------------------------------------------------------


async def test_anthropic_list_and_retrieve():
    app = app_with()
    proto = await get(app, "/v1/models", anthropic())
    assert proto.status == 200
    body = proto.json()
    epoch = "1970-01-01T00:00:00Z"
    feb = "2025-02-19T00:00:00Z"
    assert body == {
        "data": [
            {
                "type": "model",
                "id": "house-model",
                "display_name": "House Model",
                "created_at": feb,
            },
            {"type": "model", "id": "house", "display_name": "House Model", "created_at": feb},
            {
                "type": "model",
                "id": "org/llama-3",
                "display_name": "org/llama-3",
                "created_at": epoch,
            },
            {"type": "model", "id": "secret", "display_name": "secret", "created_at": epoch},
        ],
        "has_more": False,
        "first_id": "house-model",
        "last_id": "secret",
    }
    for item in body["data"]:
        proto = await get(app, f"/v1/models/{item['id']}", anthropic(bearer_auth=True))
        assert (proto.status, proto.json()) == (200, item)


async def test_anthropic_callers_use_x_api_key_or_bearer_and_get_anthropic_errors():
    app = app_with()
    assert (await get(app, "/v1/models", anthropic(bearer_auth=True))).status == 200
    for headers in (ANTHROPIC, anthropic("sk-wrong"), anthropic("sk-wrong", bearer_auth=True)):
        for path in ("/v1/models", "/v1/models/house"):
            proto = await get(app, path, headers)
            assert proto.status == 401
            assert anthropic_error(proto)["type"] == "authentication_error"


async def test_anthropic_retrieve_of_a_hidden_or_unknown_model_is_its_not_found_error():
    app = app_with()
    for key, model in ((LIMITED, "secret"), (KEY, "claude-nothing")):
        proto = await get(app, f"/v1/models/{model}", anthropic(key))
        assert proto.status == 404
        err = anthropic_error(proto)
        assert err["type"] == "not_found_error"
        assert f"'{model}'" in err["message"]


@pytest.mark.parametrize(
    ("query", "ids", "has_more"),
    [
        ("", ["house-model", "house", "org/llama-3", "secret"], False),
        ("limit=2", ["house-model", "house"], True),
        ("limit=2&after_id=house", ["org/llama-3", "secret"], False),
        ("limit=1&after_id=house", ["org/llama-3"], True),
        ("after_id=secret", [], False),
        ("limit=2&before_id=secret", ["house", "org/llama-3"], True),
        ("limit=3&before_id=secret", ["house-model", "house", "org/llama-3"], False),
        ("before_id=house-model", [], False),
        ("limit=1000", ["house-model", "house", "org/llama-3", "secret"], False),
        # An id with a slash, quoted as the SDKs quote it.
        ("after_id=org%2Fllama-3", ["secret"], False),
    ],
)
async def test_anthropic_paging(query: str, ids: list[str], has_more: bool):
    body = (await get(app_with(), "/v1/models", anthropic(), query=query)).json()
    assert [m["id"] for m in body["data"]] == ids
    assert body["has_more"] is has_more
    assert (body["first_id"], body["last_id"]) == ((ids[0], ids[-1]) if ids else (None, None))


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=two", "limit"),
        ("limit=-1", "limit"),
        ("limit=", "limit"),
        ("after_id=nope", "after_id"),
        ("before_id=nope", "before_id"),
        ("after_id=house&before_id=secret", "before_id"),
        ("order=asc", "order"),
        ("page=2", "page"),
    ],
)
async def test_anthropic_paging_refuses_what_it_cannot_honour_naming_it(query: str, named: str):
    proto = await get(app_with(), "/v1/models", anthropic(), query=query)
    assert proto.status == 400
    err = anthropic_error(proto)
    assert err["type"] == "invalid_request_error"
    assert err["message"].startswith(f"{named}: ")


async def test_a_cursor_the_caller_may_not_see_is_as_unknown():
    proto = await get(app_with(), "/v1/models", anthropic(LIMITED), query="after_id=secret")
    assert proto.status == 400
    assert anthropic_error(proto)["message"].startswith("after_id: no model 'secret'")


def test_paging_walks_every_model_once_both_ways():
    listed = [Listed(f"m{i}", ModelConfig(f"m{i}", "SelfHosted")) for i in range(7)]
    forward: list[str] = []
    query = "limit=3"
    while True:
        page = json.loads(anthropic_list(listed, query))
        forward += [m["id"] for m in page["data"]]
        if not page["has_more"]:
            break
        query = f"limit=3&after_id={page['last_id']}"
    assert forward == [f"m{i}" for i in range(7)]
    backward: list[str] = []
    query = "limit=3&before_id=m6"
    while True:
        page = json.loads(anthropic_list(listed, query))
        backward = [m["id"] for m in page["data"]] + backward
        if not page["has_more"]:
            break
        query = f"limit=3&before_id={page['first_id']}"
    assert backward == [f"m{i}" for i in range(6)]


async def test_methods_other_than_get_on_a_model_are_405_in_the_callers_shape():
    app = app_with()
    proto = fakes.Protocol()
    scope = fakes.Scope("DELETE", "/v1/models/house", anthropic())
    await ServerApp(app).__rsgi__(scope, proto)
    assert proto.status == 405 and proto.header("allow") == "GET"
    assert anthropic_error(proto)["type"] == "invalid_request_error"


# -- [[models]] display_name and created_at ------------------------------------


def test_display_name_and_created_at_from_toml():
    s = parse_edge_settings(
        tomllib.loads(
            """
[[models]]
name = "a"
provider = "SelfHosted"
display_name = "Model A"
created_at = 2025-02-19T01:02:03+02:00

[[models]]
name = "b"
provider = "SelfHosted"
created_at = "2024-10-22T00:00:00Z"
"""
        )
    )
    a, b = s.models
    assert a.display_name == "Model A"
    assert a.created_at == datetime(2025, 2, 19, 1, 2, 3, tzinfo=timezone(timedelta(hours=2)))
    assert (b.display_name, b.created_at) == (None, datetime(2024, 10, 22, tzinfo=UTC))


async def test_created_at_is_shown_in_utc_both_ways():
    offset = datetime(2025, 2, 19, 1, 2, 3, tzinfo=timezone(timedelta(hours=2)))
    app = app_with((ModelConfig("a", "SelfHosted", created_at=offset),))
    ant = (await get(app, "/v1/models/a", anthropic())).json()
    oai = (await get(app, "/v1/models/a", bearer())).json()
    assert ant["created_at"] == "2025-02-18T23:02:03Z"
    assert oai["created"] == int(offset.timestamp())


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('display_name = ""', "models[0].display_name: must not be empty"),
        ('display_name = "  "', "models[0].display_name: must not be empty"),
        ("display_name = 3", "models[0].display_name"),
        ("created_at = 2025-02-19T00:00:00", "models[0].created_at: give a time zone offset"),
        ("created_at = 2025-02-19", "models[0].created_at"),
        ('created_at = "yesterday"', "models[0].created_at"),
    ],
)
def test_bad_display_name_or_created_at_names_the_key(entry: str, message: str):
    doc = f'[[models]]\nname = "a"\nprovider = "SelfHosted"\n{entry}\n'
    with pytest.raises(EdgeConfigError) as info:
        parse_edge_settings(tomllib.loads(doc))
    assert message in str(info.value)
