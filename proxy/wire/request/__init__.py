"""``CompletionRequest``, the root a caller sends: its route read (``route``),
verifier (``verify``), fast reader (``decode``), token estimate
(``estimate``), the fast writer the edge writes with (``writer``) and
``build_request`` (``build``), the documented way to write one from Python,
re-exported here as ``wire.request.build_request``. No I/O."""

from __future__ import annotations

from flatgate.proxy.wire.request.build import ROLES, build_request

__all__ = ["ROLES", "build_request"]
