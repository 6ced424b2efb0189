"""Signing keys, key sets and tokens for the JWT tests (and the JWT benchmark).

Keys are generated with ``cryptography``; tokens are signed with PyJWT, except
the forged ones (``alg: none``, HS256 keyed with a public key) that PyJWT
refuses to write. A tiny threaded HTTP server serves a key set for the URL
source's tests.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

ISSUER = "https://issuer.flatgate.test/"
AUDIENCE = "flatgate"


@dataclass
class Signer:
    """One private key, its ``kid`` and algorithm; ``token`` signs claims."""

    kid: str
    alg: str
    private: Any

    @property
    def public_jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        kind: dict[str, Any] = {
            "RS": RSAAlgorithm,
            "PS": RSAAlgorithm,
            "ES": ECAlgorithm,
            "Ed": OKPAlgorithm,
        }
        jwk: dict[str, Any] = kind[self.alg[:2]].to_jwk(public, as_dict=True)
        return {**jwk, "kid": self.kid, "use": "sig"}

    @property
    def public_pem(self) -> bytes:
        pem: bytes = self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return pem

    def token(
        self,
        more: Mapping[str, Any] | None = None,
        *,
        kid: str | None = "",
        headers: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        """A token of ``claims`` (and ``more``, for names that are not Python
        names) over the defaults (``sub`` "acme", ``iss``, ``aud``, ``exp`` in
        an hour); a claim given as ``None`` is left out. ``kid`` "": the
        signer's, ``None``: none."""
        now = int(time.time())
        body = {"sub": "acme", "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 3600}
        body.update(more or {})
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        head = dict(headers or {})
        if kid is not None:
            head["kid"] = kid or self.kid
        return jwt.encode(body, self.private, algorithm=self.alg, headers=head)


def rsa_signer(kid: str = "rsa-1", alg: str = "RS256", bits: int = 2048) -> Signer:
    return Signer(kid, alg, rsa.generate_private_key(public_exponent=65537, key_size=bits))


def ec_signer(kid: str = "ec-1") -> Signer:
    return Signer(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))


def ed_signer(kid: str = "ed-1") -> Signer:
    return Signer(kid, "EdDSA", ed25519.Ed25519PrivateKey.generate())


def key_set(*signers: Signer) -> dict[str, Any]:
    return {"keys": [s.public_jwk for s in signers]}


def write_key_set(path: Path, *signers: Signer) -> str:
    path.write_text(json.dumps(key_set(*signers)))
    return str(path)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], claims: dict[str, Any], secret: bytes | None) -> str:
    """A token PyJWT would not write: HMAC-SHA256 with ``secret`` (HS256),
    or no signature at all (``secret`` None, ``alg: none``)."""
    now = int(time.time())
    body = {"sub": "acme", "iss": ISSUER, "aud": AUDIENCE, "exp": now + 3600, **claims}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(body).encode())}"
    if secret is None:
        return signing_input + "."
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(mac)}"


@dataclass
class KeySetServer:
    """What the JWKS server serves (change it between requests) and saw."""

    url: str
    body: bytes
    status: int = 200
    delay: float = 0.0
    hits: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def serve(self, *signers: Signer) -> None:
        self.body = json.dumps(key_set(*signers)).encode()


@contextmanager
def serving(*signers: Signer) -> Iterator[KeySetServer]:
    """A JWKS at ``http://127.0.0.1:<port>/jwks.json`` until the block ends."""
    state = KeySetServer("", json.dumps(key_set(*signers)).encode())

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            with state.lock:
                state.hits += 1
            if state.delay:
                time.sleep(state.delay)
            self.send_response(state.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(state.body)))
            self.end_headers()
            self.wfile.write(state.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
