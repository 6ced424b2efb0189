"""Bearer tokens, checked against their SHA-256: what both services' caller
authentication shares (the edge's API keys, the proxy's caller token).

Tokens are configured as hex SHA-256 digests, never in clear; a presented
token is hashed and the digests compared with ``hmac.compare_digest``. No I/O.
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["TokenCheck", "bearer_token", "hash_key"]


def hash_key(key: str) -> str:
    """The hex SHA-256 of a key or token, as the config stores it."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or ``None``."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


class TokenCheck:
    """One configured token (its hex SHA-256); ``valid`` checks a header."""

    __slots__ = ("_digest",)

    def __init__(self, sha256_hex: str) -> None:
        self._digest = bytes.fromhex(sha256_hex)

    def valid(self, authorization: str | None) -> bool:
        token = bearer_token(authorization)
        if token is None:
            return False
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        return hmac.compare_digest(digest, self._digest)
