"""Google's credential endpoints as loopback fakes, for google-auth to talk to.

- ``service_account_key``: a service account's key file made for the test
  (a new RSA key; its ``token_uri`` the fake's), as Google's console writes one;
- ``TokenEndpoint``: OAuth 2.0's token endpoint for a service account (RFC
  7523's JWT bearer grant): each assertion is checked with PyJWT against the
  key's public half (its issuer the account, its
  scope; its audience Google's token endpoint, as google-auth writes it
  whatever the token_uri), or a token exchange (RFC 8693, as Google's STS
  takes workload identity federation's subject token), and answered with a
  new access token ``<prefix>.<n>`` that lives ``lifetime`` seconds;
- ``MetadataServer``: the metadata server's paths google-auth asks (its
  ping at ``/``, the default service account's info and token, the project
  id), each checked for ``Metadata-Flavor: Google``.

Both run a ``ThreadingHTTPServer`` on 127.0.0.1 (``serve``); ``seen`` lists
what each was asked.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

__all__ = [
    "MetadataServer",
    "TokenEndpoint",
    "external_account",
    "serve",
    "service_account_key",
]

EMAIL = "flatgate@test-project.iam.gserviceaccount.com"
PROJECT = "test-project"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
# A service account's assertion names Google's token endpoint as its
# audience, whichever token_uri it is sent to (as google-auth writes it).
AUDIENCE = "https://oauth2.googleapis.com/token"
# RFC 8693's token exchange (Google's STS), and the subject token of an
# external account's file made for the test.
EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
SUBJECT_TOKEN = "workload-identity-jwt"


def external_account(path: Path, token_file: Path, token_url: str) -> None:
    """Workload identity federation's credentials file at ``path``: a
    subject token read from ``token_file``, exchanged at ``token_url``."""
    token_file.write_text(SUBJECT_TOKEN)
    doc = {
        "type": "external_account",
        "audience": "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/"
        "pool/providers/provider",
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": token_url,
        "credential_source": {"file": str(token_file)},
    }
    path.write_text(json.dumps(doc))


def service_account_key(path: Path, token_uri: str) -> rsa.RSAPublicKey:
    """A service account's key file at ``path``; its public key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    doc = {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "0123456789abcdef",
        "private_key": pem,
        "client_email": EMAIL,
        "client_id": "1234567890",
        "auth_uri": "http://127.0.0.1:1/auth",
        "token_uri": token_uri,
    }
    path.write_text(json.dumps(doc))
    return key.public_key()


class _Handler(BaseHTTPRequestHandler):
    seen: ClassVar[list[str]]

    def _send(self, status: int, doc: Any, headers: dict[str, str] | None = None) -> None:
        data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class TokenEndpoint(_Handler):
    """The token endpoint (see the module docstring); configure the class."""

    public_key: ClassVar[rsa.RSAPublicKey | None] = None
    prefix: ClassVar[str] = "token"
    lifetime: ClassVar[int] = 3600
    issued: ClassVar[int] = 0
    seen: ClassVar[list[str]] = []
    lock = threading.Lock()

    def _issue(self) -> None:
        with self.lock:
            type(self).issued += 1
            token = f"{self.prefix}.{type(self).issued}"
        self._send(
            200, {"access_token": token, "expires_in": self.lifetime, "token_type": "Bearer"}
        )

    def do_POST(self) -> None:
        form = parse_qs(self.rfile.read(int(self.headers["content-length"])).decode())
        grant = form.get("grant_type", [""])[0]
        self.seen.append(f"POST {self.path} {grant}")
        if grant == EXCHANGE:  # STS: workload identity federation's subject token
            if form.get("subject_token") != [SUBJECT_TOKEN] or not form.get("audience"):
                self._send(400, {"error": "invalid_grant", "error_description": str(form)})
                return
            self._issue()
            return
        if grant != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            self._send(400, {"error": "unsupported_grant_type"})
            return
        assert self.public_key is not None
        try:
            claims = jwt.decode(
                form["assertion"][0], self.public_key, algorithms=["RS256"], audience=AUDIENCE
            )
        except jwt.PyJWTError as exc:
            self._send(400, {"error": "invalid_grant", "error_description": str(exc)})
            return
        if claims.get("iss") != EMAIL or CLOUD_PLATFORM not in claims.get("scope", "").split():
            self._send(400, {"error": "invalid_scope", "error_description": json.dumps(claims)})
            return
        self._issue()


class MetadataServer(_Handler):
    """The metadata server (see the module docstring)."""

    token: ClassVar[str] = "metadata-token"
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(f"GET {self.path}")
        if self.headers.get("metadata-flavor") != "Google":
            self._send(403, {"error": "Missing Metadata-Flavor:Google header."})
            return
        flavor = {"metadata-flavor": "Google"}
        path = self.path.partition("?")[0]
        base = "/computeMetadata/v1/"
        if path == "/":
            self._send(200, b"", flavor)
        elif path == base + "project/project-id":
            self._send(200, PROJECT.encode(), flavor)
        elif path == base + "instance/service-accounts/default/":
            info = {"email": EMAIL, "scopes": [CLOUD_PLATFORM], "aliases": ["default"]}
            self._send(200, info, flavor)
        elif path == base + "instance/service-accounts/default/token":
            token = {"access_token": self.token, "expires_in": 3599, "token_type": "Bearer"}
            self._send(200, token, flavor)
        else:
            self._send(404, {"error": "not found"}, flavor)


@contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """``handler`` on 127.0.0.1: its port, until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
