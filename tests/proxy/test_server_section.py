"""The config fields every server's section shares: said once, checked once,
overlaid from the environment the same way for each section."""

from __future__ import annotations

import msgspec
import pytest

from flatgate.edge_translator.settings import EdgeSection, parse_edge_settings
from flatgate.proxy.plumbing.config import Problems, overlay_env
from flatgate.proxy.plumbing.server_section import (
    ServerSection,
    ServiceSection,
    lifecycle_problems,
    server_problems,
)
from flatgate.proxy.service.settings import ProxySection, parse_config
from flatgate.proxy.stub.settings import StubSection, parse_stub_section

ROUTED = {
    "backends": [{"name": "b", "url": "http://127.0.0.1:9"}],
    "routes": [{"model": "*", "backends": ["b"]}],
}


def fields(kind: type[msgspec.Struct]) -> set[str]:
    return set(kind.__struct_fields__)


def test_each_section_derives_the_shared_fields() -> None:
    assert issubclass(ProxySection, ServiceSection) and issubclass(EdgeSection, ServiceSection)
    assert issubclass(StubSection, ServerSection) and not issubclass(StubSection, ServiceSection)
    shared = fields(ServiceSection)
    assert shared <= fields(ProxySection) and shared <= fields(EdgeSection)
    # The stub has only what it uses: no pool, no admission, no reloads.
    assert fields(StubSection) & shared == fields(ServerSection)
    # Each section listens on its own port by default; the rest is shared.
    assert (ProxySection().port, EdgeSection().port, StubSection().port) == (8081, 8080, 8082)
    for key in fields(ServiceSection) - {"port"}:
        assert getattr(ProxySection(), key) == getattr(EdgeSection(), key), key


def test_fields_are_keywords_and_frozen() -> None:
    with pytest.raises(TypeError):
        ProxySection(*["0.0.0.0"])
    with pytest.raises(AttributeError):
        EdgeSection().port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("section", "kind"), [("proxy", ProxySection), ("edge", EdgeSection), ("stub", StubSection)]
)
def test_the_shared_checks_name_the_section(
    section: str, kind: type[ProxySection | EdgeSection | StubSection]
) -> None:
    problems = Problems()
    server_problems(section, kind(host="", port=0, workers=0), problems)
    assert problems == [
        f"{section}.port: expected 1..65535, got 0",
        f"{section}.host: must not be empty",
        f"{section}.workers: must be >= 1, got 0",
    ]


@pytest.mark.parametrize(("section", "kind"), [("proxy", ProxySection), ("edge", EdgeSection)])
def test_lifecycle_checks(section: str, kind: type[ProxySection | EdgeSection]) -> None:
    problems = Problems()
    bad = kind(drain_grace_seconds=3, drain_seconds=2, reload_seconds=-1, gc_thresholds=(1, -2, 3))
    lifecycle_problems(section, bad, problems)
    assert problems == [
        f"{section}.drain_grace_seconds: must be less than {section}.drain_seconds (2), got 3",
        f"{section}.reload_seconds: must be >= 0, got -1",
        f"{section}.gc_thresholds[1]: must be >= 0, got -2",
    ]


def test_a_digest_is_checked_once_for_every_key() -> None:
    problems = Problems()
    assert problems.sha256("keys[0].sha256", "ab" * 32, "the key")
    assert not problems.sha256("edge.metrics_token_sha256", "AB" * 32, "the token")
    assert problems == [
        "edge.metrics_token_sha256: expected 64 lower-case hex digits (the SHA-256 of the token)"
    ]


def test_one_overlay_for_every_section() -> None:
    env = {
        "FLATGATE_PROXY_WORKERS": "3",
        "FLATGATE_EDGE_WORKERS": "4",
        "FLATGATE_STUB_WORKERS": "5",
        "FLATGATE_EDGE_HOST": "0.0.0.0",  # a bare string
        "FLATGATE_PROXY_COLOUR": "red",  # not a key: not read
    }
    data = {**ROUTED, "proxy": {"workers": 1}}
    assert parse_config(data, env).proxy.workers == 3
    edge = parse_edge_settings(data, environ=env).edge
    assert (edge.workers, edge.host) == (4, "0.0.0.0")
    assert parse_stub_section(data, env).workers == 5
    overlaid = overlay_env(data, env, {"proxy": ProxySection.__struct_fields__})
    assert overlaid["proxy"] == {"workers": 3} and "colour" not in overlaid["proxy"]
