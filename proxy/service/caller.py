"""A proxy request's caller, before its body is read: who it is and what it may hold.

The two steps of ``ProxyServer.completions`` between the request's head and
its body, in order: ``caller_of`` (the proxy's bearer token, checked from the
headers alone, so a wrong or missing one where required is refused before any
body byte is read) and ``hold_of`` (admission control: a caller that presented
the token is held to the worker's bounds alone, any other to its address's
share of the body bytes too, and every request to its connection's). Each
failure is a ``ProxyError``. No routing here, and no body: it is read within
``body.BodyPolicy`` next, and its failures are mapped with the others
(``service.errors``).
"""

from __future__ import annotations

from flatgate.proxy.errors import codes
from flatgate.proxy.plumbing.admission import Admission, Hold, Refusal
from flatgate.proxy.plumbing.auth import TokenCheck
from flatgate.proxy.plumbing.serve import Exchange
from flatgate.proxy.service.errors import BUSY_RETRY_AFTER, ProxyError

__all__ = ["caller_of", "hold_of"]


def caller_of(ex: Exchange, token: TokenCheck | None, require_auth: bool) -> tuple[str, bool]:
    """The ``Authorization`` a backend may be forwarded, and whether the
    caller presented the proxy's ``token``; ``ProxyError`` for a wrong token,
    or none where one is required."""
    authorization = ex.header("authorization")
    if token is None:
        return authorization or "", False
    if token.valid(authorization):
        # The proxy's own token is never forwarded, whatever forward_credentials says.
        return "", True
    if authorization is not None or require_auth:
        raise ProxyError(codes.UNAUTHORIZED, "the proxy's bearer token is missing or wrong")
    return "", False


def hold_of(admission: Admission, ex: Exchange, size: int, trusted: bool) -> Hold:
    """Admit the request's ``size`` body bytes (see the module docstring)."""
    peer = ex.peer
    hold = admission.admit(size, None if trusted else peer.rpartition(":")[0], peer)
    if isinstance(hold, Refusal):
        raise ProxyError(hold.code, hold.message, retry_after=BUSY_RETRY_AFTER)
    return hold
