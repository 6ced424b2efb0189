from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from flatgate.edge_translator.keys import hash_key
from flatgate.edge_translator.settings import (
    EdgeConfigError,
    EdgeSection,
    load_edge_settings,
    parse_edge_settings,
)
from flatgate.proxy.wire.schema import Provider

FULL = f"""
[proxy]
port = 9001

[edge]
host = "0.0.0.0"
port = 9000
workers = 3
proxy_url = "http://127.0.0.1:9001"
max_body_bytes = 1024
connect_timeout = 1.5
read_timeout = 10
total_timeout = 60
transport = "httpx"
pool_limit = 8

[[models]]
name = "gpt-4o"
provider = "OpenAI"
aliases = ["gpt-4o-latest", "4o"]
owned_by = "openai"

[[models]]
name = "claude"
provider = "Anthropic"

[[keys]]
tenant = "acme"
sha256 = "{hash_key("sk-acme")}"
"""


def parse(text: str, **kwargs: object):
    return parse_edge_settings(tomllib.loads(text), **kwargs)  # type: ignore[arg-type]


def test_full_config():
    s = parse(FULL)
    e = s.edge
    assert (e.host, e.port, e.workers, e.proxy_url) == ("0.0.0.0", 9000, 3, "http://127.0.0.1:9001")
    assert (e.max_body_bytes, e.connect_timeout, e.read_timeout, e.total_timeout) == (
        1024,
        1.5,
        10.0,
        60.0,
    )
    assert (e.transport, e.pool_limit) == ("httpx", 8)
    assert [m.name for m in s.models] == ["gpt-4o", "claude"]
    assert s.models[0].aliases == ("gpt-4o-latest", "4o")
    assert s.models[0].provider_id is Provider.OpenAI
    assert s.models[1].provider_id is Provider.Anthropic
    assert s.models[1].owned_by == "flatgate"
    assert s.keys[0].tenant == "acme"
    index = s.model_index()
    assert index["4o"] is s.models[0]
    assert set(index) == {"gpt-4o", "gpt-4o-latest", "4o", "claude"}


def test_defaults_when_sections_are_absent():
    s = parse("")
    assert s.edge == EdgeSection()
    assert s.edge.max_body_bytes == 32 << 20
    assert s.models == () and s.keys == ()


def test_env_then_overrides_take_precedence():
    env = {"FLATGATE_EDGE_PORT": "7000", "FLATGATE_EDGE_PROXY_URL": "http://10.0.0.1:1"}
    s = parse(FULL, environ=env)
    assert (s.edge.port, s.edge.proxy_url) == (7000, "http://10.0.0.1:1")
    s = parse(FULL, environ=env, overrides={"port": 7100, "host": None})
    assert (s.edge.port, s.edge.host) == (7100, "0.0.0.0")


def test_unknown_override_is_refused():
    with pytest.raises(EdgeConfigError, match=r"edge\.colour"):
        parse(FULL, overrides={"colour": "blue"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[edge]\nprot = 1\n", r"edge: Object contains unknown field `prot`"),
        ("[edge]\nport = 'x'\n", r"edge\.port: Expected `int`"),
        ("[edge]\nport = 70000\n", r"edge\.port: expected 1\.\.65535"),
        ("[edge]\nworkers = 0\n", r"edge\.workers: must be >= 1"),
        ("[edge]\nmax_body_bytes = 0\n", r"edge\.max_body_bytes"),
        ("[edge]\nread_timeout = 0\n", r"edge\.read_timeout: must be > 0"),
        ("[edge]\ntotal_timeout = -1\n", r"edge\.total_timeout"),
        ("[edge]\ntransport = 'carrier-pigeon'\n", r"edge\.transport"),
        ("[edge]\nproxy_url = 'ftp://x'\n", r"edge\.proxy_url: expected http://host"),
        (
            "[[models]]\nname='a'\nprovider='OpenAI'\n[[models]]\nname='b'\nprovider='Google'\n",
            r"models\[1\]\.provider: expected one of OpenAI, Anthropic, SelfHosted, got 'Google'",
        ),
        ("[[models]]\nprovider='OpenAI'\n", r"models\[0\]\.name: required key is missing"),
        ("[[models]]\nname='a'\nprovider='OpenAI'\ncolour=1\n", r"models\[0\]: .*`colour`"),
        (
            "[[models]]\nname='a'\nprovider='OpenAI'\n[[models]]\nname='b'\nprovider='OpenAI'\n"
            "aliases=['a']\n",
            r"models\[1\]\.aliases\[0\]: 'a' is already used by models\[0\]",
        ),
        ("[[models]]\nname=''\nprovider='OpenAI'\n", r"models\[0\]\.name: must not be empty"),
        ("[[keys]]\ntenant='t'\nsha256='abc'\n", r"keys\[0\]\.sha256: expected 64"),
        ("[[keys]]\ntenant=''\nsha256='" + "a" * 64 + "'\n", r"keys\[0\]\.tenant"),
        (
            "[[keys]]\ntenant='t'\nsha256='" + "a" * 64 + "'\n"
            "[[keys]]\ntenant='u'\nsha256='" + "a" * 64 + "'\n",
            r"keys\[1\]\.sha256: the same key is listed twice",
        ),
        ("edge = 3\n", r"edge: expected a table"),
    ],
)
def test_bad_values_name_the_key(text, message):
    with pytest.raises(EdgeConfigError, match=message):
        parse(text)


def test_load_from_file_and_environment(tmp_path: Path):
    path = tmp_path / "flatgate.toml"
    path.write_text(FULL)
    s = load_edge_settings(str(path), {"workers": 5}, environ={"FLATGATE_EDGE_PORT": "6000"})
    assert (s.edge.port, s.edge.workers) == (6000, 5)


def test_load_errors(tmp_path: Path):
    with pytest.raises(EdgeConfigError, match="cannot read config"):
        load_edge_settings(str(tmp_path / "missing.toml"), environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[edge\n")
    with pytest.raises(EdgeConfigError, match="not valid TOML"):
        load_edge_settings(str(bad), environ={})


def test_embedded_default_serves_the_echo_model():
    s = load_edge_settings(None, environ={})
    assert s.edge.port == 8080
    assert s.model_index()["flatgate-echo"].provider_id is Provider.SelfHosted
    assert s.keys == ()
