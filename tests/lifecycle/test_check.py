"""Configuration problems are found before anything starts, every one of them,
each naming its key: the checks, ``flatgate check``, and the services' start-up."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from flatgate.proxy.gateway.check import file_problems
from flatgate.proxy.gateway.cli import main
from flatgate.proxy.gateway.document import side_problems
from flatgate.proxy.service.settings import unrouted_models
from tests.stacks import toml

GOOD = """
[proxy]
port = 9101
[stub]
port = 9102
[[backends]]
name = "a"
url = "http://127.0.0.1:9102"
[[routes]]
model = "m"
provider = "SelfHosted"
backends = ["a"]
[edge]
port = 9100
proxy_url = "http://127.0.0.1:9101"
[[models]]
name = "m"
provider = "SelfHosted"
"""


def problems(config: str | dict[str, Any], environ: dict[str, str] | None = None) -> list[str]:
    data = tomllib.loads(config) if isinstance(config, str) else config
    proxy, edge = side_problems(data, environ or {})
    return proxy + edge


def with_keys(section: str, **keys: Any) -> dict[str, Any]:
    """GOOD with ``keys`` set in ``[section]``."""
    data = tomllib.loads(GOOD)
    data[section].update(keys)
    return data


def test_the_good_config_has_no_problem() -> None:
    assert problems(GOOD) == []
    assert unrouted_models(tomllib.loads(GOOD), [("m", "SelfHosted")]) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # ports: 1..65535 (0, "any free port", is refused)
        (with_keys("proxy", port=0), "proxy.port: expected 1..65535, got 0"),
        (with_keys("stub", port=70000), "stub.port: expected 1..65535, got 70000"),
        (with_keys("edge", port=0), "edge.port: expected 1..65535, got 0"),
        (
            with_keys("stub", port=65535, up=["fbs", "openai"]),
            "stub.port: 65535 leaves no room for 2 stubs (stub.up)",
        ),
        # pools, bodies, workers
        (with_keys("proxy", pool_limit=0), "proxy.pool_limit: must be >= 1, got 0"),
        (with_keys("edge", pool_limit=0), "edge.pool_limit: must be >= 1, got 0"),
        (with_keys("proxy", max_body_bytes=0), "proxy.max_body_bytes: must be >= 1"),
        (with_keys("edge", max_body_bytes=0), "edge.max_body_bytes: must be >= 1"),
        (with_keys("proxy", workers=0), "proxy.workers: must be >= 1, got 0"),
        (with_keys("stub", workers=0), "stub.workers: must be >= 1, got 0"),
        (with_keys("edge", workers=0), "edge.workers: must be >= 1, got 0"),
        # timeouts that make no sense at zero, and delays that cannot be negative
        (with_keys("edge", read_timeout=0), "edge.read_timeout: must be > 0"),
        (with_keys("proxy", pool_timeout=0), "proxy.pool_timeout: must be > 0"),
        (with_keys("stub", itl_ms=-1), "stub.itl_ms: must be >= 0"),
        (
            GOOD.replace('url = "http://127.0.0.1:9102"', 'url = "http://x"\nconnect_timeout = 0'),
            "backends[0].connect_timeout: must be > 0",
        ),
        # drain times, in each section
        (with_keys("proxy", drain_seconds=-1), "proxy.drain_seconds: must be >= 0"),
        (
            with_keys("stub", drain_grace_seconds=40),
            "stub.drain_grace_seconds: must be less than stub.drain_seconds (30.0), got 40",
        ),
        (
            with_keys("edge", drain_grace_seconds=2, drain_seconds=2),
            "edge.drain_grace_seconds: must be less than edge.drain_seconds (2.0)",
        ),
        (with_keys("edge", drain_grace_seconds=-1), "edge.drain_grace_seconds: must be >= 0"),
        # the same route twice (granian's workers would each fail on it)
        (
            GOOD + '[[routes]]\nmodel = "m"\nprovider = "SelfHosted"\nbackends = ["a"]\n',
            "routes[1].model: duplicate route: routes[0] already routes 'm' for provider "
            "SelfHosted",
        ),
        (
            GOOD.replace(
                '[[routes]]\nmodel = "m"\nprovider = "SelfHosted"\n', '[[routes]]\nmodel = "*"\n'
            )
            + '[[routes]]\nmodel = "*"\nbackends = ["a"]\n',
            "routes[1].model: duplicate route: routes[0] already routes '*' for any provider",
        ),
    ],
)
def test_each_problem_names_its_key(text: str, expected: str) -> None:
    found = problems(text)
    assert any(expected in p for p in found), found


def test_a_route_per_provider_is_no_duplicate() -> None:
    text = GOOD + '[[routes]]\nmodel = "m"\nbackends = ["a"]\n'
    text += '[[routes]]\nmodel = "m"\nprovider = "OpenAI"\nbackends = ["a"]\n'
    assert problems(text) == []


def test_every_problem_is_listed_not_only_the_first() -> None:
    data = with_keys("proxy", colour=1, workers="many", pool_limit=0)
    data["stub"]["itl_ms"] = "slow"
    data["routes"][0]["backends"] = ["a", "nope"]
    data["backends"].append({"name": "b", "url": "ftp://b", "weight": 0})
    data["edge"].update(port=0, read_timeout=-1)
    data["keys"] = [{"tenant": "", "sha256": "x"}]
    assert problems(data) == [
        "proxy: Object contains unknown field `colour`",
        "proxy.workers: Expected `int`, got `str`",
        "proxy.pool_limit: must be >= 1, got 0",
        "stub.itl_ms: Expected `float`, got `str`",
        "backends[1].url: expected http(s)://host[:port][/path], got 'ftp://b'",
        "backends[1].weight: must be >= 1, got 0",
        "routes[0].backends: unknown backend 'nope'",
        "edge.port: expected 1..65535, got 0",
        "edge.read_timeout: must be > 0, got -1.0",
        "keys[0].tenant: must not be empty",
        "keys[0].sha256: expected 64 lower-case hex digits (the SHA-256 of the key)",
    ]


def test_a_bad_entry_does_not_hide_the_next_or_make_up_others() -> None:
    text = GOOD + '[[backends]]\nname = "b"\nurl = 3\n[[backends]]\nurl = "http://c"\n'
    text += '[[routes]]\nmodel = "n"\nbackends = ["b"]\n'  # b did not convert: still known
    assert problems(text) == [
        "backends[1].url: Expected `str`, got `int`",
        "backends[2].name: required key is missing",
    ]


ROUTES = """
[[backends]]
name = "a"
url = "http://127.0.0.1:1"
[[routes]]
model = "exact"
provider = "OpenAI"
backends = ["a"]
[[routes]]
model = "any-provider"
backends = ["a"]
[[routes]]
model = "llama-*"
provider = "SelfHosted"
backends = ["a"]
"""


@pytest.mark.parametrize(
    ("extra", "model", "served"),
    [
        ("", ("exact", "OpenAI"), True),
        ("", ("exact", "Anthropic"), False),  # pinned to another provider
        ("", ("any-provider", "Anthropic"), True),
        ("", ("llama-3", "SelfHosted"), True),
        ("", ("llama-3", "OpenAI"), False),  # the pattern is pinned
        ("", ("gpt-4o", "OpenAI"), False),
        (
            '[[routes]]\nmodel = "*"\nprovider = "OpenAI"\nbackends = ["a"]\n',
            ("gpt", "OpenAI"),
            True,
        ),
        (
            '[[routes]]\nmodel = "*"\nprovider = "OpenAI"\nbackends = ["a"]\n',
            ("gpt", "Anthropic"),
            False,
        ),
        ('[[routes]]\nmodel = "*"\nbackends = ["a"]\n', ("anything", "Anthropic"), True),
    ],
)
def test_models_against_routes_by_the_tables_precedence(
    extra: str, model: tuple[str, str], served: bool
) -> None:
    found = unrouted_models(tomllib.loads(ROUTES + extra), [("exact", "OpenAI"), model])
    if served:
        assert found == []
    else:
        name, provider = model
        assert found[-1] == (
            f"models[1].name: no [[routes]] entry serves {name!r} (provider {provider}): "
            'add a route for it (its name, a pattern, or "*")'
        )


def test_a_file_without_routes_serves_an_edge_whose_proxy_reads_another() -> None:
    assert unrouted_models({"edge": {}}, [("m", "OpenAI")]) == []


def write(tmp_path: Path, config: str | dict[str, Any], name: str = "flatgate.toml") -> Path:
    path = tmp_path / name
    path.write_text(config if isinstance(config, str) else toml(config))
    return path


def unrouted_edge() -> dict[str, Any]:
    """GOOD with an edge model no route serves."""
    data = tomllib.loads(GOOD)
    data["models"][0]["name"] = "x"
    return data


UNROUTED = (
    "models[0].name: no [[routes]] entry serves 'x' (provider SelfHosted): "
    'add a route for it (its name, a pattern, or "*")'
)


def test_file_problems_by_scope(tmp_path: Path) -> None:
    data = unrouted_edge()
    data["proxy"]["pool_limit"] = 0
    path = write(tmp_path, data)
    pool = "proxy.pool_limit: must be >= 1, got 0"
    assert file_problems(path, {}, "proxy") == [pool]
    assert file_problems(path, {}, "edge") == [UNROUTED]
    assert file_problems(path, {}, "all") == [pool, UNROUTED]
    assert file_problems(tmp_path / "missing.toml", {})[0].startswith("cannot read config")
    assert file_problems(path, {"FLATGATE_PROXY_POOL_LIMIT": "3"}, "proxy") == []
    # An edge whose file holds no routes (its proxy reads another) is not checked against any.
    del data["routes"], data["backends"]
    assert file_problems(write(tmp_path, data), {}, "edge") == []


def test_up_finds_what_clashes_on_one_host(tmp_path: Path) -> None:
    assert file_problems(write(tmp_path, GOOD), {}, "up") == []
    assert file_problems(write(tmp_path, GOOD), {}, "split") == []
    data = with_keys("stub", port=9100, up=["fbs", "openai"])
    data["edge"]["proxy_url"] = "http://127.0.0.1:9"
    path = write(tmp_path, data)
    # flatgate up --split: the edge and the proxy apart, HTTP between them.
    assert file_problems(path, {}, "split") == [
        "proxy.port: port 9101 is taken by stub.up[1] (on stub.port + 1)",
        "edge.port: port 9100 is taken by stub.port",
        "edge.proxy_url: flatgate up starts the proxy on port 9101, but the edge would call "
        "http://127.0.0.1:9",
    ]
    # flatgate up: the one-process gateway has no proxy port and no proxy_url to call.
    assert file_problems(path, {}, "up") == ["edge.port: port 9100 is taken by stub.port"]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("FLATGATE_"):
            monkeypatch.delenv(key)


@pytest.mark.usefixtures("clean_env")
def test_flatgate_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, GOOD)
    assert main(["check", "--config", str(good)]) == 0
    assert capsys.readouterr().out == f"flatgate check: {good}: ok\n"
    assert main(["check"]) == 0  # the embedded default
    capsys.readouterr()
    data = with_keys("proxy", pool_limit=0, port=0)
    data["routes"].append({"model": "m2"})
    assert main(["check", "--config", str(write(tmp_path, data, "bad.toml"))]) == 2
    assert capsys.readouterr().err == (
        "flatgate check: bad config, 3 problems:\n"
        "  proxy.port: expected 1..65535, got 0\n"
        "  proxy.pool_limit: must be >= 1, got 0\n"
        "  routes[1].backends: required key is missing\n"
    )
    assert main(["check", "--config", str(write(tmp_path, unrouted_edge(), "u.toml"))]) == 2
    assert capsys.readouterr().err == f"flatgate check: bad config: {UNROUTED}\n"
    assert main(["check", "--config", str(tmp_path / "nope.toml")]) == 2
    assert "cannot read config" in capsys.readouterr().err


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLATGATE_")}
    return subprocess.run(
        [sys.executable, "-m", "flatgate.proxy.gateway.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )


def test_services_refuse_a_bad_config_before_granian_starts(tmp_path: Path) -> None:
    twice = tomllib.loads(GOOD)
    twice["routes"].append(dict(twice["routes"][0]))
    cases = [
        (
            ["proxy", "--config", str(write(tmp_path, twice, "a.toml"))],
            "routes[1].model: duplicate",
        ),
        (["proxy", "--config", str(write(tmp_path, GOOD, "b.toml")), "--port", "0"], "proxy.port"),
        (["stub", "--workers", "0"], "stub.workers: must be >= 1"),
        (["edge", "--config", str(write(tmp_path, unrouted_edge(), "c.toml"))], UNROUTED),
        (
            ["up", "--config", str(write(tmp_path, with_keys("edge", pool_limit=0), "d.toml"))],
            "edge.pool_limit",
        ),
    ]
    for args, expected in cases:
        started = time.monotonic()
        done = run_cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert expected in done.stderr, (args, done.stderr)
        assert "Starting granian" not in done.stderr
        assert time.monotonic() - started < 10
