"""API keys (``Authorization: Bearer <key>``) to tenants.

Owns key checking: keys are configured as hex SHA-256 digests, never in clear;
a presented key is hashed and its digest looked up, and the stored digest it
finds is compared with ``hmac.compare_digest``. Why a dict lookup is safe
here: the only thing lookup timing can depend on is the SHA-256 of what the
caller sent, and learning how a hash of a guess relates to a stored hash does
not help find a key whose hash matches (preimage resistance), so the time taken
says nothing useful about any real key. No keys configured means open access
and an empty tenant.

Also owns ``Identity``, who a caller is, whichever credential said so (an API
key here, a JWT in ``jwt_auth``; ``identity`` puts the two together).

Pure: no I/O.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from flatgate.edge_translator.errors import AuthenticationFailed
from flatgate.edge_translator.settings import KeyConfig
from flatgate.proxy.errors import codes
from flatgate.proxy.plumbing.auth import bearer_token, hash_key

__all__ = [
    "OPEN",
    "Credential",
    "Identity",
    "KeyRing",
    "bearer_token",  # plumbing.auth's
    "hash_key",  # plumbing.auth's
]


class Credential(enum.Enum):
    """What identified a caller."""

    OPEN = "open"  # nothing: no [[keys]] and no [auth.jwt] configured
    KEY = "key"  # an API key of [[keys]]
    JWT = "jwt"  # a JWT verified against [auth.jwt]'s key set


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a caller is: its ``tenant`` (``""`` under open access) and, when its
    credential carries one, the models it may use (globs; ``None``: the
    credential says nothing, ``()``: none)."""

    tenant: str
    credential: Credential
    models: tuple[str, ...] | None = None


OPEN = Identity("", Credential.OPEN)


class KeyRing:
    """The configured keys; ``tenant_for`` authenticates one request."""

    __slots__ = ("_by_digest",)

    def __init__(self, keys: Iterable[KeyConfig]) -> None:
        self._by_digest: dict[bytes, tuple[bytes, Identity]] = {}
        for k in keys:
            digest = bytes.fromhex(k.sha256)
            self._by_digest[digest] = (digest, Identity(k.tenant, Credential.KEY, k.models))

    @property
    def open(self) -> bool:
        """True when no keys are configured (every caller is let in)."""
        return not self._by_digest

    def tenant_for(self, authorization: str | None) -> str:
        """The tenant owning the presented key; ``""`` under open access.

        Raises ``AuthenticationFailed`` (401) for a missing or unknown key.
        """
        if not self._by_digest:
            return ""
        token = bearer_token(authorization)
        if token is None:
            raise AuthenticationFailed(
                "You didn't provide an API key. Provide it in the Authorization header "
                "as 'Authorization: Bearer YOUR_KEY'.",
                code=codes.MISSING_API_KEY,
            )
        identity = self.identity_for(token)
        if identity is None:
            raise AuthenticationFailed("Incorrect API key provided.")
        return identity.tenant

    def identity_for(self, token: str) -> Identity | None:
        """The identity of the key ``token`` (the key itself, not a header);
        ``None`` when it is not a configured key."""
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        entry = self._by_digest.get(digest)
        if entry is None or not hmac.compare_digest(entry[0], digest):
            return None
        return entry[1]
