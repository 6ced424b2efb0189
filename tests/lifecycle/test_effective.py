"""The start-up log line (what matters) and ``flatgate check --effective`` (the
whole document), every secret masked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flatgate.proxy.gateway.cli import main
from flatgate.proxy.gateway.document import SECTIONS, load_document
from flatgate.proxy.gateway.effective import MASK, effective_document, startup_line
from tests.servers import running, write_config

SECRETS = ("sk-backend-secret", "hdr-secret", "edge-to-proxy-token", "stub-key-1")
CONFIG = f"""
[proxy]
auth_token_sha256 = "{"ab" * 32}"
max_attempts = 2

[stub]
api_key = "stub-key-1"

[[backends]]
name = "oa"
url = "http://127.0.0.1:9/v1"
protocol = "openai"
api_key = "sk-backend-secret"
headers = {{"Authorization" = "Bearer hdr-secret", "OpenAI-Organization" = "org-1"}}

[[routes]]
model = "*"
backends = ["oa"]

[edge]
proxy_token = "edge-to-proxy-token"

[[models]]
name = "m"
provider = "OpenAI"

[[keys]]
tenant = "team-a"
sha256 = "{"cd" * 32}"
"""


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(CONFIG)
    monkeypatch.setenv("FLATGATE_CONFIG", str(path))
    return path


def test_secrets_are_masked_and_the_rest_shown(config: Path) -> None:
    whole = effective_document(load_document(None))
    proxy = {k: whole[k] for k in ("proxy", "backends", "routes")}
    assert proxy["proxy"]["auth_token_sha256"] == MASK
    assert proxy["proxy"]["max_attempts"] == 2 and proxy["proxy"]["pool_limit"] == 4096
    (backend,) = proxy["backends"]
    assert backend["api_key"] == MASK
    assert backend["headers"] == {"Authorization": MASK, "OpenAI-Organization": "org-1"}
    assert proxy["routes"][0]["backends"] == ["oa"]
    edge = {k: whole[k] for k in ("edge", "keys")}
    assert edge["edge"]["proxy_token"] == MASK and edge["keys"][0]["sha256"] == MASK
    assert edge["keys"][0]["tenant"] == "team-a"
    assert whole["stub"]["api_key"] == MASK
    text = json.dumps([proxy, edge, whole])
    assert not any(s in text for s in SECRETS) and "abab" not in text and "cdcd" not in text


@pytest.mark.integration
def test_the_proxy_logs_what_matters_at_start_up(tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "p.toml",
        CONFIG.replace(
            'url = "http://127.0.0.1:9/v1"', 'url = "http://127.0.0.1:9/v1"\nweight = 3'
        ),
    )
    with running("proxy", ["--config", cfg], tmp_path) as p:
        log = p.log.read_text()
    (i,) = [n for n, x in enumerate(log.splitlines()) if x.startswith("flatgate proxy: listening")]
    line = log.splitlines()[i : i + 2]
    assert "store: memory" in line[0] and "caller token" in line[0]
    assert line[1].strip() == "routes: * -> oa; backends: oa (openai)"
    assert "effective config" not in log and len("\n".join(line)) < 400
    assert not any(s in log for s in SECRETS)


def test_the_start_up_line_says_what_matters(config: Path) -> None:
    doc = load_document(None)
    proxy = startup_line("proxy", doc)
    head, rest = proxy.splitlines()
    assert head.startswith("flatgate proxy: listening on http://127.0.0.1:8081 (1 workers, asgi)")
    assert "store: memory" in head and "on: caller token" in head
    assert rest.strip() == "routes: * -> oa; backends: oa (openai)"
    edge = startup_line("edge", doc)
    assert "listening on http://127.0.0.1:8080" in edge and "keys (1)" in edge
    assert "models: m" in edge and "proxy: http://127.0.0.1:8081" in edge
    gateway = startup_line("gateway", doc)
    assert "routes: * -> oa" in gateway and "models: m" in gateway
    assert startup_line("stub", doc).startswith("flatgate stub: listening on 127.0.0.1:8082")
    lines = [proxy, edge, gateway, startup_line("stub", doc)]
    assert all(len(x) < 400 for x in lines)
    assert not any(s in x for s in SECRETS for x in lines)


def test_check_effective_prints_the_whole_document_masked(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--effective", "--config", str(config)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == list(SECTIONS)
    assert data["proxy"]["max_attempts"] == 2 and data["proxy"]["pool_limit"] == 4096
    assert data["stub"]["api_key"] == MASK and data["edge"]["proxy_token"] == MASK
    assert data["backends"][0]["api_key"] == MASK and data["backends"][0]["protocol"] == "openai"
    assert data["state"]["store"] == "memory" and data["telemetry"]["enabled"] is False
    text = json.dumps(data)
    assert not any(s in text for s in SECRETS) and "abab" not in text and "cdcd" not in text


def test_check_effective_reports_a_bad_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[proxy]\nport = 0\n")
    assert main(["check", "--effective", "--config", str(bad)]) == 2
    assert "proxy.port" in capsys.readouterr().err
