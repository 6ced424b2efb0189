"""API keys (``Authorization: Bearer <key>``) to tenants.

Owns key checking: keys are configured as hex SHA-256 digests, never in clear;
a presented key is hashed and its digest looked up, and the stored digest it
finds is compared with ``hmac.compare_digest``. Why a dict lookup is safe
here: the only thing lookup timing can depend on is the SHA-256 of what the
caller sent, and learning how a hash of a guess relates to a stored hash does
not help find a key whose hash matches (preimage resistance), so the time taken
says nothing useful about any real key. No keys configured means open access
and an empty tenant.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from flatgate.edge_translator.config import KeyConfig
from flatgate.edge_translator.errors import AuthenticationFailed
from flatgate.proxy.plumbing.auth import bearer_token, hash_key
from flatgate.proxy.wire import codes

__all__ = ["KeyRing", "bearer_token", "hash_key"]  # the last two: plumbing.auth


class KeyRing:
    """The configured keys; ``tenant_for`` authenticates one request."""

    __slots__ = ("_by_digest",)

    def __init__(self, keys: Iterable[KeyConfig]) -> None:
        self._by_digest: dict[bytes, tuple[bytes, str]] = {}
        for k in keys:
            digest = bytes.fromhex(k.sha256)
            self._by_digest[digest] = (digest, k.tenant)

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
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        entry = self._by_digest.get(digest)
        if entry is None or not hmac.compare_digest(entry[0], digest):
            raise AuthenticationFailed("Incorrect API key provided.")
        return entry[1]
