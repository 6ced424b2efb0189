"""``proxy_link.whole``: the proxy's embeddings answer read to its end, and
never more of it than ``max_response_bytes``."""

from __future__ import annotations

import pytest

from flatgate.edge_translator.errors import ProxyFailed, ProxyTimedOut
from flatgate.edge_translator.proxy_link import whole
from flatgate.proxy.errors import codes
from flatgate.proxy.errors.root import FlatgateError
from flatgate.proxy.transport.base import UpstreamProtocolError, UpstreamTimeout
from tests.edge.fakes import Response


async def test_the_pieces_are_joined() -> None:
    assert await whole(Response(200, [b"ab", b"cd", b"e"]), 5) == b"abcde"
    assert await whole(Response(200, [b"abc"]), 3) == b"abc"
    assert await whole(Response(200, []), 3) == b""


async def test_a_content_length_over_the_cap_is_refused_before_reading() -> None:
    resp = Response(200, [b"x"], headers={"content-length": "11"}, stall_after=0)
    with pytest.raises(ProxyFailed) as refused:
        await whole(resp, 10)  # a read would stall for ever
    assert refused.value.code is codes.PROXY_PROTOCOL_ERROR
    assert "max_response_bytes = 10" in refused.value.message


async def test_a_body_growing_past_the_cap_is_refused_as_it_does() -> None:
    resp = Response(200, [b"12345", b"678901"], stall_after=2)
    with pytest.raises(ProxyFailed) as refused:
        await whole(resp, 10)  # refused at the second piece, not after the stall
    assert refused.value.status == 502


@pytest.mark.parametrize(
    ("exc", "kind"),
    [(UpstreamProtocolError("reset"), ProxyFailed), (UpstreamTimeout("slow"), ProxyTimedOut)],
)
async def test_a_broken_answer_is_the_edges_error(
    exc: Exception, kind: type[FlatgateError]
) -> None:
    with pytest.raises(kind):
        await whole(Response(200, [b"ab"], error_after=(1, exc)), 100)
