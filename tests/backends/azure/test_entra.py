"""Microsoft Entra ID tokens through azure-identity's own chain, against a
managed-identity endpoint served on loopback the way App Service serves one
(``IDENTITY_ENDPOINT`` and ``IDENTITY_HEADER``): fetched off the request's
path (the request reads the token without I/O, and never waits on a fetch),
fetched again before it expires, and no connection leaves 127.0.0.0/8 (the
guard fails the test on any socket connect or name lookup that would).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar, cast
from urllib.parse import parse_qs, urlsplit

import pytest

from flatgate.proxy.backends.base import Inbound
from flatgate.proxy.backends.openai.adapter import OpenAIAdapter
from flatgate.proxy.backends.openai.azure import openai_adapter
from flatgate.proxy.backends.openai.config import OpenAIConfig
from flatgate.proxy.transport.azure import ENTRA_SCOPE, entra_token
from flatgate.proxy.transport.credentials import CredentialsUnavailable
from tests.backends.helpers import config_of, request, user
from tests.clients.conftest import serving

SECRET = "identity-header-secret"
# Below MSAL's five minutes (so its cache hands back no token: each fetch
# asks the endpoint) and below the refresher's margin (so it is due again
# in a second).
LIFETIME = 200
# Every variable that would send azure-identity anywhere else.
_ELSEWHERE = (
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_CLIENT_CERTIFICATE_PATH",
    "AZURE_USERNAME",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_AUTHORITY_HOST",
    "AZURE_TOKEN_CREDENTIALS",
    "MSI_ENDPOINT",
    "MSI_SECRET",
    "IMDS_ENDPOINT",
    "IDENTITY_SERVER_THUMBPRINT",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
)


class _Identity(BaseHTTPRequestHandler):
    """App Service's managed-identity endpoint (2019-08-01): a token per GET."""

    issued: ClassVar[list[dict[str, Any]]] = []
    delay: ClassVar[float] = 0.0
    # Set while a token is being made (a fetch is in flight).
    busy: ClassVar[threading.Event] = threading.Event()

    def do_GET(self) -> None:
        query = parse_qs(urlsplit(self.path).query)
        seen = {"query": query, "header": self.headers.get("X-IDENTITY-HEADER")}
        self.busy.set()
        if self.delay:
            time.sleep(self.delay)
        if seen["header"] != SECRET:
            self._send(401, {"error": "unauthorized"})
            return
        self.issued.append(seen)
        self.busy.clear()
        token = f"tok-{len(self.issued)}"
        self._send(
            200,
            {
                "access_token": token,
                "expires_on": str(int(time.time()) + LIFETIME),
                "resource": query["resource"][0],
                "token_type": "Bearer",
                "client_id": "fake-client",
            },
        )

    def _send(self, status: int, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _loopback(host: object) -> bool:
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Fails any connect or name lookup outside 127.0.0.0/8 (and ::1); the
    attempts, for the test to assert none was made."""
    attempts: list[str] = []
    connect = socket.socket.connect
    lookup = socket.getaddrinfo

    def guarded_connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):
            attempts.append(f"connect {address}")
            raise AssertionError(f"a connection outside loopback: {address}")
        connect(self, address)

    def guarded_lookup(host: Any, *args: Any, **kw: Any) -> Any:
        if host is not None and not _loopback(host):
            attempts.append(f"lookup {host}")
            raise AssertionError(f"a name lookup outside loopback: {host}")
        return lookup(host, *args, **kw)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_lookup)
    yield attempts
    assert attempts == []


@pytest.fixture
def identity(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, loopback_only: list[str]
) -> Iterator[type[_Identity]]:
    """The fake endpoint, and the environment App Service gives a process."""
    handler = type(
        "Identity", (_Identity,), {"issued": [], "delay": 0.0, "busy": threading.Event()}
    )
    for name in _ELSEWHERE:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no CLI login or token cache to find
    monkeypatch.setenv("NO_PROXY", "*")
    with serving(handler) as port:
        monkeypatch.setenv("IDENTITY_ENDPOINT", f"http://127.0.0.1:{port}/msi/token")
        monkeypatch.setenv("IDENTITY_HEADER", SECRET)
        yield handler


def entra_backend(**kw: Any) -> OpenAIAdapter:
    entry = {
        "name": "az",
        "protocol": "openai",
        "url": "https://contoso.openai.azure.com/openai/v1",
        "auth": "entra",
        **kw,
    }
    return openai_adapter(cast(OpenAIConfig, config_of(entry)))


def bearer(adapter: OpenAIAdapter) -> str:
    req = request({"model": "m", "messages": [user("hi")]}, model_name="gpt-4o")
    return dict(adapter.prepare(Inbound(b"", lambda: req, "rid", "")).headers)["authorization"]


@pytest.mark.parametrize("credential", ["default", "managed-identity"])
def test_azure_identitys_chain_fetches_from_the_managed_identity_endpoint(
    identity: type[_Identity], credential: str
) -> None:
    token, expires = entra_token(ENTRA_SCOPE, credential)()  # type: ignore[arg-type]
    assert token == "tok-1"
    assert expires is not None and 0 < expires - time.time() <= LIFETIME
    (seen,) = identity.issued
    assert seen["header"] == SECRET
    assert seen["query"]["api-version"] == ["2019-08-01"]
    assert seen["query"]["resource"] == ["https://cognitiveservices.azure.com"]


def test_a_user_assigned_identity_is_asked_for_by_its_client_id(
    identity: type[_Identity],
) -> None:
    entra_token(ENTRA_SCOPE, "managed-identity", "11111111-2222")()
    assert identity.issued[0]["query"]["client_id"] == ["11111111-2222"]


def test_a_request_never_fetches(identity: type[_Identity]) -> None:
    adapter = entra_backend()
    assert adapter.credentials is not None
    for _ in range(3):
        with pytest.raises(CredentialsUnavailable, match="backend az \\(Entra ID\\)"):
            bearer(adapter)
    assert identity.issued == []  # nothing fetched on the request's path
    with pytest.raises(CredentialsUnavailable):  # not ready: the dispatcher's probe says so
        adapter.probe()


async def test_the_refresher_fetches_off_the_loop_and_again_before_expiry(
    identity: type[_Identity],
) -> None:
    adapter = entra_backend()
    creds = adapter.credentials
    assert creds is not None
    identity.delay = 0.5  # a slow token service: neither the loop nor a request waits on it
    creds.start(asyncio.get_running_loop())
    try:
        # The first fetch is in flight: the loop runs on, and a request
        # finds no token (it would have had one had it waited for the fetch).
        await _until(identity.busy.is_set)
        with pytest.raises(CredentialsUnavailable):
            bearer(adapter)
        assert identity.issued == []
        await _until(lambda: len(identity.issued) >= 1)
        assert bearer(adapter) == "Bearer tok-1"
        assert dict(adapter.probe().headers)["authorization"] == "Bearer tok-1"
        # Due again a second later (it expires in LIFETIME s, margin 300 s);
        # while that fetch is in flight, requests go on with the token they have.
        await _until(identity.busy.is_set, seconds=8)
        assert len(identity.issued) == 1
        assert bearer(adapter) == "Bearer tok-1"
        await _until(lambda: bearer(adapter) == "Bearer tok-2")
    finally:
        creds.stop()
    await asyncio.sleep(0)


async def _until(holds: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not holds():
        if time.monotonic() > deadline:
            raise AssertionError("not within the time allowed")
        await asyncio.sleep(0.02)


def test_the_guard_catches_a_connection_outside_loopback(loopback_only: list[str]) -> None:
    with pytest.raises(AssertionError, match="outside loopback"):
        socket.create_connection(("169.254.169.254", 80), timeout=0.1)
    loopback_only.clear()  # seen, and meant: the fixture's own check passes
    with socket.socket() as s, pytest.raises(AssertionError, match="outside loopback"):
        s.connect(("10.0.0.1", 80))
    loopback_only.clear()


def test_azure_identity_is_imported_only_by_a_fetch() -> None:
    """A gateway with no Entra ID backend never pays azure-identity's import."""
    script = (
        "import sys\n"
        "from flatgate.proxy.backends.registry import adapter_for, backend_config\n"
        "from flatgate.proxy.plumbing.config import Problems\n"
        "entry = {'name': 'az', 'protocol': 'openai', 'auth': 'entra',\n"
        "         'url': 'https://contoso.openai.azure.com/openai/v1'}\n"
        "adapter_for(backend_config(entry, 'b', Problems()))\n"
        "assert 'azure.identity' not in sys.modules, 'imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
