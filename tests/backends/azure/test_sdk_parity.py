"""The Azure-configured adapters send what the openai SDK's ``AzureOpenAI``
(and, for Azure's v1 API, its ``OpenAI`` client, as Azure documents) sends
for the same endpoint, deployment, api-version and credential: the URL with
its query, the credential's header, and the body's model. The SDK's request
is captured in process by an ``httpx2.MockTransport`` (the SDK's HTTP
library): nothing leaves the process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, cast

import httpx2
import openai
import pytest

from flatgate.proxy.backends import azure as azure_module
from flatgate.proxy.backends.base import Inbound, Outbound
from flatgate.proxy.backends.openai.adapter import OpenAIAdapter, OpenAIConventions
from flatgate.proxy.backends.openai.azure import openai_adapter
from flatgate.proxy.backends.openai.config import OpenAIConfig
from flatgate.proxy.backends.responses.adapter import ResponsesAdapter, responses_adapter
from flatgate.proxy.backends.responses.config import ResponsesConfig
from flatgate.proxy.wire.embeddings import read_embedding_request, write_embedding_request
from tests.backends.helpers import config_of, request, user

ENDPOINT = "https://contoso-eastus.openai.azure.com"
V1 = f"{ENDPOINT}/openai/v1"
VERSION = "2024-10-21"
KEY = "azure-key-0123456789"
TOKEN = "entra-token-abc"
DEPLOYMENT = "gpt-4o-prod"


class _Captured(Exception):
    """The SDK's request, caught before any answer."""


def captured(call: Callable[[openai.OpenAI], object], make: Callable[..., openai.OpenAI]) -> Any:
    """The request the SDK client ``make(http_client=...)`` sends for ``call``."""
    seen: list[httpx2.Request] = []

    def handler(req: httpx2.Request) -> httpx2.Response:
        seen.append(req)
        raise _Captured

    with httpx2.Client(transport=httpx2.MockTransport(handler)) as http:
        client = make(http_client=http, max_retries=0)
        with pytest.raises(_Captured):
            call(client)
        client.close()
    assert len(seen) == 1
    return seen[0]


def azure_sdk(**kw: Any) -> Callable[..., openai.OpenAI]:
    def make(**more: Any) -> openai.OpenAI:
        return openai.AzureOpenAI(azure_endpoint=ENDPOINT, api_version=VERSION, **kw, **more)

    return make


def v1_sdk(api_key: Any) -> Callable[..., openai.OpenAI]:
    def make(**more: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{V1}/", api_key=api_key, **more)

    return make


def chat(model: str, stream: bool = False) -> Callable[[openai.OpenAI], object]:
    return lambda c: c.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hi"}], stream=stream
    )


def sent(adapter: OpenAIConventions, model: str, stream: bool = False) -> Outbound:
    req = request({"model": model, "messages": [user("hi")], "stream": stream}, model_name=model)
    return adapter.prepare(Inbound(b"", lambda: req, "rid-1", ""))


def auth_of(headers: Any) -> dict[str, str]:
    """The credential headers, by lower-case name."""
    return {
        k.lower(): v for k, v in dict(headers).items() if k.lower() in ("api-key", "authorization")
    }


@pytest.fixture(autouse=True)
def entra(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Entra ID's fetch, faked: tests/backends/azure/test_entra.py runs the real one."""
    monkeypatch.setattr(azure_module, "entra_token", lambda *a: lambda: (TOKEN, None))
    yield


def openai_backend(**kw: Any) -> OpenAIAdapter:
    adapter = openai_adapter(
        cast(OpenAIConfig, config_of({"name": "az", "protocol": "openai", **kw}))
    )
    if adapter.credentials is not None:
        adapter.credentials.refresh()
    return adapter


def responses_backend(**kw: Any) -> ResponsesAdapter:
    entry = {"name": "az", "protocol": "openai-responses", **kw}
    adapter = responses_adapter(cast(ResponsesConfig, config_of(entry)))
    if adapter.credentials is not None:
        adapter.credentials.refresh()
    return adapter


KEYED = {"auth": "api-key", "api_key": KEY}
DATED = {"url": ENDPOINT, "azure_api_version": VERSION}


# -- the deployment URLs (api-version) ----------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_chat_to_a_deployment_named_by_the_model(stream: bool) -> None:
    theirs = captured(chat(DEPLOYMENT, stream), azure_sdk(api_key=KEY))
    ours = sent(openai_backend(**DATED, **KEYED), DEPLOYMENT, stream)
    assert ours.url == str(theirs.url)
    assert str(theirs.url) == (
        f"{ENDPOINT}/openai/deployments/{DEPLOYMENT}/chat/completions?api-version={VERSION}"
    )
    assert auth_of(ours.headers) == auth_of(theirs.headers) == {"api-key": KEY}
    assert json.loads(ours.body)["model"] == json.loads(theirs.content)["model"]


def test_chat_to_the_configured_deployment() -> None:
    theirs = captured(chat("gpt-4o"), azure_sdk(api_key=KEY, azure_deployment=DEPLOYMENT))
    ours = sent(openai_backend(**DATED, **KEYED, azure_deployment=DEPLOYMENT), "gpt-4o")
    assert ours.url == str(theirs.url)
    assert f"/deployments/{DEPLOYMENT}/" in ours.url


def test_the_backends_model_names_the_deployment() -> None:
    theirs = captured(chat(DEPLOYMENT), azure_sdk(api_key=KEY))
    ours = sent(openai_backend(**DATED, **KEYED, model=DEPLOYMENT), "gpt-4o")
    assert ours.url == str(theirs.url)
    assert json.loads(ours.body)["model"] == DEPLOYMENT


def test_a_deployment_name_is_quoted_as_the_sdk_quotes_it() -> None:
    name = "dep with space"
    theirs = captured(chat(name), azure_sdk(api_key=KEY))
    ours = sent(openai_backend(**DATED, **KEYED), name)
    assert ours.url == str(theirs.url)


def test_embeddings_to_a_deployment() -> None:
    def call(c: openai.OpenAI) -> object:
        return c.embeddings.create(model="emb-small", input=["a"], encoding_format="base64")

    theirs = captured(call, azure_sdk(api_key=KEY))
    body = write_embedding_request("emb-small", texts=["a"])
    adapter = openai_backend(**DATED, **KEYED)
    ours = adapter.prepare_embeddings(
        Inbound(body, lambda: read_embedding_request(body), "rid-1", "")
    )
    assert ours.url == str(theirs.url)
    assert ours.url == f"{ENDPOINT}/openai/deployments/emb-small/embeddings?api-version={VERSION}"
    assert auth_of(ours.headers) == auth_of(theirs.headers)


def test_responses_at_the_resource_with_the_deployment_in_the_body() -> None:
    def call(c: openai.OpenAI) -> object:
        return c.responses.create(model=DEPLOYMENT, input="hi", stream=True)

    theirs = captured(call, azure_sdk(api_key=KEY))
    ours = sent(responses_backend(**DATED, **KEYED), DEPLOYMENT, True)
    assert ours.url == str(theirs.url) == f"{ENDPOINT}/openai/responses?api-version={VERSION}"
    assert auth_of(ours.headers) == auth_of(theirs.headers)
    assert json.loads(ours.body)["model"] == json.loads(theirs.content)["model"]


@pytest.mark.parametrize("make", [openai_backend, responses_backend])
def test_readiness_lists_the_resources_models(make: Callable[..., OpenAIConventions]) -> None:
    theirs = captured(lambda c: c.models.list(), azure_sdk(api_key=KEY))
    probe = make(**DATED, **KEYED).probe()
    assert probe.url == str(theirs.url) == f"{ENDPOINT}/openai/models?api-version={VERSION}"
    assert auth_of(probe.headers) == auth_of(theirs.headers)


def test_an_entra_token_is_the_bearer_the_sdk_sends() -> None:
    theirs = captured(chat(DEPLOYMENT), azure_sdk(azure_ad_token_provider=lambda: TOKEN))
    ours = sent(openai_backend(**DATED, auth="entra"), DEPLOYMENT)
    assert ours.url == str(theirs.url)
    assert auth_of(ours.headers) == auth_of(theirs.headers) == {"authorization": f"Bearer {TOKEN}"}


# -- Azure's v1 API -------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_v1_chat_is_the_openai_clients_request(stream: bool) -> None:
    theirs = captured(chat(DEPLOYMENT, stream), v1_sdk(TOKEN))
    ours = sent(openai_backend(url=V1, auth="entra"), DEPLOYMENT, stream)
    assert ours.url == str(theirs.url) == f"{V1}/chat/completions"
    assert auth_of(ours.headers) == auth_of(theirs.headers)


def test_v1_with_a_key_sends_azures_header() -> None:
    theirs = captured(chat(DEPLOYMENT), v1_sdk(KEY))
    ours = sent(openai_backend(url=V1, **KEYED), DEPLOYMENT)
    assert ours.url == str(theirs.url)
    assert auth_of(ours.headers) == {"api-key": KEY}


def test_v1_responses_embeddings_and_models() -> None:
    theirs = captured(lambda c: c.responses.create(model=DEPLOYMENT, input="hi"), v1_sdk(KEY))
    assert sent(responses_backend(url=V1, **KEYED), DEPLOYMENT).url == str(theirs.url)

    theirs = captured(lambda c: c.embeddings.create(model="e", input=["a"]), v1_sdk(KEY))
    body = write_embedding_request("e", texts=["a"])
    inbound = Inbound(body, lambda: read_embedding_request(body), "rid-1", "")
    assert openai_backend(url=V1, **KEYED).prepare_embeddings(inbound).url == str(theirs.url)

    theirs = captured(lambda c: c.models.list(), v1_sdk(KEY))
    assert openai_backend(url=V1, **KEYED).probe().url == str(theirs.url)


def test_a_deployment_url_is_made_once_per_model_and_few_are_kept() -> None:
    adapter = openai_backend(**DATED, **KEYED)
    first = sent(adapter, "dep-a").url
    assert sent(adapter, "dep-a").url is first  # the one made for dep-a
    for i in range(1000):  # routed names are the callers': never an unbounded table
        assert sent(adapter, f"dep-{i}").url.endswith(
            f"/deployments/dep-{i}/chat/completions?api-version={VERSION}"
        )
    assert len(adapter._endpoints) <= 256  # type: ignore[attr-defined]


def test_a_health_path_is_probed_with_the_token() -> None:
    probe = openai_backend(url=V1, auth="entra", health_path="/healthz").probe()
    assert probe.url == f"{ENDPOINT}/healthz"
    assert auth_of(probe.headers) == {"authorization": f"Bearer {TOKEN}"}
