"""The start-up log line: the effective config, every secret masked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flatgate.proxy.gateway.effective import MASK, effective_config
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
    proxy = effective_config("proxy")
    assert proxy["proxy"]["auth_token_sha256"] == MASK
    assert proxy["proxy"]["max_attempts"] == 2 and proxy["proxy"]["pool_limit"] == 4096
    (backend,) = proxy["backends"]
    assert backend["api_key"] == MASK
    assert backend["headers"] == {"Authorization": MASK, "OpenAI-Organization": "org-1"}
    assert proxy["routes"][0]["backends"] == ["oa"]
    edge = effective_config("edge")
    assert edge["edge"]["proxy_token"] == MASK and edge["keys"][0]["sha256"] == MASK
    assert edge["keys"][0]["tenant"] == "team-a"
    assert effective_config("stub")["stub"]["api_key"] == MASK
    text = json.dumps([proxy, edge, effective_config("stub")])
    assert not any(s in text for s in SECRETS) and "abab" not in text and "cdcd" not in text


@pytest.mark.integration
def test_the_proxy_logs_its_effective_config_at_start_up(tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "p.toml",
        CONFIG.replace(
            'url = "http://127.0.0.1:9/v1"', 'url = "http://127.0.0.1:9/v1"\nweight = 3'
        ),
    )
    with running("proxy", ["--config", cfg], tmp_path) as p:
        log = p.log.read_text()
    (line,) = [x for x in log.splitlines() if "effective config:" in x]
    data = json.loads(line.split("effective config: ", 1)[1])
    assert data["backends"][0]["weight"] == 3 and data["backends"][0]["api_key"] == MASK
    assert not any(s in log for s in SECRETS)
