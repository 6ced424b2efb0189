"""The whole config file as one typed document: read once, each service handed
its part, the same part each service reads on its own."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from flatgate.edge_translator.settings import parse_edge_settings
from flatgate.proxy.gateway import check, onebox
from flatgate.proxy.gateway.document import (
    SECTIONS,
    GatewayDocument,
    load_document,
    parse_document,
    side_problems,
)
from flatgate.proxy.plumbing import config
from flatgate.proxy.plumbing.config import ConfigError, read_document
from flatgate.proxy.service.settings import parse_config
from flatgate.proxy.stub.settings import parse_stub_section

FULL = """
[proxy]
port = 9101
access_log = false
[stub]
port = 9102
itl_ms = 2
[[backends]]
name = "a"
url = "http://127.0.0.1:9102"
[[routes]]
model = "m"
backends = ["a"]
[edge]
port = 9100
access_log = false
[[models]]
name = "m"
provider = "SelfHosted"
[[keys]]
tenant = "t"
sha256 = "%s"
[state]
key_prefix = "doc"
[[limits]]
tenant = "*"
requests_per_minute = 5
[[tenants]]
name = "t"
""" % ("ab" * 32)


def test_its_fields_are_the_files_sections() -> None:
    assert SECTIONS == (
        "proxy",
        "stub",
        "backends",
        "routes",
        "edge",
        "models",
        "keys",
        "auth",
        "state",
        "limits",
        "tenants",
        "telemetry",
    )
    assert GatewayDocument.__struct_fields__ == SECTIONS


@pytest.mark.parametrize(
    "env", [{}, {"FLATGATE_PROXY_WORKERS": "2", "FLATGATE_STATE_POOL_SIZE": "3"}]
)
def test_each_part_is_what_its_service_reads(env: dict[str, str]) -> None:
    data = tomllib.loads(FULL)
    doc = parse_document(data, env)
    assert doc.proxy_settings() == parse_config(data, env)
    assert doc.edge_settings() == parse_edge_settings(data, environ=env)
    assert doc.stub == parse_stub_section(data, env)
    assert doc.stub.itl_ms == 2.0 and doc.state.key_prefix == "doc"


def test_the_embedded_default() -> None:
    doc = load_document(None, {})
    assert doc.proxy_settings() == parse_config(read_document(None, {}), {})
    assert [m.name for m in doc.models] == ["flatgate-echo", "flatgate-echo-openai"]


def test_a_service_alone_reads_its_own_sections() -> None:
    data: dict[str, Any] = {**tomllib.loads(FULL), "edge": {"port": "x"}}
    # The proxy and the stub check only the shape of the edge's sections...
    assert side_problems(data, {}, "proxy") == ([], [])
    doc = parse_document(data, {}, "stub")
    assert doc.stub.port == 9102 and doc.edge.port == 8080  # not read: the default
    assert side_problems({**data, "edge": 3}, {}, "proxy")[0] == [
        "edge: Expected `object`, got `int`"
    ]
    # ...the edge only its own, and the whole document all of them.
    assert side_problems(data, {}, "edge") == ([], ["edge.port: Expected `int`, got `str`"])
    with pytest.raises(ConfigError, match=r"edge\.port: Expected `int`"):
        parse_document(data, {})
    with pytest.raises(ConfigError, match="colour: unknown section"):
        parse_document({**tomllib.loads(FULL), "colour": {}}, {})


def test_the_file_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.toml"
    path.write_text(FULL)
    reads: list[object] = []
    real = config.read_config_text

    def counted(where: object) -> str:
        reads.append(where)
        return real(where)  # type: ignore[arg-type]

    monkeypatch.setattr(config, "read_config_text", counted)
    doc, problems = check.checked(path, {}, "up")
    assert problems == [] and doc is not None and len(reads) == 1
    reads.clear()
    onebox.build(str(path))
    assert len(reads) == 1
