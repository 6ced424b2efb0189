"""The proxy service's errors, and the one place an error becomes an answer.

Owns ``ProxyError`` (what the proxy answers before the first byte), the one
boundary where the exceptions of the layers below become ProxyErrors
(``proxy_error``), and the one rendering of a ProxyError as an answer
(``answer_of``: status, headers, body), which the HTTP surface
(``service.app``) and the in-process router (``service.inprocess``) both send.
After the first byte the same codes travel in an error chunk instead
(``service.relay``). No I/O.

The tree: one class, raised by the service's own steps (``caller``,
``quota``, ``dispatch``, ``app``), and the foreign exceptions mapped to it
here and nowhere else::

    ProxyError                    a ``FlatgateError`` (``proxy.errors.root``) written
    │                             code first: an ``ErrorCode`` (status, code), a
    │                             message, the seconds to wait (Retry-After) and
    │                             whether a retry can help (``should_retry``)
    │   mapped by ``proxy_error`` from:
    ├── body.BodyTooLarge         body_too_large (413)
    ├── body.BodyTimeout          body_timeout (408)
    ├── body.BodyMalformed        malformed_body (400)
    ├── wire.MalformedBuffer      malformed_request (400)
    ├── backends.TranslatorError  backend_protocol_error (502)
    ├── transport.UpstreamTimeout backend_timeout (504)
    └── transport.UpstreamError   backend_unavailable (502); once the answer has
                                  begun, backend_disconnected

There are no subclasses: nothing tells one ProxyError from another by its
type; its code says what it is (``errors.codes``, the one registry). The
foreign exceptions are FlatgateErrors too (the wire's ``MalformedBuffer``
aside), but the map above, not their own default codes, says what the
proxy answers (an upstream error once the answer has begun, for one).

An answer is ``{"error": {"code", "message"}}`` (or a backend's own JSON body,
passed through) with ``Content-Type: application/json``, and:

- ``Retry-After`` in whole seconds, rounded up and at least 1
  (``transport.base.retry_after_value``), when the wait is known;
- ``WWW-Authenticate`` on a 401;
- ``x-should-retry: false`` for a code a retry cannot fix
  (``codes.NOT_RETRYABLE``: the OpenAI and Anthropic SDKs obey it);
- ``Connection: close`` on ``draining``, so that a load balancer's next
  request goes elsewhere.
"""

from __future__ import annotations

import re

from flatgate.proxy.backends.base import TranslatorError
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.codes import ErrorCode, error_body
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.accesslog import Entry
from flatgate.proxy.plumbing.body import BodyError, BodyTimeout, BodyTooLarge
from flatgate.proxy.plumbing.drain import Ending
from flatgate.proxy.plumbing.serve import CallerWatch, Exchange
from flatgate.proxy.transport.base import UpstreamError, UpstreamTimeout, retry_after_value
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.schema import JSON

__all__ = [
    "ANSWERABLE",
    "BUSY_RETRY_AFTER",
    "CLIENT_CLOSED",
    "DRAINING_ANSWER",
    "Answer",
    "ProxyError",
    "answer_of",
    "cancelled",
    "proxy_error",
    "timed_out",
    "unreachable",
    "without_addresses",
]

# Seconds a caller is told to wait when flatgate itself is at a limit.
BUSY_RETRY_AFTER = 1.0

# (status, headers, body): what ``Exchange.respond`` sends.
Answer = tuple[int, list[tuple[str, str]], bytes]
# Status logged and counted for a caller that left before its answer ended.
CLIENT_CLOSED = 499


class ProxyError(FlatgateError):
    """A ``FlatgateError`` the proxy answers before the first byte, written
    code first: its registered code, a message, the status (the code's own
    unless a backend's is passed through, with its JSON ``body``, kept as
    ``raw``), and the seconds a caller should wait before trying again,
    when known."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        status: int = 0,
        retry_after: float | None = None,
        body: bytes = b"",
    ) -> None:
        super().__init__(message, code=code, status=status, retry_after=retry_after, raw=body)


# What the boundary maps: ProxyError itself, and the foreign exceptions of the
# tree above. A handler catches them as one (``except ANSWERABLE as exc``) and
# hands ``exc`` to a function that maps and answers it: a name in the handler
# that held the error would keep its traceback, the handler's frame and the
# request body alive until the GC breaks the cycle.
ANSWERABLE: tuple[type[Exception], ...] = (
    ProxyError,
    BodyError,
    MalformedBuffer,
    TranslatorError,
    UpstreamError,
)


# Where a backend listens, as a transport's message may say it: a socket
# address tuple, an IPv6 or IPv4 address with its port, a URL's authority.
_ADDRESS = re.compile(
    r"\(\s*'[^']*',\s*\d+(?:,\s*\d+)*\s*\)"
    r"|\[[0-9A-Fa-f:.%]+\](?::\d+)?"
    r"|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"
    r"|\b[a-z][a-z0-9+.-]*://[^\s/'\")]+"
    r"|\b(?=[A-Za-z0-9.-]*[A-Za-z])(?:[A-Za-z0-9-]+\.)*[A-Za-z0-9-]+:\d{1,5}\b"
)


def without_addresses(detail: str) -> str:
    """A transport's message about a backend, as a caller may read it: every
    address in it ``<address>`` (the backend is named by its configured
    name; the log keeps the whole message)."""
    return _ADDRESS.sub("<address>", detail)


def timed_out(detail: str) -> ProxyError:
    """504 ``backend_timeout``: no backend answered within its timeouts."""
    return ProxyError(
        codes.BACKEND_TIMEOUT, f"no backend answered in time: {without_addresses(detail)}"
    )


def unreachable(detail: str) -> ProxyError:
    """502 ``backend_unavailable``: no backend could be reached."""
    return ProxyError(
        codes.BACKEND_UNAVAILABLE, f"no backend reachable: {without_addresses(detail)}"
    )


def proxy_error(exc: Exception, *, begun: bool = False) -> ProxyError:
    """``exc`` (one of ``ANSWERABLE``) as a ProxyError; ``begun``: the answer
    has begun (the code goes into an error chunk, its message is the cause's)."""
    if isinstance(exc, ProxyError):
        return exc
    if isinstance(exc, UpstreamTimeout):
        if begun:
            return ProxyError(codes.BACKEND_TIMEOUT, without_addresses(str(exc)))
        return timed_out(str(exc))
    if isinstance(exc, UpstreamError):
        if begun:
            return ProxyError(codes.BACKEND_DISCONNECTED, without_addresses(str(exc)))
        return unreachable(str(exc))
    if isinstance(exc, TranslatorError):
        return ProxyError(codes.BACKEND_PROTOCOL_ERROR, str(exc))
    if isinstance(exc, MalformedBuffer):
        return ProxyError(codes.MALFORMED_REQUEST, str(exc))
    if isinstance(exc, BodyTooLarge):
        return ProxyError(codes.BODY_TOO_LARGE, str(exc))
    if isinstance(exc, BodyTimeout):
        return ProxyError(codes.BODY_TIMEOUT, str(exc))
    if isinstance(exc, BodyError):
        return ProxyError(codes.MALFORMED_BODY, str(exc))
    raise TypeError(f"not an error the proxy answers: {exc!r}") from exc


def answer_of(err: ProxyError) -> Answer:
    """The answer to ``err``: its status, the headers of the module docstring
    and its body."""
    headers = [("content-type", JSON)]
    if err.retry_after is not None:
        headers.append(("retry-after", retry_after_value(err.retry_after)))
    if err.status == 401:
        headers.append(("www-authenticate", 'Bearer realm="flatgate"'))
    if not err.should_retry:
        headers.append(("x-should-retry", "false"))
    if err.code is codes.DRAINING:
        headers.append(("connection", "close"))
    return err.status, headers, err.raw or error_body(err.code, err.message)


# What the HTTP surface answers while it drains, to everything but /healthz
# (docs/operations.md, "Graceful restarts").
DRAINING_ANSWER = answer_of(
    ProxyError(codes.DRAINING, "the proxy is shutting down; retry elsewhere", retry_after=1.0)
)


async def cancelled(ex: Exchange, entry: Entry, watch: CallerWatch | None, ending: Ending) -> bool:
    """A request's task was cancelled: by its caller's leaving (``watch``:
    499, for the metrics only) or by the drain's deadline before any answer
    (``ending``: the draining answer is sent), noted on ``entry``; whatever
    was open upstream is closed by now. ``False``: neither, the cancel is
    the server's own, to re-raise."""
    if watch is not None and watch.caught():
        entry.status, entry.error = CLIENT_CLOSED, "client_closed"
        return True
    if ending.absorb():
        entry.status, entry.error = codes.DRAINING.status, codes.DRAINING.code
        await ex.respond(*DRAINING_ANSWER)
        return True
    return False
