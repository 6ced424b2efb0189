"""``read_route``: hand-written cases, zero-copy, input types, other writers."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import flatbuffers
import pytest

from flatgate.generated.LLMGateway import CompletionRequest as fb_request
from flatgate.generated.LLMGateway.CompletionRequest import CompletionRequest, CompletionRequestT
from flatgate.proxy.wire.buffer import MalformedBuffer
from flatgate.proxy.wire.request.route import read_route
from flatgate.proxy.wire.request.verify import verify_request
from flatgate.proxy.wire.schema import REQUEST_IDENTIFIER
from tests.proxy.wire_helpers import build, full_decode, sample_request, string_position

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "schema" / "gateway.fbs"
FLATC = Path(sys.executable).with_name("flatc")


def accessor_route(buf: bytes) -> tuple[int, bytes | None]:
    r = CompletionRequest.GetRootAs(buf, 0)
    return r.Provider(), r.ModelName()


def test_reads_provider_and_model() -> None:
    buf = build(sample_request("gpt-4o-mini", provider=2))
    provider, model = read_route(buf)
    assert provider == 2
    assert model == b"gpt-4o-mini"  # type: ignore[comparison-overlap]  # compares as bytes
    assert (provider, bytes(model)) == accessor_route(buf)


def test_model_is_a_view_of_the_callers_bytes() -> None:
    buf = build(sample_request("llama-3.1-70b"))
    _, model = read_route(buf)
    assert isinstance(model, memoryview)
    assert model.obj is buf
    assert model.readonly
    start = string_position(buf, CompletionRequest.GetRootAs(buf, 0), 8) + 4
    assert model.tobytes() == buf[start : start + len(model)]
    assert hash(model) == hash(b"llama-3.1-70b")
    assert {b"llama-3.1-70b": "hit"}[model] == "hit"  # type: ignore[index]


def test_memoryview_input_gives_a_slice_of_the_same_buffer() -> None:
    body = build(sample_request("m-1", provider=1))
    framed = b"junk" + body  # a view into a larger buffer, not at offset 0
    view = memoryview(framed)[4:]
    provider, model = read_route(view)
    assert (provider, model.tobytes()) == (1, b"m-1")
    assert model.obj is framed


def test_provider_absent_reads_as_default() -> None:
    t = sample_request(provider=0)
    lean = build(t)
    forced = build(t, force_defaults=True)
    root = CompletionRequest.GetRootAs(lean, 0)
    assert root._tab.Offset(6) == 0  # the writer really left it out
    assert CompletionRequest.GetRootAs(forced, 0)._tab.Offset(6) != 0
    assert read_route(lean)[0] == 0
    assert read_route(forced)[0] == 0


@pytest.mark.parametrize("value", [-128, -1, 3, 127])
def test_unknown_provider_values_pass_through(value: int) -> None:
    assert read_route(build(sample_request(provider=value)))[0] == value


@pytest.mark.parametrize("model", ["", "x", "東京-モデル", "a" * 1000, "with\x00nul"])
def test_any_model_bytes(model: str) -> None:
    buf = build(sample_request(model))
    assert read_route(buf)[1].tobytes() == model.encode()


def test_invalid_utf8_model_is_returned_raw() -> None:
    t = CompletionRequestT(modelName=b"\xff\xfe-model")
    assert read_route(build(t))[1].tobytes() == b"\xff\xfe-model"


def test_minimal_request() -> None:
    buf = build(CompletionRequestT(modelName="m"))
    assert read_route(buf)[0] == 0
    assert bytes(read_route(buf)[1]) == b"m"


def test_missing_model_name() -> None:
    with pytest.raises(MalformedBuffer, match="model_name absent"):
        read_route(build(CompletionRequestT(requestId="r", provider=1)))
    # A vtable cut before slot 2 (only request_id and provider written).
    with pytest.raises(MalformedBuffer, match="model_name absent"):
        read_route(build(CompletionRequestT(provider=1)))


def test_identifier_is_required() -> None:
    no_id = build(sample_request(), identifier=None)
    with pytest.raises(MalformedBuffer, match=r"file identifier.*at offset 4"):
        read_route(no_id)
    with pytest.raises(MalformedBuffer, match="file identifier"):
        read_route(build(sample_request(), identifier=b"FGCK"))
    with pytest.raises(MalformedBuffer, match="file identifier"):
        verify_request(no_id)


def test_size_prefixed_buffer_is_refused() -> None:
    builder = flatbuffers.Builder(64)
    builder.FinishSizePrefixed(sample_request().Pack(builder), REQUEST_IDENTIFIER)
    with pytest.raises(MalformedBuffer):
        read_route(bytes(builder.Output()))


@pytest.mark.parametrize(
    "bad",
    [
        bytearray(build(sample_request())),
        memoryview(bytearray(build(sample_request()))),
        "a string",
        None,
        12,
        memoryview(build(sample_request())).cast("c"),
        memoryview(build(sample_request()))[::2],
        memoryview(build(sample_request())[:16]).cast("B", (4, 4)),
    ],
    ids=["bytearray", "writable-view", "str", "none", "int", "format-c", "strided", "2d"],
)
def test_refuses_other_inputs(bad: object) -> None:
    with pytest.raises(MalformedBuffer, match="input"):
        read_route(bad)  # type: ignore[arg-type]
    with pytest.raises(MalformedBuffer, match="input"):
        verify_request(bad)  # type: ignore[arg-type]


def test_released_memoryview() -> None:
    view = memoryview(build(sample_request()))
    view.release()
    with pytest.raises(MalformedBuffer, match="released"):
        read_route(view)


def test_bytes_subclass_still_gives_a_view() -> None:
    class Body(bytes):
        pass

    _, model = read_route(Body(build(sample_request("sub"))))
    assert isinstance(model, memoryview)
    assert model.tobytes() == b"sub"


def test_malformed_buffer_is_a_value_error_with_an_offset() -> None:
    buf = bytearray(build(sample_request()))
    struct.pack_into("<I", buf, 0, len(buf) + 8)
    with pytest.raises(ValueError, match=r"root offset \d+: .* at offset 0"):
        read_route(bytes(buf))


def test_string_terminator_checked() -> None:
    buf = build(sample_request("abc"))
    start = string_position(buf, CompletionRequest.GetRootAs(buf, 0), 8)
    broken = bytearray(buf)
    broken[start + 4 + 3] = 0x21
    with pytest.raises(MalformedBuffer, match=f"terminator is not NUL at offset {start + 7}"):
        read_route(bytes(broken))


def test_string_length_past_end() -> None:
    buf = build(sample_request("abc"))
    start = string_position(buf, CompletionRequest.GetRootAs(buf, 0), 8)
    broken = bytearray(buf)
    struct.pack_into("<I", broken, start, len(buf))
    with pytest.raises(MalformedBuffer, match=f"past the buffer end at offset {start}"):
        read_route(bytes(broken))


def test_field_offset_outside_table() -> None:
    buf = build(sample_request())
    root = struct.unpack_from("<I", buf, 0)[0]
    vt = root - struct.unpack_from("<i", buf, root)[0]
    tsize = struct.unpack_from("<H", buf, vt + 2)[0]
    broken = bytearray(buf)
    struct.pack_into("<H", broken, vt + 8, tsize)  # model_name at the table's end
    with pytest.raises(MalformedBuffer, match="model_name field offset"):
        read_route(bytes(broken))
    struct.pack_into("<H", broken, vt + 6, tsize)  # provider too
    with pytest.raises(MalformedBuffer, match="provider field offset"):
        read_route(bytes(broken))


def test_raw_builder_with_a_newer_field() -> None:
    """A newer writer's extra slot (23 fields) is ignored by both functions."""
    b = flatbuffers.Builder(64)
    model = b.CreateString("future-model")
    extra = b.CreateString("a field from the future")
    b.StartObject(23)
    fb_request.AddModelName(b, model)
    fb_request.AddProvider(b, 2)
    b.PrependUOffsetTRelativeSlot(22, extra, 0)
    b.Finish(b.EndObject(), REQUEST_IDENTIFIER)
    buf = bytes(b.Output())
    verify_request(buf)
    assert read_route(buf)[0] == 2
    assert read_route(buf)[1].tobytes() == b"future-model"
    full_decode(buf)


# --- another writer: flatc's C++ builder, from JSON --------------------------------


def flatc_binary(tmp_path: Path, name: str, request: dict[str, object]) -> bytes:
    src = tmp_path / f"{name}.json"
    src.write_text(json.dumps(request, ensure_ascii=False))
    subprocess.run(
        [str(FLATC), "-b", "-o", str(tmp_path), str(SCHEMA), str(src)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return (tmp_path / f"{name}.fgrq").read_bytes()


FLATC_REQUESTS: dict[str, dict[str, object]] = {
    "minimal": {"model_name": "gpt-4o"},
    "provider-default": {"model_name": "gpt-4o", "provider": "OpenAI", "request_id": "r"},
    "anthropic": {"provider": "Anthropic", "model_name": "claude-sonnet", "max_tokens": 9},
    "unicode": {"provider": "SelfHosted", "model_name": "東京-llama-*", "stream": True},
    "full": {
        "request_id": "req-9",
        "provider": "SelfHosted",
        "model_name": "llama-3.1-8b",
        "max_tokens": 100,
        "temperature": 0.2,
        "tools": [{"name": "f", "description": "d", "parameters": "{}", "strict": True}],
        "messages": [
            {"role": "System", "content": "be brief"},
            {"role": "User", "content": "hi", "name": "ann"},
            {
                "role": "Assistant",
                "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}],
            },
            {"role": "Tool", "content": "ok", "tool_call_id": "c1"},
        ],
        "tool_choice": "Function",
        "tool_choice_name": "f",
        "top_p": 0.5,
        "stop": ["x", "y"],
        "seed": -5,
        "presence_penalty": 0.0,
        "frequency_penalty": 1.5,
        "n": 3,
        "stream": True,
        "user": "u",
        "tenant": "t",
        "metadata": [{"key": "k", "value": "v"}],
        "include_usage": True,
        "parallel_tool_calls": False,
        "response_format": "{}",
    },
}


@pytest.mark.parametrize("name", sorted(FLATC_REQUESTS))
def test_flatc_written_buffers_route_the_same(tmp_path: Path, name: str) -> None:
    buf = flatc_binary(tmp_path, name, FLATC_REQUESTS[name])
    assert buf[4:8] == REQUEST_IDENTIFIER
    provider, model = read_route(buf)
    assert (provider, bytes(model)) == accessor_route(buf)
    assert model.obj is buf
    verify_request(buf)
    decoded = full_decode(buf)
    assert decoded.modelName == str(FLATC_REQUESTS[name]["model_name"]).encode()


def test_flatc_and_python_writers_agree(tmp_path: Path) -> None:
    buf = flatc_binary(tmp_path, "full", FLATC_REQUESTS["full"])
    again = build(full_decode(buf))  # the same request through the Python builder
    assert read_route(again)[0] == read_route(buf)[0]
    assert read_route(again)[1] == read_route(buf)[1]
    verify_request(again)
