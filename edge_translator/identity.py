"""Who is calling: one check over every credential the edge accepts.

Owns ``Identities``: a bearer token is an API key of ``[[keys]]`` (``keys.KeyRing``,
by SHA-256) or a JWT (``jwt_auth.JwtVerifier``, when ``[auth.jwt]`` is set),
and the answer is a ``keys.Identity``. With neither configured, access is
open (tenant ``""``).

Two steps, so that a known caller costs no ``await``: ``cached`` answers from
what is known without I/O (open access, a JWT verified before, an API key) or
says ``None`` (a JWT to verify), and ``verify`` does the rest. The header
forms take ``Authorization``; the ``*_token`` forms take the token itself
(Anthropic's ``x-api-key``, say).

Failures: no token is ``missing_api_key``, a token that is neither a key nor
JWT-shaped ``invalid_api_key``, a JWT that does not verify ``invalid_token``
(all 401, ``errors.AuthenticationFailed``). No I/O beyond the key set's.
"""

from __future__ import annotations

from collections.abc import Iterable

from flatgate.edge_translator.errors import AuthenticationFailed
from flatgate.edge_translator.jwt_auth import JwtVerifier, looks_like_jwt
from flatgate.edge_translator.keys import OPEN, Identity, KeyRing
from flatgate.edge_translator.settings import EdgeSettings, KeyConfig
from flatgate.proxy.errors import codes
from flatgate.proxy.plumbing.auth import bearer_token

__all__ = ["Identities"]

_MISSING = (
    "You didn't provide an API key. Provide it in the Authorization header "
    "as 'Authorization: Bearer YOUR_KEY'."
)


class Identities:
    """Every credential the edge accepts; one per worker (the JWT cache is)."""

    __slots__ = ("_has_keys", "_jwt", "_keys", "_open")

    def __init__(self, keys: Iterable[KeyConfig] = (), jwt: JwtVerifier | None = None) -> None:
        self._keys = KeyRing(keys)
        self._has_keys = not self._keys.open
        self._jwt = jwt
        self._open = not self._has_keys and jwt is None

    @classmethod
    def from_settings(cls, settings: EdgeSettings) -> Identities:
        """``[[keys]]`` and ``[auth.jwt]`` (whose ``jwks_file`` is read now)."""
        jwt = settings.auth.jwt
        return cls(settings.keys, JwtVerifier(jwt) if jwt is not None else None)

    @property
    def open(self) -> bool:
        """True when no credential is configured (every caller is let in)."""
        return self._open

    @property
    def jwt(self) -> JwtVerifier | None:
        return self._jwt

    def cached(self, authorization: str | None) -> Identity | None:
        """The caller of an ``Authorization`` header, if known without I/O;
        ``None``: ``await verify(authorization)``. Raises ``AuthenticationFailed``."""
        if self._open:
            return OPEN
        return self.cached_token(bearer_token(authorization))

    async def verify(self, authorization: str | None) -> Identity:
        """The caller of an ``Authorization`` header. Raises ``AuthenticationFailed``
        (401), or ``FlatgateError`` ``jwks_unavailable`` (503)."""
        if self._open:
            return OPEN
        return await self.verify_token(bearer_token(authorization))

    def cached_token(self, token: str | None) -> Identity | None:
        """``cached`` for the token itself (``None``: none was sent)."""
        if self._open:
            return OPEN
        if token is None:
            raise AuthenticationFailed(_MISSING, code=codes.MISSING_API_KEY)
        jwt = self._jwt
        if jwt is not None:
            hit = jwt.cached(token)
            if hit is not None:
                return hit
        if self._has_keys:
            identity = self._keys.identity_for(token)
            if identity is not None:
                return identity
        if jwt is not None and looks_like_jwt(token):
            return None
        raise AuthenticationFailed("Incorrect API key provided.")

    async def verify_token(self, token: str | None) -> Identity:
        """``verify`` for the token itself (``None``: none was sent)."""
        identity = self.cached_token(token)
        if identity is not None:
            return identity
        assert self._jwt is not None and token is not None  # cached_token said: a JWT
        return await self._jwt.verify(token)
