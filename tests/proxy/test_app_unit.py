"""ProxyServer in process: the in-memory exchange and backend of benchmarks.alloc_proxy."""

from __future__ import annotations

import json

from benchmarks.alloc_proxy import make_server, serve_one
from flatgate.proxy.wire.request import build_request
from flatgate.proxy.wire.schema import FinishReason
from flatgate.proxy.wire.writer import write_chunk

BODY = build_request("m", [("user", "hi")])


def test_a_complete_answer_goes_out_as_one_response() -> None:
    frames = write_chunk(content="hi") + write_chunk(finish_reason=FinishReason.STOP)
    server, transport = make_server(frames)
    ex = serve_one(server, BODY)
    assert (ex.status, ex.body_out) == (200, frames)
    assert transport.last_body is BODY
    assert transport.last_answer is not None and transport.last_answer.closed
    assert server.backends["stub"].outstanding == 0


def test_a_malformed_first_frame_is_a_502_not_a_crash() -> None:
    server, transport = make_server(b"\xff\xff\xff\x7f" + b"x" * 64)
    ex = serve_one(server, BODY)
    assert ex.status == 502
    assert json.loads(ex.body_out)["error"]["code"] == "backend_protocol_error"
    assert transport.last_answer is not None and transport.last_answer.closed
    assert server.backends["stub"].outstanding == 0
