"""Bearer tokens that are JWTs (``[auth.jwt]``) to identities.

Owns verifying a JWT: its header's ``alg`` against the configured algorithms
(never ``none`` or HS*: ``settings.JWT_ALGORITHMS``), its ``kid`` against the key
set (``jwks.KeySource``, fetched again on an unknown ``kid``, rate-limited),
then PyJWT's ``jwt.decode`` with that one key and that one algorithm (the key
is bound to the algorithms it may verify, so a token cannot pick how its key
is read), checking the signature, ``exp`` (required), ``nbf``, ``iat``,
``iss`` and ``aud`` within ``leeway_seconds``; then that the time claims are
JSON numbers (PyJWT takes ``int()`` of them, so ``"exp": "9999999999"``, a
string, would pass), the tenant claim (a non-empty printable string) and, if
configured, the models claim.

A verified token is cached (``cached``: one dict lookup and a clock read, no
signature check) until its ``exp`` (plus the leeway, as a verify would
allow), never longer than ``cache_seconds``, and not past a key-set refresh
that drops its key. The cache holds only tokens that verified, at most
``cache_size`` of them (oldest first out), each at most ``max_token_bytes``
long: a caller cannot grow it with made-up tokens.

Every failure is an ``InvalidToken`` (401) saying what failed, never echoing
the token, its claims or a key: garbage in any part (not base64url, not
UTF-8, not JSON, JSON nested too deeply to decode) included. No I/O here
beyond ``jwks``'.
"""

from __future__ import annotations

import base64
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeGuard

import jwt
import msgspec
from jwt import PyJWK
from jwt import exceptions as jwt_errors
from jwt.types import Options

from flatgate.edge_translator.errors import InvalidToken
from flatgate.edge_translator.jwks import (
    KeySet,
    KeySource,
    fetch_key_set,
    read_key_file,
)
from flatgate.edge_translator.keys import Credential, Identity
from flatgate.edge_translator.settings import JwtConfig
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError

__all__ = ["MAX_CLAIM_CHARS", "MAX_MODELS", "JwtVerifier", "key_source", "looks_like_jwt"]

# Bounds on what a token's claims may make the edge keep.
MAX_CLAIM_CHARS = 256
MAX_MODELS = 256
_INVALID = "Invalid JWT bearer token: "
_NOT_DECODED = "it does not decode (expected header.payload.signature)."
# PyJWT's refusals, each as the caller is told it (none is a subclass of
# another, so the order does not matter).
_REASONS: dict[type[jwt_errors.PyJWTError], str] = {
    jwt_errors.ExpiredSignatureError: "it has expired (exp).",
    jwt_errors.ImmatureSignatureError: "it is not valid yet (nbf or iat is in the future).",
    jwt_errors.InvalidIssuerError: "its issuer (iss) is not accepted.",
    jwt_errors.InvalidAudienceError: "its audience (aud) is not accepted.",
    jwt_errors.InvalidSignatureError: "its signature does not verify.",
    jwt_errors.InvalidSubjectError: "its 'sub' claim is not a string.",
    jwt_errors.InvalidAlgorithmError: "its algorithm does not match its key.",
}
_REFUSED = tuple(_REASONS)
# NumericDate claims: a JSON number of seconds since the epoch (RFC 7519).
_TIMES = ("exp", "nbf", "iat")
# How PyJWT names a time claim it could not take int() of.
_PYJWT_TIME = re.compile(r"\((exp|nbf|iat)\) must be")


def looks_like_jwt(token: str) -> bool:
    """Whether ``token`` has a compact JWS's shape (three dot-separated
    segments), so that it is verified as a JWT rather than looked up as a key."""
    return token.count(".") == 2


def key_source(config: JwtConfig, monotonic: Callable[[], float] = time.monotonic) -> KeySource:
    """The key source ``config`` names: a file read now (``KeySetError`` if it
    does not load) and again on refresh, or a URL fetched on first use."""
    algs = config.algorithms
    if config.jwks_file:
        path = config.jwks_file

        async def read() -> KeySet:
            return read_key_file(path, algs)

        return KeySource(
            read,
            name=path,
            refresh_seconds=config.refresh_seconds,
            max_age_seconds=config.max_age_seconds,
            keys=read_key_file(path, algs),
            monotonic=monotonic,
        )
    url, timeout = config.jwks_url, config.fetch_timeout

    async def fetch() -> KeySet:
        return await fetch_key_set(url, algs, timeout)

    return KeySource(
        fetch,
        name=url.partition("?")[0],
        refresh_seconds=config.refresh_seconds,
        max_age_seconds=config.max_age_seconds,
        monotonic=monotonic,
    )


def _header(token: str) -> dict[str, Any] | None:
    """The JOSE header of a compact token, read only to choose its key.

    Not ``jwt.get_unverified_header``: it checks every segment's alphabet
    character by character (some 20 µs for a 600-byte token, as much again
    inside ``jwt.decode``). Lenient base64 is safe here: ``jwt.decode`` then
    reads the whole token strictly, and holds the header's ``alg`` to the
    one algorithm it is given and to the key's own."""
    segment, dot, _ = token.partition(".")
    if not dot:
        return None
    try:
        header = msgspec.json.decode(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    # binascii.Error and UnicodeDecodeError are ValueErrors; RecursionError:
    # nested deeper than the decoder goes.
    except (ValueError, RecursionError, msgspec.DecodeError):
        return None
    return header if isinstance(header, dict) else None


def _invalid(why: str) -> InvalidToken:
    return InvalidToken(_INVALID + why)


def _time_claims(claims: dict[str, Any]) -> None:
    """Refuse a time claim PyJWT took that is not a JSON number."""
    for name in _TIMES:
        if name in claims:
            value = claims[name]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _not_a_time(name)


def _not_a_time(name: str) -> InvalidToken:
    return _invalid(f"its '{name}' claim is not a number (seconds since the epoch).")


def _text(value: Any) -> TypeGuard[str]:
    """A claim value fit to become a tenant or a model glob."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_CLAIM_CHARS
        and value.isprintable()
        and value == value.strip()
    )


class JwtVerifier:
    """One worker's JWT check: ``cached`` (sync, the hot path) and ``verify``."""

    __slots__ = (
        "_algorithms",
        "_audience",
        "_cache",
        "_cache_seconds",
        "_cache_size",
        "_clock",
        "_issuer",
        "_leeway",
        "_max_token",
        "_models_claim",
        "_options",
        "_tenant_claim",
        "source",
    )

    def __init__(
        self,
        config: JwtConfig,
        *,
        source: KeySource | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock``: wall-clock seconds, for the cache's expiry (``exp`` is
        wall-clock time); PyJWT reads its own clock for its checks."""
        self._algorithms = frozenset(config.algorithms)
        self._issuer = config.issuer
        self._audience = (
            config.audience if isinstance(config.audience, str) else list(config.audience)
        )
        self._leeway = config.leeway_seconds
        self._tenant_claim = config.tenant_claim
        self._models_claim = config.models_claim
        self._max_token = config.max_token_bytes
        self._cache_size = config.cache_size
        self._cache_seconds = config.cache_seconds
        self._clock = clock
        # token -> (identity, trusted until (wall clock), kid)
        self._cache: OrderedDict[str, tuple[Identity, float, str | None]] = OrderedDict()
        self._options: Options = {
            "require": ["exp", "iss", "aud"],
            "enforce_minimum_key_length": True,
        }
        self.source = source if source is not None else key_source(config)

    def __len__(self) -> int:
        """Tokens cached."""
        return len(self._cache)

    def cached(self, token: str) -> Identity | None:
        """The identity of a token verified before and not yet expired; ``None``
        when it must be verified (``verify``)."""
        entry = self._cache.get(token)
        if entry is None:
            return None
        if entry[1] > self._clock():
            return entry[0]
        del self._cache[token]
        return None

    async def verify(self, token: str) -> Identity:
        """Verify ``token`` (a cache hit first); raises ``InvalidToken`` (401),
        or ``FlatgateError`` ``jwks_unavailable`` (503) when no key set could be
        loaded at all."""
        hit = self.cached(token)
        if hit is not None:
            return hit
        if len(token) > self._max_token:
            raise _invalid(f"it is longer than {self._max_token} bytes.")
        header = _header(token)
        if header is None:
            raise _invalid(_NOT_DECODED)
        alg, kid = header.get("alg"), header.get("kid")
        if not (kid is None or isinstance(kid, str)):
            raise _invalid("its key id (kid) is not a string.")
        if not isinstance(alg, str) or alg not in self._algorithms:
            named = f"'{alg}' " if alg in ("none", "HS256", "HS384", "HS512") else ""
            raise _invalid(
                f"its algorithm {named}is not accepted "
                f"(accepted: {', '.join(sorted(self._algorithms))})."
            )
        source = self.source
        if source.stale:
            await self._refresh()
        keys = source.keys.get(kid)
        if keys is None and await self._refresh():
            keys = source.keys.get(kid)
        if keys is None:
            if not len(source.keys):
                raise FlatgateError(
                    "The gateway cannot verify tokens yet: its JWT key set could not be "
                    "loaded; retry shortly.",
                    code=codes.JWKS_UNAVAILABLE,
                    retry_after=max(1.0, source.retry_in()),
                )
            raise _invalid(
                "its key id (kid) is not in the key set."
                if kid is not None
                else "it has no key id (kid) and the key set holds several keys."
            )
        key = keys.get(alg)
        if key is None:
            raise _invalid("its algorithm does not match its key.")
        claims = self._decode(token, key, alg)
        identity = self._identity(claims)
        if self._cache_size:
            self._remember(token, identity, claims["exp"], kid)
        return identity

    def _decode(self, token: str, key: PyJWK, alg: str) -> dict[str, Any]:
        """PyJWT's checks, its exceptions mapped to what the caller is told."""
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=[alg],
                issuer=self._issuer,
                audience=self._audience,
                leeway=self._leeway,
                options=self._options,
            )
        except jwt_errors.MissingRequiredClaimError as exc:
            raise _invalid(f"it has no '{exc.claim}' claim.") from None
        except _REFUSED as exc:
            raise _invalid(next(r for k, r in _REASONS.items() if isinstance(exc, k))) from None
        except jwt_errors.PyJWTError as exc:  # DecodeError among them
            named = _PYJWT_TIME.search(str(exc))
            if named is not None:
                raise _not_a_time(named.group(1)) from None
            if isinstance(exc, jwt_errors.DecodeError):
                raise _invalid(_NOT_DECODED) from None
            raise _invalid("one of its claims is malformed.") from None
        except RecursionError:  # a payload nested deeper than json goes
            raise _invalid(_NOT_DECODED) from None
        _time_claims(claims)
        return claims

    def _identity(self, claims: dict[str, Any]) -> Identity:
        tenant = claims.get(self._tenant_claim)
        if not _text(tenant):
            raise _invalid(
                f"its '{self._tenant_claim}' claim (the tenant) is missing, empty, not a "
                f"string, or longer than {MAX_CLAIM_CHARS} characters."
            )
        models: tuple[str, ...] | None = None
        if self._models_claim and self._models_claim in claims:
            raw = claims[self._models_claim]
            globs = raw.split() if isinstance(raw, str) else raw
            if (
                not isinstance(globs, list)
                or len(globs) > MAX_MODELS
                or not all(_text(g) for g in globs)
            ):
                raise _invalid(
                    f"its '{self._models_claim}' claim (the models it may use) is not a list "
                    f"of up to {MAX_MODELS} model names or globs."
                )
            models = tuple(globs)
        return Identity(tenant, Credential.JWT, models)

    def _remember(self, token: str, identity: Identity, exp: Any, kid: str | None) -> None:
        try:
            # A verify accepts the token until exp + leeway: the cache does too.
            until = float(exp) + self._leeway
        except (TypeError, ValueError, OverflowError):  # PyJWT took it: int() did
            return
        until = min(until, self._clock() + self._cache_seconds)
        cache = self._cache
        if token not in cache and len(cache) >= self._cache_size:
            cache.popitem(last=False)
        cache[token] = (identity, until, kid)

    async def _refresh(self) -> bool:
        """Load the key set again (rate-limited, shared); forget cached tokens
        whose key it no longer holds."""
        if not await self.source.refresh():
            return False
        keys = self.source.keys
        gone = [t for t, (_, _, kid) in self._cache.items() if keys.get(kid) is None]
        for token in gone:
            del self._cache[token]
        return True
