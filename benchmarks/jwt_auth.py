"""CPU per request of identifying a caller: an API key, a cached JWT, and a
JWT seen for the first time (RS256, ES256, EdDSA) against PyJWT's own
``jwt.decode`` of the same token with the same key.

Run: ``.venv/bin/python -m benchmarks.jwt_auth [--n N] [--rounds R]``

What is timed is what the edge's handler calls: ``Identities.cached(header)``
(the sync fast path: the bearer token's parse, the cache lookup, a clock
read) for a cached token or an API key, and ``await Identities.verify(header)``
with the cache off (``cache_size = 0``) for a first-seen token, inside a
running event loop. "PyJWT alone" is ``jwt.decode`` with the key object and
the same checks: the floor a first-seen token cannot go under. Rounds are
interleaved and the fastest of each row is reported (CPU time,
``time.process_time``), so machine noise hits every row alike. Keys are
generated per run (RSA 2048, P-256, Ed25519); the key set is a local file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import cryptography
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from flatgate.edge_translator.identity import Identities
from flatgate.edge_translator.jwt_auth import JwtVerifier
from flatgate.edge_translator.settings import JwtConfig, KeyConfig
from flatgate.proxy.plumbing.auth import hash_key

__all__ = ["main", "measure", "report"]

ISSUER, AUDIENCE = "https://issuer.bench/", "flatgate"
API_KEY = "sk-bench-" + "x" * 40


def _keys() -> dict[str, tuple[Any, Any]]:
    """alg -> (private key, its JWK class)."""
    return {
        "RS256": (rsa.generate_private_key(public_exponent=65537, key_size=2048), RSAAlgorithm),
        "ES256": (ec.generate_private_key(ec.SECP256R1()), ECAlgorithm),
        "EdDSA": (ed25519.Ed25519PrivateKey.generate(), OKPAlgorithm),
    }


def _token(alg: str, private: Any, sub: str = "acme") -> str:
    now = int(time.time())
    claims = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 3600}
    return jwt.encode(claims, private, algorithm=alg, headers={"kid": alg})


def _timed_sync(fn: Callable[[], object], n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n


async def _timed_async(fn: Callable[[], Awaitable[object]], n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        await fn()
    return (time.process_time() - start) / n


async def measure(n: int, rounds: int) -> dict[str, float]:
    """Fastest round's CPU µs per call, per row (first-seen rows run n // 20)."""
    keys = _keys()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "jwks.json"
        jwks = [
            {**cls.to_jwk(k.public_key(), as_dict=True), "kid": alg}
            for alg, (k, cls) in keys.items()
        ]
        path.write_text(json.dumps({"keys": jwks}))
        fields: dict[str, Any] = {"issuer": ISSUER, "audience": AUDIENCE, "jwks_file": str(path)}
        cached = Identities(
            [KeyConfig("keyed", hash_key(API_KEY))], JwtVerifier(JwtConfig(**fields))
        )
        uncached = Identities((), JwtVerifier(JwtConfig(**fields, cache_size=0)))
    tokens = {alg: _token(alg, k) for alg, (k, _) in keys.items()}
    public = {alg: k.public_key() for alg, (k, _) in keys.items()}
    header = f"Bearer {tokens['RS256']}"
    await cached.verify(header)
    key_header = f"Bearer {API_KEY}"

    def pyjwt(alg: str) -> Callable[[], object]:
        def decode() -> object:
            return jwt.decode(
                tokens[alg],
                public[alg],
                algorithms=[alg],
                issuer=ISSUER,
                audience=AUDIENCE,
                options={"require": ["exp", "iss", "aud"]},
            )

        return decode

    def first_seen(alg: str) -> Callable[[], Awaitable[object]]:
        h = f"Bearer {tokens[alg]}"
        return lambda: uncached.verify(h)

    sync_rows: dict[str, tuple[Callable[[], object], int]] = {
        "API key (cached path)": (lambda: cached.cached(key_header), n),
        "JWT, cached: Identities.cached(header)": (lambda: cached.cached(header), n),
    }
    async_rows: dict[str, tuple[Callable[[], Awaitable[object]], int]] = {}
    for alg in keys:
        sync_rows[f"{alg} first seen: PyJWT alone (jwt.decode)"] = (pyjwt(alg), n // 20)
        async_rows[f"{alg} first seen: Identities.verify(header)"] = (first_seen(alg), n // 20)
    for fn, _ in sync_rows.values():  # warm up
        _timed_sync(fn, 50)
    for afn, _ in async_rows.values():
        await _timed_async(afn, 50)
    best = {name: float("inf") for name in [*sync_rows, *async_rows]}
    for _ in range(rounds):
        for name, (fn, count) in sync_rows.items():
            best[name] = min(best[name], _timed_sync(fn, count))
        for name, (afn, count) in async_rows.items():
            best[name] = min(best[name], await _timed_async(afn, count))
    order = [
        "API key (cached path)",
        "JWT, cached: Identities.cached(header)",
        *(
            f"{alg} first seen: {how}"
            for alg in keys
            for how in ("PyJWT alone (jwt.decode)", "Identities.verify(header)")
        ),
    ]
    return {name: best[name] * 1e6 for name in order}


def report(results: dict[str, float]) -> str:
    lines = [
        f"{time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, "
        f"PyJWT {jwt.__version__}, cryptography {cryptography.__version__}, "
        f"{platform.machine()}",
        "",
        "| path | CPU µs/call | vs. PyJWT alone |",
        "|---|---:|---:|",
    ]
    for name, us in results.items():
        ratio = ""
        if "Identities.verify" in name:
            floor = results[name.replace("Identities.verify(header)", "PyJWT alone (jwt.decode)")]
            ratio = f"{us / floor:.2f}x"
        lines.append(f"| {name} | {us:.2f} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args()
    print(report(asyncio.run(measure(opts.n, opts.rounds))))


if __name__ == "__main__":
    main()
