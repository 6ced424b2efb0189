"""AWS credentials through botocore's own chain, as a ``Refreshing`` fetch.

``aws_credentials(profile)`` is the ``fetch`` of a ``credentials.Refreshing``:
each call runs botocore's credential resolver (the one boto3 and the AWS CLI
use: the environment, the shared config and credentials files and their
profiles (SSO, ``credential_process``, assumed roles), web identity (IRSA on
EKS), the container credentials endpoint (ECS, EKS Pod Identity) and the
instance metadata service) and returns the credentials frozen (access key,
secret key, session token) with their expiry in Unix seconds (``None`` for
static ones, which are then never fetched again).

The session is made at the first call and kept: a chain's credentials that
expire (``RefreshableCredentials``) are botocore's object, which refreshes
itself when asked for its value near its expiry (``get_frozen_credentials``),
so a later call takes the refreshed value and its new expiry. botocore
reads its expiry only as a private attribute (``_expiry_time``); it is read
here and nowhere else.

This is blocking I/O (files, the metadata and container endpoints): it runs
in ``Refreshing``'s thread, never on a request's path. What the chain raises
is raised (``NoCredentials`` when it finds none), and ``Refreshing`` logs it
and tries again.
"""

from __future__ import annotations

import datetime
import threading
from typing import Any, NamedTuple

from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.transport.credentials import Fetch

__all__ = ["AwsCredentials", "NoCredentials", "aws_credentials"]


class NoCredentials(FlatgateError):
    """botocore's chain found no credentials (nothing configured)."""

    default = codes.BACKEND_AUTH_FAILED


class AwsCredentials(NamedTuple):
    """One frozen set of AWS credentials (what SigV4 signs with)."""

    access_key: str
    secret_key: str
    token: str | None


def _expiry(creds: Any) -> float | None:
    when = getattr(creds, "_expiry_time", None)
    if not isinstance(when, datetime.datetime):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()


def aws_credentials(profile: str = "") -> Fetch[AwsCredentials]:
    """The fetch of one backend's AWS credentials (see the module docstring);
    ``profile``: the shared config's profile (``""``: botocore's default)."""
    lock = threading.Lock()
    found: list[Any] = []  # the chain's credentials object, once resolved

    def fetch() -> tuple[AwsCredentials, float | None]:
        with lock:
            if not found:
                import botocore.session  # at the first fetch: 150 ms, in the thread

                session = botocore.session.Session(profile=profile or None)
                creds = session.get_credentials()
                if creds is None:
                    where = f"profile {profile!r}" if profile else "any source"
                    raise NoCredentials(f"botocore's credential chain found none ({where})")
                found.append(creds)
            creds = found[0]
            frozen = creds.get_frozen_credentials()
            value = AwsCredentials(frozen.access_key, frozen.secret_key, frozen.token or None)
            return value, _expiry(creds)

    return fetch
