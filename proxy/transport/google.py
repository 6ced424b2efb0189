"""Google Cloud access tokens through google-auth's Application Default
Credentials: the fetch a ``credentials.Refreshing`` runs off the request's path.

``google_token(scopes, credentials_file)`` is a ``credentials.Fetch``: each
call refreshes the credential (a new access token from its token endpoint)
and returns ``(token, expiry)``, the expiry in Unix seconds. The credential
is google-auth's own, found once, at the first fetch:

- ``credentials_file`` given: that file, whatever kind google-auth reads
  (``_from_file``): a service account's key
  (a JWT signed with its key, exchanged at its ``token_uri``), an
  authorized user's refresh token (``gcloud auth application-default
  login``), workload identity federation's external account (a token from a
  file, a URL or an executable, exchanged at Google's STS, and the service
  account it impersonates);
- else the file ``GOOGLE_APPLICATION_CREDENTIALS`` names, read the same
  way (google-auth's chain would also ask Google which project an external
  account's is: the backend names its project);
- else google-auth's chain (``google.auth.default``): gcloud's application
  default credentials file, then the metadata server (GKE's workload identity,
  Compute Engine, Cloud Run), which google-auth finds at
  ``GCE_METADATA_HOST`` / ``GCE_METADATA_IP`` (``169.254.169.254`` when
  unset) unless ``NO_GCE_CHECK`` says not to look.

Every HTTP exchange goes through ``UrllibRequest``, a
``google.auth.transport.Request`` over the standard library's urllib
(HTTPS verified by the default context, the environment's proxies
honoured), so that no HTTP library beyond google-auth is needed.
google-auth's chain imports ``requests`` to ask the metadata server; where
``requests`` is not installed the chain's last step is taken here, with this
transport (``_metadata_credentials``).

google-auth is imported, and the credential made, at the first fetch, in the
refresher's thread: its import and its look-ups are blocking, and a gateway
with no Google backend never pays for them. This module is the one place
google-auth enters; what it raises is the refresher's to log
(``Refreshing`` catches whatever a chain raises).
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import threading
import urllib.error
import urllib.request
import warnings
from collections.abc import Mapping, Sequence
from email.message import Message
from typing import Any

from flatgate.proxy.transport.credentials import Fetch

__all__ = ["CLOUD_PLATFORM", "UrllibRequest", "google_token"]

# The scope of a token for Vertex AI (and every Google Cloud API).
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
# The file Application Default Credentials read first.
EXPLICIT_ENV = "GOOGLE_APPLICATION_CREDENTIALS"
# How long one exchange with a token endpoint may take.
_TIMEOUT = 30.0


def _module(name: str) -> Any:
    """One of google-auth's modules (imported at the first fetch: see the
    module docstring; its functions are not typed)."""
    return importlib.import_module(name)


class _Response:
    """What google-auth reads of an answer (``google.auth.transport.Response``)."""

    __slots__ = ("data", "headers", "status")

    def __init__(self, status: int, headers: Message, data: bytes) -> None:
        self.status = status
        # Looked up in any case (google-auth asks for "metadata-flavor").
        self.headers: Mapping[str, str] = {k.lower(): v for k, v in headers.items()}
        self.data = data


class UrllibRequest:
    """A ``google.auth.transport.Request`` over urllib (see the module docstring)."""

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> _Response:
        request = urllib.request.Request(url, data=body, headers=dict(headers or {}), method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout or _TIMEOUT) as answer:
                return _Response(answer.status, answer.headers, answer.read())
        except urllib.error.HTTPError as exc:  # an answer, not a failure to reach one
            with exc:
                return _Response(exc.code, exc.headers, exc.read())
        except (OSError, ValueError) as exc:
            raise _module("google.auth.exceptions").TransportError(
                f"{method} {url}: {exc}"
            ) from exc


def _metadata_credentials(request: UrllibRequest, scopes: Sequence[str]) -> Any:
    """The metadata server's credential, when google-auth's chain could not
    ask (no ``requests``) and the server answers; ``None`` otherwise."""
    if importlib.util.find_spec("requests") is not None:
        return None  # the chain asked already
    if not _module("google.auth.compute_engine._metadata").is_on_gce(request=request):
        return None
    return _module("google.auth.compute_engine").Credentials(scopes=list(scopes))


def _external(info: dict[str, Any], scopes: Sequence[str]) -> Any:
    """Workload identity federation's credential, by its source: AWS's,
    an executable's, else a file's or a URL's (never asking Google which
    project it is: a request's project is the backend's)."""
    source = info.get("credential_source") or {}
    if str(source.get("environment_id", "")).startswith("aws"):
        kind = "google.auth.aws"
    elif "executable" in source:
        kind = "google.auth.pluggable"
    else:
        kind = "google.auth.identity_pool"
    return _module(kind).Credentials.from_info(info, scopes=list(scopes))


def _from_file(path: str, scopes: Sequence[str]) -> Any:
    """The credential a file configured by the operator holds: a service
    account's key, an authorized user's file and an external account's
    (workload identity federation) by their own classes; any other kind (an
    impersonated account's) by google-auth's loader, whose warning about
    files from untrusted sources does not apply to the gateway's own
    configuration."""
    with open(path, "rb") as f:
        info = json.load(f)
    kind = info.get("type")
    if kind == "service_account":
        accounts = _module("google.oauth2.service_account")
        return accounts.Credentials.from_service_account_info(info, scopes=list(scopes))
    if kind == "authorized_user":
        users = _module("google.oauth2.credentials")
        return users.Credentials.from_authorized_user_info(info, scopes=list(scopes))
    if kind == "external_account":
        return _external(info, scopes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        found, _ = _module("google.auth").load_credentials_from_file(path, scopes=list(scopes))
    return found


def _credential(request: UrllibRequest, scopes: Sequence[str], credentials_file: str) -> Any:
    """google-auth's credential (imported here: see the module docstring)."""
    # The chain's first step, taken here: the file the environment names,
    # read as a configured one is (google-auth's would look its project up).
    named = credentials_file or os.environ.get(EXPLICIT_ENV, "")
    if named:
        return _from_file(named, scopes)
    auth = _module("google.auth")
    try:
        found, _ = auth.default(scopes=list(scopes), request=request)
    except _module("google.auth.exceptions").DefaultCredentialsError:
        fallback = _metadata_credentials(request, scopes)
        if fallback is None:
            raise
        return fallback
    return found


def _expiry(when: datetime.datetime | None) -> float | None:
    """google-auth's expiry (a naive datetime in UTC) in Unix seconds."""
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


def google_token(
    scopes: Sequence[str] = (CLOUD_PLATFORM,), credentials_file: str = ""
) -> Fetch[str]:
    """The fetch of an access token for ``scopes`` (blocking: the refresher
    runs it in a thread); ``credentials_file``: a credentials file to read
    instead of the chain."""
    made: list[Any] = []  # google-auth's credential (its types are not declared)
    lock = threading.Lock()
    request = UrllibRequest()

    def fetch() -> tuple[str, float | None]:
        with lock:  # one credential per backend, made once, refreshed in turn
            if not made:
                made.append(_credential(request, scopes, credentials_file))
            source = made[0]
            source.refresh(request)
            token = source.token
            if not token:
                raise ValueError("google-auth refreshed the credential but gave no token")
            return str(token), _expiry(source.expiry)

    return fetch
