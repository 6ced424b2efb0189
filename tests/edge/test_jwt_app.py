"""JWT callers through the edge app (fake protocol objects, fake proxy): the
tenant lands in the ``CompletionRequest``, refusals are OpenAI-shaped 401s
that never reach the proxy, and API keys work beside JWTs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flatgate.edge_translator.app import EdgeApp
from flatgate.edge_translator.keys import hash_key
from flatgate.edge_translator.settings import (
    AuthConfig,
    EdgeSection,
    EdgeSettings,
    JwtConfig,
    KeyConfig,
)
from tests.edge import fakes
from tests.edge.helpers import decode_request_fb
from tests.edge.jwt_keys import AUDIENCE, ISSUER, Signer, write_key_set
from tests.edge.test_app import MODELS, WORDS, call, chat, error_of


def app_with_jwt(jwks_file: str) -> tuple[EdgeApp, fakes.Transport]:
    transport = fakes.Transport(lambda sent: fakes.Response(200, [b"".join(WORDS)]))
    settings = EdgeSettings(
        edge=EdgeSection(proxy_url="http://127.0.0.1:9/", access_log=False),
        models=MODELS,
        keys=(KeyConfig("keyed", hash_key("sk-keyed")),),
        auth=AuthConfig(
            JwtConfig(issuer=ISSUER, audience=AUDIENCE, jwks_file=jwks_file, leeway_seconds=0)
        ),
    )
    return EdgeApp(settings, transport_factory=lambda: transport), transport


async def test_a_jwt_names_the_tenant(tmp_path: Path, rs: Signer):
    app, transport = app_with_jwt(write_key_set(tmp_path / "k.json", rs))
    auth = {"authorization": f"Bearer {rs.token(sub='globex')}"}
    for _ in range(2):  # verified, then from the cache
        proto = await call(app, "POST", "/v1/chat/completions", chat(), headers=auth)
        assert proto.status == 200
    assert [decode_request_fb(s.body)["tenant"] for s in transport.sent] == [b"globex"] * 2
    assert (await call(app, "GET", "/v1/models", headers=auth)).status == 200
    keyed = {"authorization": "Bearer sk-keyed"}
    proto = await call(app, "POST", "/v1/chat/completions", chat(), headers=keyed)
    assert proto.status == 200
    assert decode_request_fb(transport.sent[-1].body)["tenant"] == b"keyed"


@pytest.mark.parametrize(
    ("claims", "code"),
    [
        ({"exp": int(time.time()) - 10}, "invalid_token"),
        ({"aud": "other"}, "invalid_token"),
        ({"iss": "https://evil.test/"}, "invalid_token"),
    ],
)
async def test_a_refused_jwt_is_an_openai_401(tmp_path: Path, rs: Signer, claims, code):
    app, transport = app_with_jwt(write_key_set(tmp_path / "k.json", rs))
    auth = {"authorization": f"Bearer {rs.token(**claims)}"}
    proto = await call(app, "POST", "/v1/chat/completions", chat(), headers=auth)
    assert proto.status == 401
    err = error_of(proto)
    assert (err["code"], err["type"], err["param"]) == (code, "invalid_request_error", None)
    assert (await call(app, "GET", "/v1/models", headers=auth)).status == 401
    assert transport.sent == []
