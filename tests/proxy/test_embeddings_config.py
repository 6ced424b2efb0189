"""The config keys of the embeddings path: ``[[backends]] serves`` (which kinds
of request a backend is sent, by protocol when absent) and the services'
``max_response_bytes``, each checked with a message naming its key."""

from __future__ import annotations

from typing import Any

import pytest

from flatgate.edge_translator.settings import parse_edge_settings
from flatgate.proxy.backends import registry
from flatgate.proxy.backends.section import REQUEST_KINDS
from flatgate.proxy.plumbing.config import ConfigError
from flatgate.proxy.plumbing.server_section import DEFAULT_MAX_RESPONSE_BYTES
from flatgate.proxy.service.app import ProxyServer
from flatgate.proxy.service.settings import config_problems, parse_config
from tests.backends.helpers import config_of


def doc(**backend: Any) -> dict[str, Any]:
    return {
        "backends": [
            {"name": "b", "url": "http://127.0.0.1:9/v1", "protocol": "openai", **backend}
        ],
        "routes": [{"model": "*", "backends": ["b"]}],
    }


@pytest.mark.parametrize(
    ("protocol", "kinds"),
    [
        ("fbs", REQUEST_KINDS),
        ("openai", REQUEST_KINDS),
        ("openai-responses", REQUEST_KINDS),
        ("anthropic", ("completions",)),
    ],
)
def test_a_backend_serves_its_protocols_kinds_by_default(
    protocol: str, kinds: tuple[str, ...]
) -> None:
    url = "http://127.0.0.1:9" if protocol == "fbs" else "http://127.0.0.1:9/v1"
    cfg = config_of({"name": "b", "url": url, "protocol": protocol})
    assert cfg.serves is None
    assert registry.kinds(cfg) == kinds
    served = config_of({"name": "b", "url": "http://127.0.0.1:9", "serves": ["embeddings"]})
    assert registry.kinds(served) == ("embeddings",)


@pytest.mark.parametrize(
    ("serves", "message"),
    [
        (
            ["embeddings"],
            "backends[0].serves: a backend of protocol anthropic serves no embeddings",
        ),
        ([], "backends[0].serves: at least one of completions, embeddings"),
        (["completions", "completions"], "backends[0].serves: each kind once"),
        (["images"], "backends[0].serves"),
    ],
)
def test_bad_serves_are_named(serves: list[str], message: str) -> None:
    problems = config_problems(doc(protocol="anthropic", serves=serves), environ={})
    assert any(p.startswith(message) for p in problems), problems


def test_the_service_sends_each_backend_only_its_kinds() -> None:
    cfg: dict[str, Any] = {
        "proxy": {"access_log": False},
        "backends": [
            {"name": "both", "url": "http://127.0.0.1:9"},
            {"name": "chat", "url": "http://127.0.0.1:9", "serves": ["completions"]},
            {"name": "vec", "url": "http://127.0.0.1:9/v1", "protocol": "openai",
             "serves": ["embeddings"]},
            {"name": "claude", "url": "http://127.0.0.1:9/v1", "protocol": "anthropic"},
        ],
        "routes": [{"model": "*", "backends": ["both", "chat", "vec", "claude"]}],
    }  # fmt: skip
    server = ProxyServer(parse_config(cfg, environ={}), worker="t")
    assert server.embedder.serving == {"both", "vec"}
    assert server.dispatcher.refusing == {"vec"}
    # A reload that changes what a backend serves takes effect.
    cfg["backends"][0]["serves"] = ["completions"]
    server.reload(parse_config(cfg, environ={}))
    assert server.embedder.serving == {"vec"}


def test_max_response_bytes_defaults_and_is_checked_in_each_service() -> None:
    assert DEFAULT_MAX_RESPONSE_BYTES == 32 << 20
    settings = parse_config(doc(), environ={})
    assert settings.proxy.max_response_bytes == DEFAULT_MAX_RESPONSE_BYTES
    server = ProxyServer(settings, worker="t")
    assert server.embedder.max_response_bytes == DEFAULT_MAX_RESPONSE_BYTES
    env = {"FLATGATE_PROXY_MAX_RESPONSE_BYTES": "1024"}
    assert parse_config(doc(), environ=env).proxy.max_response_bytes == 1024
    with pytest.raises(ConfigError, match=r"proxy\.max_response_bytes"):
        parse_config({**doc(), "proxy": {"max_response_bytes": 0}}, environ={})
    assert parse_edge_settings({}, environ={}).edge.max_response_bytes == (
        DEFAULT_MAX_RESPONSE_BYTES
    )
    with pytest.raises(ConfigError, match=r"edge\.max_response_bytes"):
        parse_edge_settings({"edge": {"max_response_bytes": 0}}, environ={})
