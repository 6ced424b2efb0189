"""Config: the embedded default, environment overrides, errors that name the key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from flatgate.proxy.plumbing.config import ConfigError
from flatgate.proxy.service.settings import load_config, parse_config
from flatgate.proxy.stub.settings import load_stub_section

GOOD = """
[proxy]
max_body_bytes = 1000
[[backends]]
name = "a"
url = "http://127.0.0.1:9"
[[backends]]
name = "b"
url = "http://127.0.0.1:10"
weight = 3
[[routes]]
model = "llama-*"
provider = "SelfHosted"
backends = ["a"]
fallbacks = ["b"]
[edge]
port = 1
[[models]]
name = "x"
"""


def test_embedded_default_serves_flatgate_echo() -> None:
    config = load_config(None, environ={})
    assert [r.model for r in config.routes] == ["flatgate-echo", "flatgate-echo-openai"]
    assert config.backend("stub").url == "http://127.0.0.1:8082"
    assert config.backend("stub-openai").protocol == "openai"
    assert load_stub_section(None, environ={}).up == ("fbs", "openai")  # make run: an adapter route
    assert config.proxy.transport == "fast"


def test_file_and_environment(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(GOOD)
    env = {"FLATGATE_CONFIG": str(path), "FLATGATE_PROXY_PORT": "9999", "FLATGATE_STUB_ITL_MS": "5"}
    config = load_config(None, environ=env)
    assert config.proxy.port == 9999
    assert config.proxy.max_body_bytes == 1000
    assert load_stub_section(None, environ=env).itl_ms == 5.0
    assert config.routes[0].fallbacks == ["b"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("weight = 3", "weight = 0"), "backends[1].weight: must be >= 1"),
        (('fallbacks = ["b"]', 'fallbacks = ["c"]'), "routes[0].fallbacks: unknown backend 'c'"),
        (('provider = "SelfHosted"', 'provider = "Nope"'), "routes[0].provider: expected one of"),
        (('url = "http://127.0.0.1:9"', 'url = "ftp://x"'), "backends[0].url: expected http(s)"),
        (('name = "b"', 'name = "a"'), "backends[1].name: duplicate backend name 'a'"),
        (("max_body_bytes = 1000", "max_body_bytes = 'big'"), "proxy.max_body_bytes"),
        (("max_body_bytes = 1000", "max_bodee_bytes = 1"), "unknown field `max_bodee_bytes`"),
        (("weight = 3", "default_max_tokens = 5"), "backends[1].default_max_tokens: applies to"),
        (("weight = 3", 'model = "x"'), "backends[1].model: an fbs backend is sent"),
        (
            ("weight = 3", 'protocol = "openai"\napi_key = "k"\nforward_credentials = true'),
            "backends[1].forward_credentials: the backend has its own api_key",
        ),
        (("weight = 3", 'protocol = "openai"\nca_file = "/nope.pem"'), "backends[1].ca_file"),
        (("weight = 3", 'protocol = "openai"\nheaders = {Host = "x"}'), "backends[1].headers.Host"),
        (
            ("weight = 3", 'protocol = "openai"\napi_key_env = "FLATGATE_TEST_UNSET_KEY"'),
            "backends[1].api_key_env: environment variable FLATGATE_TEST_UNSET_KEY is not set",
        ),
        (
            ('url = "http://127.0.0.1:10"', 'url = "http://127.0.0.1:10/v1"'),
            "backends[1].url: an fbs",
        ),
    ],
)
def test_bad_configs_name_the_key(change: tuple[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(tomllib.loads(GOOD.replace(*change)))
    assert message in str(info.value)


def test_no_routes_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least one"):
        parse_config({})
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.toml", environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[proxy\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, environ={})


def test_a_missing_required_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"routes\[0\]\.backends: required key is missing"):
        parse_config({"routes": [{"model": "*"}]})
