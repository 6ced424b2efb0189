"""JWT key sets (``jwks``): which keys are kept, fetching one over HTTP,
refreshing on an unknown ``kid`` at most once per ``refresh_seconds``; and
the ``[auth.jwt]`` config's checks."""

from __future__ import annotations

import asyncio
import json
import logging
import tomllib
from pathlib import Path
from typing import Any

import pytest

from flatgate.edge_translator.errors import InvalidToken
from flatgate.edge_translator.jwks import KeySetError, fetch_key_set, parse_key_set
from flatgate.edge_translator.jwt_auth import JwtVerifier, key_source
from flatgate.edge_translator.settings import (
    EdgeConfigError,
    JwtConfig,
    edge_problems,
    parse_edge_settings,
)
from flatgate.proxy.errors.root import FlatgateError
from tests.edge.jwt_keys import (
    AUDIENCE,
    ISSUER,
    Signer,
    ec_signer,
    ed_signer,
    key_set,
    rsa_signer,
    serving,
    write_key_set,
)

ALL = ("RS256", "PS256", "ES256", "EdDSA")


def doc(*jwks: dict[str, Any]) -> bytes:
    return json.dumps({"keys": list(jwks)}).encode()


# -- which keys are kept -----------------------------------------------------


def test_keys_are_bound_to_the_algorithms_they_fit(rs: Signer, es: Signer):
    ed = ed_signer()
    keys = parse_key_set(json.dumps(key_set(rs, es, ed)).encode(), ALL)
    assert keys.kids == {"rsa-1", "ec-1", "ed-1"}
    assert set(keys.get("rsa-1") or {}) == {"RS256", "PS256"}
    assert set(keys.get("ec-1") or {}) == {"ES256"}
    assert set(keys.get("ed-1") or {}) == {"EdDSA"}
    assert keys.get("nope") is None and keys.get(None) is None  # several keys, no kid


def test_a_key_naming_its_alg_is_bound_to_it_alone(rs: Signer):
    keys = parse_key_set(doc({**rs.public_jwk, "alg": "PS256"}), ALL)
    assert set(keys.get("rsa-1") or {}) == {"PS256"}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"kty": "oct", "k": "c2VjcmV0"}, "symmetric"),
        ({"use": "enc"}, "use is not sig"),
        ({"key_ops": ["encrypt"]}, "key_ops"),
        ({"d": "AQAB"}, "private key material"),
        ({"alg": "HS256"}, "no configured algorithm"),
        ({"kty": "EC", "crv": "P-999"}, "unsupported EC curve"),
        ({"kty": "XYZ"}, "unsupported key type"),
        ({"n": "AQAB"}, "does not decode"),
        ({"kid": 7}, "not a JWK"),
    ],
)
def test_unusable_keys_are_skipped_and_said_why(rs: Signer, change: dict[str, Any], why: str):
    with pytest.raises(KeySetError, match=why):
        parse_key_set(doc({**rs.public_jwk, **change}), ALL)
    # Beside a good key, the bad one is only skipped.
    good = ec_signer(kid="good")
    assert parse_key_set(doc({**rs.public_jwk, **change}, good.public_jwk), ALL).kids == {"good"}


def test_a_short_rsa_key_is_refused(rs: Signer):
    weak = rsa_signer(kid="weak", bits=1024)
    with pytest.raises(KeySetError, match="2048"):
        parse_key_set(doc(weak.public_jwk), ALL)


@pytest.mark.parametrize(
    ("data", "why"),
    [(b"{", "not JSON"), (b"[]", "not a JWK set"), (b'{"keys": []}', "the set is empty")],
)
def test_documents_that_are_not_key_sets(data: bytes, why: str):
    with pytest.raises(KeySetError, match=why):
        parse_key_set(data, ALL)


# -- over HTTP ---------------------------------------------------------------


def url_config(url: str, **kw: Any) -> JwtConfig:
    return JwtConfig(issuer=ISSUER, audience=AUDIENCE, jwks_url=url, leeway_seconds=0, **kw)


async def test_fetch_key_set(rs: Signer):
    with serving(rs) as server:
        keys = await fetch_key_set(server.url, ALL, timeout=5)
        assert keys.kids == {"rsa-1"}
        server.status = 404
        with pytest.raises(KeySetError, match="HTTP 404"):
            await fetch_key_set(server.url, ALL, timeout=5)
        server.status, server.body = 200, b"{}"
        with pytest.raises(KeySetError, match="not a JWK set"):
            await fetch_key_set(server.url, ALL, timeout=5)


async def test_fetch_failures_name_no_secret():
    with pytest.raises(KeySetError) as info:
        await fetch_key_set("http://user:pw@127.0.0.1:9/jwks?token=s3cret", ALL, timeout=1)
    assert "s3cret" not in str(info.value) and "pw" not in str(info.value)


async def test_fetched_once_then_refreshed_on_an_unknown_kid(rs: Signer, es: Signer):
    with serving(rs) as server:
        verifier = JwtVerifier(url_config(server.url, refresh_seconds=0))
        assert (await verifier.verify(rs.token())).tenant == "acme"
        assert (await verifier.verify(rs.token(sub="b"))).tenant == "b"
        assert server.hits == 1  # fetched on first use, then held
        server.serve(rs, es)  # a key added at the issuer
        assert (await verifier.verify(es.token())).tenant == "acme"
        assert server.hits == 2
        with pytest.raises(InvalidToken, match="key id"):
            await verifier.verify(rsa_signer(kid="unknown").token())
        assert server.hits == 3  # one more look, in vain


async def test_refreshes_are_rate_limited(rs: Signer):
    with serving(rs) as server:
        verifier = JwtVerifier(url_config(server.url, refresh_seconds=30))
        await verifier.verify(rs.token())
        for i in range(5):
            with pytest.raises(InvalidToken, match="key id"):
                await verifier.verify(rsa_signer(kid=f"forged-{i}").token())
        assert server.hits == 1  # the first fetch; no refresh within 30 s


async def test_concurrent_misses_share_one_fetch(rs: Signer):
    with serving(rs) as server:
        server.delay = 0.2
        verifier = JwtVerifier(url_config(server.url))
        tokens = [rs.token(sub=f"t{i}") for i in range(20)]
        found = await asyncio.gather(*(verifier.verify(t) for t in tokens))
        assert [i.tenant for i in found] == [f"t{i}" for i in range(20)]
        assert server.hits == 1


async def test_a_failed_refresh_keeps_the_keys_and_logs_once(
    rs: Signer, es: Signer, caplog: pytest.LogCaptureFixture
):
    with serving(rs) as server:
        verifier = JwtVerifier(url_config(server.url, refresh_seconds=0))
        await verifier.verify(rs.token())
        server.status = 500
        with caplog.at_level(logging.WARNING, logger="flatgate.edge"):
            for _ in range(3):
                with pytest.raises(InvalidToken, match="key id"):
                    await verifier.verify(es.token())
        assert server.hits == 4
        warnings = [r for r in caplog.records if "cannot load the JWT key set" in r.message]
        assert len(warnings) == 1 and "HTTP 500" in warnings[0].message
        assert (await verifier.verify(rs.token(sub="still"))).tenant == "still"  # old keys held
        server.status = 200
        server.serve(rs, es)
        assert (await verifier.verify(es.token())).tenant == "acme"


async def test_a_refresh_that_drops_a_key_forgets_its_cached_tokens(rs: Signer, es: Signer):
    with serving(rs, es) as server:
        verifier = JwtVerifier(url_config(server.url, refresh_seconds=0))
        token = es.token()
        await verifier.verify(token)
        assert verifier.cached(token) is not None
        server.serve(rs)  # es's key retired at the issuer
        with pytest.raises(InvalidToken, match="key id"):
            await verifier.verify(rsa_signer(kid="other").token())  # forces a refresh
        assert verifier.cached(token) is None
        with pytest.raises(InvalidToken, match="key id"):
            await verifier.verify(token)


async def test_an_old_key_set_is_fetched_again(rs: Signer):
    clock = [0.0]
    with serving(rs) as server:
        cfg = url_config(server.url, max_age_seconds=60, refresh_seconds=0)
        verifier = JwtVerifier(cfg, source=key_source(cfg, monotonic=lambda: clock[0]))
        await verifier.verify(rs.token())
        clock[0] = 59
        await verifier.verify(rs.token(sub="b"))
        assert server.hits == 1
        clock[0] = 61
        await verifier.verify(rs.token(sub="c"))
        assert server.hits == 2


async def test_no_key_set_at_all_is_503():
    verifier = JwtVerifier(url_config("http://127.0.0.1:9/jwks.json", fetch_timeout=1))
    with pytest.raises(FlatgateError) as info:
        await verifier.verify(rsa_signer().token())
    assert (info.value.status, info.value.code.code) == (503, "jwks_unavailable")


# -- [auth.jwt] ----------------------------------------------------------------


def auth(lines: str) -> dict[str, Any]:
    return tomllib.loads(f'[auth.jwt]\nissuer = "{ISSUER}"\naudience = "{AUDIENCE}"\n{lines}')


def test_config_reads_auth_jwt(tmp_path: Path, rs: Signer):
    path = write_key_set(tmp_path / "k.json", rs)
    s = parse_edge_settings(
        auth(f'jwks_file = "{path}"\nalgorithms = ["RS256"]\nmodels_claim = "models"\n')
    )
    assert s.auth.jwt is not None
    assert (s.auth.jwt.jwks_file, s.auth.jwt.algorithms) == (path, ("RS256",))
    assert (s.auth.jwt.tenant_claim, s.auth.jwt.models_claim) == ("sub", "models")
    assert parse_edge_settings({}).auth.jwt is None


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ("", r"auth\.jwt\.jwks_url: give exactly one of jwks_url and jwks_file"),
        (
            'jwks_url = "https://a/"\njwks_file = "b"\n',
            r"auth\.jwt\.jwks_url: give exactly one",
        ),
        ('jwks_url = "http://idp.example.com/jwks"\n', r"auth\.jwt\.jwks_url: expected https"),
        (
            'jwks_url = "https://a/"\nalgorithms = ["none"]\n',
            r"auth\.jwt\.algorithms\[0\]: .* got 'none' \(never none or HS\*",
        ),
        (
            'jwks_url = "https://a/"\nalgorithms = ["RS256", "HS256"]\n',
            r"auth\.jwt\.algorithms\[1\]: .*got 'HS256' \(never",
        ),
        ('jwks_url = "https://a/"\nalgorithms = []\n', r"auth\.jwt\.algorithms: at least one"),
        ('jwks_url = "https://a/"\nleeway_seconds = -1\n', r"auth\.jwt\.leeway_seconds: must be"),
        ('jwks_url = "https://a/"\ntenant_claim = ""\n', r"auth\.jwt\.tenant_claim: must not"),
        ('jwks_url = "https://a/"\ncache_seconds = 0\n', r"auth\.jwt\.cache_seconds: must be > 0"),
        ('jwks_url = "https://a/"\ncolour = 1\n', r"auth\.jwt: .*unknown field `colour`"),
        ('jwks_file = "/nonexistent/jwks.json"\n', r"auth\.jwt\.jwks_file: cannot read"),
    ],
)
def test_config_problems_name_the_key(lines: str, message: str):
    with pytest.raises(EdgeConfigError, match=message):
        parse_edge_settings(auth(lines))


def test_issuer_and_audience_are_required():
    problems = edge_problems(tomllib.loads('[auth.jwt]\njwks_url = "https://a/"\n'))
    assert any(p.startswith("auth.jwt.issuer: required key is missing") for p in problems)
    problems = edge_problems(auth('jwks_url = "https://a/"\n') | {"auth": {"jwt": {"issuer": ""}}})
    assert problems


def test_a_jwks_file_that_does_not_load_is_a_startup_problem(tmp_path: Path, rs: Signer):
    bad = tmp_path / "bad.json"
    bad.write_text('{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}')
    problems = edge_problems(auth(f'jwks_file = "{bad}"\n'))
    assert len(problems) == 1
    assert problems[0].startswith("auth.jwt.jwks_file:") and "symmetric" in problems[0]


def test_unknown_auth_section():
    assert edge_problems({"auth": {"saml": {}}}) == [
        "auth.saml: unknown section (expected [auth.jwt])"
    ]
