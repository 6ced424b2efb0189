"""The model endpoints through the official SDKs against a real one-process
gateway on loopback: ``anthropic``'s ``client.models.list(limit=...)`` (its pages
followed by ``after_id`` and ``before_id``) and ``retrieve``, which read
Anthropic's shape, and ``openai``'s, which read OpenAI's; a tenant's
allow-list hiding a model from both lists and making its retrieve the SDK's
``NotFoundError``. The models need no backend: the route goes nowhere."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import anthropic
import openai
import pytest

from tests.servers import Server, running
from tests.stacks import QUIET, write_stack

pytestmark = pytest.mark.integration

KEY, LIMITED = "sk-models-acme", "sk-models-globex"
FEB_19 = datetime(2025, 2, 19, tzinfo=UTC)
PAGED = [f"m{i}" for i in range(5)]
EVERY = ["house-model", "house", "org/llama-3", *PAGED, "secret"]
# globex may use house-model (and its alias) and the m* models.
VISIBLE = ["house-model", "house", *PAGED]


@pytest.fixture(scope="module", params=["asgi", "rsgi"])
def gateway(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Server]:
    """The gateway under each granian interface (each hands the app its path:
    an id with a slash, quoted by the SDKs, must come through both)."""
    d = tmp_path_factory.mktemp("models")
    config = write_stack(
        d / "flatgate.toml",
        proxy=QUIET,
        backends={"nowhere": "http://127.0.0.1:9"},
        routes={"*": "nowhere"},
        edge={**QUIET, "interface": request.param},
        models={
            "house-model": {
                "provider": "SelfHosted",
                "aliases": ["house"],
                "display_name": "House Model",
                "created_at": "2025-02-19T00:00:00Z",
                "owned_by": "acme-labs",
            },
            "org/llama-3": "OpenAI",
            **dict.fromkeys(PAGED, "SelfHosted"),
            "secret": "Anthropic",
        },
        keys={KEY: "acme", LIMITED: "globex"},
        tenants=[{"name": "globex", "models": ["house-model", "m*"]}],
    )
    with running("gateway", ["--config", config], d) as server:
        yield server


@pytest.fixture
def claude(gateway: Server) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=20) as c:
        yield c


@pytest.fixture
def gpt(gateway: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0, timeout=20) as c:
        yield c


def test_anthropic_sdk_lists_every_model_in_its_shape(claude: anthropic.Anthropic) -> None:
    page = claude.models.list()
    assert [m.id for m in page.data] == EVERY
    assert (page.has_more, page.first_id, page.last_id) == (False, "house-model", "secret")
    house, alias = page.data[0], page.data[1]
    assert (house.type, house.display_name, house.created_at) == ("model", "House Model", FEB_19)
    assert (alias.id, alias.display_name, alias.created_at) == ("house", "House Model", FEB_19)
    plain = page.data[2]
    assert (plain.display_name, plain.created_at) == (
        "org/llama-3",
        datetime(1970, 1, 1, tzinfo=UTC),
    )


def test_anthropic_sdk_follows_pages_both_ways(claude: anthropic.Anthropic) -> None:
    first = claude.models.list(limit=3)
    assert [m.id for m in first.data] == EVERY[:3]
    assert first.has_more and first.has_next_page()
    # Iterating a page fetches the next ones with after_id = last_id.
    assert [m.id for m in claude.models.list(limit=3)] == EVERY
    # before_id: the pages before it, the SDK following first_id.
    back = claude.models.list(limit=2, before_id="secret")
    assert [m.id for m in back.data] == EVERY[-3:-1]
    assert [m.id for m in back] == EVERY[-3:-1] + EVERY[-5:-3] + EVERY[-7:-5] + EVERY[:2]
    after = claude.models.list(limit=2, after_id="m4")
    assert ([m.id for m in after.data], after.has_more) == (["secret"], False)


def test_anthropic_sdk_retrieves_models_and_aliases(claude: anthropic.Anthropic) -> None:
    m = claude.models.retrieve("house")
    assert (m.type, m.id, m.display_name, m.created_at) == ("model", "house", "House Model", FEB_19)
    # An id with a slash, which the SDK quotes in the path.
    assert claude.models.retrieve("org/llama-3").id == "org/llama-3"
    with pytest.raises(anthropic.NotFoundError) as info:
        claude.models.retrieve("claude-nothing")
    assert info.value.status_code == 404
    assert info.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]


def test_anthropic_sdk_bad_paging_is_its_bad_request_error(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.models.list(limit=1001)
    assert "limit" in info.value.message
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.models.list(after_id="nope")
    assert "after_id" in info.value.message


def test_a_tenants_allow_list_hides_models_from_the_anthropic_sdk(gateway: Server) -> None:
    with anthropic.Anthropic(base_url=gateway.url, api_key=LIMITED, max_retries=0, timeout=20) as c:
        assert [m.id for m in c.models.list(limit=2)] == VISIBLE
        assert c.models.retrieve("house").id == "house"
        for hidden in ("secret", "org/llama-3"):
            with pytest.raises(anthropic.NotFoundError):
                c.models.retrieve(hidden)


def test_anthropic_sdk_with_a_wrong_key_is_its_authentication_error(gateway: Server) -> None:
    with anthropic.Anthropic(
        base_url=gateway.url, api_key="sk-wrong", max_retries=0, timeout=20
    ) as c:
        with pytest.raises(anthropic.AuthenticationError):
            c.models.list()
        with pytest.raises(anthropic.AuthenticationError):
            c.models.retrieve("house")


def test_openai_sdk_lists_and_retrieves_in_its_shape(gpt: openai.OpenAI) -> None:
    models = list(gpt.models.list())
    assert [m.id for m in models] == EVERY
    house = models[0]
    assert (house.object, house.owned_by, house.created) == (
        "model",
        "acme-labs",
        int(FEB_19.timestamp()),
    )
    assert (models[2].owned_by, models[2].created) == ("flatgate", 0)
    for m in models:
        assert gpt.models.retrieve(m.id) == m
    with pytest.raises(openai.NotFoundError) as info:
        gpt.models.retrieve("gpt-nothing")
    assert info.value.code == "model_not_found"


def test_a_tenants_allow_list_hides_models_from_the_openai_sdk(gateway: Server) -> None:
    with openai.OpenAI(
        base_url=f"{gateway.url}/v1", api_key=LIMITED, max_retries=0, timeout=20
    ) as c:
        assert [m.id for m in c.models.list()] == VISIBLE
        with pytest.raises(openai.NotFoundError) as info:
            c.models.retrieve("secret")
        assert (info.value.code, info.value.param) == ("model_not_found", "model")
