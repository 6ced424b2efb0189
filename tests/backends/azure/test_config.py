"""The Azure keys of an ``openai`` or ``openai-responses`` backend: declared
once (``backends.azure.AzureKeys``), inherited by both, each problem naming
its key."""

from __future__ import annotations

from typing import Any

import pytest

from flatgate.proxy.backends.azure import AzureKeys, is_azure
from flatgate.proxy.backends.openai.adapter import OpenAIAdapter
from flatgate.proxy.backends.openai.azure import AzureOpenAIAdapter
from flatgate.proxy.backends.openai.config import OpenAIConfig
from flatgate.proxy.backends.registry import adapter_for
from flatgate.proxy.backends.responses.adapter import AzureResponsesAdapter
from flatgate.proxy.backends.responses.config import ResponsesConfig
from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.plumbing.config import ConfigError
from tests.backends.helpers import config_of

ENDPOINT = "https://contoso.openai.azure.com"
V1 = f"{ENDPOINT}/openai/v1"
AZURE_KEYS = {
    "auth",
    "azure_credential",
    "azure_client_id",
    "azure_scope",
    "azure_api_version",
    "azure_deployment",
}


def problems(**entry: Any) -> list[str]:
    entry.setdefault("name", "az")
    try:
        config_of(entry, "backends[0]")
    except ConfigError as exc:
        return "\n".join(exc.args).splitlines()
    return []


def test_the_keys_are_declared_once_and_inherited_by_both_protocols() -> None:
    own = set(AzureKeys.__struct_fields__) - set(BackendConfig.__struct_fields__)
    assert own == AZURE_KEYS
    assert issubclass(OpenAIConfig, AzureKeys)
    assert issubclass(ResponsesConfig, AzureKeys)


@pytest.mark.parametrize("protocol", ["openai", "openai-responses"])
def test_good_azure_backends(protocol: str) -> None:
    good: list[dict[str, Any]] = [
        {"url": V1, "auth": "api-key", "api_key": "k"},
        {"url": V1, "auth": "entra"},
        {
            "url": V1,
            "auth": "entra",
            "azure_credential": "managed-identity",
            "azure_client_id": "c",
        },
        {"url": ENDPOINT, "auth": "api-key", "api_key": "k", "azure_api_version": "2024-10-21"},
        {
            "url": "https://apim.example.com/aoai",
            "auth": "entra",
            "azure_api_version": "2025-04-01-preview",
        },
    ]
    for entry in good:
        assert problems(protocol=protocol, **entry) == [], entry
        b = config_of({"name": "az", "protocol": protocol, **entry})
        assert isinstance(b, AzureKeys)
        assert is_azure(b)


def test_a_plain_openai_backend_is_not_azure() -> None:
    b = config_of({"name": "o", "protocol": "openai", "url": "https://api.openai.com/v1"})
    assert isinstance(b, OpenAIConfig)
    assert b.auth == "bearer"
    assert not is_azure(b)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"url": V1, "auth": "entra", "api_key": "k"}, 'backends[0].auth: "entra" presents'),
        (
            {"url": V1, "auth": "entra", "forward_credentials": True},
            "backends[0].forward_credentials",
        ),
        ({"url": V1, "auth": "entra", "azure_scope": " "}, "backends[0].azure_scope: the token's"),
        ({"url": V1, "auth": "api-key"}, 'backends[0].auth: "api-key" sends api_key'),
        (
            {"url": V1, "api_key": "k", "azure_credential": "cli"},
            "backends[0].azure_credential: only",
        ),
        ({"url": V1, "api_key": "k", "azure_client_id": "c"}, "backends[0].azure_client_id: only"),
        ({"url": V1, "api_key": "k", "azure_scope": "s"}, "backends[0].azure_scope: only"),
        (
            {"url": ENDPOINT, "api_key": "k", "auth": "api-key"},
            "backends[0].url: Azure's v1 API is",
        ),
        (
            {"url": V1, "api_key": "k", "auth": "api-key", "azure_api_version": "2024-10-21"},
            "backends[0].url: with azure_api_version, url is the resource's endpoint",
        ),
        (
            {"url": ENDPOINT, "auth": "entra", "azure_api_version": "2024-10-21&x=1"},
            "backends[0].azure_api_version: not an api-version",
        ),
        (
            {"url": V1, "auth": "entra", "azure_deployment": "d"},
            "backends[0].azure_deployment: the deployment URLs need azure_api_version",
        ),
        ({"url": V1, "auth": "sigv4"}, "backends[0].auth"),
        (
            {"url": V1, "auth": "entra", "azure_credential": "browser"},
            "backends[0].azure_credential",
        ),
    ],
)
def test_each_problem_names_its_key(entry: dict[str, Any], expected: str) -> None:
    found = problems(protocol="openai", **entry)
    assert any(p.startswith(expected) for p in found), found


def test_the_responses_api_names_no_deployment_and_compacts_on_v1_only() -> None:
    found = problems(
        protocol="openai-responses",
        url=ENDPOINT,
        auth="entra",
        azure_api_version="2025-04-01-preview",
        azure_deployment="d",
        compact=True,
    )
    assert any(p.startswith("backends[0].azure_deployment: the Responses API") for p in found)
    assert any(p.startswith("backends[0].compact: Azure's deployment URLs") for p in found)


def test_another_protocols_backend_is_told_the_keys_are_not_its_own() -> None:
    found = problems(protocol="anthropic", url="https://api.anthropic.com/v1", auth="entra")
    assert found == ["backends[0].auth: applies to openai and openai-responses backends only"]


def test_the_registry_gives_an_azure_backend_azures_conventions() -> None:
    azure = config_of({"name": "az", "protocol": "openai", "url": V1, "auth": "entra"})
    plain = config_of({"name": "o", "protocol": "openai", "url": "https://api.openai.com/v1"})
    responses = config_of({"name": "r", "protocol": "openai-responses", "url": V1, "auth": "entra"})
    assert type(adapter_for(azure)) is AzureOpenAIAdapter
    assert type(adapter_for(plain)) is OpenAIAdapter
    assert type(adapter_for(responses)) is AzureResponsesAdapter
    assert adapter_for(azure).protocol == "openai"
    assert adapter_for(responses).protocol == "openai-responses"
    assert adapter_for(plain).credentials is None
    assert adapter_for(azure).credentials is not None
