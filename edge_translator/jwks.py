"""JWT signing keys: a JSON Web Key Set (RFC 7517) read, checked and kept fresh.

Owns turning a JWKS document into verification keys (``parse_key_set``, pure),
reading one from a file or fetching one over HTTP(S) through the project's
transport, and ``KeySource``: the key set a worker holds, fetched again when a
token names an unknown ``kid`` or the set grows old, at most once per
``refresh_seconds``, concurrent callers sharing one fetch, a failed fetch
keeping the keys held (and logged once, not once per request).

Only public, asymmetric keys meant for signatures are kept: ``kty`` RSA (2048
bits or more), EC (P-256, P-384) or OKP (Ed25519, Ed448); never ``oct`` (a
symmetric secret cannot be published), never a key with private material,
never one whose ``use`` or ``key_ops`` says it is not for verifying. Each key
is bound to the algorithms it may verify: those its type allows, narrowed to
its own ``alg`` when it names one, and to the configured ones. Keys are
PyJWT's ``PyJWK`` objects over ``cryptography``; no crypto is written here.

I/O: ``read_key_file`` reads a file; ``fetch_key_set`` makes one GET.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import msgspec
from jwt import PyJWK
from jwt.exceptions import PyJWTError

from flatgate.proxy.apis.decoding import UNDECODABLE, why_undecodable
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.transport.base import Timeouts, Upstream, UpstreamError
from flatgate.proxy.transport.factory import make_transport

__all__ = [
    "MAX_KEYS",
    "MAX_KEY_SET_BYTES",
    "KeySet",
    "KeySetError",
    "KeySource",
    "fetch_key_set",
    "parse_key_set",
    "read_key_file",
]

log = logging.getLogger("flatgate.edge")

# Bounds on what a key set may make the edge hold.
MAX_KEY_SET_BYTES = 1 << 20
MAX_KEYS = 256
_MIN_RSA_BITS = 2048
_RSA = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
_CURVES: dict[str, dict[str, tuple[str, ...]]] = {
    "EC": {"P-256": ("ES256",), "P-384": ("ES384",)},
    "OKP": {"Ed25519": ("EdDSA",), "Ed448": ("EdDSA",)},
}
_PRIVATE = ("d", "p", "q", "dp", "dq", "qi", "oth", "k")


class KeySetError(FlatgateError, ValueError):
    """A key set that cannot be used (the message says why, never a key)."""

    default = codes.JWKS_UNAVAILABLE


class KeySet:
    """Verification keys by ``kid``, each with the algorithms it may verify."""

    __slots__ = ("_by_kid", "loaded_at")

    def __init__(
        self, by_kid: Mapping[str | None, Mapping[str, PyJWK]] | None = None, loaded_at: float = 0
    ) -> None:
        self._by_kid: dict[str | None, dict[str, PyJWK]] = {
            kid: dict(algs) for kid, algs in (by_kid or {}).items()
        }
        # time.monotonic() when it was read or fetched.
        self.loaded_at = loaded_at

    def __len__(self) -> int:
        return len(self._by_kid)

    @property
    def kids(self) -> frozenset[str | None]:
        return frozenset(self._by_kid)

    def get(self, kid: str | None) -> Mapping[str, PyJWK] | None:
        """The key ``kid`` names (its algorithms to its ``PyJWK``), or ``None``.
        A token without a ``kid`` gets the set's key without one, or its only key."""
        keys = self._by_kid.get(kid)
        if keys is None and kid is None and len(self._by_kid) == 1:
            keys = next(iter(self._by_kid.values()))
        return keys


def _algorithms_of(jwk: Mapping[str, Any], allowed: frozenset[str]) -> tuple[str, ...] | str:
    """The algorithms ``jwk`` may verify, or why it is not kept."""
    kty = jwk.get("kty")
    if kty == "oct":
        return "a symmetric (oct) key is never used"
    if kty == "RSA":
        algs: tuple[str, ...] = _RSA
    elif kty in _CURVES:
        crv = jwk.get("crv")
        found = _CURVES[kty].get(crv) if isinstance(crv, str) else None
        if found is None:
            return f"unsupported {kty} curve"
        algs = found
    else:
        return "unsupported key type"
    if any(name in jwk for name in _PRIVATE):
        return "it holds private key material"
    if jwk.get("use", "sig") != "sig":
        return "its use is not sig"
    ops = jwk.get("key_ops")
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        return "its key_ops do not include verify"
    named = jwk.get("alg")
    if named is not None:
        algs = tuple(a for a in algs if a == named)
    algs = tuple(a for a in algs if a in allowed)
    if not algs:
        return "no configured algorithm fits it"
    return algs


def _bind(jwk: dict[str, Any], algs: tuple[str, ...]) -> dict[str, PyJWK] | str:
    """``jwk`` as a ``PyJWK`` per algorithm, or why it is not kept."""
    out: dict[str, PyJWK] = {}
    for alg in algs:
        try:
            key = PyJWK(jwk, algorithm=alg)
        except PyJWTError:
            return "it does not decode as its key type"
        if jwk["kty"] == "RSA" and getattr(key.key, "key_size", 0) < _MIN_RSA_BITS:
            return f"an RSA key shorter than {_MIN_RSA_BITS} bits"
        out[alg] = key
    return out


def parse_key_set(
    data: bytes, algorithms: Iterable[str], *, loaded_at: float | None = None
) -> KeySet:
    """The usable keys of a JWKS document (``{"keys": [...]}``) for ``algorithms``.

    Unusable keys are skipped; ``KeySetError`` when none is left, the message
    naming why each was skipped. Pure: no I/O."""
    if len(data) > MAX_KEY_SET_BYTES:
        raise KeySetError(f"larger than {MAX_KEY_SET_BYTES} bytes")
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise KeySetError(f"not JSON: {exc}") from None
    except UNDECODABLE as exc:
        raise KeySetError(f"not JSON: {why_undecodable(exc)}") from None
    keys = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(keys, list):
        raise KeySetError('not a JWK set: expected {"keys": [...]}')
    allowed = frozenset(algorithms)
    by_kid: dict[str | None, dict[str, PyJWK]] = {}
    skipped: list[str] = []
    for i, jwk in enumerate(keys[:MAX_KEYS]):
        kid = jwk.get("kid") if isinstance(jwk, dict) else None
        name = f"keys[{i}]" + (f" (kid {kid!r})" if isinstance(kid, str) else "")
        if not isinstance(jwk, dict) or not (kid is None or isinstance(kid, str)):
            skipped.append(f"{name}: not a JWK")
            continue
        algs = _algorithms_of(jwk, allowed)
        bound = _bind(jwk, algs) if isinstance(algs, tuple) else algs
        if isinstance(bound, str):
            skipped.append(f"{name}: {bound}")
            continue
        by_kid.setdefault(kid, {}).update(bound)
    if not by_kid:
        why = "; ".join(skipped[:4]) if skipped else "the set is empty"
        raise KeySetError(f"no usable key for {', '.join(sorted(allowed))}: {why}")
    return KeySet(by_kid, time.monotonic() if loaded_at is None else loaded_at)


def read_key_file(path: str, algorithms: Iterable[str]) -> KeySet:
    """The key set in a local JWKS file."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_KEY_SET_BYTES + 1)
    except OSError as exc:
        raise KeySetError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    try:
        return parse_key_set(data, algorithms)
    except KeySetError as exc:
        raise KeySetError(f"{path!r}: {exc}") from None


def _where(url: str) -> str:
    """``url`` without its user information or query (they may carry secrets)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"


async def fetch_key_set(url: str, algorithms: Iterable[str], timeout: float) -> KeySet:
    """GET the JWKS at ``url`` (no redirects; the system's CA store for https)
    within ``timeout`` seconds, on a transport of its own, closed after."""
    transport = make_transport("fast", limit=1, pool_timeout=timeout)
    body = bytearray()
    try:
        resp = await transport.request(
            Upstream(
                "GET",
                url,
                body=b"",
                headers=[("accept", "application/json"), ("accept-encoding", "identity")],
                timeouts=Timeouts(connect=timeout, read=timeout, total=timeout),
            )
        )
        try:
            if resp.status != 200:
                raise KeySetError(f"{_where(url)} answered HTTP {resp.status}")
            async for piece in resp.iter_bytes():
                body += piece
                if len(body) > MAX_KEY_SET_BYTES:
                    raise KeySetError(f"{_where(url)}: larger than {MAX_KEY_SET_BYTES} bytes")
        finally:
            await resp.aclose()
    except UpstreamError as exc:
        raise KeySetError(f"cannot fetch {_where(url)}: {exc}") from None
    finally:
        await transport.aclose()
    try:
        return parse_key_set(bytes(body), algorithms)
    except KeySetError as exc:
        raise KeySetError(f"{_where(url)}: {exc}") from None


class KeySource:
    """The key set one worker holds, and when to load it again.

    ``load`` reads or fetches a fresh set (raising ``KeySetError``). A set
    given at construction counts as loaded then; without one, the first
    ``refresh`` loads it."""

    def __init__(
        self,
        load: Callable[[], Awaitable[KeySet]],
        *,
        name: str,
        refresh_seconds: float,
        max_age_seconds: float = 0,
        keys: KeySet | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self._name = name
        self._refresh = refresh_seconds
        self._max_age = max_age_seconds
        self._monotonic = monotonic
        self.keys = keys if keys is not None else KeySet()
        self._last_attempt = monotonic() if keys is not None else -math.inf
        self._fetching: asyncio.Task[bool] | None = None
        self._failing = False
        # Loads attempted (for tests and metrics).
        self.fetches = 0

    @property
    def stale(self) -> bool:
        """Whether the set is older than ``max_age_seconds`` (never when 0)."""
        return bool(self._max_age) and self._monotonic() - self.keys.loaded_at >= self._max_age

    def retry_in(self) -> float:
        """Seconds until a refresh may be attempted again."""
        return max(0.0, self._last_attempt + self._refresh - self._monotonic())

    async def refresh(self) -> bool:
        """Load the set again, unless a load began less than ``refresh_seconds``
        ago; a load under way is joined, not repeated. True when a new set
        is in place after it."""
        fetching = self._fetching
        if fetching is None:
            if self.retry_in() > 0:
                return False
            self._last_attempt = self._monotonic()
            fetching = self._fetching = asyncio.ensure_future(self._fetch())
        # Shielded: a caller that leaves does not cancel the others' fetch.
        return await asyncio.shield(fetching)

    async def _fetch(self) -> bool:
        self.fetches += 1
        try:
            keys = await self._load()
        except Exception as exc:  # a failed load keeps the keys held
            if not self._failing:
                log.warning(
                    "edge: cannot load the JWT key set (%s): %s; keeping the %d keys held",
                    self._name,
                    exc if isinstance(exc, KeySetError) else repr(exc),
                    len(self.keys),
                )
            self._failing = True
            return False
        finally:
            self._fetching = None
        if self._failing:
            log.warning("edge: the JWT key set (%s) loads again", self._name)
            self._failing = False
        keys.loaded_at = self._monotonic()
        self.keys = keys
        return True
