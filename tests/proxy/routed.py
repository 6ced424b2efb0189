"""The router in process (``service.inprocess.InProcessRouter``), read as
the proxy's HTTP surface would have answered: ``answered`` awaits one of its
calls and gives the status, headers and body, a refusal's (raised as
``transport.router.Refused``) as ``service.errors.answer_of`` writes it."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping

from flatgate.proxy.service.errors import ProxyError, answer_of
from flatgate.proxy.transport.base import Response
from flatgate.proxy.transport.router import Refused

__all__ = ["answered", "http_answer"]


def http_answer(err: Refused) -> tuple[int, dict[str, str], bytes]:
    """What the proxy's HTTP surface answers for the refusal ``err``."""
    status, headers, body = answer_of(
        ProxyError(
            err.code, err.message, status=err.status, retry_after=err.retry_after, body=err.raw
        )
    )
    return status, dict(headers), body


async def answered(call: Awaitable[Response]) -> tuple[int, Mapping[str, str], bytes]:
    """``call``'s answer, read whole and closed, or its refusal's."""
    try:
        resp = await call
    except Refused as err:
        return http_answer(err)
    try:
        return resp.status, resp.headers, await resp.read()
    finally:
        await resp.aclose()
