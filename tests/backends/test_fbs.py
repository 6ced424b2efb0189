"""``backends.fbs``: the passthrough. ``FrameRelay`` cuts the backend's frames at
frame boundaries without decoding them; ``FbsAdapter`` sends the caller's bytes
untouched.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from flatgate.proxy.backends.base import Inbound, TranslatorError
from flatgate.proxy.backends.fbs.adapter import FbsAdapter, FrameRelay
from flatgate.proxy.backends.section import BackendConfig
from flatgate.proxy.errors import codes
from flatgate.proxy.wire.chunk.frames import MAX_FRAME_BYTES, ChunkError, Usage
from flatgate.proxy.wire.chunk.writer import ChunkWriter
from flatgate.proxy.wire.request.decode import Request
from flatgate.proxy.wire.schema import FLATBUFFERS, FRAMES, FinishReason
from tests.backends.helpers import bytewise, random_pieces, read_frames, run, terminals

W = ChunkWriter("rid", "m")
STREAM = b"".join(
    [
        W.content("Hello"),
        W.reasoning("hmm"),
        W.content(", world"),
        W.chunk(finish_reason=FinishReason.STOP, usage=Usage(3, 2)),
    ]
)


def test_a_piece_of_whole_frames_passes_through_uncopied() -> None:
    relay = FrameRelay("rid")
    assert relay.feed(STREAM) is STREAM
    assert relay.done
    assert relay.end() == b""


def test_frames_cut_across_reads_come_out_whole_and_unchanged() -> None:
    want = read_frames(STREAM)
    rng = random.Random(3)
    for _ in range(50):
        relay = FrameRelay("rid")
        out = b"".join(relay.feed(p) for p in random_pieces(STREAM, rng))
        assert out == STREAM
        assert relay.done
    assert run(FrameRelay("rid"), bytewise(STREAM)) == want


def test_not_done_until_the_final_frame() -> None:
    relay = FrameRelay("rid")
    relay.feed(STREAM[:-1])
    assert not relay.done


def test_a_stream_ending_without_a_final_frame_gets_one_truncation_chunk() -> None:
    relay = FrameRelay("other-rid")
    chunks = run(relay, [W.content("partial")])
    assert [c.content for c in chunks] == ["partial", ""]
    last = chunks[-1]
    assert last.finish_reason == FinishReason.ERROR
    assert last.error is not None
    assert last.error.code == codes.BACKEND_STREAM_TRUNCATED.code
    assert last.request_id == "other-rid"
    assert relay.done
    assert relay.end() == b""


def test_a_stream_ending_inside_a_frame_gets_one_truncation_chunk() -> None:
    relay = FrameRelay("rid")
    chunks = run(relay, [STREAM[:-3]])
    assert len(terminals(chunks)) == 1
    assert chunks[-1].finish_reason == FinishReason.ERROR


def test_an_error_frame_is_final() -> None:
    relay = FrameRelay("rid")
    relay.feed(
        W.content("x") + W.chunk(error=ChunkError("e", "m"), finish_reason=FinishReason.ERROR)
    )
    assert relay.done


def test_frames_pass_through_as_the_backend_sent_them() -> None:
    """The fbs relay does not inspect frames (that is what makes it cheap): an fbs
    backend that writes past its final chunk has its frames relayed as sent, and
    the relay, seeing a stream whose last frame is not final, ends it with a
    truncation error; readers stop at the first terminal chunk."""
    relay = FrameRelay("rid")
    data = STREAM + W.content("after the end")
    assert relay.feed(data) is data  # whole frames: the very bytes, no copy
    assert not relay.done
    out = read_frames(data + relay.end())
    assert [c.error.code for c in terminals(out) if c.error] == ["backend_stream_truncated"]
    assert relay.done and relay.end() == b""


def test_a_frame_longer_than_the_limit_raises_translator_error() -> None:
    with pytest.raises(TranslatorError):
        FrameRelay("rid").feed(struct.pack("<I", MAX_FRAME_BYTES + 1) + b"\0" * 8)


# -- the adapter ---------------------------------------------------------------


def adapter(**kw: Any) -> FbsAdapter:
    return FbsAdapter(BackendConfig(name="f", url="http://127.0.0.1:8082/", **kw))


def never() -> Request:
    raise AssertionError("the fbs passthrough decoded the request")


def test_prepare_sends_the_callers_bytes_untouched_without_decoding_them() -> None:
    body = b"FGRQ-any-bytes"
    out = adapter().prepare(Inbound(body, never, "rid-1", "Bearer caller"))
    assert out.body is body
    assert out.url == "http://127.0.0.1:8082/v1/completions"
    assert out.headers == [
        ("content-type", FLATBUFFERS),
        ("accept", FRAMES),
        ("x-request-id", "rid-1"),
    ]


def test_prepare_forwards_the_callers_credential_only_when_configured() -> None:
    out = adapter(forward_credentials=True).prepare(Inbound(b"x", never, "r", "Bearer c"))
    assert ("authorization", "Bearer c") in out.headers


def test_prepare_adds_the_configured_headers() -> None:
    out = adapter(headers={"x-team": "a"}).prepare(Inbound(b"x", never, "r", ""))
    assert ("x-team", "a") in out.headers


def test_the_translator_is_a_frame_relay_and_the_probe_is_healthz() -> None:
    a = adapter()
    assert isinstance(a.translator("rid", "m"), FrameRelay)
    assert a.probe().url == "http://127.0.0.1:8082/healthz"
