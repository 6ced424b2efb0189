"""JWT callers of a real ``flatgate gateway`` with the official openai SDK:
the key set fetched from a URL, the tenant in the access log, refusals as the
SDK's ``AuthenticationError``, API keys beside JWTs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from tests.edge.jwt_keys import KeySetServer, Signer, ec_signer, rsa_signer, serving
from tests.servers import Server, running
from tests.stacks import QUIET, write_stack

pytestmark = pytest.mark.integration

KEY = "sk-gateway-jwt-keyed"


@dataclass
class Stack:
    gateway: Server
    jwks: KeySetServer
    rs: Signer
    es: Signer

    def client(self, key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.gateway.url}/v1", api_key=key, max_retries=0)

    def logged(self, request_id: str) -> dict[str, Any]:
        """The access-log line of ``request_id`` (waiting for its flush)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for line in self.gateway.log.read_text().splitlines():
                if line.startswith('{"ts"') and f'"{request_id}"' in line:
                    entry: dict[str, Any] = json.loads(line)
                    return entry
            time.sleep(0.05)
        raise AssertionError(f"no log line for {request_id}:\n{self.gateway.log.read_text()}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    d = tmp_path_factory.mktemp("gateway-jwt")
    rs, es = rsa_signer(), ec_signer()
    with serving(rs) as jwks, running("stub", [], d) as fbs:
        cfg = write_stack(
            d / "g.toml",
            proxy=QUIET,
            backends={"fbs": fbs.url},
            routes={"echo": "fbs"},
            edge={"log_format": "json"},
            models={"echo": "SelfHosted"},
            keys={KEY: "keyed"},
            auth={
                "jwt": {
                    "jwks_url": jwks.url,
                    "issuer": "https://issuer.flatgate.test/",
                    "audience": "flatgate",
                    "leeway_seconds": 0,
                    "refresh_seconds": 0,
                }
            },
        )
        with running("gateway", ["--config", cfg], d) as gateway:
            yield Stack(gateway, jwks, rs, es)


def ask(c: openai.OpenAI, request_id: str) -> str | None:
    done = c.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": "hello jwt"}],
        extra_headers={"x-request-id": request_id},
    )
    return done.choices[0].message.content


def test_a_jwt_caller_gets_its_answer_under_its_tenant(stack: Stack) -> None:
    c = stack.client(stack.rs.token(sub="globex"))
    assert ask(c, "jwt-1") == "hello jwt"
    assert ask(c, "jwt-2") == "hello jwt"  # the cached token
    assert stack.logged("jwt-1")["tenant"] == "globex"
    assert stack.logged("jwt-2")["tenant"] == "globex"
    assert [m.id for m in c.models.list()] == ["echo"]


def test_a_key_added_at_the_issuer_is_fetched(stack: Stack) -> None:
    stack.jwks.serve(stack.rs, stack.es)
    assert ask(stack.client(stack.es.token(sub="initech")), "jwt-3") == "hello jwt"
    assert stack.logged("jwt-3")["tenant"] == "initech"


def test_api_keys_work_beside_jwts(stack: Stack) -> None:
    assert ask(stack.client(KEY), "jwt-4") == "hello jwt"
    assert stack.logged("jwt-4")["tenant"] == "keyed"


@pytest.mark.parametrize(
    ("claims", "says"),
    [
        ({"exp": 1_000_000_000}, "expired"),
        ({"aud": "someone-else"}, "audience"),
        ({"iss": "https://evil.test/"}, "issuer"),
    ],
)
def test_refused_jwts_are_authentication_errors(
    stack: Stack, claims: dict[str, Any], says: str
) -> None:
    token = stack.rs.token(**claims)
    with pytest.raises(openai.AuthenticationError) as info:
        ask(stack.client(token), f"jwt-refused-{says}")
    err = info.value
    assert err.status_code == 401 and err.code == "invalid_token"
    assert says in err.message and token.split(".")[1] not in err.message
    entry = stack.logged(f"jwt-refused-{says}")
    assert entry["status"] == 401 and entry["error"] == "invalid_token"
    assert entry["tenant"] is None
    assert token not in stack.gateway.log.read_text()  # credentials never logged


def test_a_wrong_api_key_is_still_invalid_api_key(stack: Stack) -> None:
    with pytest.raises(openai.AuthenticationError) as info:
        ask(stack.client("sk-not-a-key"), "jwt-5")
    assert info.value.code == "invalid_api_key"
