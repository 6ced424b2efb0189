"""Who may call the edge and what it serves: ``[[models]]``, ``[[keys]]`` and
``[auth]`` (``[auth.jwt]``), each key said once with its default and its
comment. Their checks are the edge's (``edge_translator.settings``). No I/O.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from flatgate.proxy.wire.schema import Provider

__all__ = ["JWT_ALGORITHMS", "AuthConfig", "JwtConfig", "KeyConfig", "ModelConfig"]


class ModelConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    provider: str
    aliases: tuple[str, ...] = ()
    owned_by: str = "flatgate"
    # What the model endpoints show: Anthropic's `display_name` (None: the
    # listed id itself) and when the model was made (`created_at`, and
    # OpenAI's `created`; a TOML offset date-time or an RFC 3339 string;
    # None: the Unix epoch).
    display_name: str | None = None
    created_at: datetime | None = None

    @property
    def provider_id(self) -> Provider:
        return Provider[self.provider]


class KeyConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tenant: str
    # Hex SHA-256 of the API key; the key itself is never stored.
    sha256: str
    # Names or globs of the models this key may call (absent: every model the
    # tenant may; a [[tenants]] entry's list applies as well).
    models: tuple[str, ...] | None = None


# The JWT signature algorithms [auth.jwt] may allow: asymmetric only. `none`
# and the HMAC family (HS*) never: a key set is published, and an HMAC "key"
# taken from it would let anyone sign.
JWT_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA")


class JwtConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[auth.jwt]``: bearer tokens that are JWTs, verified against a key set."""

    # Accepted `iss`, and `aud` (a token's `aud` must hold one of these).
    issuer: str
    audience: str | tuple[str, ...]
    # The key set (JWKS): an https URL, fetched in each worker and refreshed
    # when a token names an unknown `kid`, or a local file (read at start, and
    # read again on an unknown `kid`). Exactly one of the two.
    jwks_url: str = ""
    jwks_file: str = ""
    algorithms: tuple[str, ...] = ("RS256", "ES256", "EdDSA")
    # The claim naming the tenant (a non-empty string), by exact name.
    tenant_claim: str = "sub"
    # Optional claim listing the models the token may use (globs; a list of
    # strings, or one string of them separated by spaces). "": not read.
    models_claim: str = ""
    # Clock skew tolerated on `exp`, `nbf` and `iat`.
    leeway_seconds: float = 30.0
    # Verified tokens kept, per worker, so that a token's signature is checked
    # once: until it expires, and never longer than cache_seconds (0: no cache).
    cache_size: int = 10000
    cache_seconds: float = 300.0
    # The key set is fetched at most once per refresh_seconds, and fetched
    # again on the next new token once older than max_age_seconds (0: only
    # on an unknown `kid`).
    refresh_seconds: float = 30.0
    max_age_seconds: float = 3600.0
    fetch_timeout: float = 5.0
    # Longest token verified (longer ones are refused unread).
    max_token_bytes: int = 8192


class AuthConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``[auth]``: how callers are identified besides ``[[keys]]``."""

    jwt: JwtConfig | None = None
