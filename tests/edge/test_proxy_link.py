"""The edge's link to the proxy: the transport's errors become the edge's at
this one boundary, before the answer and while its frames are read."""

from __future__ import annotations

import asyncio

import pytest

from flatgate.edge_translator.errors import ProxyFailed, ProxyTimedOut
from flatgate.edge_translator.proxy_link import Frames, ProxyLink, proxy_failure
from flatgate.edge_translator.settings import EdgeSection
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.plumbing.drain import Ending
from flatgate.proxy.plumbing.metrics import Metrics
from flatgate.proxy.transport.base import (
    Upstream,
    UpstreamConnectError,
    UpstreamError,
    UpstreamPoolTimeout,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from tests.edge import fakes


@pytest.mark.parametrize(
    ("exc", "kind", "code", "status"),
    [
        (UpstreamPoolTimeout("full"), FlatgateError, codes.POOL_EXHAUSTED, 503),
        (UpstreamTimeout("slow"), ProxyTimedOut, codes.PROXY_TIMEOUT, 504),
        (UpstreamConnectError("refused"), ProxyFailed, codes.PROXY_UNAVAILABLE, 502),
        (UpstreamProtocolError("cut"), ProxyFailed, codes.PROXY_UNAVAILABLE, 502),
    ],
)
def test_before_the_answer(exc: UpstreamError, kind: type, code: codes.ErrorCode, status: int):
    err = proxy_failure(exc)
    assert type(err) is kind
    assert (err.code, err.status) == (code, status)
    assert str(exc) in err.message
    assert err.retry_after == (1.0 if code is codes.POOL_EXHAUSTED else None)


@pytest.mark.parametrize(
    ("exc", "kind", "code"),
    [
        (UpstreamTimeout("slow"), ProxyTimedOut, codes.PROXY_TIMEOUT),
        (UpstreamProtocolError("cut"), ProxyFailed, codes.PROXY_PROTOCOL_ERROR),
        (UpstreamPoolTimeout("odd"), ProxyFailed, codes.PROXY_PROTOCOL_ERROR),
    ],
)
def test_while_its_frames_are_read(exc: UpstreamError, kind: type, code: codes.ErrorCode):
    err = proxy_failure(exc, begun=True)
    assert type(err) is kind and err.code is code


def _failures(metrics: Metrics, kind: str) -> float | None:
    labels = {"backend": "proxy", "kind": kind}
    return metrics.registry.get_sample_value("flatgate_edge_upstream_failures_total", labels)


class _Failing:
    def __init__(self, exc: Exception) -> None:
        self.exc = exc
        self.sent: list[bytes] = []

    async def request(self, req: Upstream) -> object:
        self.sent.append(req.body)
        raise self.exc

    def stats(self) -> dict[str, int]:
        return {}

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize(
    ("exc", "label"),
    [(UpstreamTimeout("slow"), "timeout"), (UpstreamConnectError("no"), "unreachable")],
)
async def test_send_counts_the_proxys_failures(exc: UpstreamError, label: str):
    metrics = Metrics("flatgate_edge")
    link = ProxyLink(EdgeSection(), metrics, transport_factory=lambda: _Failing(exc))  # type: ignore[arg-type,return-value]
    with pytest.raises(FlatgateError) as info:
        await link.complete(b"frame", "rid", admitted=False)
    assert info.value.__cause__ is exc
    assert _failures(metrics, label) == 1


async def test_a_pool_timeout_is_the_edges_own_limit_not_a_proxy_failure():
    metrics = Metrics("flatgate_edge")
    link = ProxyLink(
        EdgeSection(),
        metrics,
        transport_factory=lambda: _Failing(UpstreamPoolTimeout("full")),  # type: ignore[arg-type,return-value]
    )
    with pytest.raises(FlatgateError) as info:
        await link.complete(b"frame", "rid", admitted=False)
    assert info.value.code is codes.POOL_EXHAUSTED
    assert _failures(metrics, "timeout") == _failures(metrics, "unreachable") == 0


async def test_frames_map_a_broken_connection():
    cut = fakes.Response(200, [], error_after=(0, UpstreamProtocolError("reset")))
    frames = Frames(cut)
    with pytest.raises(ProxyFailed) as info:
        await frames.next()
    assert info.value.code is codes.PROXY_PROTOCOL_ERROR
    await frames.aclose()


async def test_the_drain_ending_a_wait_is_draining():
    async def read() -> None:
        ending = Ending()
        frames = Frames(fakes.Response(200, [], stall_after=0), ending)
        asyncio.get_running_loop().call_later(0.01, ending)
        await frames.next()

    with pytest.raises(FlatgateError) as info:
        await asyncio.create_task(read())
    assert info.value.code is codes.DRAINING
