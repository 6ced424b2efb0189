"""Google access tokens through google-auth's Application Default
Credentials (``transport.google``), and never a connection outside loopback
while it looks: a service account's key made for the test, whose token
endpoint is a fake on 127.0.0.1, and the metadata server a fake there too
(or not looked for at all); ``tests.loopback`` fails a test on any
connection outside 127.0.0.0/8."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flatgate.proxy.transport.credentials import CredentialsUnavailable, Refreshing
from flatgate.proxy.transport.google import google_token
from tests import loopback
from tests.backends.vertex.google_fakes import (
    EMAIL,
    MetadataServer,
    TokenEndpoint,
    external_account,
    serve,
    service_account_key,
)

loopback_only = loopback.loopback_only


@pytest.fixture
def no_google(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An environment where google-auth's chain finds nothing of the host's:
    no Google variables, an empty home and gcloud configuration, and the
    metadata server not looked for (google-auth reads ``NO_GCE_CHECK`` when
    it is imported: set on its module as well)."""
    from google.auth.compute_engine import _metadata

    for name in list(os.environ):
        if name.startswith(("GOOGLE_", "GCE_", "CLOUDSDK_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)
    return tmp_path


@pytest.fixture
def token_endpoint(no_google: Path) -> Iterator[tuple[int, Path]]:
    """The token endpoint, and a service account's key whose token_uri it is."""
    TokenEndpoint.seen = []
    TokenEndpoint.issued = 0
    TokenEndpoint.lifetime = 3600
    TokenEndpoint.prefix = "token"
    with serve(TokenEndpoint) as port:
        key = no_google / "key.json"
        TokenEndpoint.public_key = service_account_key(key, f"http://127.0.0.1:{port}/token")
        yield port, key


def test_nothing_configured_and_no_metadata_server_is_an_error(
    no_google: Path, loopback_only: list[str]
) -> None:
    from google.auth.exceptions import DefaultCredentialsError

    with pytest.raises(DefaultCredentialsError):
        google_token()()
    assert loopback_only == []  # not even a loopback connection was tried


def test_a_service_account_key_named_by_the_environment(
    token_endpoint: tuple[int, Path], monkeypatch: pytest.MonkeyPatch, loopback_only: list[str]
) -> None:
    """The key's JWT, signed with its private key, is exchanged at its
    token_uri (PyJWT checks the signature, audience, issuer and scope)."""
    _, key = token_endpoint
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    token, expires = google_token()()
    assert token == "token.1"
    assert expires is not None
    assert TokenEndpoint.seen == ["POST /token urn:ietf:params:oauth:grant-type:jwt-bearer"]
    assert set(loopback_only) == {"127.0.0.1"}


def test_a_credentials_file_configured_and_its_tokens_refreshed_when_they_expire(
    token_endpoint: tuple[int, Path], loopback_only: list[str]
) -> None:
    """A token that lives 400 s is fetched again 300 s before it expires;
    once expired, none is handed out until a fetch replaces it."""
    _, key = token_endpoint
    TokenEndpoint.lifetime = 400
    now = [time.time()]
    refreshing = Refreshing("backend v (Google)", google_token(credentials_file=str(key)),
                            clock=lambda: now[0])  # fmt: skip
    with pytest.raises(CredentialsUnavailable, match="not fetched yet"):
        refreshing.current()
    wait = refreshing.refresh()
    assert refreshing.current() == "token.1"
    assert wait is not None and 80 < wait < 101  # 400 s (whole seconds), less the 300 s margin
    now[0] += 401
    with pytest.raises(CredentialsUnavailable):
        refreshing.current()
    TokenEndpoint.lifetime = 3600
    refreshing.refresh()
    assert refreshing.current() == "token.2"
    assert len(TokenEndpoint.seen) == 2


def test_workload_identity_federation_s_file(
    token_endpoint: tuple[int, Path], no_google: Path, loopback_only: list[str]
) -> None:
    """An external account's file (a subject token from a file, exchanged
    at its token_url: Google's STS, here the fake) configured as
    ``credentials_file``: google-auth's own loader reads it."""
    port, _ = token_endpoint
    path = no_google / "federation.json"
    external_account(path, no_google / "subject-token", f"http://127.0.0.1:{port}/v1/token")
    token, expires = google_token(credentials_file=str(path))()
    assert token == "token.1" and expires is not None
    assert TokenEndpoint.seen == ["POST /v1/token urn:ietf:params:oauth:grant-type:token-exchange"]
    assert set(loopback_only) == {"127.0.0.1"}


def test_a_refused_assertion_is_the_fetch_s_error(
    token_endpoint: tuple[int, Path], no_google: Path, loopback_only: list[str]
) -> None:
    """A key the endpoint does not know (another key's signature) is refused."""
    from google.auth.exceptions import RefreshError

    port, _ = token_endpoint
    other = no_google / "other.json"
    service_account_key(other, f"http://127.0.0.1:{port}/token")  # not the endpoint's key
    with pytest.raises(RefreshError, match="invalid_grant"):
        google_token(credentials_file=str(other))()


@pytest.fixture
def metadata(no_google: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """The metadata server on loopback, where google-auth looks (its host
    is read when google-auth is imported: set on its module as well)."""
    from google.auth.compute_engine import _metadata

    MetadataServer.seen = []
    with serve(MetadataServer) as port:
        monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", False)
        monkeypatch.setattr(_metadata, "_GCE_METADATA_HOST", f"127.0.0.1:{port}")
        monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{port}")
        monkeypatch.setenv("GCE_METADATA_IP", f"127.0.0.1:{port}")
        yield port


def test_the_metadata_server_s_token(metadata: int, loopback_only: list[str]) -> None:
    token, expires = google_token()()
    assert token == "metadata-token" and expires is not None
    asked = [s.partition("?")[0] for s in MetadataServer.seen]
    assert "GET /" in asked  # the ping
    assert "GET /computeMetadata/v1/instance/service-accounts/default/token" in asked
    assert set(loopback_only) == {"127.0.0.1"}


def test_the_metadata_server_from_the_environment_alone(tmp_path: Path) -> None:
    """In a fresh process (google-auth reading ``GCE_METADATA_HOST`` and
    ``GCE_METADATA_IP`` as it is imported), with the guard installed there."""
    with serve(MetadataServer) as port:
        MetadataServer.seen = []
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("GOOGLE_", "GCE_", "CLOUDSDK_"))
        }
        env |= {
            "HOME": str(tmp_path),
            "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
            "GCE_METADATA_HOST": f"127.0.0.1:{port}",
            "GCE_METADATA_IP": f"127.0.0.1:{port}",
        }
        script = (
            "from tests import loopback\n"
            "from flatgate.proxy.transport.google import google_token\n"
            "loopback.WATCHING.set()\n"
            "token, _ = google_token()()\n"
            "assert not loopback.outside(loopback.SEEN), loopback.SEEN\n"
            "print(token)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60,
            check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "metadata-token"


def test_google_auth_is_imported_only_by_a_fetch() -> None:
    """A gateway with no Google backend never pays google-auth's import."""
    script = (
        "import sys\n"
        "import flatgate.proxy.gateway.cli\n"
        "import flatgate.proxy.transport.google\n"
        "names = ('google.auth', 'google.oauth2', 'google.genai')\n"
        "print([m for m in sys.modules if m.startswith(names)])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_key_s_account_is_the_issuer() -> None:
    assert EMAIL.endswith(".iam.gserviceaccount.com")


def test_the_metadata_server_without_requests_installed(
    metadata: int, monkeypatch: pytest.MonkeyPatch, loopback_only: list[str]
) -> None:
    """google-auth's chain asks the metadata server through ``requests``;
    where it is not installed, the chain's last step is taken with the
    urllib transport (``transport.google._metadata_credentials``)."""
    import importlib.util

    from flatgate.proxy.transport import google

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "requests" else real(name, *a)
    )
    request = google.UrllibRequest()
    found = google._metadata_credentials(request, [google.CLOUD_PLATFORM])
    assert found is not None
    found.refresh(request)
    assert found.token == "metadata-token"
    assert set(loopback_only) == {"127.0.0.1"}
