"""Hostile bearer tokens shaped like JWTs get a 401 ``invalid_token``, never a
500: a header (or a signed payload) nested thousands of levels deep, parts
that are not base64url, not UTF-8 or not JSON, and time claims that are not
numbers (``"exp": "9999999999"``, which PyJWT's ``int()`` would take).

The verifier first (pure but for its key file), then a real ``flatgate
gateway`` with ``[auth.jwt]`` and no ``[[keys]]``, on every endpoint,
``GET /v1/models`` included, whose log must hold no traceback.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from jwt.api_jws import PyJWS

from flatgate.edge_translator.errors import InvalidToken
from flatgate.edge_translator.jwks import KeySetError, parse_key_set
from flatgate.edge_translator.jwt_auth import JwtVerifier
from flatgate.edge_translator.settings import JwtConfig
from tests.edge.jwt_keys import AUDIENCE, ISSUER, Signer, write_key_set
from tests.servers import Server, running
from tests.stacks import QUIET, write_stack

DEPTH = 2000
NOT_A_NUMBER = "claim is not a number"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def nested(depth: int = DEPTH) -> bytes:
    return b"[" * depth + b"]" * depth


def signed_raw(signer: Signer, payload: bytes) -> str:
    """A token over ``payload`` exactly as given (PyJWT's JWS layer signs any bytes)."""
    return PyJWS().encode(
        payload, signer.private, algorithm=signer.alg, headers={"kid": signer.kid}
    )


def token_of(*parts: bytes) -> str:
    """A compact token of raw ``parts``, each base64url-encoded."""
    return ".".join(b64(p) for p in parts)


def hostile_tokens(signer: Signer) -> dict[str, str]:
    """Tokens that must each be a 401, by what is wrong with them."""
    head = json.dumps({"alg": signer.alg, "kid": signer.kid}).encode()
    deep_head = head[:-1] + b', "x": ' + nested() + b"}"
    return {
        "header nested 2,000 deep": token_of(nested(), b"{}", b"sig"),
        "header object with a 2,000-deep value": token_of(deep_head, b"{}", b"sig"),
        "signed payload nested 2,000 deep": signed_raw(signer, nested()),
        "header not UTF-8": token_of(b"\xff\xfe", b"{}", b"sig"),
        "header an overlong slash": token_of(b'{"alg":"\xc0\xaf"}', b"{}", b"sig"),
        "header not JSON": token_of(b"not json", b"{}", b"sig"),
        "header not an object": token_of(b"[1]", b"{}", b"sig"),
        "payload not UTF-8": token_of(head, b"\xed\xa0\x80", b"sig"),
        "signed payload not UTF-8": signed_raw(signer, b'{"sub":"\xff"}'),
        "not base64url": "@@@.###.$$$",
        "empty parts": "..",
    }


def time_tokens(signer: Signer) -> dict[str, tuple[str, str]]:
    """Tokens whose time claim is not a number: (token, the claim)."""
    later = int(time.time()) + 3600
    return {
        "exp a numeric string": (signer.token(exp=str(later)), "exp"),
        "exp a word": (signer.token(exp="tomorrow"), "exp"),
        "exp a list": (signer.token(exp=[later]), "exp"),
        "nbf a string": (signer.token(nbf="0"), "nbf"),
        "iat a string": (signer.token(iat=str(int(time.time()))), "iat"),
        "iat a word": (signer.token(iat="now"), "iat"),
    }


@pytest.fixture
def verifier(tmp_path: Path, rs: Signer) -> JwtVerifier:
    jwks = write_key_set(tmp_path / "jwks.json", rs)
    return JwtVerifier(
        JwtConfig(jwks_file=jwks, issuer=ISSUER, audience=AUDIENCE, leeway_seconds=0)
    )


async def refusal(verifier: JwtVerifier, token: str) -> str:
    with pytest.raises(InvalidToken) as info:
        await verifier.verify(token)
    err = info.value
    assert (err.status, err.code.code) == (401, "invalid_token")
    return err.message


# -- the verifier -------------------------------------------------------------


def test_the_hostile_tokens_fit_the_token_limit(rs: Signer) -> None:
    """Each is refused for what it is, not for its length (8192 bytes)."""
    assert max(len(t) for t in hostile_tokens(rs).values()) < 8192


async def test_every_hostile_token_is_invalid_token(verifier: JwtVerifier, rs: Signer) -> None:
    for what, token in hostile_tokens(rs).items():
        message = await refusal(verifier, token)
        assert message.startswith("Invalid JWT bearer token: "), what


async def test_a_time_claim_that_is_not_a_number_is_refused_by_name(
    verifier: JwtVerifier, rs: Signer
) -> None:
    for what, (token, claim) in time_tokens(rs).items():
        message = await refusal(verifier, token)
        assert f"'{claim}' {NOT_A_NUMBER}" in message, what
    assert not len(verifier)  # none was cached


async def test_numbers_stay_valid_times(verifier: JwtVerifier, rs: Signer) -> None:
    now = time.time()
    for claims in ({"exp": now + 3600.5}, {"nbf": int(now) - 10, "iat": now - 10.25}):
        identity = await verifier.verify(rs.token(claims))
        assert identity.tenant == "acme"


@pytest.mark.parametrize(
    ("doc", "why"),
    [(b'{"keys":' + nested() + b"}", "nested too deeply"), (b'{"keys":"\xff"}', "not valid UTF-8")],
)
def test_a_key_set_that_does_not_decode_is_a_key_set_error(doc: bytes, why: str) -> None:
    """What the issuer serves is held to the same decoding as a caller's body."""
    with pytest.raises(KeySetError, match=why):
        parse_key_set(doc, ["RS256"])


# -- a real gateway -----------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, rs: Signer) -> Iterator[Server]:
    d = tmp_path_factory.mktemp("jwt-hostile")
    jwks = write_key_set(d / "jwks.json", rs)
    with running("stub", [], d) as stub:
        cfg = write_stack(
            d / "g.toml",
            proxy=QUIET,
            backends={"stub": stub.url},
            routes={"echo": "stub"},
            edge=QUIET,
            models={"echo": "SelfHosted"},
            auth={"jwt": {"jwks_file": jwks, "issuer": ISSUER, "audience": AUDIENCE}},
        )
        with running("gateway", ["--config", cfg], d) as server:
            yield server


REQUEST = json.dumps(
    {"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
).encode()
# (method, path, the header carrying the token, whether the answer is Anthropic's)
CALLS = [
    ("GET", "/v1/models", "authorization", False),
    ("POST", "/v1/chat/completions", "authorization", False),
    ("POST", "/v1/messages", "authorization", True),
    ("POST", "/v1/messages", "x-api-key", True),
    ("POST", "/v1/messages/count_tokens", "x-api-key", True),
]


def call(server: Server, method: str, path: str, header: str, token: str) -> httpx.Response:
    value = (f"Bearer {token}" if header == "authorization" else token).encode("latin-1")
    return httpx.request(
        method,
        server.url + path,
        content=REQUEST if method == "POST" else None,
        headers=[(header.encode(), value), (b"content-type", b"application/json")],
        timeout=30,
    )


def unauthorized(resp: httpx.Response, anthropic: bool) -> str:
    """The message of a 401 ``invalid_token`` in the API's own shape."""
    assert resp.status_code == 401, resp.text
    doc: dict[str, Any] = resp.json()
    if anthropic:
        assert doc["type"] == "error" and doc["error"]["type"] == "authentication_error"
        return str(doc["error"]["message"])
    assert set(doc["error"]) == {"message", "type", "param", "code"}
    assert doc["error"]["code"] == "invalid_token"
    return str(doc["error"]["message"])


@pytest.mark.integration
@pytest.mark.parametrize(("method", "path", "header", "anthropic"), CALLS)
def test_hostile_tokens_are_a_401_on_every_endpoint(  # noqa: PLR0917
    gateway: Server, rs: Signer, method: str, path: str, header: str, anthropic: bool
) -> None:
    tokens = {**hostile_tokens(rs), "latin-1 bytes": "\xff\xfe.a\xe9.b"}
    for what, token in tokens.items():
        message = unauthorized(call(gateway, method, path, header, token), anthropic)
        assert message.startswith("Invalid JWT bearer token"), what
    assert "Traceback" not in gateway.log.read_text()


@pytest.mark.integration
@pytest.mark.parametrize(("method", "path", "header", "anthropic"), CALLS)
def test_a_string_exp_is_a_401_naming_the_claim(  # noqa: PLR0917
    gateway: Server, rs: Signer, method: str, path: str, header: str, anthropic: bool
) -> None:
    for what, (token, claim) in time_tokens(rs).items():
        message = unauthorized(call(gateway, method, path, header, token), anthropic)
        assert f"'{claim}' {NOT_A_NUMBER}" in message, what
    good = call(gateway, method, path, header, rs.token())
    assert good.status_code == 200, good.text
    assert "Traceback" not in gateway.log.read_text()
