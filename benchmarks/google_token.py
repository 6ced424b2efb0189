"""What Google's access token costs the ``vertex`` backend, reported apart
(issue 40): ``cost_checks``' ``google-token`` table, and the loopback token
endpoint with a service account's key made for the bench that
``cloud_ratios --prepare`` fetches the vertex rows' token from.

A ``vertex`` request carries ``Authorization: Bearer`` with a token the
adapter's ``Refreshing`` holds: per request it is read, never fetched
(``transport.credentials``: fetched in a thread at the start, then again
``DEFAULT_MARGIN`` seconds before it expires; Google's tokens live an hour,
so a backend fetches about once in 55 minutes). The rows:

- per request: ``Refreshing.current()`` of the held token (what ``prepare``
  reads; the header list is made once per token);
- per fetch: ``transport.google.google_token``'s fetch, google-auth's
  service-account credential refreshed through flatgate's urllib transport
  (the JWT assertion signed RS256 with the account's 2048-bit key, POSTed to
  the token endpoint, the answer read); the two parts of a fetch alone: the
  assertion signed by google-auth's ``jwt.encode`` with the key's
  ``RSASigner``, and the exchange (the same form POSTed through
  ``UrllibRequest``, a new connection each, as urllib makes); and a backend's
  first fetch (the key file read and its key parsed, which ``cryptography``
  checks, then the fetch).

CPU is the fetching thread's (``time.thread_time``: the token endpoint
answers from another thread, its CPU not the gateway's), the fastest of
interleaved rounds; the wall time per call beside it. The token endpoint
(``TokenEndpoint``: 127.0.0.1, a ``ThreadingHTTPServer``) answers every
JWT-bearer grant with a new token living an hour and keeps the last
assertion (the tests check its signature with PyJWT). Nothing leaves
loopback: the credential is the key file's, never google-auth's chain.
"""

from __future__ import annotations

import importlib
import json
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from benchmarks.harness.report import md_table
from flatgate.proxy.transport.credentials import Refreshing
from flatgate.proxy.transport.google import CLOUD_PLATFORM, UrllibRequest, google_token

__all__ = [
    "EMAIL",
    "TokenEndpoint",
    "google_token_checks",
    "google_token_report",
    "loopback_key",
    "service_account_key",
]

EMAIL = "flatgate-bench@flatgate-bench.iam.gserviceaccount.com"
_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def service_account_key(path: Path, token_uri: str) -> bytes:
    """A service account's key file at ``path`` (a new 2048-bit RSA key, as
    Google's console writes one, its ``token_uri`` given); the public key's PEM."""

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    doc = {
        "type": "service_account",
        "project_id": "flatgate-bench",
        "private_key_id": "0123456789abcdef",
        "private_key": pem,
        "client_email": EMAIL,
        "client_id": "1234567890",
        "token_uri": token_uri,
    }
    path.write_text(json.dumps(doc))
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    endpoint: TokenEndpoint

    def do_POST(self) -> None:
        form = parse_qs(self.rfile.read(int(self.headers["content-length"])).decode())
        if form.get("grant_type") != [_GRANT]:
            self._send(400, {"error": "unsupported_grant_type"})
            return
        token = self.endpoint.issue(form.get("assertion", [""])[0])
        self._send(200, {"access_token": token, "expires_in": 3600, "token_type": "Bearer"})

    def _send(self, status: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return None


class TokenEndpoint:
    """OAuth 2.0's token endpoint on 127.0.0.1 (see the module docstring)."""

    def __init__(self) -> None:
        handler = type("Handler", (_Handler,), {"endpoint": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/token"
        self.issued = 0
        self.assertion = ""
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def issue(self, assertion: str) -> str:
        with self._lock:
            self.issued += 1
            self.assertion = assertion
            return f"ya29.flatgate-bench.{self.issued}"

    def __enter__(self) -> TokenEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@dataclass(frozen=True)
class LoopbackKey:
    """A key file whose ``token_uri`` is ``endpoint``'s, and its public key."""

    path: Path
    public_pem: bytes
    endpoint: TokenEndpoint


@contextmanager
def loopback_key() -> Iterator[LoopbackKey]:
    """A token endpoint on loopback and a service account's key file for it,
    both gone at the end."""
    with tempfile.TemporaryDirectory(prefix="flatgate-bench-") as tmp, TokenEndpoint() as ep:
        path = Path(tmp) / "service-account.json"
        public = service_account_key(path, ep.url)
        yield LoopbackKey(path, public, ep)


def _best(
    steps: dict[str, Callable[[], object]], calls: int, rounds: int
) -> dict[str, tuple[float, float]]:
    """Fastest round's (thread CPU µs, wall µs) per call of each step."""
    for step in steps.values():  # imports, caches, the first connection
        step()
    best = {name: (float("inf"), float("inf")) for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            cpu, wall = time.thread_time(), time.perf_counter()
            for _ in range(calls):
                step()
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
            best[name] = (min(best[name][0], cpu / calls), min(best[name][1], wall / calls))
    return {name: (c * 1e6, w * 1e6) for name, (c, w) in best.items()}


def google_token_checks(
    calls: int, rounds: int, reads: int = 100_000
) -> dict[str, tuple[float, float]]:
    """Each row's (CPU µs, wall µs) per call: ``reads`` token reads a round,
    ``calls`` fetches (and their parts) a round."""

    crypt: Any = importlib.import_module("google.auth.crypt")  # not typed
    jwt: Any = importlib.import_module("google.auth.jwt")
    with loopback_key() as key:
        fetch = google_token(credentials_file=str(key.path))
        held: Refreshing[str] = Refreshing("bench (Google credentials)", fetch)
        held.refresh()
        info = json.loads(key.path.read_text())
        signer = crypt.RSASigner.from_service_account_info(info)
        now = int(time.time())
        claims = {"iss": EMAIL, "aud": key.endpoint.url, "iat": now, "exp": now + 3600}
        claims["scope"] = CLOUD_PLATFORM
        form = urlencode({"grant_type": _GRANT, "assertion": key.endpoint.assertion}).encode()
        request = UrllibRequest()
        headers = {"content-type": "application/x-www-form-urlencoded"}

        def fresh() -> None:
            google_token(credentials_file=str(key.path))()

        def exchange() -> None:
            request(key.endpoint.url, "POST", form, headers)

        read = _best({"read": held.current}, reads, rounds)["read"]
        fetches = _best(
            {
                "fetch": fetch,
                "sign": lambda: jwt.encode(signer, claims),
                "exchange": exchange,
            },
            calls,
            rounds,
        )
        # Some 30 ms each (the key's parse checks it): a tenth as many.
        first = _best({"first": fresh}, max(calls // 10, 1), rounds)["first"]
    return {
        "per request: Refreshing.current(), the held token read": read,
        "per fetch: google_token's fetch (google-auth's service account"
        " refresh: RS256 assertion, POST to the loopback token endpoint)": fetches["fetch"],
        "  of which: the JWT assertion signed (google.auth.jwt.encode,"
        " RSASigner, 2048-bit key)": fetches["sign"],
        "  of which: the exchange alone (the grant POSTed through"
        " UrllibRequest, a new connection, the answer read)": fetches["exchange"],
        "the first fetch of a backend: a fresh google_token (the key file read,"
        " its key parsed and checked), then the fetch": first,
    }


def google_token_report(results: dict[str, tuple[float, float]]) -> str:
    rows = [(name, f"{cpu:,.2f}", f"{wall:,.2f}") for name, (cpu, wall) in results.items()]
    head = ["Google's access token, for a vertex backend", "CPU µs/call", "wall µs/call"]
    return "\n".join(md_table(head, rows))
