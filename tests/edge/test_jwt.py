"""JWT bearer tokens (``jwt_auth``, ``identity``): each way a token is refused,
the cache of verified tokens, and API keys beside JWTs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import jwt
import pytest

from flatgate.edge_translator.errors import AuthenticationFailed, InvalidToken
from flatgate.edge_translator.identity import Identities
from flatgate.edge_translator.jwt_auth import JwtVerifier
from flatgate.edge_translator.keys import OPEN, Credential, Identity, hash_key
from flatgate.edge_translator.settings import JwtConfig, KeyConfig
from flatgate.proxy.errors.root import FlatgateError
from tests.edge.jwt_keys import (
    AUDIENCE,
    ISSUER,
    Signer,
    ec_signer,
    ed_signer,
    forged,
    rsa_signer,
    write_key_set,
)


@pytest.fixture
def jwks(tmp_path: Path, rs: Signer, es: Signer, ed: Signer) -> str:
    return write_key_set(tmp_path / "jwks.json", rs, es, ed)


def config(jwks_file: str, **kw: Any) -> JwtConfig:
    fields: dict[str, Any] = {"issuer": ISSUER, "audience": AUDIENCE, "leeway_seconds": 0}
    return JwtConfig(**{**fields, "jwks_file": jwks_file, **kw})


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tokens PyJWT was asked to verify."""
    seen: list[str] = []
    real = jwt.decode

    def counting(token: str, *args: Any, **kw: Any) -> Any:
        seen.append(token)
        return real(token, *args, **kw)

    monkeypatch.setattr(jwt, "decode", counting)  # what jwt_auth calls
    return seen


async def refused(verifier: JwtVerifier, token: str) -> str:
    with pytest.raises(InvalidToken) as info:
        await verifier.verify(token)
    err = info.value
    assert (err.status, err.code.code, err.type) == (401, "invalid_token", "invalid_request_error")
    # Nothing of the token is echoed (its payload segment, say).
    assert not any(len(part) > 8 and part in err.message for part in token.split("."))
    return err.message


# -- accepted ----------------------------------------------------------------


@pytest.mark.parametrize("which", ["rs", "es", "ed"])
async def test_each_algorithm_verifies(jwks: str, which: str, request: pytest.FixtureRequest):
    signer: Signer = request.getfixturevalue(which)
    verifier = JwtVerifier(config(jwks))
    identity = await verifier.verify(signer.token(sub=f"tenant-{which}"))
    assert identity == Identity(f"tenant-{which}", Credential.JWT)


async def test_tenant_claim_and_models_claim(jwks: str, rs: Signer):
    verifier = JwtVerifier(
        config(jwks, tenant_claim="https://flatgate.test/tenant", models_claim="models")
    )
    token = rs.token({"https://flatgate.test/tenant": "globex", "models": ["gpt-4o*", "echo"]})
    assert await verifier.verify(token) == Identity("globex", Credential.JWT, ("gpt-4o*", "echo"))
    spaced = rs.token({"https://flatgate.test/tenant": "globex", "models": "a b"})
    assert (await verifier.verify(spaced)).models == ("a", "b")
    none = rs.token({"https://flatgate.test/tenant": "globex"})
    assert (await verifier.verify(none)).models is None  # no claim: config decides
    empty = rs.token({"https://flatgate.test/tenant": "globex", "models": []})
    assert (await verifier.verify(empty)).models == ()


async def test_audience_list_and_leeway(jwks: str, rs: Signer):
    verifier = JwtVerifier(config(jwks, audience=("other", AUDIENCE), leeway_seconds=60))
    assert (await verifier.verify(rs.token(aud=[AUDIENCE, "x"]))).tenant == "acme"
    # Expired 30 s ago, within the leeway.
    assert (await verifier.verify(rs.token(exp=int(time.time()) - 30))).tenant == "acme"


# -- refused: one test per reason --------------------------------------------


async def test_expired(jwks: str, rs: Signer):
    message = await refused(JwtVerifier(config(jwks)), rs.token(exp=int(time.time()) - 5))
    assert "expired" in message


async def test_not_yet_valid(jwks: str, rs: Signer):
    verifier = JwtVerifier(config(jwks))
    assert "not valid yet" in await refused(verifier, rs.token(nbf=int(time.time()) + 120))
    assert "not valid yet" in await refused(verifier, rs.token(iat=int(time.time()) + 120))


async def test_wrong_issuer(jwks: str, rs: Signer):
    message = await refused(JwtVerifier(config(jwks)), rs.token(iss="https://evil.test/"))
    assert "issuer" in message


async def test_wrong_audience(jwks: str, rs: Signer):
    assert "audience" in await refused(JwtVerifier(config(jwks)), rs.token(aud="someone-else"))


async def test_bad_signature(jwks: str, rs: Signer, es: Signer):
    verifier = JwtVerifier(config(jwks))
    impostor = rsa_signer(kid=rs.kid)  # another key, claiming the configured one's kid
    assert "signature" in await refused(verifier, impostor.token())
    head, _, sig = rs.token().split(".")
    other = rs.token(sub="mallory").split(".")[1]
    assert "signature" in await refused(verifier, f"{head}.{other}.{sig}")  # a changed payload
    assert "signature" in await refused(
        verifier, Signer(es.kid, "ES256", ec_signer().private).token()
    )


async def test_unknown_kid_even_after_refresh(jwks: str, rs: Signer):
    verifier = JwtVerifier(config(jwks, refresh_seconds=0))
    assert "key id (kid)" in await refused(verifier, rsa_signer(kid="rotated-away").token())
    assert verifier.source.fetches == 1  # the file was read again, once


async def test_a_key_added_to_the_file_is_found_on_its_first_token(tmp_path: Path, rs: Signer):
    path = tmp_path / "jwks.json"
    verifier = JwtVerifier(config(write_key_set(path, rs), refresh_seconds=0))
    new = ec_signer(kid="new")
    write_key_set(path, rs, new)
    assert (await verifier.verify(new.token())).tenant == "acme"
    # Within refresh_seconds of the start, the file is not read again.
    later = JwtVerifier(config(str(path), refresh_seconds=30))
    write_key_set(path, rs)
    assert (await later.verify(new.token())).tenant == "acme"  # held since the start
    newer = ed_signer(kid="newer")
    write_key_set(path, rs, new, newer)
    assert "key id (kid)" in await refused(later, newer.token())
    assert later.source.fetches == 0


async def test_no_kid_with_several_keys(jwks: str, rs: Signer, tmp_path: Path):
    assert "no key id" in await refused(JwtVerifier(config(jwks)), rs.token(kid=None))
    # With one key in the set, a token without kid gets that key.
    single = write_key_set(tmp_path / "one.json", rs)
    assert (await JwtVerifier(config(single)).verify(rs.token(kid=None))).tenant == "acme"


async def test_alg_none(jwks: str, rs: Signer):
    token = forged({"alg": "none", "kid": rs.kid, "typ": "JWT"}, {}, None)
    assert "'none' is not accepted" in await refused(JwtVerifier(config(jwks)), token)


async def test_hs256_keyed_with_the_public_key(jwks: str, rs: Signer):
    # The classic confusion: the published key used as an HMAC secret.
    token = forged({"alg": "HS256", "kid": rs.kid, "typ": "JWT"}, {}, rs.public_pem)
    assert "'HS256' is not accepted" in await refused(JwtVerifier(config(jwks)), token)


async def test_an_allowed_algorithm_that_is_not_the_keys(jwks: str, rs: Signer, tmp_path: Path):
    # PS256 is allowed, and rs's key is RSA: PS256 fits it, a signature by the
    # same key verifies; ES256 never fits an RSA key.
    verifier = JwtVerifier(config(jwks, algorithms=("RS256", "PS256", "ES256")))
    pss = Signer(rs.kid, "PS256", rs.private)
    assert (await verifier.verify(pss.token())).tenant == "acme"
    # An RS256 token under a key the set binds to ES256 only.
    es_only = write_key_set(tmp_path / "es.json", ec_signer(kid="k"))
    message = await refused(JwtVerifier(config(es_only)), rsa_signer(kid="k").token())
    assert "algorithm does not match its key" in message


async def test_algorithm_not_configured(jwks: str, es: Signer):
    message = await refused(JwtVerifier(config(jwks, algorithms=("RS256",))), es.token())
    assert "ES256" not in message.split("(")[0] and "(accepted: RS256)" in message


@pytest.mark.parametrize(
    "sub",
    [None, "", 42, ["acme"], " acme", "ac\nme", "x" * 257],
    ids=["missing", "empty", "number", "list", "padded", "control", "long"],
)
async def test_no_usable_tenant_claim(jwks: str, rs: Signer, sub: Any):
    assert "'sub' claim" in await refused(JwtVerifier(config(jwks)), rs.token(sub=sub))


@pytest.mark.parametrize("models", [42, [1], ["ok", ""], ["x"] * 257])
async def test_malformed_models_claim(jwks: str, rs: Signer, models: Any):
    verifier = JwtVerifier(config(jwks, models_claim="models"))
    assert "'models' claim" in await refused(verifier, rs.token(models=models))


@pytest.mark.parametrize("claim", ["exp", "iss", "aud"])
async def test_required_claims(jwks: str, rs: Signer, claim: str):
    assert f"no '{claim}' claim" in await refused(
        JwtVerifier(config(jwks)), rs.token({claim: None})
    )


@pytest.mark.parametrize(
    "token",
    ["a.b.c", "....", "eyJhbGciOiJSUzI1NiJ9.e30", "x" * 9000],
    ids=["garbage", "dots", "two-segments", "too-long"],
)
async def test_malformed(jwks: str, token: str):
    await refused(JwtVerifier(config(jwks)), token)


async def test_header_values_of_the_wrong_type(jwks: str):
    verifier = JwtVerifier(config(jwks))
    token = forged({"alg": ["RS256"], "kid": "rsa-1"}, {}, b"k")
    assert "algorithm" in await refused(verifier, token)
    token = forged({"alg": "RS256", "kid": 7}, {}, b"k")
    assert "kid" in await refused(verifier, token)
    token = forged({"alg": "RS256", "kid": "rsa-1"}, {}, b"k")
    assert "signature" in await refused(verifier, token)  # an HMAC where RS256 is due


# -- the cache ---------------------------------------------------------------


async def test_a_cached_token_is_not_verified_again(jwks: str, rs: Signer, decodes: list[str]):
    verifier = JwtVerifier(config(jwks))
    token = rs.token()
    first = await verifier.verify(token)
    assert verifier.cached(token) is first
    assert await verifier.verify(token) is first
    assert decodes == [token]
    assert verifier.cached(rs.token(sub="other")) is None


async def test_a_cached_token_expires_with_its_exp(jwks: str, rs: Signer, decodes: list[str]):
    clock = Clock()
    verifier = JwtVerifier(config(jwks, cache_seconds=86400), clock=clock)
    exp = int(clock.now) + 60
    token = rs.token(exp=exp)
    await verifier.verify(token)
    clock.now = exp - 0.5
    assert verifier.cached(token) is not None
    clock.now = exp + 0.5
    assert verifier.cached(token) is None and len(verifier) == 0
    await verifier.verify(token)  # PyJWT's clock still says valid: verified again
    assert decodes == [token, token]


async def test_cache_seconds_caps_the_trust(jwks: str, rs: Signer):
    clock = Clock()
    verifier = JwtVerifier(config(jwks, cache_seconds=10), clock=clock)
    token = rs.token()
    await verifier.verify(token)
    clock.now += 9
    assert verifier.cached(token) is not None
    clock.now += 2
    assert verifier.cached(token) is None


async def test_an_expired_token_is_refused_after_being_cached(jwks: str, rs: Signer):
    verifier = JwtVerifier(config(jwks))
    exp = int(time.time()) + 1
    token = rs.token(exp=exp)
    assert (await verifier.verify(token)).tenant == "acme"
    await asyncio.sleep(exp - time.time() + 0.05)
    assert verifier.cached(token) is None
    assert "expired" in await refused(verifier, token)


async def test_the_cache_is_bounded_oldest_out(jwks: str, rs: Signer, decodes: list[str]):
    verifier = JwtVerifier(config(jwks, cache_size=2))
    a, b, c = (rs.token(sub=s) for s in "abc")
    for token in (a, b, c):
        await verifier.verify(token)
    assert len(verifier) == 2
    assert verifier.cached(a) is None and verifier.cached(c) is not None
    off = JwtVerifier(config(jwks, cache_size=0))
    await off.verify(a)
    assert len(off) == 0 and off.cached(a) is None


async def test_refused_tokens_are_not_cached(jwks: str, rs: Signer):
    verifier = JwtVerifier(config(jwks))
    await refused(verifier, rs.token(aud="nope"))
    assert len(verifier) == 0


# -- API keys beside JWTs ----------------------------------------------------


def identities(jwks: str, **kw: Any) -> Identities:
    keys = [KeyConfig("keyed", hash_key("sk-keyed"))]
    return Identities(keys, JwtVerifier(config(jwks, **kw)))


async def test_api_keys_keep_working_beside_jwts(jwks: str, rs: Signer):
    ids = identities(jwks)
    assert not ids.open
    assert ids.cached("Bearer sk-keyed") == Identity("keyed", Credential.KEY)
    token = rs.token(sub="jwt-tenant")
    header = f"Bearer {token}"
    assert ids.cached(header) is None  # a JWT not seen yet: verify it
    assert await ids.verify(header) == Identity("jwt-tenant", Credential.JWT)
    assert ids.cached(header) == Identity("jwt-tenant", Credential.JWT)
    assert await ids.verify_token(token) == Identity("jwt-tenant", Credential.JWT)
    assert await ids.verify_token("sk-keyed") == Identity("keyed", Credential.KEY)


async def test_an_api_key_shaped_like_a_jwt_is_still_a_key(jwks: str):
    ids = Identities([KeyConfig("dotted", hash_key("sk.a.b"))], JwtVerifier(config(jwks)))
    assert await ids.verify("Bearer sk.a.b") == Identity("dotted", Credential.KEY)


@pytest.mark.parametrize(
    ("header", "code"),
    [
        (None, "missing_api_key"),
        ("Basic abc", "missing_api_key"),
        ("Bearer sk-wrong", "invalid_api_key"),
        ("Bearer a.b.c", "invalid_token"),
    ],
)
async def test_what_each_bad_credential_is_told(jwks: str, header: str | None, code: str):
    with pytest.raises(AuthenticationFailed) as info:
        await identities(jwks).verify(header)
    assert (info.value.status, info.value.code.code) == (401, code)


async def test_jwt_only_and_open_access(jwks: str, rs: Signer):
    only = Identities((), JwtVerifier(config(jwks)))
    assert not only.open
    with pytest.raises(AuthenticationFailed) as info:
        only.cached("Bearer sk-anything")
    assert info.value.code.code == "invalid_api_key"
    assert (await only.verify(f"Bearer {rs.token()}")).tenant == "acme"
    anyone = Identities()
    assert anyone.open
    assert anyone.cached(None) is OPEN and await anyone.verify("Bearer x") is OPEN
    assert anyone.cached_token("x") is OPEN


async def test_no_key_set_yet_is_503_not_401(rs: Signer):
    from flatgate.edge_translator.jwks import KeySetError, KeySource

    async def fail():
        raise KeySetError("nothing there")

    source = KeySource(fail, name="test", refresh_seconds=30)
    verifier = JwtVerifier(config("", jwks_url="https://jwks.test/"), source=source)
    with pytest.raises(FlatgateError) as info:
        await verifier.verify(rs.token())
    err = info.value
    assert (err.status, err.code.code) == (503, "jwks_unavailable")
    assert err.retry_after is not None and 1 <= err.retry_after <= 30
