"""What the edge asks of the router: ``Router``, one interface, two makers.

The edge sends the router a ``CompletionRequest`` or an ``EmbeddingRequest``
it has written, and reads its answer; that is all it asks of it. Two
implement it: the router itself, in process (``service.inprocess``, the
one-process gateway's), and the edge's HTTP client to a separate proxy
(``edge_translator.proxy_link.ProxyLink``, over its ``POST /v1/completions``
and ``/v1/embeddings``). ``gateway.onebox`` gives the edge the first; the
edge makes the second for itself. Neither side imports the other: this
module is below both.

- ``complete`` returns the answer once it has begun: a ``Response`` whose
  status is 200, whose headers name the backend (``x-flatgate-backend``) and
  the fields it left out (``x-flatgate-omitted``), and whose body is the
  size-prefixed chunk frames (an upstream failure past that is one error
  chunk among them).
- ``embed`` returns the answer once it has begun: a ``Response`` whose
  status is 200, whose headers name the backend, and whose body is one
  ``EmbeddingResponse`` buffer.
- A refusal before any answer (no route, every backend down, a limit) is
  raised, never answered: in process as ``Refused``, the router's error
  object as it is (the edge reads what it means, as it reads the proxy's
  JSON error over HTTP: ``proxy_link.refused``); over HTTP as the edge's
  error for that JSON.

Where the buffer is verified: where it comes from outside the process. The
proxy's HTTP surface verifies what a caller sent; the router in process
reads the edge's buffer without the verifier's walk (its writer is this
process's code), and keeps the route read's bounds checks.
"""

from __future__ import annotations

from typing import Protocol

from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.transport.base import Response, Transport

__all__ = ["Refused", "Router"]


class Refused(FlatgateError):
    """The router's refusal before any answer, in process: its code, status,
    message and Retry-After as its HTTP surface would answer them (a
    ``FlatgateError`` of its own, so that the edge tells it from its own
    errors)."""

    @classmethod
    def of(cls, err: FlatgateError) -> Refused:
        """``err``, the router's error, as its refusal."""
        return cls(
            err.message,
            code=err.code,
            status=err.status,
            retry_after=err.retry_after,
            raw=err.raw,
        )


class Router(Protocol):
    """What the edge asks of the router (see the module docstring)."""

    async def complete(self, frame: bytes, request_id: str, *, admitted: bool) -> Response:
        """The answer to the ``CompletionRequest`` ``frame``, once begun
        (``admitted``: the edge has charged the tenant's limits, so the
        router need not); a refusal is raised."""
        ...

    async def embed(self, frame: bytes, request_id: str, *, admitted: bool) -> Response:
        """The answer to the ``EmbeddingRequest`` ``frame``, once begun; a
        refusal is raised."""
        ...

    def pool(self) -> Transport | None:
        """The upstream pool the edge reports (its ``stats()``); ``None``
        until one is made."""
        ...

    async def aclose(self) -> None: ...
