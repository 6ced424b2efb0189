"""Hostile buffers: only ``MalformedBuffer`` escapes, and what verifies decodes.

Seeded: each randomized test prints its seed (``pytest -s``) and names it in
every failure message, so a failure replays with the same seed.
"""

from __future__ import annotations

import random
import struct

import flatbuffers
import pytest

from flatgate.generated.LLMGateway import CompletionRequest as fb_request
from flatgate.generated.LLMGateway import Message as fb_message
from flatgate.generated.LLMGateway.CompletionRequest import CompletionRequest
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.request.route import read_route
from flatgate.proxy.wire.request.verify import verify_request
from flatgate.proxy.wire.schema import REQUEST_IDENTIFIER
from tests.proxy.wire_helpers import build, full_decode, sample_request

SEEDS = [20260, 7, 424242]
MUTATIONS_PER_SEED = 3000


def sample_buffers() -> list[bytes]:
    return [
        build(sample_request()),
        build(sample_request("llama-3.1-8b", provider=0), force_defaults=True),
    ]


def check(buf: bytes, context: str) -> str:
    """Run both functions; only MalformedBuffer may escape; accepted decodes.

    Returns "accepted" or "rejected" for the verifier.
    """
    route: tuple[int, memoryview] | None
    try:
        route = read_route(buf)
    except MalformedBuffer:
        route = None
    except Exception as exc:
        raise AssertionError(f"{context}: read_route raised {exc!r}") from exc
    try:
        verify_request(buf)
    except MalformedBuffer:
        return "rejected"
    except Exception as exc:
        raise AssertionError(f"{context}: verify_request raised {exc!r}") from exc
    try:
        decoded = full_decode(buf)
    except Exception as exc:
        raise AssertionError(f"{context}: verified but does not decode: {exc!r}") from exc
    # Whatever the verifier accepts, the reader routes like the accessors.
    if decoded.modelName is None:
        assert route is None, context
    else:
        assert route is not None, context
        r = CompletionRequest.GetRootAs(buf, 0)
        assert (route[0], bytes(route[1])) == (r.Provider(), r.ModelName()), context
    return "accepted"


def test_every_truncation() -> None:
    for buf in sample_buffers():
        verdicts = [check(buf[:cut], f"truncated to {cut}") for cut in range(len(buf))]
        # Only the builder's trailing alignment padding may go: once a byte of
        # an object is cut, every shorter buffer is refused too.
        accepted = [cut for cut, v in enumerate(verdicts) if v == "accepted"]
        if accepted:
            assert accepted == list(range(accepted[0], len(buf)))
            assert not any(buf[accepted[0] :])
            assert len(buf) - accepted[0] < 8


@pytest.mark.parametrize("seed", SEEDS)
def test_seeded_random_mutations(seed: int) -> None:
    print(f"mutation seed {seed}")
    rng = random.Random(seed)
    outcomes = {"accepted": 0, "rejected": 0}
    for buf in sample_buffers():
        for i in range(MUTATIONS_PER_SEED):
            out = bytearray(buf)
            for _ in range(rng.choice((1, 1, 2, 3, 8))):
                at = rng.randrange(len(out))
                if rng.random() < 0.5:
                    out[at] = rng.randrange(256)
                else:  # a plausible-looking small or huge 32-bit word
                    at &= ~3
                    value = rng.choice((0, 1, 4, len(out), 0x7FFFFFFF, 0xFFFFFFFF))
                    if at + 4 <= len(out):
                        struct.pack_into("<I", out, at, value)
            outcomes[check(bytes(out), f"seed {seed} mutation {i}")] += 1
    print(f"seed {seed}: {outcomes}")
    # Both branches exercised: some mutations land in string bytes and survive.
    assert outcomes["accepted"] and outcomes["rejected"]


def header(root: int) -> bytes:
    return struct.pack("<I", root) + REQUEST_IDENTIFIER


@pytest.mark.parametrize("root", [0, 4, 8, 9, 12, 64, 0x7FFFFFFC, 0xFFFFFFFC, 0xFFFFFFFF])
def test_root_offsets_past_the_end(root: int) -> None:
    buf = header(root) + bytes(48)
    assert check(buf, f"root {root}") == "rejected"
    with pytest.raises(MalformedBuffer):
        read_route(buf)


@pytest.mark.parametrize(
    "soffset", [-(1 << 31), -4096, -12, -4, 0, 2, 4, 8, 9, 12, 64, (1 << 31) - 1]
)
def test_negative_and_huge_soffsets(soffset: int) -> None:
    buf = bytearray(build(sample_request()))
    root = struct.unpack_from("<I", buf, 0)[0]
    struct.pack_into("<i", buf, root, soffset)
    check(bytes(buf), f"soffset {soffset}")


def test_vtable_overlapping_the_table() -> None:
    """A vtable inside its own table: legal bytes, so either verdict, never a crash."""
    buf = build(sample_request())
    root = struct.unpack_from("<I", buf, 0)[0]
    verdicts = set()
    for delta in range(-64, 64, 2):
        out = bytearray(buf)
        struct.pack_into("<i", out, root, delta)
        verdicts.add(check(bytes(out), f"soffset {delta}"))
    assert "rejected" in verdicts


def test_crafted_vtable_inside_table_is_accepted_and_decodes() -> None:
    """Root table whose vtable lies inside the table's own inline bytes."""
    model = b"inside\x00\x00"  # padded string body
    # Layout: [root uoffset][ident][table: soffset, vtable(10 bytes)+pad, uoffset->str][string]
    table = 8
    vt = table + 4
    field_at = vt + 12  # model_name uoffset after the 10-byte vtable and 2 pad bytes
    tsize = field_at + 4 - table
    string = field_at + 4
    buf = bytearray(header(table))
    buf += struct.pack("<i", table - vt)
    buf += struct.pack("<5H", 10, tsize, 0, 0, field_at - table) + b"\x00\x00"
    buf += struct.pack("<I", string - field_at)
    buf += struct.pack("<I", 6) + model
    data = bytes(buf)
    assert check(data, "vtable inside table") == "accepted"
    assert read_route(data)[1].tobytes() == b"inside"


def test_uoffset_pointing_at_itself() -> None:
    """uoffsets are unsigned: the only "cycle" is 0, a string or table at itself."""
    buf = bytearray(build(sample_request()))
    r = CompletionRequest.GetRootAs(bytes(buf), 0)
    for voffset in (4, 8, 14, 16, 24, 40):
        out = bytearray(buf)
        at = r._tab.Pos + r._tab.Offset(voffset)
        struct.pack_into("<I", out, at, 0)
        check(bytes(out), f"self-pointing field at voffset {voffset}")


def test_vector_elements_pointing_at_themselves() -> None:
    buf = build(sample_request())
    r = CompletionRequest.GetRootAs(buf, 0)
    first = r._tab.Vector(r._tab.Offset(16))
    for j in range(r.MessagesLength()):
        out = bytearray(buf)
        struct.pack_into("<I", out, first + 4 * j, 0)
        assert check(bytes(out), f"message {j} -> itself") == "rejected"


def test_deep_sharing_is_bounded_not_slow() -> None:
    """Messages whose tool_calls all share one vector: the work is capped."""
    b = flatbuffers.Builder(1 << 16)
    s = b.CreateString("x")
    from flatgate.generated.LLMGateway import ToolCall as fb_call

    fb_call.Start(b)
    fb_call.AddId(b, s)
    call = b.EndObject()
    fb_message.StartToolCallsVector(b, 2000)
    for _ in range(2000):
        b.PrependUOffsetTRelative(call)
    calls = b.EndVector()
    fb_message.Start(b)
    fb_message.AddToolCalls(b, calls)
    msg = b.EndObject()
    fb_request.StartMessagesVector(b, 2000)
    for _ in range(2000):
        b.PrependUOffsetTRelative(msg)
    msgs = b.EndVector()
    model = b.CreateString("m")
    fb_request.Start(b)
    fb_request.AddModelName(b, model)
    fb_request.AddMessages(b, msgs)
    b.Finish(fb_request.End(b), REQUEST_IDENTIFIER)
    buf = bytes(b.Output())  # 4 million ToolCalls reachable from 16 KB
    with pytest.raises(MalformedBuffer, match="max_objects"):
        verify_request(buf)
    assert read_route(buf)[1].tobytes() == b"m"


def test_random_garbage_with_a_valid_header() -> None:
    seed = 99
    print(f"garbage seed {seed}")
    rng = random.Random(seed)
    for i in range(2000):
        size = rng.randrange(8, 200)
        body = bytes(rng.randrange(256) for _ in range(size))
        root = rng.randrange(0, size + 8) & ~3
        check(header(root) + body, f"seed {seed} garbage {i}")
